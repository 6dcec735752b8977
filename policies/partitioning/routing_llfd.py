"""Least-Load Fit Decreasing with its Adjust step (Fang et al., HPDC'17, Algorithm 1; digest 003
§3.0 and §3.2, with the §7 conventions the oracles rely on), the core every routing-table planner runs.

- Phase II: from each instance above U = (1 + θmax)·L̄, disassociate keys in criterion order while
  L > U (keys with c = 0 and fixed keys are skipped, §8 A7);
- Phase III, :func:`llfd`: keys in criterion order from a priority queue; instances by (load,
  index); Adjust swaps out the shortest greedy prefix (criterion order) of the instance's
  *residents* with strictly smaller cost that brings it under U; bumped keys re-enter the queue.
  A key no instance accepts goes to the least-loaded instance and the plan is ``infeasible``
  (§8 A6).

:func:`fewest_keys` and :func:`llfd_target` are the one LLFD/Adjust step shared with the
compact-record planners (``routing_compact``): an item there is a record of n equal keys.

Units: c in tuples, S in rows or bytes, loads and U in c's unit (``routing_table``). Pure.
"""
from __future__ import annotations

import heapq
import math
from typing import Callable, Optional, Sequence

import numpy as np

from spark_governor.policies.partitioning.routing_table import (BETA, EPS, THETA_MAX, RoutingPlan, Stats, _bound, _rank,
                                                                assignment, cost_order, gamma_order, instance_loads,
                                                                migration_cost)

__all__ = ["fewest_keys", "llfd_target", "llfd"]


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

