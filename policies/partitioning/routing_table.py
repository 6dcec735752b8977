"""Mixed routing for keyed, stateful operators: routing table A with hash fallback (Fang et al.,
"Parallel Stream Processing Against Workload Skewness and Variance", HPDC'17; digest 003) — the
data model every planner shares.

F(k) = A[k] if k ∈ A else h(k) (Eq. 1, digest §1.2); entries never equal h(k). Load of instance d:
L(d) = Σ_{F(k)=d} c(k); balance constraint L(d) ≤ U = (1 + θmax)·L̄ (digest §1.4, §8 A1; θmax
default 0.08); migration cost M = Σ_{k: F_old(k) ≠ F_new(k)} S(k, w) (Eq. 2, §1.6).

Here: :class:`Stats` (the per-key statistics a planner reads, optionally discretised, §3.9 in
``routing_discretise``), :class:`RoutingPlan` (what a planner returns), F, L, M and U, and the
criterion orders C_cost, C_γ and C_mem (§3.1). The planners live beside it: LLFD with Adjust
(Algorithm 1) in ``routing_llfd``, MinTable / MinMig / Mixed / Mixed_BF / Simple (Algorithms 2–5)
in ``routing_planners``, the same on compact records (§3.8) in ``routing_compact``.

Units: c(k) = cost of key k in the last interval (tuples by default, digest §8 A12), S(k, w) = the
key's state over the last w intervals (rows or bytes, caller's choice); M is in S's unit.
Tie-breaks: C_cost (−c, key index), C_γ (−γ, −c, key index), C_mem (S, key index); equal loads →
lower instance index; comparisons use ≤ U + 1e-9. Keys are identified by their index in
:class:`Stats` (callers list them in id order). Pure: no Spark imports.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Optional, Sequence

import numpy as np

from spark_governor.policies.partitioning.routing_discretise import discretised_values

__all__ = ["Stats", "RoutingPlan", "Bounds", "assignment", "instance_loads", "migration_cost", "cost_order",
           "gamma_order", "memory_order", "bounds", "giant_bound", "giant_threshold", "lower_bound", "within_bounds", "THETA_MAX",
           "BETA", "EPS", "VALID"]

THETA_MAX = 0.08
BETA = 1.5
EPS = 1e-9
#: statuses of a plan that meets its target: θmax (``ok``, ``fallback_mintable``, ``exact``) or, when a
#: key alone exceeds (1 + θmax)·L̄, the best-effort bounds (``best_effort``)
VALID = ("ok", "fallback_mintable", "exact", "best_effort")


@dataclass(frozen=True)
class Stats:
    """Per-key statistics of the last interval: ``cost`` c(k), ``state`` S(k, w), ``hashed`` h(k)
    (0..N−1), for N = ``instances``; ``table`` the current routing table {key index: instance}.
    ``discretisation_r`` > 0 replaces c and S by their HLHE + greedy discretisation (§3.9).
    ``reserve`` (ours, ≥ 0, c's unit): the load every instance is expected to receive from keys
    not in these statistics — hashed, so no table moves it (``routing_plan``: Good–Turing); it
    only narrows a giant's best-effort bound (:func:`giant_bound`), below (1 + ``goal_theta``)·
    max(c_max, L̄) — ``goal_theta`` the user's θmax when the planner aims tighter (a planning
    margin, ``routing_plan``), else None: the planner's θ."""

    cost: np.ndarray
    state: np.ndarray
    hashed: np.ndarray
    instances: int
    table: Mapping[int, int] = field(default_factory=dict)
    discretisation_r: int = 0
    fixed: Optional[np.ndarray] = None   # keys that never move (e.g. a residual load per instance)
    reserve: float = 0.0
    goal_theta: Optional[float] = None

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
        if not self.reserve >= 0:
            raise ValueError("reserve must be >= 0")
        object.__setattr__(self, "fixed", fixed)

    @property
    def keys(self) -> int:
        return len(self.cost)


