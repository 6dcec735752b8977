"""Mixed routing for keyed, stateful operators: routing table A with hash fallback (Fang et al.,
"Parallel Stream Processing Against Workload Skewness and Variance", HPDC'17; digest 003).

F(k) = A[k] if k ∈ A else h(k) (Eq. 1, digest §1.2); entries never equal h(k). Load of instance d:
L(d) = Σ_{F(k)=d} c(k); balance constraint L(d) ≤ U = (1 + θmax)·L̄ (digest §1.4, §8 A1; θmax
default 0.08); migration cost M = Σ_{k: F_old(k) ≠ F_new(k)} S(k, w) (Eq. 2, §1.6).

Algorithms (digest §3, with the §7 conventions the oracles rely on):

- :func:`llfd` — Least-Load Fit Decreasing with its Adjust step (Algorithm 1): keys in criterion
  order from a priority queue; instances by (load, index); Adjust swaps out the shortest greedy
  prefix (criterion order) of the instance's *residents* with strictly smaller cost that brings it
  under U; bumped keys re-enter the queue. A key no instance accepts goes to the least-loaded
  instance and the plan is ``infeasible`` (§8 A6).
- :func:`min_table` (Algorithm 2), :func:`min_mig` (Algorithm 3, γ = c^β / S, β = 1.5, S = 0 → γ =
  +∞), :func:`mixed` (Algorithm 4 with the digest's deterministic next-``a`` rule, §3.5: restart
  from the old table each trial; paper rule a ← |A'| − Amax, then the cumulative escape, then the
  smallest untried value; MinTable fallback; otherwise the smallest table, ``table_violation``) —
  so it always terminates after at most |A_old| + 1 trials plus one MinTable run.
- :func:`mixed_bf` (every a), :func:`simple` (Algorithm 5, LPT).
- §3.8–3.9: :func:`hlhe_representatives`, :func:`discretise` (greedy error cancellation),
  :class:`CompactRecords` (the 6-dimensional vectors with merge and split), and
  ``discretisation_r`` in :class:`Stats` to plan on discretised c and S.

Units: c(k) = cost of key k in the last interval (tuples by default, digest §8 A12), S(k, w) = the
key's state over the last w intervals (rows or bytes, caller's choice); M is in S's unit.
Tie-breaks: C_cost (−c, key index), C_γ (−γ, −c, key index), C_mem (S, key index); equal loads →
lower instance index; comparisons use ≤ U + 1e-9. Keys are identified by their index in
:class:`Stats` (callers list them in id order). Pure: no Spark imports.
"""
from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field
from typing import Callable, Mapping, Optional, Sequence

import numpy as np

__all__ = ["Stats", "RoutingPlan", "assignment", "instance_loads", "migration_cost", "llfd",
           "min_table", "min_mig", "mixed", "mixed_bf", "simple", "exact_plan", "trimmed", "hlhe_representatives",
           "discretise", "CompactRecords", "THETA_MAX", "BETA", "ALGORITHMS", "algorithm"]

THETA_MAX = 0.08
BETA = 1.5
EPS = 1e-9


