"""Least-Load Fit Decreasing with its Adjust step (Fang et al., HPDC'17, Algorithm 1; digest 003
§3.0 and §3.2, with the §7 conventions the oracles rely on), the core every routing-table planner runs.

- Phase II: from each instance above U = (1 + θmax)·L̄, disassociate keys in criterion order while
  L > U (keys with c = 0 and fixed keys are skipped, §8 A7);
- Phase III, :func:`llfd`: keys in criterion order from a priority queue; instances by (load,
  index); Adjust swaps out the shortest greedy prefix (criterion order) of the instance's
  *residents* with strictly smaller cost that brings it under U; bumped keys re-enter the queue.
  A key no instance accepts goes to the least-loaded instance and the plan is ``infeasible``
  (§8 A6).
- Best effort (ours, ``best_effort=True``, the default; the paper and the digest give up): when a
  key alone exceeds U (a *giant*, ``routing_table.giant_threshold``) θmax cannot be met by any
  table, so the planners minimise the maximum load instead, within the paper's slack: each giant
  on its own instance (its home: ``routing_table.bounds``, where it is unless a giant with more
  state is there), and the paper's problem on the rest with per-instance bounds — c(giant) +
  θmax·R̄ on a giant's instance, (1 + θmax)·R̄ elsewhere (R̄ the mean of the rest over the other
  instances; less on a giant's when ``Stats.reserve`` — the expected load of keys not in the
  statistics — leaves less room, ``routing_table.giant_bound``). Giants are pinned (never
  disassociated nor bumped). The plan's maximum load is then at most c_max + θmax·R̄ ≤
  (1 + θmax)·max(c_max, L̄), status ``best_effort``; its achieved θ is ``max_theta``.
  Without a giant nothing changes.

:func:`fewest_keys` and :func:`llfd_target` are the one LLFD/Adjust step shared with the
compact-record planners (``routing_compact``): an item there is a record of n equal keys.

Units: c in tuples, S in rows or bytes, loads and U in c's unit (``routing_table``). Pure.
"""
from __future__ import annotations

import heapq
import math
from typing import Callable, Optional, Sequence

import numpy as np

from spark_governor.policies.partitioning.routing_table import (BETA, EPS, THETA_MAX, Bounds, RoutingPlan, Stats, _bound,
                                                                _rank, assignment, bounds, cost_order, gamma_order,
                                                                instance_loads, lower_bound, migration_cost)

__all__ = ["fewest_keys", "llfd_target", "llfd", "plan_status"]


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


def llfd_target(loads: np.ndarray, ck: float, U, residents: Sequence[list],
                cost: Callable[[object], float], available: Callable[[object], int]) -> tuple[Optional[int], list]:
    """LLFD's choice for one key of cost ``ck`` (Algorithm 1, with Adjust): instances by (load,
    index); the first one the key fits on (L + c ≤ U), or the first one on which Adjust frees room
    by taking, in criterion order, the fewest residents of strictly smaller cost. ``U`` is one bound
    or one per instance (best effort). ``residents[d]``
    lists items in criterion order (an item is one key, or a record of equal keys); ``cost(item)``
    is its per-key cost and ``available(item)`` how many of its keys can still be bumped. Returns
    (instance or None, the ``(item, m)`` to bump); the caller moves them and places the key."""
    if np.ndim(U) == 0:
        U = [float(U)] * len(loads)
    for d in sorted(range(len(loads)), key=loads.__getitem__):      # (load, index): sorted is stable
        if loads[d] + ck <= U[d] + EPS:
            return d, []
        excess, chosen = loads[d] + ck - U[d], []
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


