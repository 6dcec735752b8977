"""Fang et al.'s routing tables as registered partitioners (``mixed``, ``mintable``, ``minmig``;
digest 003 §3, §3.7).

A routing-table partitioner never splits a key: Map block = the stateful instance that owns the
key, F(k) = A[k] if present else ``crc32(key) mod P``. The instance keeps the table and the last
``window`` batches of key counts across calls:

- c(k) = the key's tuples in the statistics batch; S(k, w) = its tuples over the last ``window``
  batches (the state a windowed operator keeps; digest §8 A12 allows rows as the unit).
- Trigger (digest §8 A2): the table is rebuilt only when the current table leaves some instance
  above (1 + θmax)·L̄ on the statistics — or, when a key alone exceeds that bound (best effort,
  ``routing_llfd``), when the current table misses the best-effort bounds (a giant shares its
  instance, or another instance is above (1 + θmax)·R̄); otherwise it is kept and nothing
  migrates. A plan that meets neither (status ``infeasible`` or ``table_violation``) replaces the
  table only if it lowers the maximum load (digest §8 A6); ``last.status`` still says what the
  algorithm found. ``best_effort=False`` is the paper's behaviour (an unmeetable θmax gives
  ``infeasible`` plans).
- ``plan_on="current"`` (default, the offline ``plan`` command): the batch given is the
  statistics window, the table is planned on it and applied to it. ``plan_on="previous"`` (a
  running stream, the paper's protocol): the batch is routed with the table planned on the
  previous batch, then the table is re-planned from this batch for the next one.
- Unseen keys (ours, ``unseen="good-turing"``, the default; only when the table routes a later
  batch than its statistics, ``plan_on="previous"``): keys absent from the statistics batch
  carry no table entry, so in the next batch they are hashed — on average the same load on every
  instance, including a giant's. The planner is told that expected load per instance,
  ``Stats.reserve`` = M·T/P, with T the batch's tuples and M = n₁/T the Good–Turing estimate of
  the missing mass (n₁ = keys seen exactly once; I. J. Good, "The population frequencies of
  species and the estimation of population parameters", Biometrika 40, 1953); a giant's
  best-effort bound then leaves room for it below (1 + θmax)·max(c_max, L̄) — the user's θmax,
  not the tighter planning target of ``plan_margin``, which is for the noise of the seen keys —
  (``routing_table.giant_bound``): when the reserve alone fills that room, no movable key stays
  beside the giant. Measured on the drift bench (10⁵ keys, 16 partitions, z = 1): M = 0.114
  (the share actually unseen 0.112–0.116), i.e. 1 425 tuples per instance per 200 000-tuple
  batch, 8.6 % of the heaviest key; the paper's planner left θmax·R̄ of seen keys beside it and
  reached 1.107–1.109 × max(heaviest key, mean), 1.084–1.090 with the reserve. The routing
  function F stays the paper's (A[k] else h(k)); only a giant's bound changes. The limit of any
  table with a hash fallback: when M·T/P alone exceeds 10 % of the heaviest key (few tuples per
  key, e.g. 3·10⁴ tuples over 2·10⁴ keys at 16 partitions), max load ≤ 1.1 × max(c_max, L̄)
  cannot be guaranteed. ``unseen="none"`` is the paper's (the statistics are the next batch).

``last`` holds the latest :class:`~policies.partitioning.routing_table.RoutingPlan` (migration
cost in tuples of state, table size, status) and :meth:`report` its JSON form.
:meth:`set_previous` loads an earlier window and table (``plan mixed --previous FILE``).
"""
from __future__ import annotations

import json
from collections import deque
from pathlib import Path
from typing import Literal, Mapping, Optional, Sequence

import numpy as np
from pydantic import Field

from spark_governor.policies.partitioning.base import (Fragments, KeyCounts, KeyIndex, Partitioner, PartitionerOptions,
                                                       PlanError, stable_hashes)
from spark_governor.policies.partitioning.registry import register
from spark_governor.policies.partitioning.routing_planners import algorithm
from spark_governor.policies.partitioning.routing_table import (BETA, THETA_MAX, VALID, RoutingPlan, Stats, assignment,
                                                                bounds, instance_loads, lower_bound, within_bounds)


