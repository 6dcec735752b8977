"""The routing-table planners of Fang et al. (HPDC'17 §3, Algorithms 2–5; digest 003 §3.3–3.6) on top of LLFD
(``routing_llfd``):

- :func:`min_table` (Algorithm 2), :func:`min_mig` (Algorithm 3, γ = c^β / S, β = 1.5, S = 0 → γ =
  +∞), :func:`mixed` (Algorithm 4 with the digest's deterministic next-``a`` rule, §3.5: restart
  from the old table each trial; paper rule a ← |A'| − Amax, then the cumulative escape, then the
  smallest untried value; MinTable fallback; otherwise the smallest table, ``table_violation``) —
  so it always terminates after at most |A_old| + 1 trials plus one MinTable run;
- :func:`mixed_bf` (every a), :func:`simple` (Algorithm 5, LPT);
- ours: :func:`exact_plan` (branch and bound for small instances) and :func:`trimmed` (a plan cut
  to Amax entries), used by :func:`mixed`;
- :data:`ALGORITHMS` and :func:`algorithm`: the planners by name, per key or on compact records
  (``routing_compact``, §3.8).

Units: c in tuples, S in rows or bytes, M in S's unit (``routing_table``). Pure: no Spark imports.
"""
from __future__ import annotations

import math
from typing import Optional

import numpy as np

from spark_governor.policies.partitioning.routing_compact import (KeySpace, compact_plan, llfd_compact, min_mig_compact,
                                                                  min_table_compact)
from spark_governor.policies.partitioning.routing_llfd import _plan, llfd
from spark_governor.policies.partitioning.routing_table import (BETA, EPS, THETA_MAX, RoutingPlan, Stats, _bound,
                                                                _evaluate, _rank, assignment, cost_order, gamma_order,
                                                                lower_bound, memory_order, migration_cost)

__all__ = ["min_table", "min_mig", "mixed", "mixed_bf", "simple", "exact_plan", "trimmed", "ALGORITHMS", "algorithm"]


def min_table(stats: Stats, theta_max: float = THETA_MAX, best_effort: bool = True) -> RoutingPlan:
    """Algorithm 2: move back every entry, then Phase II + LLFD by highest cost first."""
    return _plan("mintable", stats, {}, _rank(cost_order(stats)), theta_max, best_effort=best_effort)


def min_mig(stats: Stats, theta_max: float = THETA_MAX, beta: float = BETA, best_effort: bool = True) -> RoutingPlan:
    """Algorithm 3: no cleaning, Phase II + LLFD by largest γ = c^β/S first."""
    return _plan("minmig", stats, stats.table, _rank(gamma_order(stats, beta)), theta_max, best_effort=best_effort)


def _mixed_trial(stats: Stats, back: list[int], a: int, rank: np.ndarray, theta_max: float,
                 best_effort: bool = True, order: Optional[np.ndarray] = None) -> RoutingPlan:
    gone = set(back[:a])
    work = {k: d for k, d in stats.table.items() if k not in gone}
    return _plan("mixed", stats, work, rank, theta_max, best_effort=best_effort, order=order)


def _met(plan: RoutingPlan) -> bool:
    """The plan meets its target: θmax, or the best-effort bounds when a key alone exceeds U."""
    return plan.status in ("ok", "best_effort")


#: tables with more entries than this use the bounded search for ``a`` (``mixed``)
LINEAR_SEARCH_MAX = 64
#: trials of the bounded search beyond the first
SEARCH_TRIALS = 10
#: the bounded search stops once the bracket of ``a`` is this share of |A_old| wide (at least 1)
SEARCH_TOLERANCE = 0.01