@dataclass(frozen=True)
class RoutingPlan:
    """A new routing table and what it does: ``table`` {key: instance ≠ h(key)}, ``owner`` F'(k)
    per key, ``loads`` L(d), ``bound`` the largest load allowed (U, or the best-effort target),
    ``moved`` the keys whose owner changed, ``migration`` M (S units), ``status`` ok | best_effort |
    infeasible | fallback_mintable | exact | table_violation, ``trials`` the a values Mixed tried
    (empty for the others), ``lower_bound`` max(max_k c(k), L̄): no unsplit assignment has a
    smaller maximum load. The achieved θ is :attr:`max_theta` (from ``loads``)."""

    algorithm: str
    table: dict
    owner: np.ndarray
    loads: np.ndarray
    bound: float
    moved: np.ndarray
    migration: float
    status: str
    trials: tuple = ()
    lower_bound: float = 0.0

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
                "max_theta": self.max_theta, "best_effort": self.status == "best_effort",
                "lower_bound": self.lower_bound, "moved": [name(int(k)) for k in self.moved],
                "migration_cost": self.migration, "trials": list(self.trials)}


# -- basics ----------------------------------------------------------------------------------------

def assignment(hashed: np.ndarray, table: Mapping[int, int]) -> np.ndarray:
    """F(k) = A[k] if present else h(k) (Eq. 1)."""
    owner = np.array(hashed, dtype=np.int64, copy=True)
    if table:
        owner[np.fromiter(table.keys(), dtype=np.int64, count=len(table))] = \
            np.fromiter(table.values(), dtype=np.int64, count=len(table))
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


def _bound(stats: Stats, theta_max: float) -> float:
    """U = (1 + θmax)·L̄."""
    return (1 + theta_max) * float(stats.cost.sum()) / stats.instances


def _evaluate(name: str, stats: Stats, table: dict, theta_max: float, status: str, trials: tuple = ()) -> RoutingPlan:
    """The plan that installs ``table`` (owners, loads, moved keys and M against ``stats.table``)."""
    owner = assignment(stats.hashed, table)
    moved, M = migration_cost(assignment(stats.hashed, stats.table), owner, stats.state)
    return RoutingPlan(name, table, owner, instance_loads(owner, stats.cost, stats.instances),
                       _bound(stats, theta_max), moved, M, status, trials, lower_bound(stats))


# -- best effort: keys heavier than the bound on their own ----------------------------------------

def lower_bound(stats: Stats) -> float:
    """max(max_k c(k), L̄): no assignment that keeps every key whole has a lower maximum load."""
    if not stats.keys:
        return 0.0
    return max(float(stats.cost.max()), float(stats.cost.sum()) / stats.instances)


def giant_threshold(stats: Stats, theta_max: float) -> Optional[float]:
    """The best-effort rule (ours; the paper is silent, digest §8 A6): a *giant* is a movable key
    that alone exceeds the balance bound of what is left to balance. With the movable keys by cost
    descending, the g-th is a giant iff c > (1 + θmax)·R̄_g, R̄_g = (Σc − Σ of the g heavier
    giants) / (N − g) — the first is the paper's U = (1 + θmax)·L̄, and each giant given its own
    instance lowers the mean of the rest, which can make the next key a giant too. Returns
    (1 + θmax)·R̄ for the final g (every giant has c above it, no other key has), or None when there
    is no giant (the paper's problem is unchanged). There are always fewer than N giants."""
    c = stats.cost
    N = stats.instances
    total = float(c.sum())
    if total <= 0 or not stats.keys:
        return None
    movable = np.sort(c[~stats.fixed])[::-1]
    g, taken = 0, 0.0
    while g < min(len(movable), N - 1):
        bound = (1 + theta_max) * (total - taken) / (N - g)
        if movable[g] <= bound + EPS:
            break
        taken += float(movable[g])
        g += 1
    if g == 0:
        return None
    return (1 + theta_max) * (total - taken) / (N - g)