@dataclass(frozen=True)
class Stats:
    """Per-key statistics of the last interval: ``cost`` c(k), ``state`` S(k, w), ``hashed`` h(k)
    (0..N−1), for N = ``instances``; ``table`` the current routing table {key index: instance}.
    ``discretisation_r`` > 0 replaces c and S by their HLHE + greedy discretisation (§3.9)."""

    cost: np.ndarray
    state: np.ndarray
    hashed: np.ndarray
    instances: int
    table: Mapping[int, int] = field(default_factory=dict)
    discretisation_r: int = 0
    fixed: Optional[np.ndarray] = None   # keys that never move (e.g. a residual load per instance)

    def __post_init__(self):
        c = np.asarray(self.cost, dtype=float); s = np.asarray(self.state, dtype=float)
        h = np.asarray(self.hashed, dtype=np.int64)
        if not (c.shape == s.shape == h.shape) or c.ndim != 1:
            raise ValueError("cost, state and hashed need one value per key")
        if (c < 0).any() or (s < 0).any():
            raise ValueError("cost and state must be >= 0")
        if self.instances < 1 or (len(h) and (h.min() < 0 or h.max() >= self.instances)):
            raise ValueError(f"hashed must lie in 0..{self.instances - 1}")
        table = {int(k): int(d) for k, d in dict(self.table).items()}
        for k, d in table.items():
            if not 0 <= k < len(c) or not 0 <= d < self.instances:
                raise ValueError(f"table entry {k}->{d} out of range")
        table = {k: d for k, d in table.items() if d != h[k]}   # entries equal to h(k) are redundant
        if self.discretisation_r > 0:
            c = discretised_values(c, self.discretisation_r)
            s = discretised_values(s, self.discretisation_r)
        object.__setattr__(self, "cost", c); object.__setattr__(self, "state", s)
        object.__setattr__(self, "hashed", h); object.__setattr__(self, "table", table)
        fixed = np.zeros(len(c), dtype=bool) if self.fixed is None else np.asarray(self.fixed, dtype=bool)
        if fixed.shape != c.shape:
            raise ValueError("fixed needs one flag per key")
        if any(fixed[k] for k in table):
            raise ValueError("a fixed key cannot have a table entry")
        object.__setattr__(self, "fixed", fixed)

    @property
    def keys(self) -> int:
        return len(self.cost)


@dataclass(frozen=True)
class RoutingPlan:
    """A new routing table and what it does: ``table`` {key: instance ≠ h(key)}, ``owner`` F'(k)
    per key, ``loads`` L(d), ``moved`` the keys whose owner changed, ``migration`` M (S units),
    ``status`` ok | infeasible | fallback_mintable | table_violation, ``trials`` the a values
    Mixed tried (empty for the others)."""

    algorithm: str
    table: dict
    owner: np.ndarray
    loads: np.ndarray
    bound: float
    moved: np.ndarray
    migration: float
    status: str
    trials: tuple = ()

    @property
    def size(self) -> int:
        return len(self.table)

    @property
    def max_theta(self) -> float:
        """max_d (L(d) − L̄)/L̄ (0 when there is no load)."""
        mean = float(self.loads.mean()) if len(self.loads) else 0.0
        return float(self.loads.max() / mean - 1) if mean > 0 else 0.0

    @property
    def balanced(self) -> bool:
        return bool(len(self.loads) == 0 or self.loads.max() <= self.bound + EPS)

    def to_dict(self, keys: Optional[Sequence[str]] = None) -> dict:
        name = (lambda i: keys[i]) if keys is not None else (lambda i: i)
        return {"algorithm": self.algorithm, "status": self.status, "table": {str(name(k)): int(d) for k, d in sorted(self.table.items())},
                "table_size": self.size, "loads": self.loads.tolist(), "bound": self.bound,
                "max_theta": self.max_theta, "moved": [name(int(k)) for k in self.moved],
                "migration_cost": self.migration, "trials": list(self.trials)}


# -- basics ----------------------------------------------------------------------------------------

def assignment(hashed: np.ndarray, table: Mapping[int, int]) -> np.ndarray:
    """F(k) = A[k] if present else h(k) (Eq. 1)."""
    owner = np.array(hashed, dtype=np.int64, copy=True)
    for k, d in table.items():
        owner[k] = d
    return owner


def instance_loads(owner: np.ndarray, cost: np.ndarray, instances: int) -> np.ndarray:
    """L(d) = Σ_{F(k)=d} c(k)."""
    return np.bincount(owner, weights=cost, minlength=instances).astype(float)


def migration_cost(old_owner: np.ndarray, new_owner: np.ndarray, state: np.ndarray) -> tuple[np.ndarray, float]:
    """(Δ, M): keys whose owner changed and Σ_{k∈Δ} S(k, w) (Eq. 2)."""
    moved = np.nonzero(np.asarray(old_owner) != np.asarray(new_owner))[0]
    return moved, float(np.asarray(state)[moved].sum())


def _rank(order: np.ndarray) -> np.ndarray:
    rank = np.empty(len(order), dtype=np.int64)
    rank[order] = np.arange(len(order))
    return rank


def cost_order(stats: Stats) -> np.ndarray:
    """C_cost: c descending, ties by key index."""
    return np.lexsort((np.arange(stats.keys), -stats.cost))