def crc32_instances(keys, partitions: int) -> np.ndarray:
    """The default hash fallback h(k) = crc32(key) mod P (the ``hash`` baseline's block)."""
    return stable_hashes(tuple(keys)) % partitions if len(keys) else np.zeros(0, dtype=np.int64)


crc32_instances.crc32 = True   # KeyIndex.instances computes it from its cached crc32


def keep_new(plan: RoutingPlan, old_loads: np.ndarray) -> bool:
    """Apply a plan if it is valid, or if it at least lowers the maximum load (digest §8 A6: when
    no balanced table within Amax exists, keep the old table unless the new one is better)."""
    return plan.status in VALID or float(plan.loads.max(initial=0)) < float(old_loads.max(initial=0)) - 1e-9


def current_meets_target(stats: Stats, owner: np.ndarray, theta_max: float, best_effort: bool = True) -> bool:
    """The re-plan trigger's test (module docstring): the current assignment keeps every instance
    within (1 + θmax)·L̄, or — best effort, when a key alone exceeds that — within the
    best-effort bounds."""
    loads = instance_loads(owner, stats.cost, stats.instances)
    if loads.max(initial=0) <= (1 + theta_max) * float(stats.cost.sum()) / stats.instances + 1e-9:
        return True
    return best_effort and within_bounds(stats, owner, theta_max)


def plan_with_margin(fn, stats: Stats, theta_max: float, plan_margin: float = 0.0, **kwargs) -> RoutingPlan:
    """``fn(stats, θ)`` for θ = θmax·(1 − plan_margin); when that tighter target has no valid plan,
    the paper's θmax (so a margin never turns a feasible re-plan into an infeasible one)."""
    if plan_margin > 0:
        plan = fn(stats, theta_max * (1 - plan_margin), **kwargs)
        if plan.status in VALID:
            return plan
    return fn(stats, theta_max, **kwargs)


class RoutingOptions(PartitionerOptions):
    theta_max: float = Field(THETA_MAX, ge=0, description="balance tolerance θmax: L(d) ≤ (1+θmax)·L̄")
    table_max: int = Field(3000, ge=0, description="routing-table size bound Amax (entries)")
    beta: float = Field(BETA, gt=0, description="migration selection factor β in γ = c^β/S")
    window: int = Field(1, ge=1, description="batches w over which the state S(k, w) is summed")
    plan_on: Literal["current", "previous"] = Field("current", description="statistics batch: the batch given, or the previous one")
    discretisation_r: int = Field(0, ge=0, description="HLHE degree r for discretising c and S (0: exact)")
    compact: bool = Field(False, description="plan on compact records (§3.8; with discretisation_r > 0 "
                                             "equal keys merge into few records)")
    plan_margin: float = Field(0.5, ge=0, lt=1, description=(
        "re-plan when max load > (1+θmax)·L̄ (as the paper), but plan for (1+θmax·(1−plan_margin))·L̄, so that "
        "the next window's sampling noise and drift stay inside θmax (ours, default 0.5; 0 = the paper)"))
    best_effort: bool = Field(True, description=(
        "when a key alone exceeds (1+θmax)·L̄: minimise the maximum load (the key alone on its instance, the "
        "rest within θmax of its own mean) instead of giving up (ours; false = the paper)"))
    unseen: Literal["good-turing", "none"] = Field("good-turing", description=(
        "plan_on=previous: leave room on a giant's instance for the expected load of keys absent from the "
        "statistics (Good–Turing missing mass n1/T, hashed evenly) (ours; none = the paper)"))


class _Names(Sequence):
    """Key names of the planner's key indices, looked up lazily (a batch plans on up to 10⁵ keys,
    and only the table entries and reports need names)."""

    def __init__(self, names: list, universe: np.ndarray):
        self._names, self._universe = names, universe

    def __len__(self) -> int:
        return len(self._universe)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self._names[j] for j in self._universe[i].tolist()]
        return self._names[int(self._universe[i])]

    def names_of(self, indices: Sequence[int]) -> list:
        """The names of key indices (one numpy gather instead of one lookup per key)."""
        names = self._names
        return [names[u] for u in self._universe[np.asarray(indices, dtype=np.int64)].tolist()]


