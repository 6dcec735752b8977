"""Phase I–III of Fang et al.'s routing-table algorithms on compact records (HPDC'17 §4.1;
digest 003 §3.8), instead of on individual keys.

A record ``(d_next, d_cur, d_hash, c, S)`` stands for n keys that share the five values
(:class:`CompactRecords`); with the §3.9 discretisation of c and S
(``Stats(discretisation_r=r)``) a skewed key space collapses into few records, and the work of
Phases I and II no longer grows with the number of keys:

- Phase I (back-moves) sets ``d_next := d_hash`` on records: all of them for MinTable, the first
  ``a`` keys in C_mem order (S ascending) for Mixed's trial ``a``, none for MinMig / LLFD;
- Phase II disassociates from every instance above U = (1 + θ)·L̄ the fewest keys, in criterion
  order, that bring it to U: from a record of n equal keys it takes m = ⌈(L − U)/c⌉ ≤ n of them
  in one step (record splitting, [D]); they become ``d_next = ⊥``;
- Phase III is LLFD with its Adjust step on the ⊥ keys in criterion order, one key at a time
  (equal keys one after another), bumping residents of the least-loaded instances whose cost is
  below the key's, again m keys of a record at a time;
- materialisation (§3.8 (i)–(iii)): for every record with ``d_next ≠ d_cur``, n concrete keys of
  its (d_cur, d_hash, c, S) group move (the lowest key indices first, the per-key algorithms'
  tie-break); A' holds the keys whose final instance differs from h(k).

Equivalence with the per-key algorithms (``routing_llfd``, ``routing_planners``) on the same (discretised) statistics:
every step depends on keys only through c (loads, the fit test, Adjust) or through (c, S) (the γ
and C_mem orders), and keys with equal values are interchangeable, so MinTable, MinMig and LLFD
give the per-key loads; when equal keys of one group interleave with other keys in the per-key
order, the record order keeps the group together, which can change which keys move (the table
and M, for C_cost ties between different S; for Mixed also the loads, through C_mem ties). The
tests check equal loads for the three, validity for Mixed, and exact equality without such ties.

Criterion orders on records (:class:`Orders`): C_cost (−c), C_γ (−γ, −c), γ = c^β/S (S = 0 → +∞),
C_mem (S), each with ties to the group holding the lowest key index — the per-key tie-break when
groups hold one key, so without identical keys the plans are the per-key plans exactly.

Best effort (``best_effort=True``, ``routing_llfd``): records whose keys are giants are pinned to
their homes after Phase I (a record holding several giants on one instance is split: its extra
keys go one by one to the instance without a giant with the least other load) and the bounds are
per instance, as per key. Pure: numpy and the standard library only.
"""
from __future__ import annotations

import heapq
import math
from collections import defaultdict
from typing import Callable, Optional

import numpy as np

from spark_governor.policies.partitioning.routing_llfd import fewest_keys, llfd_target
from spark_governor.policies.partitioning.routing_table import (BETA, EPS, THETA_MAX, RoutingPlan, Stats, _bound,
                                                                _evaluate, assignment, giant_bound,
                                                                giant_threshold, lower_bound)

__all__ = ["CompactRecords", "UNASSIGNED", "KeySpace", "Orders", "plan_records", "compact_plan", "llfd_compact",
           "min_table_compact", "min_mig_compact"]

Record = tuple  # (d_next, d_cur, d_hash, c, S)


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


class Orders:
    """The criterion orders on records; ties go to the record whose key group has the lowest key
    index (``first``), which is the per-key tie-break whenever a group holds one key."""

    def __init__(self, first: dict, beta: float = BETA):
        self.first, self.beta = first, beta

    def _tie(self, rec: Record) -> int:
        return self.first[rec[1:]]

    def cost(self, rec: Record) -> tuple:
        """C_cost: c descending."""
        return (-rec[3], self._tie(rec))

    def gamma(self, rec: Record) -> tuple:
        """C_γ: γ = c^β / S descending (S = 0 → +∞), then c descending."""
        c, s = rec[3], rec[4]
        return (-(math.inf if s <= 0 else c ** self.beta / s), -c, self._tie(rec))

    def memory(self, rec: Record) -> tuple:
        """C_mem: S ascending."""
        return (rec[4], self._tie(rec))