def mixed(stats: Stats, theta_max: float = THETA_MAX, table_max: int = 3000, beta: float = BETA,
          max_trials: Optional[int] = None, exact_keys: int = 12, compact: bool = False,
          best_effort: bool = True) -> RoutingPlan:
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

    ``best_effort`` (default; ``routing_llfd``): when a key alone exceeds U, every trial, MinTable
    and the result aim at the best-effort bounds instead of θmax (status ``best_effort``), so a
    plan exists and the trials end as soon as one fits Amax; ``best_effort=False`` is the paper's
    (and the digest's) behaviour: ``infeasible``.

    **Large tables** (ours; more than ``LINEAR_SEARCH_MAX`` = 64 entries): the digest's rule can
    take up to |A_old| + 1 trials — on a 3000-entry table whose trials land just above Amax it
    alternated a = 0, 284, 2, 282, … for hundreds of trials (up to 60 s per batch). There MinTable
    runs first; when trial 0 is too large and MinTable is valid, ``a`` is searched between 0
    (too large) and |A_old| (MinTable-like) by regula falsi on |A'(a)| − Amax alternating with
    bisection, for at most ``SEARCH_TRIALS`` = 10 more trials, keeping the valid trial with the
    least migration (|A'| usually shrinks as more entries move back; where it does not, the search
    still ends and MinTable is the fallback). When MinTable is not valid no trial is searched.
    The search also stops once the bracket is ``SEARCH_TOLERANCE`` = 1 % of |A_old| wide: the
    entries between its ends are the ones with the least state (C_mem), so a closer ``a`` saves
    at most 1 % of the back-moves, each of the smallest state — not worth a trial (ours, for
    the planning-time goal: 5–6 trials fewer on 3000-entry tables, a 2× shorter plan).

    ``compact=True`` runs every trial and MinTable on compact records (``routing_compact``, §3.8)."""
    back = memory_order(stats, list(stats.table))
    if compact:
        space = KeySpace(stats)

        def trial(a: int) -> RoutingPlan:
            return compact_plan("mixed", stats, theta_max, "gamma", beta, back=a, space=space, best_effort=best_effort)

        def table_only(stats, theta_max):
            return min_table_compact(stats, theta_max, best_effort=best_effort)
    else:
        order = gamma_order(stats, beta)
        rank = _rank(order)

        def trial(a: int) -> RoutingPlan:
            return _mixed_trial(stats, back, a, rank, theta_max, best_effort, order)

        def table_only(stats, theta_max):
            return min_table(stats, theta_max, best_effort=best_effort)
    def valid(plan: RoutingPlan) -> bool:
        return plan.size <= table_max and _met(plan)

    limit = len(back) + 1 if max_trials is None else max_trials
    tried: list[int] = []
    results: list[RoutingPlan] = []
    found: Optional[RoutingPlan] = None
    mt: Optional[RoutingPlan] = None
    if len(back) > LINEAR_SEARCH_MAX:
        mt = table_only(stats, theta_max)
        found = _bounded_search(trial, len(back), table_max, valid, mt, tried, results,
                                SEARCH_TRIALS if max_trials is None else max(max_trials - 1, 0))
    else:
        a = 0
        while len(tried) < limit:
            plan = trial(a)
            tried.append(a); results.append(plan)
            if valid(plan):
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
    if mt is None:
        mt = table_only(stats, theta_max)
    mt_valid = valid(mt)
    if found is not None:
        if mt_valid and mt.migration < found.migration - EPS:
            return _renamed(mt, "mixed", mt.status, trials)
        return _renamed(found, "mixed", found.status, trials)
    if mt_valid:
        return _renamed(mt, "mixed", "fallback_mintable" if mt.status == "ok" else mt.status, trials)
    U = _bound(stats, theta_max)
    single_too_big = bool(stats.keys and stats.cost.max() > U + EPS)
    if not single_too_big and int((stats.cost > 0).sum()) <= exact_keys:
        exact = exact_plan(stats, theta_max, table_max)
        if exact is not None:
            return _renamed(exact, "mixed", "exact", trials)
    best = min(results + [mt], key=lambda p: (p.size, p.migration))
    if best.size > table_max:
        best = trimmed(stats, best, table_max, theta_max)
    if best_effort:
        status = "infeasible" if best.status == "infeasible" else "table_violation"
    else:
        status = "infeasible" if single_too_big else "table_violation"
    return _renamed(best, "mixed", status, trials)


def _bounded_search(trial, entries: int, table_max: int, valid, mt: RoutingPlan, tried: list, results: list,
                    budget: int) -> Optional[RoutingPlan]:
    """``mixed``'s search for a on large tables (its docstring): trial 0, then, if it is too large
    and MinTable is valid, regula falsi on |A'(a)| − Amax between a too-large trial and the
    smallest valid one (|A_old| stands for MinTable at first), alternating with bisection."""
    def run(a: int) -> RoutingPlan:
        plan = trial(a)
        tried.append(a); results.append(plan)
        return plan

    p0 = run(0)
    if valid(p0):
        return p0
    if not valid(mt):
        return None
    lo, s_lo, hi, s_hi = 0, p0.size, entries, mt.size
    best: Optional[RoutingPlan] = None
    width = max(1, math.ceil(SEARCH_TOLERANCE * entries))
    for step in range(budget):
        if hi - lo <= width:
            break
        if step % 2 == 0 and s_lo > s_hi:
            a = lo + math.ceil((s_lo - table_max) * (hi - lo) / (s_lo - s_hi))
        else:
            a = (lo + hi) // 2
        a = min(max(a, lo + 1), hi - 1)
        plan = run(a)
        if valid(plan):
            hi, s_hi = a, plan.size
            if best is None or plan.migration < best.migration:
                best = plan
        else:
            lo, s_lo = a, max(plan.size, table_max + 1)
    return best


def trimmed(stats: Stats, plan: RoutingPlan, table_max: int, theta_max: float) -> RoutingPlan:
    """``plan`` with only its ``table_max`` highest-cost entries (ties: key index); the other
    keys move back to h(k)."""
    keep = sorted(plan.table, key=lambda k: (-stats.cost[k], k))[: max(table_max, 0)]
    table = {k: plan.table[k] for k in keep}
    return _evaluate(plan.algorithm, stats, table, theta_max, plan.status, plan.trials)



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
    return RoutingPlan(name, plan.table, plan.owner, plan.loads, plan.bound, plan.moved, plan.migration, status, trials,
                       plan.lower_bound)


def mixed_bf(stats: Stats, theta_max: float = THETA_MAX, table_max: int = 3000, beta: float = BETA,
             best_effort: bool = True) -> RoutingPlan:
    """Mixed_BF: every a in 0..|A|; the balanced (or best-effort) plan within Amax of least M
    (ties: smaller a)."""
    back = memory_order(stats, list(stats.table))
    rank = _rank(gamma_order(stats, beta))
    plans = [_mixed_trial(stats, back, a, rank, theta_max, best_effort) for a in range(len(back) + 1)]
    good = [(p.migration, a, p) for a, p in enumerate(plans) if _met(p) and p.size <= table_max]
    if good:
        m, a, p = min(good, key=lambda t: (t[0], t[1]))
        return _renamed(p, "mixed_bf", p.status, (a,))
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
                       "ok" if loads.max(initial=0) <= U + EPS else "infeasible", (), lower_bound(stats))



ALGORITHMS = {"mixed": mixed, "mintable": min_table, "minmig": min_mig, "mixed_bf": mixed_bf,
              "llfd": llfd, "simple": simple}


def algorithm(name: str, compact: bool = False):
    """The planner ``name`` (a key of ALGORITHMS); ``compact=True``: the same algorithm on compact
    records (``routing_compact``, §3.8) — mixed, mintable, minmig and llfd."""
    if not compact:
        return ALGORITHMS[name]
    table = {"mixed": lambda stats, theta_max=THETA_MAX, **kw: mixed(stats, theta_max, compact=True, **kw),
             "mintable": min_table_compact, "minmig": min_mig_compact, "llfd": llfd_compact}
    if name not in table:
        raise ValueError(f"{name!r} has no compact-record variant (one of {sorted(table)})")
    return table[name]