def unseen_share(counts: np.ndarray) -> float:
    """Good–Turing estimate of the missing mass (Good 1953): the share of the next batch's tuples
    that belong to keys absent from this one, n₁/T (n₁ = keys with exactly one tuple, T = tuples)."""
    counts = np.asarray(counts)
    total = float(counts.sum())
    return float((counts == 1).sum()) / total if total > 0 else 0.0


class _RoutingTablePartitioner(Partitioner):
    Options = RoutingOptions
    algorithm: str = "mixed"

    def __init__(self, **options):
        super().__init__(**options)
        self.table: dict[str, int] = {}
        self.partitions: Optional[int] = None
        self.history: deque[tuple[np.ndarray, np.ndarray]] = deque(maxlen=self.options.window)
        self.last: Optional[RoutingPlan] = None
        self._last_names: Sequence[str] = ()
        self.rebuilt = False
        self.hash_keys = crc32_instances
        self.index = KeyIndex()

    @property
    def last_keys(self) -> tuple[str, ...]:
        """The key of every index of ``last`` (key-name order)."""
        return tuple(self._last_names)

    def use_hash(self, hash_keys) -> None:
        """Replace the hash fallback: ``hash_keys(keys, P) -> int array`` (e.g. Spark's Murmur3 of
        the job's grouping key, ``collectors.routing``)."""
        self.hash_keys = hash_keys

    def _entry(self, counts: Mapping[str, int]) -> tuple[np.ndarray, np.ndarray]:
        keys = list(counts)
        return self.index.lookup(keys), np.fromiter((int(counts[k]) for k in keys), dtype=np.int64, count=len(keys))

    def set_previous(self, counts: Mapping[str, int], table: Mapping[str, int]) -> None:
        """The previous window's key counts and routing table (e.g. from an earlier ``plan`` run)."""
        self.history.append(self._entry({str(k): int(v) for k, v in counts.items()}))
        self.table = {str(k): int(v) for k, v in table.items()}

    def _stats(self, ids: np.ndarray, cnt: np.ndarray, partitions: int,
               unseen: float = 0.0) -> tuple["_Names", Stats, np.ndarray]:
        """Stats over the keys of the batch, the window and the table, in key-name order: (key
        names, Stats, position of every id in them, −1 if absent). ``unseen``: the share of the
        next batch expected from keys not in this one; ``Stats.reserve`` = unseen·T/P (module
        docstring)."""
        bad = [k for k, d in self.table.items() if not 0 <= d < partitions]
        if bad:
            raise PlanError(f"table: key {bad[0]!r} names instance {self.table[bad[0]]} outside 0..{partitions - 1}")
        table_ids = self.index.lookup(list(self.table))
        window = list(self.history)[-(self.options.window - 1):] if self.options.window > 1 else []
        # the keys that can move: in the batch (c > 0) or in the table; a key with c = 0 and no
        # entry never moves and carries no load, so it is left out (its S would not matter)
        seen = np.zeros(len(self.index), dtype=bool)
        seen[ids[cnt > 0]] = True
        seen[table_ids] = True
        universe = self.index.name_order(np.nonzero(seen)[0])
        pos = np.full(len(self.index), -1, dtype=np.int64)
        pos[universe] = np.arange(len(universe))
        c = np.zeros(len(universe))
        at = pos[ids]                          # −1: a key with count 0 and no entry (left out)
        c[at[at >= 0]] = cnt[at >= 0]
        s = c.copy()
        for h_ids, h_cnt in window:
            at = pos[h_ids]
            s[at[at >= 0]] += h_cnt[at >= 0]
        hashed = self.index.instances(universe, partitions, self.hash_keys)
        table = dict(zip(pos[table_ids].tolist(), self.table.values()))
        reserve = unseen * float(cnt.sum()) / partitions
        return _Names(self.index.names, universe), Stats(c, s, hashed, partitions, table,
                                                         self.options.discretisation_r, reserve=reserve,
                                                         goal_theta=self.options.theta_max), pos

    def replan(self, counts: Mapping[str, int], partitions: int,
               state: Optional[Mapping[str, float]] = None, next_batch: bool = False) -> RoutingPlan:
        """Plan a new table from ``counts`` (the statistics window) if the current one is unbalanced.
        ``state`` (optional) gives S(k, w) per key directly (e.g. one state row per key for a
        running aggregate); by default S is the key's tuples over the last ``window`` batches.
        ``next_batch=True``: the table will route a later batch (a running job's driver), so the
        reserve for unseen keys applies (``unseen``)."""
        ids, cnt = self._entry(counts)
        return self._replan(ids, cnt, partitions, state, next_batch)

    def _replan(self, ids: np.ndarray, cnt: np.ndarray, partitions: int,
                state: Optional[Mapping[str, float]] = None, next_batch: bool = False) -> RoutingPlan:
        """``next_batch``: the table routes a later batch than ``cnt`` (``plan_on="previous"``), so
        the expected load of unseen keys counts (``unseen``)."""
        if self.partitions not in (None, partitions):
            self.table, self.history = {}, deque(maxlen=self.options.window)
        self.partitions = partitions
        share = unseen_share(cnt) if next_batch and self.options.unseen == "good-turing" else 0.0
        keys, stats, pos = self._stats(ids, cnt, partitions, share)
        if state is not None:
            st_ids = self.index.lookup(list(state))
            inside = st_ids < len(pos)
            at = np.where(inside, pos[np.minimum(st_ids, len(pos) - 1)], -1) if len(pos) else np.full(len(st_ids), -1)
            s = np.zeros(stats.keys)
            vals = np.fromiter((float(v) for v in state.values()), dtype=float, count=len(st_ids))
            s[at[at >= 0]] = vals[at >= 0]
            stats = Stats(stats.cost, s, stats.hashed, partitions, stats.table, self.options.discretisation_r,
                          reserve=stats.reserve, goal_theta=stats.goal_theta)
        o = self.options
        owner = assignment(stats.hashed, stats.table)
        loads = instance_loads(owner, stats.cost, partitions)
        bound = (1 + o.theta_max) * float(stats.cost.sum()) / partitions
        if current_meets_target(stats, owner, o.theta_max, o.best_effort) and len(stats.table) <= o.table_max:
            status, kept_bound = "ok", bound
            if loads.max(initial=0) > bound + 1e-9:
                status, kept_bound = "best_effort", bounds(stats, owner, o.theta_max).target
            plan = RoutingPlan(self.algorithm, dict(stats.table), owner, loads, kept_bound,
                               np.zeros(0, dtype=np.int64), 0.0, status, (), lower_bound(stats))
            self.rebuilt = False
        else:
            fn = algorithm(self.algorithm, o.compact)
            kwargs = {"beta": o.beta} if self.algorithm in ("mixed", "minmig") else {}
            if self.algorithm == "mixed":
                kwargs["table_max"] = o.table_max
            kwargs["best_effort"] = o.best_effort
            plan = plan_with_margin(fn, stats, o.theta_max, o.plan_margin, **kwargs)
            self.rebuilt = True
            if not keep_new(plan, loads):     # digest §8 A6: an unbalanced plan that is no better
                plan = RoutingPlan(self.algorithm, dict(stats.table), owner, loads, bound,
                                   np.zeros(0, dtype=np.int64), 0.0, plan.status, plan.trials, lower_bound(stats))
                self.rebuilt = False
        self.table = dict(zip(keys.names_of(list(plan.table)), plan.table.values()))
        self.last, self._last_names = plan, keys
        self.history.append((ids, cnt))
        return plan

    def owners(self, keys, partitions: int, ids: Optional[np.ndarray] = None) -> np.ndarray:
        """F(k) under the current table for ``keys`` (``ids``: their ids, when known)."""
        ids = self.index.lookup(list(keys)) if ids is None else ids
        owner = self.index.instances(ids, partitions, self.hash_keys).copy()
        if self.table:
            dense = np.full(len(self.index), -1, dtype=np.int64)
            dense[self.index.lookup(list(self.table))] = list(self.table.values())
            ids = np.asarray(ids, dtype=np.int64)
            entry = dense[ids] if len(dense) else np.full(len(ids), -1)
            owner = np.where(entry >= 0, entry, owner)
        return owner

    def assign_blocks(self, batch: KeyCounts, partitions: int) -> Fragments:
        ids = self.index.lookup(batch.keys)
        self._batch_ids = ids
        if self.options.plan_on == "current":
            self._replan(ids, batch.counts.copy(), partitions)
            owners = self.owners(batch.keys, partitions, ids)
        else:
            if self.partitions not in (None, partitions):
                self.table = {}
            owners = self.owners(batch.keys, partitions, ids)
            self._replan(ids, batch.counts.copy(), partitions, next_batch=True)
        return Fragments(np.arange(batch.num_keys, dtype=np.int64), owners, batch.counts.copy())

    def assign_buckets(self, batch: KeyCounts, fragments: Fragments, reduce: int) -> np.ndarray:
        """crc32(key) mod R, as the default, from the cached hashes."""
        ids = getattr(self, "_batch_ids", None)
        if ids is None or len(ids) != batch.num_keys:
            ids = self.index.lookup(batch.keys)
        return self.index.crc(ids) % reduce

    def report(self) -> dict:
        """Extra plan output: table, loads on the statistics, migration cost, status."""
        if self.last is None:
            return {}
        return {"routing": {**self.last.to_dict(list(self.last_keys)), "rebuilt": self.rebuilt,
                            "theta_max": self.options.theta_max, "table_max": self.options.table_max}}