def gamma_order(stats: Stats, beta: float = BETA) -> np.ndarray:
    """C_γ: γ = c^β / S descending (S = 0 → +∞), then c descending, then key index."""
    with np.errstate(divide="ignore", invalid="ignore"):
        g = np.where(stats.state > 0, stats.cost ** beta / np.where(stats.state > 0, stats.state, 1), np.inf)
    return np.lexsort((np.arange(stats.keys), -stats.cost, -g))


def memory_order(stats: Stats, keys: Sequence[int]) -> list[int]:
    """C_mem over ``keys``: S ascending, ties by key index."""
    return sorted(keys, key=lambda k: (stats.state[k], k))


# -- Phase II + LLFD (Algorithm 1) -----------------------------------------------------------------

def _bound(stats: Stats, theta_max: float) -> float:
    return (1 + theta_max) * float(stats.cost.sum()) / stats.instances


def fewest_keys(over: float, c: float, n: int) -> int:
    """The fewest keys of cost c, between 1 and n, that bring ``over`` (> EPS) to ≤ EPS, taking
    them one at a time (all n when c = 0: they do not lower ``over``, and Adjust takes them on its
    way). For one key (n = 1) this is 1; for a record of n equal keys it is what the per-key loop
    would take from a run of them."""
    if c <= 0:
        return n
    m = min(n, max(1, math.ceil((over - EPS) / c)))
    while m > 1 and over - (m - 1) * c <= EPS:
        m -= 1
    while m < n and over - m * c > EPS:
        m += 1
    return m


def llfd_target(loads: np.ndarray, ck: float, U: float, residents: Sequence[list],
                cost: Callable[[object], float], available: Callable[[object], int]) -> tuple[Optional[int], list]:
    """LLFD's choice for one key of cost ``ck`` (Algorithm 1, with Adjust): instances by (load,
    index); the first one the key fits on (L + c ≤ U), or the first one on which Adjust frees room
    by taking, in criterion order, the fewest residents of strictly smaller cost. ``residents[d]``
    lists items in criterion order (an item is one key, or a record of equal keys); ``cost(item)``
    is its per-key cost and ``available(item)`` how many of its keys can still be bumped. Returns
    (instance or None, the ``(item, m)`` to bump); the caller moves them and places the key."""
    for d in sorted(range(len(loads)), key=lambda d: (loads[d], d)):
        if loads[d] + ck <= U + EPS:
            return d, []
        excess, chosen = loads[d] + ck - U, []
        for item in residents[d]:
            avail, c2 = available(item), cost(item)
            if avail == 0 or c2 >= ck:
                continue
            m = fewest_keys(excess, c2, avail)
            chosen.append((item, m))
            excess -= c2 * m
            if excess <= EPS:
                break
        if chosen and excess <= EPS:
            return d, chosen
    return None, []


def _phase2_llfd(stats: Stats, table: dict, rank: np.ndarray, theta_max: float) -> tuple[dict, np.ndarray, bool]:
    """Phase II (disassociate keys, criterion order, from each overloaded instance while L > U;
    keys with c = 0 are skipped, §8 A7) and Phase III (LLFD). Returns (A', F', feasible)."""
    N, c, h = stats.instances, stats.cost, stats.hashed
    U = _bound(stats, theta_max)
    table = dict(table)
    owner = assignment(h, table)
    loads = instance_loads(owner, c, N)
    order = np.argsort(rank, kind="stable")
    candidates: list[int] = []
    over = [d for d in range(N) if loads[d] > U + EPS]
    if over:
        owner_in_order = owner[order]
        for d in over:
            for k in order[owner_in_order == d].tolist():
                if loads[d] <= U + EPS:
                    break
                if c[k] <= 0 or stats.fixed[k]:
                    continue
                loads[d] -= c[k]; owner[k] = -1; table.pop(k, None); candidates.append(k)
    if not candidates:
        return table, owner, True
    residents: list[list[int]] = [[] for _ in range(N)]     # per instance, criterion order
    placed = owner >= 0
    owner_in_order = owner[order]
    for d in range(N):
        residents[d] = order[(owner_in_order == d) & placed[order] & ~stats.fixed[order]].tolist()
    bumped = np.zeros(stats.keys, dtype=bool)
    heap = [(int(rank[k]), k) for k in candidates]
    heapq.heapify(heap)
    feasible = True
    while heap:
        _, k = heapq.heappop(heap)
        ck = c[k]
        target, chosen = llfd_target(loads, ck, U, residents, c.__getitem__, lambda k2: 0 if bumped[k2] else 1)
        for k2, _m in chosen:
            bumped[k2] = True; loads[target] -= c[k2]; owner[k2] = -1; table.pop(k2, None)
            heapq.heappush(heap, (int(rank[k2]), k2))
        if target is None:                     # §8 A6: least-loaded instance, plan infeasible
            feasible = False
            target = min(range(N), key=lambda d: (loads[d], d))
        owner[k] = target; loads[target] += ck
        if target != h[k]:
            table[k] = target
        else:
            table.pop(k, None)
    return table, owner, feasible