def _phase2_llfd(stats: Stats, table: dict, rank: np.ndarray, theta_max: float,
                 best_effort: bool = True, order: Optional[np.ndarray] = None) -> tuple[dict, np.ndarray, bool, Optional[Bounds]]:
    """Phase II (disassociate keys, criterion order, from each overloaded instance while L > U;
    keys with c = 0 are skipped, §8 A7) and Phase III (LLFD). With ``best_effort`` and giants,
    the giants go to their homes first and U is per instance (module docstring). ``order``: the
    keys in criterion order (argsort of ``rank``; Mixed's trials share it). Returns (A', F',
    feasible, the best-effort bounds or None).

    Speed (the arithmetic and tie-breaks are Algorithm 1's, in the same sequence): loads are
    Python floats, and a key that fits the least-loaded instance (lowest index on ties) goes
    there without sorting the instances — :func:`llfd_target` runs only when it does not."""
    N, c, h = stats.instances, stats.cost, stats.hashed
    table = dict(table)
    owner = assignment(h, table)
    pinned = stats.fixed
    be = bounds(stats, owner, theta_max) if best_effort else None
    if be is None:
        U = [_bound(stats, theta_max)] * N
    else:
        U = be.per_instance.tolist()
        pinned = stats.fixed.copy()
        for k, d in be.home.items():
            owner[k] = d
            pinned[k] = True
            if d != h[k]:
                table[k] = d
            else:
                table.pop(k, None)
    loads = instance_loads(owner, c, N).tolist()
    if order is None:
        order = np.argsort(rank, kind="stable")
    candidates: list[int] = []
    over = [d for d in range(N) if loads[d] > U[d] + EPS]
    if over:
        owner_in_order = owner[order]
        for d in over:
            ks = order[owner_in_order == d]
            L, lim = loads[d], U[d] + EPS
            for k, ck, pk in zip(ks.tolist(), c[ks].tolist(), pinned[ks].tolist()):
                if L <= lim:
                    break
                if ck <= 0 or pk:
                    continue
                L -= ck; candidates.append(k)
            loads[d] = L
        if candidates:
            owner[candidates] = -1
            for k in candidates:
                table.pop(k, None)
    if not candidates:
        return table, owner, True, be
    residents: list[list[int]] = [[] for _ in range(N)]     # per instance, criterion order
    keep = ~pinned[order] & (owner[order] >= 0)
    in_order, owner_in_order = order[keep], owner[order][keep]
    by_instance = np.argsort(owner_in_order, kind="stable")
    bounds_at = np.searchsorted(owner_in_order[by_instance], np.arange(N + 1))
    sorted_keys = in_order[by_instance]
    for d in range(N):
        residents[d] = sorted_keys[bounds_at[d]:bounds_at[d + 1]].tolist()
    bumped = np.zeros(stats.keys, dtype=bool)
    heap = list(zip(rank[candidates].tolist(), candidates))
    heapq.heapify(heap)
    feasible = True
    loads_at = loads.__getitem__
    instances = range(N)
    while heap:
        _, k = heapq.heappop(heap)
        ck = float(c[k])
        d0 = min(instances, key=loads_at)
        if loads[d0] + ck <= U[d0] + EPS:
            target, chosen = d0, ()
        else:
            target, chosen = llfd_target(loads, ck, U, residents, c.__getitem__, lambda k2: 0 if bumped[k2] else 1)
        for k2, _m in chosen:
            bumped[k2] = True; loads[target] -= c[k2]; owner[k2] = -1; table.pop(k2, None)
            heapq.heappush(heap, (int(rank[k2]), k2))
        if target is None:                     # §8 A6: least-loaded instance, plan infeasible
            feasible = False
            target = min(instances, key=loads_at)
        owner[k] = target; loads[target] += ck
        if target != h[k]:
            table[k] = target
        else:
            table.pop(k, None)
    return table, owner, feasible, be


def plan_status(loads: np.ndarray, feasible: bool, U: float, be: Optional[Bounds]) -> tuple[str, float]:
    """(status, bound) of a planned assignment: ``ok`` within U; ``best_effort`` within the
    best-effort bounds (there were giants); else ``infeasible``."""
    if be is None:
        return ("ok" if feasible and loads.max(initial=0) <= U + EPS else "infeasible"), U
    ok = feasible and bool((loads <= be.per_instance + EPS).all())
    return ("best_effort" if ok else "infeasible"), be.target


def _plan(name: str, stats: Stats, table: dict, rank: np.ndarray, theta_max: float,
          trials: tuple = (), best_effort: bool = True, order: Optional[np.ndarray] = None) -> RoutingPlan:
    new_table, owner, feasible, be = _phase2_llfd(stats, table, rank, theta_max, best_effort, order)
    old_owner = assignment(stats.hashed, stats.table)
    moved, M = migration_cost(old_owner, owner, stats.state)
    loads = instance_loads(owner, stats.cost, stats.instances)
    status, bound = plan_status(loads, feasible, _bound(stats, theta_max), be)
    return RoutingPlan(name, new_table, owner, loads, bound, moved, M, status, trials, lower_bound(stats))


def llfd(stats: Stats, theta_max: float = THETA_MAX, criterion: str = "cost", beta: float = BETA,
         best_effort: bool = True) -> RoutingPlan:
    """LLFD alone on the current table (no cleaning) with criterion ``cost`` or ``gamma``."""
    order = cost_order(stats) if criterion == "cost" else gamma_order(stats, beta)
    return _plan("llfd", stats, stats.table, _rank(order), theta_max, best_effort=best_effort)