@register
class Mixed(_RoutingTablePartitioner):
    name = "mixed"
    algorithm = "mixed"
    description = "Fang et al. Mixed routing table (HPDC'17): balance within θmax, |A| ≤ Amax, low migration"


@register
class MinTable(_RoutingTablePartitioner):
    name = "mintable"
    algorithm = "mintable"
    description = "Fang et al. MinTable: rebuild the routing table from hash (smallest table)"


@register
class MinMig(_RoutingTablePartitioner):
    name = "minmig"
    algorithm = "minmig"
    description = "Fang et al. MinMig: LLFD by γ = c^β/S on the current table (least migration, unbounded table)"


def read_previous(path: str | Path) -> tuple[dict[str, int], dict[str, int]]:
    """``--previous FILE``: JSON ``{"counts": {key: n}, "table": {key: instance}}``, or the JSON
    output of an earlier ``plan mixed --json`` (counts from its assignment, table from its
    ``routing``). Errors name the file and the field."""
    p = Path(path)
    try:
        doc = json.loads(p.read_text(encoding="utf-8"))
    except OSError as exc:
        raise PlanError(f"{p}: {exc.strerror}") from None
    except ValueError as exc:
        raise PlanError(f"{p}: not JSON ({exc})") from None
    if not isinstance(doc, dict):
        raise PlanError(f"{p}: expected a JSON object")
    if "counts" in doc:
        counts = doc["counts"]
    elif "assignment" in doc:
        counts = {k: sum(int(n) for _, n in v.get("blocks", [])) for k, v in doc["assignment"].items()}
    else:
        raise PlanError(f"{p}: field 'counts' (or a plan's 'assignment') is missing")
    table = doc.get("table", (doc.get("routing") or {}).get("table", {}))
    if not isinstance(counts, dict) or not isinstance(table, dict):
        raise PlanError(f"{p}: 'counts' and 'table' must be objects")
    out_c, out_t = {}, {}
    for k, v in counts.items():
        if not isinstance(v, int) or isinstance(v, bool) or v < 0:
            raise PlanError(f"{p}: counts.{k}: expected an integer >= 0, got {v!r}")
        out_c[str(k)] = v
    for k, v in table.items():
        if not isinstance(v, int) or isinstance(v, bool) or v < 0:
            raise PlanError(f"{p}: table.{k}: expected an instance index >= 0, got {v!r}")
        out_t[str(k)] = v
    return out_c, out_t


def apply_previous(partitioner: Partitioner, path: str | Path) -> None:
    """``plan <algorithm> --previous FILE``: load the previous window into a routing-table partitioner."""
    if not isinstance(partitioner, _RoutingTablePartitioner):
        raise PlanError(f"--previous applies to the routing-table partitioners (mixed, mintable, minmig), "
                        f"not {partitioner.name!r}")
    counts, table = read_previous(path)
    partitioner.set_previous(counts, table)