def _plan(name: str, stats: Stats, table: dict, rank: np.ndarray, theta_max: float,
          trials: tuple = ()) -> RoutingPlan:
    new_table, owner, feasible = _phase2_llfd(stats, table, rank, theta_max)
    old_owner = assignment(stats.hashed, stats.table)
    moved, M = migration_cost(old_owner, owner, stats.state)
    loads = instance_loads(owner, stats.cost, stats.instances)
    U = _bound(stats, theta_max)
    ok = feasible and loads.max(initial=0) <= U + EPS
    return RoutingPlan(name, new_table, owner, loads, U, moved, M, "ok" if ok else "infeasible", trials)


def llfd(stats: Stats, theta_max: float = THETA_MAX, criterion: str = "cost", beta: float = BETA) -> RoutingPlan:
    """LLFD alone on the current table (no cleaning) with criterion ``cost`` or ``gamma``."""
    order = cost_order(stats) if criterion == "cost" else gamma_order(stats, beta)
    return _plan("llfd", stats, stats.table, _rank(order), theta_max)


def min_table(stats: Stats, theta_max: float = THETA_MAX) -> RoutingPlan:
    """Algorithm 2: move back every entry, then Phase II + LLFD by highest cost first."""
    return _plan("mintable", stats, {}, _rank(cost_order(stats)), theta_max)


def min_mig(stats: Stats, theta_max: float = THETA_MAX, beta: float = BETA) -> RoutingPlan:
    """Algorithm 3: no cleaning, Phase II + LLFD by largest γ = c^β/S first."""
    return _plan("minmig", stats, stats.table, _rank(gamma_order(stats, beta)), theta_max)


def _mixed_trial(stats: Stats, back: list[int], a: int, rank: np.ndarray, theta_max: float) -> RoutingPlan:
    work = {k: d for k, d in stats.table.items() if k not in set(back[:a])}
    return _plan("mixed", stats, work, rank, theta_max)


