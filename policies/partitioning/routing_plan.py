"""Fang et al.'s routing tables as registered partitioners (``mixed``, ``mintable``, ``minmig``;
digest 003 §3, §3.7).

A routing-table partitioner never splits a key: Map block = the stateful instance that owns the
key, F(k) = A[k] if present else ``crc32(key) mod P``. The instance keeps the table and the last
``window`` batches of key counts across calls:

- c(k) = the key's tuples in the statistics batch; S(k, w) = its tuples over the last ``window``
  batches (the state a windowed operator keeps; digest §8 A12 allows rows as the unit).
- Trigger (digest §8 A2): the table is rebuilt only when the current table leaves some instance
  above (1 + θmax)·L̄ on the statistics; otherwise it is kept and nothing migrates. A plan that
  is not balanced within Amax (e.g. one key above the bound) replaces the table only if it lowers
  the maximum load (digest §8 A6); ``last.status`` still says what the algorithm found.
- ``plan_on="current"`` (default, the offline ``plan`` command): the batch given is the
  statistics window, the table is planned on it and applied to it. ``plan_on="previous"`` (a
  running stream, the paper's protocol): the batch is routed with the table planned on the
  previous batch, then the table is re-planned from this batch for the next one.

``last`` holds the latest :class:`~policies.partitioning.routing_table.RoutingPlan` (migration
cost in tuples of state, table size, status) and :meth:`report` its JSON form.
:meth:`set_previous` loads an earlier window and table (``plan mixed --previous FILE``).
"""
from __future__ import annotations

import json
from collections import deque
from pathlib import Path
from typing import Literal, Mapping, Optional

import numpy as np
from pydantic import Field

from spark_governor.policies.partitioning.base import Fragments, KeyCounts, Partitioner, PartitionerOptions, PlanError, stable_hashes
from spark_governor.policies.partitioning.registry import register
from spark_governor.policies.partitioning.routing_planners import algorithm
from spark_governor.policies.partitioning.routing_table import BETA, THETA_MAX, RoutingPlan, Stats, assignment, instance_loads


def crc32_instances(keys, partitions: int) -> np.ndarray:
    """The default hash fallback h(k) = crc32(key) mod P (the ``hash`` baseline's block)."""
    return stable_hashes(tuple(keys)) % partitions if len(keys) else np.zeros(0, dtype=np.int64)


VALID = ("ok", "fallback_mintable", "exact")


def keep_new(plan: RoutingPlan, old_loads: np.ndarray) -> bool:
    """Apply a plan if it is valid, or if it at least lowers the maximum load (digest §8 A6: when
    no balanced table within Amax exists, keep the old table unless the new one is better)."""
    return plan.status in VALID or float(plan.loads.max(initial=0)) < float(old_loads.max(initial=0)) - 1e-9


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