class KeySpace:
    """The per-key statistics grouped for records: ``groups[(d_cur, d_hash, c, S)]`` = key indices
    (ascending), ``base`` the load of the fixed keys per instance (they never move)."""

    def __init__(self, stats: Stats):
        self.stats = stats
        owner = assignment(stats.hashed, stats.table)
        movable = np.nonzero(~stats.fixed)[0]
        self.base = np.bincount(owner[stats.fixed], weights=stats.cost[stats.fixed],
                                minlength=stats.instances).astype(float)
        cols = (owner[movable], stats.hashed[movable], stats.cost[movable], stats.state[movable])
        self.groups: dict[tuple, np.ndarray] = {}
        if len(movable):
            order = np.lexsort(cols[::-1])            # by (d_cur, d_hash, c, S), then key index
            srt = [col[order] for col in cols]
            change = np.zeros(len(order), dtype=bool)
            change[0] = True
            for col in srt:
                change[1:] |= col[1:] != col[:-1]
            starts = np.nonzero(change)[0]
            for i, keys in zip(starts, np.split(movable[order], starts[1:])):
                self.groups[(int(srt[0][i]), int(srt[1][i]), float(srt[2][i]), float(srt[3][i]))] = keys
        self.first = {g: int(keys[0]) for g, keys in self.groups.items()}

    def orders(self, beta: float = BETA) -> Orders:
        return Orders(self.first, beta)

    def records(self) -> CompactRecords:
        out = CompactRecords()
        for (d_cur, d_hash, c, s), keys in self.groups.items():
            out.add((d_cur, d_cur, d_hash, c, s), len(keys))
        return out

    def materialise(self, recs: CompactRecords) -> dict[int, int]:
        """A' from the final records: per group, movers (by d_next) take the lowest key indices."""
        owner = np.array(self.stats.hashed, dtype=np.int64, copy=True)
        by_group: dict[tuple, list] = defaultdict(list)
        for (d_next, d_cur, d_hash, c, s), n in recs.records.items():
            if d_next == UNASSIGNED:
                raise ValueError("materialise: a record is still unassigned")
            by_group[(d_cur, d_hash, c, s)].append((d_next == d_cur, d_next, n))
        for g, parts in by_group.items():
            keys = self.groups[g]
            i = 0
            for _, d_next, n in sorted(parts):      # movers first, by instance
                owner[keys[i:i + n]] = d_next
                i += n
        moved = np.nonzero(owner != self.stats.hashed)[0]
        return {int(k): int(owner[k]) for k in moved}


def plan_records(space: KeySpace, theta_max: float, order: Callable[[Record], tuple],
                 back: int | str = 0, best_effort: bool = True) -> tuple[CompactRecords, np.ndarray, bool, Optional[np.ndarray]]:
    """Phases I–III on records (module docstring). ``back``: ``"all"`` (MinTable) or the number
    of table entries moved back in C_mem order (Mixed's ``a``). Returns (records, loads, feasible,
    the best-effort per-instance bounds or None)."""
    stats = space.stats
    N = stats.instances
    recs = space.records()
    # Phase I
    entries = sorted((r for r in recs.records if r[1] != r[2]), key=space.orders().memory)
    todo = sum(recs.records[r] for r in entries) if back == "all" else int(back)
    for rec in entries:
        if todo <= 0:
            break
        m = min(todo, recs.records[rec])
        recs.move_back(rec, m)
        todo -= m
    loads = space.base.copy()
    for (dn, _, _, c, _), n in recs.records.items():
        loads[dn] += c * n
    thr = giant_threshold(stats, theta_max) if best_effort else None
    if thr is None:
        U = np.full(N, _bound(stats, theta_max))
        giant = lambda rec: False  # noqa: E731
    else:
        U = _giant_homes(recs, space, thr, loads, thr * theta_max / (1 + theta_max),
                         (1 + (theta_max if stats.goal_theta is None else stats.goal_theta)) * lower_bound(stats))
        giant = lambda rec: rec[3] > thr + EPS  # noqa: E731
    # Phase II
    for d in range(N):
        if loads[d] <= U[d] + EPS:
            continue
        for rec in sorted((r for r in recs.records if r[0] == d), key=order):
            if loads[d] <= U[d] + EPS:
                break
            c = rec[3]
            if c <= 0 or giant(rec):
                continue
            m = fewest_keys(loads[d] - U[d], c, recs.records[rec])
            recs.take(rec, m, UNASSIGNED)
            loads[d] -= c * m
    waiting = [r for r in recs.records if r[0] == UNASSIGNED]
    be = None if thr is None else U
    if not waiting:
        return recs, loads, True, be
    # Phase III: LLFD with Adjust; residents are the keys that stayed after Phase II
    residents: list[list] = [[] for _ in range(N)]
    avail: dict = {}                            # resident record -> keys not bumped yet
    for rec in sorted(recs.records, key=order):
        if rec[0] != UNASSIGNED and not giant(rec):
            residents[rec[0]].append(rec)
            avail[rec] = recs.records[rec]
    heap = [(order(r), r) for r in waiting]
    heapq.heapify(heap)
    feasible = True
    while heap:
        key, rec = heap[0]
        if recs.records.get(rec, 0) == 0:
            heapq.heappop(heap)
            continue
        ck = rec[3]
        target, chosen = llfd_target(loads, ck, U, residents, lambda r: r[3], avail.__getitem__)
        for r2, m in chosen:
            avail[r2] -= m
            loads[target] -= r2[3] * m
            new = recs.take(r2, m, UNASSIGNED)
            heapq.heappush(heap, (order(new), new))
        if target is None:                      # §8 A6: least-loaded instance, plan infeasible
            feasible = False
            target = min(range(N), key=lambda d: (loads[d], d))
        recs.take(rec, 1, target)
        loads[target] += ck
    return recs, loads, feasible, be