def mixed(stats: Stats, theta_max: float = THETA_MAX, table_max: int = 3000, beta: float = BETA,
          max_trials: Optional[int] = None, exact_keys: int = 12, compact: bool = False) -> RoutingPlan:
    """Algorithm 4 with the digest's deterministic rule (§3.5, §8 A8): trial a moves back the a
    table entries with the smallest state (C_mem), then Phase II + LLFD by γ; the first balanced
    plan with |A'| ≤ Amax (``table_max``) ends the trials.

    Beyond the paper (decisions of ours, stated in the report):
    - MinTable's plan is always computed and returned instead when it is balanced, within Amax
      and moves strictly less state, so Mixed never migrates more than a valid MinTable plan;
      when no trial is valid, MinTable is the fallback (status ``fallback_mintable``, digest §3.5).
    - When neither is valid and the instance has at most ``exact_keys`` keys with load, an exact
      branch-and-bound search returns a balanced table within Amax of least M if one exists
      (status ``exact``): the heuristics are incomplete (bin packing) and small instances are
      cheap to solve exactly.
    - Otherwise the smallest plan is returned (status ``table_violation``, or ``infeasible`` when
      a single key exceeds U) **trimmed to Amax**: its entries of lowest cost move back to h(k),
      so |A'| ≤ Amax holds always (the digest returns the untrimmed smallest table).

    ``compact=True`` runs every trial and MinTable on compact records (``routing_compact``, §3.8)."""
    back = memory_order(stats, list(stats.table))
    if compact:
        from spark_governor.policies.partitioning.routing_compact import KeySpace, compact_plan, min_table_compact

        space = KeySpace(stats)

        def trial(a: int) -> RoutingPlan:
            return compact_plan("mixed", stats, theta_max, "gamma", beta, back=a, space=space)
        table_only = min_table_compact
    else:
        rank = _rank(gamma_order(stats, beta))

        def trial(a: int) -> RoutingPlan:
            return _mixed_trial(stats, back, a, rank, theta_max)
        table_only = min_table
    limit = len(back) + 1 if max_trials is None else max_trials
    tried: list[int] = []
    results: list[RoutingPlan] = []
    found: Optional[RoutingPlan] = None
    a = 0
    while len(tried) < limit:
        plan = trial(a)
        tried.append(a); results.append(plan)
        if plan.size <= table_max and plan.status == "ok":
            found = plan
            break
        ex = plan.size - table_max
        nxt = min(max(ex, 0), len(back))
        if nxt in tried:
            nxt = min(a + max(ex, 1), len(back))
        if nxt in tried:
            untried = [x for x in range(len(back) + 1) if x not in tried]
            if not untried:
                break
            nxt = untried[0]
        a = nxt
    trials = tuple(tried)
    mt = table_only(stats, theta_max)
    mt_valid = mt.size <= table_max and mt.status == "ok"
    if found is not None:
        if mt_valid and mt.migration < found.migration - EPS:
            return _renamed(mt, "mixed", "ok", trials)
        return _renamed(found, "mixed", "ok", trials)
    if mt_valid:
        return _renamed(mt, "mixed", "fallback_mintable", trials)
    U = _bound(stats, theta_max)
    single_too_big = bool(stats.keys and stats.cost.max() > U + EPS)
    if not single_too_big and int((stats.cost > 0).sum()) <= exact_keys:
        exact = exact_plan(stats, theta_max, table_max)
        if exact is not None:
            return _renamed(exact, "mixed", "exact", trials)
    best = min(results + [mt], key=lambda p: (p.size, p.migration))
    if best.size > table_max:
        best = trimmed(stats, best, table_max, theta_max)
    return _renamed(best, "mixed", "infeasible" if single_too_big else "table_violation", trials)


def trimmed(stats: Stats, plan: RoutingPlan, table_max: int, theta_max: float) -> RoutingPlan:
    """``plan`` with only its ``table_max`` highest-cost entries (ties: key index); the other
    keys move back to h(k)."""
    keep = sorted(plan.table, key=lambda k: (-stats.cost[k], k))[: max(table_max, 0)]
    table = {k: plan.table[k] for k in keep}
    return _evaluate(plan.algorithm, stats, table, theta_max, plan.status, plan.trials)


def _evaluate(name: str, stats: Stats, table: dict, theta_max: float, status: str, trials: tuple = ()) -> RoutingPlan:
    owner = assignment(stats.hashed, table)
    moved, M = migration_cost(assignment(stats.hashed, stats.table), owner, stats.state)
    return RoutingPlan(name, table, owner, instance_loads(owner, stats.cost, stats.instances),
                       _bound(stats, theta_max), moved, M, status, trials)