class _RoutingTablePartitioner(Partitioner):
    Options = RoutingOptions
    algorithm: str = "mixed"

    def __init__(self, **options):
        super().__init__(**options)
        self.table: dict[str, int] = {}
        self.partitions: Optional[int] = None
        self.history: deque[dict[str, int]] = deque(maxlen=self.options.window)
        self.last: Optional[RoutingPlan] = None
        self.last_keys: tuple[str, ...] = ()
        self.rebuilt = False
        self.hash_keys = crc32_instances

    def use_hash(self, hash_keys) -> None:
        """Replace the hash fallback: ``hash_keys(keys, P) -> int array`` (e.g. Spark's Murmur3 of
        the job's grouping key, ``collectors.routing``)."""
        self.hash_keys = hash_keys

    def set_previous(self, counts: Mapping[str, int], table: Mapping[str, int]) -> None:
        """The previous window's key counts and routing table (e.g. from an earlier ``plan`` run)."""
        self.history.append({str(k): int(v) for k, v in counts.items()})
        self.table = {str(k): int(v) for k, v in table.items()}

    def _stats(self, counts: Mapping[str, int], partitions: int) -> tuple[tuple[str, ...], Stats]:
        keys = set(counts) | set(self.table)
        for h in self.history:
            keys |= set(h)
        keys_t = tuple(sorted(keys))
        index = {k: i for i, k in enumerate(keys_t)}
        c = np.array([counts.get(k, 0) for k in keys_t], dtype=float)
        s = c.copy()
        for h in list(self.history)[-(self.options.window - 1):] if self.options.window > 1 else []:
            s += np.array([h.get(k, 0) for k in keys_t], dtype=float)
        hashed = np.asarray(self.hash_keys(keys_t, partitions), dtype=np.int64)
        bad = [k for k, d in self.table.items() if not 0 <= d < partitions]
        if bad:
            raise PlanError(f"table: key {bad[0]!r} names instance {self.table[bad[0]]} outside 0..{partitions - 1}")
        table = {index[k]: d for k, d in self.table.items()}
        return keys_t, Stats(c, s, hashed, partitions, table, self.options.discretisation_r)

    def replan(self, counts: Mapping[str, int], partitions: int,
               state: Optional[Mapping[str, float]] = None) -> RoutingPlan:
        """Plan a new table from ``counts`` (the statistics window) if the current one is unbalanced.
        ``state`` (optional) gives S(k, w) per key directly (e.g. one state row per key for a
        running aggregate); by default S is the key's tuples over the last ``window`` batches."""
        if self.partitions not in (None, partitions):
            self.table, self.history = {}, deque(maxlen=self.options.window)
        self.partitions = partitions
        keys, stats = self._stats(counts, partitions)
        if state is not None:
            s = np.array([float(state.get(k, 0.0)) for k in keys], dtype=float)
            stats = Stats(stats.cost, s, stats.hashed, partitions, stats.table, self.options.discretisation_r)
        o = self.options
        owner = assignment(stats.hashed, stats.table)
        loads = instance_loads(owner, stats.cost, partitions)
        bound = (1 + o.theta_max) * float(stats.cost.sum()) / partitions
        if loads.max(initial=0) <= bound + 1e-9 and len(stats.table) <= o.table_max:
            plan = RoutingPlan(self.algorithm, dict(stats.table), owner, loads, bound, np.zeros(0, dtype=np.int64),
                               0.0, "ok")
            self.rebuilt = False
        else:
            fn = algorithm(self.algorithm, o.compact)
            kwargs = {"beta": o.beta} if self.algorithm in ("mixed", "minmig") else {}
            if self.algorithm == "mixed":
                kwargs["table_max"] = o.table_max
            plan = plan_with_margin(fn, stats, o.theta_max, o.plan_margin, **kwargs)
            self.rebuilt = True
            if not keep_new(plan, loads):     # digest §8 A6: an unbalanced plan that is no better
                plan = RoutingPlan(self.algorithm, dict(stats.table), owner, loads, bound,
                                   np.zeros(0, dtype=np.int64), 0.0, plan.status, plan.trials)
                self.rebuilt = False
        self.table = {keys[k]: d for k, d in plan.table.items()}
        self.last, self.last_keys = plan, keys
        self.history.append(dict(counts))
        return plan

    def owners(self, keys, partitions: int) -> np.ndarray:
        """F(k) under the current table for ``keys``."""
        hashed = np.asarray(self.hash_keys(keys, partitions), dtype=np.int64)
        return np.array([self.table.get(k, int(h)) for k, h in zip(keys, hashed)], dtype=np.int64)

    def assign_blocks(self, batch: KeyCounts, partitions: int) -> Fragments:
        counts = dict(zip(batch.keys, batch.counts.tolist()))
        if self.options.plan_on == "current":
            self.replan(counts, partitions)
            owners = self.owners(batch.keys, partitions)
        else:
            if self.partitions not in (None, partitions):
                self.table = {}
            owners = self.owners(batch.keys, partitions)
            self.replan(counts, partitions)
        return Fragments(np.arange(batch.num_keys, dtype=np.int64), owners, batch.counts.copy())

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