def _giant_homes(recs: CompactRecords, space: KeySpace, thr: float, loads: np.ndarray, slack: float,
                 goal: float) -> np.ndarray:
    """Best effort on records: every giant key on an instance of its own (``routing_table.bounds``'
    rule: giants by S descending, then c descending, then first key index, keep their instance
    unless taken; the others go to the free instance with the least non-giant load); ``loads`` is
    updated. Returns the per-instance bounds (``routing_table.giant_bound`` on a giant's, with
    ``slack`` = θmax·R̄ and ``goal`` = (1 + θmax)·max(c_max, L̄))."""
    N = space.stats.instances
    giants = sorted((r for r in recs.records if r[3] > thr + EPS),
                    key=lambda r: (-r[4], -r[3], space.first[r[1:]], r[0]))
    rest = loads.copy()
    for (dn, _, _, c, _), n in recs.records.items():
        if c > thr + EPS:
            rest[dn] -= c * n
    taken = np.zeros(N, dtype=bool)
    per = np.full(N, thr)
    for rec in giants:
        n = recs.records.get(rec, 0)
        for _ in range(n):
            d = rec[0]
            if taken[d]:
                d = min((e for e in range(N) if not taken[e]), key=lambda e: (rest[e], e))
                loads[rec[0]] -= rec[3]
                loads[d] += rec[3]
                recs.take(rec, 1, d)
            taken[d] = True
            per[d] = giant_bound(rec[3], slack, goal, space.stats.reserve)
    return per


def compact_plan(name: str, stats: Stats, theta_max: float, criterion: str = "cost", beta: float = BETA,
                 back: int | str = 0, space: KeySpace | None = None, best_effort: bool = True) -> RoutingPlan:
    """One algorithm run on records (``criterion`` "cost" or "gamma"), materialised and evaluated
    like the per-key plans."""
    space = space or KeySpace(stats)
    orders = space.orders(beta)
    recs, loads, feasible, per = plan_records(space, theta_max, orders.cost if criterion == "cost" else orders.gamma,
                                              back, best_effort)
    plan = _evaluate(name, stats, space.materialise(recs), theta_max, "ok")
    if per is None:
        status = "ok" if feasible and plan.loads.max(initial=0) <= plan.bound + EPS else "infeasible"
        bound = plan.bound
    else:
        status = "best_effort" if feasible and bool((plan.loads <= per + EPS).all()) else "infeasible"
        bound = float(per.max())
    return RoutingPlan(plan.algorithm, plan.table, plan.owner, plan.loads, bound, plan.moved,
                       plan.migration, status, plan.trials, plan.lower_bound)


def llfd_compact(stats: Stats, theta_max: float = THETA_MAX, criterion: str = "cost", beta: float = BETA,
                 best_effort: bool = True) -> RoutingPlan:
    return compact_plan("llfd", stats, theta_max, criterion, beta, best_effort=best_effort)


def min_table_compact(stats: Stats, theta_max: float = THETA_MAX, best_effort: bool = True) -> RoutingPlan:
    return compact_plan("mintable", stats, theta_max, "cost", back="all", best_effort=best_effort)


def min_mig_compact(stats: Stats, theta_max: float = THETA_MAX, beta: float = BETA,
                    best_effort: bool = True) -> RoutingPlan:
    return compact_plan("minmig", stats, theta_max, "gamma", beta, best_effort=best_effort)