def exact_plan(stats: Stats, theta_max: float, table_max: int, node_budget: int = 200_000) -> Optional[RoutingPlan]:
    """Branch and bound: a balanced assignment with at most ``table_max`` keys off their hash
    instance and least migration cost, or None (none exists, or the node budget ran out). Fixed
    keys stay; a key with c = 0 either stays or moves back to h(k) (dropping its entry)."""
    N, c, h, S = stats.instances, stats.cost, stats.hashed, stats.state
    U = _bound(stats, theta_max) + EPS
    old = assignment(h, stats.table)
    # keys with load first (cost order), then zero-cost keys with a table entry (keep it or drop it)
    live = [k for k in cost_order(stats).tolist() if not stats.fixed[k] and (c[k] > 0 or old[k] != h[k])]
    staying = [k for k in range(stats.keys) if stats.fixed[k] or (c[k] <= 0 and old[k] == h[k])]
    loads = np.bincount(old[staying], weights=c[staying], minlength=N).astype(float) if staying else np.zeros(N)
    fixed_entries = sum(1 for k in staying if old[k] != h[k])
    best: list = [math.inf, None]
    choice = [0] * len(live)
    nodes = [0]

    def dfs(i: int, entries: int, mig: float) -> None:
        nodes[0] += 1
        if nodes[0] > node_budget or mig >= best[0]:
            return
        if i == len(live):
            best[0], best[1] = mig, list(choice)
            return
        k = live[i]
        options = range(N) if c[k] > 0 else sorted({int(old[k]), int(h[k])})
        for d in sorted(options, key=lambda d: (d != old[k], d != h[k], loads[d], d)):
            e = entries + (d != h[k])
            if loads[d] + c[k] > U or e > table_max:
                continue
            loads[d] += c[k]; choice[i] = d
            dfs(i + 1, e, mig + (S[k] if d != old[k] else 0.0))
            loads[d] -= c[k]

    if fixed_entries > table_max:
        return None
    dfs(0, fixed_entries, 0.0)
    if best[1] is None:
        return None
    owner = old.copy()
    for k, d in zip(live, best[1]):
        owner[k] = d
    table = {k: int(owner[k]) for k in range(stats.keys) if owner[k] != h[k]}
    return _evaluate("exact", stats, table, theta_max, "ok")


def _renamed(plan: RoutingPlan, name: str, status: str, trials: tuple) -> RoutingPlan:
    return RoutingPlan(name, plan.table, plan.owner, plan.loads, plan.bound, plan.moved, plan.migration, status, trials)


def mixed_bf(stats: Stats, theta_max: float = THETA_MAX, table_max: int = 3000, beta: float = BETA) -> RoutingPlan:
    """Mixed_BF: every a in 0..|A|; the balanced plan within Amax of least M (ties: smaller a)."""
    back = memory_order(stats, list(stats.table))
    rank = _rank(gamma_order(stats, beta))
    plans = [_mixed_trial(stats, back, a, rank, theta_max) for a in range(len(back) + 1)]
    good = [(p.migration, a, p) for a, p in enumerate(plans) if p.status == "ok" and p.size <= table_max]
    if good:
        m, a, p = min(good, key=lambda t: (t[0], t[1]))
        return _renamed(p, "mixed_bf", "ok", (a,))
    best = min(plans, key=lambda p: (p.size, p.migration))
    return _renamed(best, "mixed_bf", "table_violation", tuple(range(len(plans))))


def simple(stats: Stats, theta_max: float = THETA_MAX) -> RoutingPlan:
    """Algorithm 5 (LPT): every key, highest cost first, on the least-loaded instance."""
    N, c, h = stats.instances, stats.cost, stats.hashed
    loads = np.zeros(N); owner = np.empty(stats.keys, dtype=np.int64); table = {}
    for k in cost_order(stats).tolist():
        d = min(range(N), key=lambda d: (loads[d], d))
        owner[k] = d; loads[d] += c[k]
        if d != h[k]:
            table[k] = d
    moved, M = migration_cost(assignment(h, stats.table), owner, stats.state)
    U = _bound(stats, theta_max)
    return RoutingPlan("simple", table, owner, loads, U, moved, M,
                       "ok" if loads.max(initial=0) <= U + EPS else "infeasible")


ALGORITHMS = {"mixed": mixed, "mintable": min_table, "minmig": min_mig, "mixed_bf": mixed_bf,
              "llfd": llfd, "simple": simple}


def algorithm(name: str, compact: bool = False):
    """The planner ``name`` (a key of ALGORITHMS); ``compact=True``: the same algorithm on compact
    records (``routing_compact``, §3.8) — mixed, mintable, minmig and llfd."""
    if not compact:
        return ALGORITHMS[name]
    from spark_governor.policies.partitioning import routing_compact as rc

    table = {"mixed": lambda stats, theta_max=THETA_MAX, **kw: mixed(stats, theta_max, compact=True, **kw),
             "mintable": rc.min_table_compact, "minmig": rc.min_mig_compact, "llfd": rc.llfd_compact}
    if name not in table:
        raise ValueError(f"{name!r} has no compact-record variant (one of {sorted(table)})")
    return table[name]