@dataclass(frozen=True)
class Bounds:
    """Per-instance load bounds of a best-effort plan: ``per_instance[d]`` = :func:`giant_bound`
    = c(giant) + min(θmax·R̄, room) on a giant's instance, room = max(0, (1 + θmax)·max(c_max, L̄)
    − c(giant) − reserve) (``Stats.reserve``; room ≥ θmax·R̄ without one, so the bound is then
    c(giant) + θmax·R̄), (1 + θmax)·R̄ elsewhere; ``home`` giant key → its instance; ``target`` =
    max(per_instance), the plan's maximum load when the bounds are met: ≤ c_max + θmax·R̄ ≤
    (1 + θmax)·max(c_max, L̄).

    Why the room (ours, issue 18): the keys of the next batch that are not in the statistics are
    hashed — ``reserve`` per instance on average, on a giant's instance too, whatever the table
    says. The giant's instance then gets c(giant) + its planned keys + reserve; with 10⁵ keys,
    16 partitions, z = 1 the reserve is 8.6 % of the heaviest key and c_max + θmax·R̄ became
    1.107–1.109 × max(c_max, L̄) in the next batch. So movable keys join a giant only as far as
    the instance stays within (1 + θmax)·max(c_max, L̄) with the reserve on top — none when the
    reserve alone fills the room (every key hashed there gets an entry: ~1 300 at 16
    partitions). Lighter giants have room to spare (the bound is c_max, not theirs) and keep the
    paper's slack. The reserve is not added to the other instances: it is the same on each, and
    their bound is relative to the mean (adding it as fixed load there made keys just below
    (1 + θmax)·R̄ fit nowhere and multiplied Mixed's migration by 5–10 at 32–64 partitions).

    Why c(giant) + θmax·R̄ and not c(giant) alone (the giant strictly alone, which minimises the
    maximum load): every key hashed to the giant's instance would need a table entry — with
    10⁴ keys over 8 instances that is more than Amax = 3000 entries for two giants, so Mixed
    exhausted its trials — while the slack of θmax·R̄ the paper allows every other instance lets
    the light tail stay (Phase II moves the heaviest keys first) at ≤ θmax·R̄ above the optimum."""

    per_instance: np.ndarray
    home: dict
    target: float


def bounds(stats: Stats, owner: np.ndarray, theta_max: float) -> Optional[Bounds]:
    """The best-effort bounds for the assignment ``owner`` (None: no giant, the paper's U holds).

    Homes: giants by state descending (ties: cost descending, key index) keep their instance in
    ``owner`` unless a giant with more state holds it; the others move to the instance holding no
    giant with the least load of non-giant keys (ties: lower index) — a giant's state is the
    costliest to move, so the one with the most stays."""
    thr = giant_threshold(stats, theta_max)
    if thr is None:
        return None
    c, N = stats.cost, stats.instances
    giants = np.nonzero((c > thr + EPS) & ~stats.fixed)[0]
    giants = giants[np.lexsort((giants, -c[giants], -stats.state[giants]))]
    rest = np.ones(stats.keys, dtype=bool)
    rest[giants] = False
    rest_load = np.bincount(owner[rest], weights=c[rest], minlength=N).astype(float)
    home: dict[int, int] = {}
    taken = np.zeros(N, dtype=bool)
    for k in giants.tolist():
        d = int(owner[k])
        if taken[d]:
            free = [e for e in range(N) if not taken[e]]
            d = min(free, key=lambda e: (rest_load[e], e))
        home[k] = d
        taken[d] = True
    per = np.full(N, thr)
    slack = thr * theta_max / (1 + theta_max)            # θmax·R̄
    goal = (1 + (theta_max if stats.goal_theta is None else stats.goal_theta)) * lower_bound(stats)
    for k, d in home.items():
        per[d] = giant_bound(float(c[k]), slack, goal, stats.reserve)
    return Bounds(per, home, float(per.max()))


def giant_bound(cost: float, slack: float, goal: float, reserve: float = 0.0) -> float:
    """The bound of a giant's instance (:class:`Bounds`): c(giant) + min(``slack`` = θmax·R̄,
    max(0, ``goal`` − c(giant) − ``reserve``)), ``goal`` = (1 + θmax)·max(c_max, L̄). With
    ``reserve`` 0 it is c(giant) + θmax·R̄ (R̄ < c(giant) ≤ c_max, so θmax·R̄ < goal − c(giant))."""
    return cost + min(slack, max(0.0, goal - cost - reserve))


def within_bounds(stats: Stats, owner: np.ndarray, theta_max: float) -> bool:
    """Whether ``owner`` meets the target the planners aim for: every load ≤ U when there is no
    giant (the paper's trigger, digest §8 A2), else every giant on its own instance within
    :func:`giant_bound` and every other instance ≤ (1 + θmax)·R̄ (the best-effort bounds, giants
    where they are)."""
    loads = instance_loads(owner, stats.cost, stats.instances)
    b = bounds(stats, owner, theta_max)
    if b is None:
        return bool(loads.max(initial=0) <= _bound(stats, theta_max) + EPS)
    if any(b.home[k] != owner[k] for k in b.home):
        return False                                 # two giants share an instance
    return bool((loads <= b.per_instance + EPS).all())