# -- discretisation (§3.9) -------------------------------------------------------------------------

def hlhe_representatives(x_max: float, r: int) -> list[float]:
    """HLHE[R] (digest §3.9, §8 A10): linear {1..r} and exponential {2r, 4r, …, 2^m·r} with
    m = ⌈log2(x_max/r)⌉, descending; |V| = r + m when x_max > r."""
    if r < 1:
        raise ValueError("r must be >= 1")
    reps = list(range(1, r + 1))
    v = r
    while v < x_max:
        v *= 2
        reps.append(v)
    return sorted((float(x) for x in reps), reverse=True)


def discretise(values: Sequence[float], reps: Sequence[float]) -> tuple[list[float], list[float]]:
    """Greedy error cancellation (§3.9 step 2) over ``values`` sorted non-increasing: a value
    between two representatives takes the larger if the running deviation D = Σ(x − x̂) > 0,
    else the smaller. Returns (x̂, D after each value). |D_final| ≤ the largest gap used."""
    reps = sorted(reps, reverse=True)
    out, trace, D = [], [], 0.0
    for x in values:
        if x in reps:
            xh = x
        else:
            upper = min((v for v in reps if v > x), default=reps[0])
            lower = max((v for v in reps if v < x), default=reps[-1])
            xh = upper if D > 0 else lower
        D += x - xh
        out.append(xh); trace.append(D)
    return out, trace


def discretised_values(values: np.ndarray, r: int) -> np.ndarray:
    """Discretise positive values (normalised by the smallest positive one, §8 A10) in descending
    order with HLHE(r) representatives; zeros stay zero; result in the original unit."""
    v = np.asarray(values, dtype=float)
    pos = v > 0
    if not pos.any():
        return v.copy()
    unit = float(v[pos].min())
    x = v / unit
    order = np.argsort(-x, kind="stable")
    order = order[pos[order]]
    reps = hlhe_representatives(float(x[order[0]]), r)
    xh, _ = discretise(x[order].tolist(), reps)
    out = np.zeros_like(v)
    out[order] = np.asarray(xh) * unit
    return out


# -- compact representation (§3.8) -----------------------------------------------------------------

UNASSIGNED = -1   # the paper's ⊥ (disassociated, waiting in C)


class CompactRecords:
    """Records (d_next, d_cur, d_hash, c, S, n): n keys sharing the five values (§3.8).
    Identical records are merged by summing n; :meth:`take` splits a record when only m < n of
    its keys are selected (digest §3.8, [D])."""

    def __init__(self):
        self.records: dict[tuple, int] = {}

    @classmethod
    def from_stats(cls, stats: Stats) -> "CompactRecords":
        out = cls()
        owner = assignment(stats.hashed, stats.table)
        for k in range(stats.keys):
            out.add((int(owner[k]), int(owner[k]), int(stats.hashed[k]), float(stats.cost[k]), float(stats.state[k])), 1)
        return out

    def add(self, rec: tuple, n: int) -> None:
        if n:
            self.records[rec] = self.records.get(rec, 0) + n

    def take(self, rec: tuple, m: int, d_next: int) -> tuple:
        """Move m of the n keys of ``rec`` to ``d_next`` (⊥ = UNASSIGNED); returns the new record."""
        n = self.records[rec]
        if not 0 < m <= n:
            raise ValueError(f"cannot take {m} of {n} keys")
        if m == n:
            del self.records[rec]
        else:
            self.records[rec] = n - m
        new = (d_next,) + rec[1:]
        self.add(new, m)
        return new

    def move_back(self, rec: tuple, m: Optional[int] = None) -> tuple:
        """Phase I on records: d_next := d_hash."""
        return self.take(rec, self.records[rec] if m is None else m, rec[2])

    def loads(self, instances: int) -> np.ndarray:
        """L(d) = Σ c·n over records with d_next = d (⊥ excluded)."""
        out = np.zeros(instances)
        for (dn, _, _, c, _), n in self.records.items():
            if dn != UNASSIGNED:
                out[dn] += c * n
        return out

    @property
    def keys(self) -> int:
        return sum(self.records.values())

    def __len__(self) -> int:
        return len(self.records)
