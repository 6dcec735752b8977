"""The ``mixed-routing`` policy: Fang et al.'s routing table for a keyed, stateful operator
(HPDC'17, digest 003 §3.7). Knob ``partition_plan``.

Every evaluation that sees a batch newer than the current table's: c(k) = the key's tuples in
the latest reported batch (the paper's last-interval predictor), S(k, w) = its tuples over the
last ``window`` reported batches (``state_unit="tuples"``, a windowed operator) or one state row
per key seen in them (``"rows"``, a running aggregate). Tuples the job summarised as ``other``
are placed per instance as immovable residual load (the measured block loads minus the reported
keys' loads under the current table). The trigger is the balance constraint (digest §8 A2): only
when some instance exceeds (1 + θmax)·L̄ under the current table is ``algorithm`` (``mixed`` by
default; ``mintable``/``minmig`` for comparison) run, and a new table is proposed only when it
differs — and, when no balanced table within Amax exists, only if it lowers the maximum load
(digest §8 A6). When a key alone exceeds (1 + θmax)·L̄ the planners are best effort by
default (``routing_llfd``: that key alone on its instance, the rest balanced; status
``best_effort``, the achieved θ in ``achieved_theta``). h(k) is Spark's ``pmod(hash(0, key), P)`` (``hash="spark"``, the routed job of
``collectors.routing``) or crc32 mod P (``"crc32"``).

The value: ``{"algorithm": "mixed-routing", "partitions": P, "table": {key: instance}, …}`` with
the plan's status, predicted loads, moved keys and migration cost; the job
(``collectors.routing.RoutedCount.applier``) installs it between micro-batches and moves the
moved keys' state. Prediction: max θ + 1 (max/mean load) on the statistics; ``observe`` the
measured max/mean of the latest batch.
"""
from __future__ import annotations

from typing import Literal, Optional

import numpy as np
from pydantic import Field

from spark_governor.policies.base import JobView, Policy, Proposal
from spark_governor.policies.partitioning.base import stable_hashes
from spark_governor.policies.partitioning.routing_plan import current_meets_target, keep_new, plan_with_margin
from spark_governor.policies.partitioning.routing_planners import algorithm
from spark_governor.policies.partitioning.routing_table import BETA, THETA_MAX, Stats, assignment, instance_loads
from spark_governor.policies.partitioning.spark_hash import spark_partition
from spark_governor.policies.plan_inputs import measured_balance, unplanned_batches
from spark_governor.policies.safety import SafetyConfig


class MixedRoutingConfig(SafetyConfig):
    min_value: Optional[float] = Field(None, description="Unused: the knob's value is a table, not a number")
    partitions: Optional[int] = Field(None, ge=1, le=4096, description="State partitions P (default: as reported)")
    theta_max: float = Field(THETA_MAX, ge=0, description="Balance tolerance: L(d) ≤ (1 + θmax)·L̄")
    table_max: int = Field(3000, ge=0, description="Routing-table size bound Amax")
    plan_margin: float = Field(0.5, ge=0, lt=1, description=(
        "Re-plan when max/mean > 1 + θmax (the paper) but plan for 1 + θmax·(1 − plan_margin), so the next "
        "batches' noise and drift stay inside θmax (ours, default 0.5; 0 = the paper)"))
    best_effort: bool = Field(True, description=(
        "When a key alone exceeds (1 + θmax)·L̄: minimise the maximum load (the key alone on its instance, the "
        "rest within θmax of its own mean) and report the achieved θ, instead of keeping the old table (ours; "
        "false = the paper)"))
    beta: float = Field(BETA, gt=0, description="γ = c^β / S")
    window: int = Field(5, ge=1, description="Reported batches summed into S(k, w)")
    state_unit: Literal["tuples", "rows"] = "tuples"
    algorithm: Literal["mixed", "mintable", "minmig"] = "mixed"
    compact: bool = Field(False, description="Plan on compact records (§3.8) instead of per key")
    discretisation_r: int = Field(0, ge=0, le=4096, description="HLHE degree r for discretising c and S (§3.9; 0: exact)")
    hash: Literal["spark", "crc32"] = "spark"


def hash_instances(keys, P: int, how: str) -> np.ndarray:
    if not keys:
        return np.zeros(0, dtype=np.int64)
    if how == "spark":
        return np.array([spark_partition(P, 0, k) for k in keys], dtype=np.int64)
    return stable_hashes(list(keys)) % P


class MixedRoutingPolicy(Policy):
    name = "mixed-routing"
    knobs = ("partition_plan",)
    Config = MixedRoutingConfig
    description = "Fang et al. (HPDC'17) Mixed routing table: balance within θmax, |A| ≤ Amax, least state migration"

    def evaluate(self, view: JobView, config: MixedRoutingConfig) -> list[Proposal]:
        found = unplanned_batches(view)
        if found is None:
            return []
        stats, latest, value = found.stats, found.latest, found.current
        P = int(config.partitions or latest.partitions)
        old_table = {str(k): int(d) for k, d in (value.get("table") or {}).items() if 0 <= int(d) < P}
        recent = stats[-config.window:]
        cost = {k: int(c) for k, c in latest.key_counts}
        state: dict[str, float] = {}
        for s in recent:
            for k, c in s.key_counts:
                state[k] = state.get(k, 0.0) + (float(c) if config.state_unit == "tuples" else 0.0)
                if config.state_unit == "rows":
                    state[k] = 1.0
        keys = sorted(set(cost) | set(state) | set(old_table))
        index = {k: i for i, k in enumerate(keys)}
        hashed = hash_instances(keys, P, config.hash)
        c = np.array([cost.get(k, 0) for k in keys], dtype=float)
        S = np.array([state.get(k, 0.0) for k in keys], dtype=float)
        table = {index[k]: d for k, d in old_table.items()}
        # residual (unreported) load per instance, immovable
        known = instance_loads(assignment(hashed, table), c, P)
        measured = np.asarray(latest.block_loads, dtype=float) if len(latest.block_loads) == P else None
        residual = np.zeros(P)
        if latest.other_tuples > 0:
            residual = np.maximum(measured - known, 0) if measured is not None else np.full(P, latest.other_tuples / P)
        extra = [d for d in range(P) if residual[d] > 0]
        c = np.concatenate([c, residual[extra]]); S = np.concatenate([S, np.zeros(len(extra))])
        hashed = np.concatenate([hashed, np.array(extra, dtype=np.int64)])
        fixed = np.r_[np.zeros(len(keys), dtype=bool), np.ones(len(extra), dtype=bool)]
        st = Stats(c, S, hashed, P, table, config.discretisation_r, fixed=fixed)
        loads = instance_loads(assignment(st.hashed, st.table), st.cost, P)
        bound = (1 + config.theta_max) * float(st.cost.sum()) / P
        inputs = {"batch_id": latest.batch_id, "keys": len(keys), "tuples": latest.tuples,
                  "max_mean_load": float(loads.max() / loads.mean()) if loads.sum() else 1.0,
                  "table_size": len(old_table), "measured_max_mean_load": latest.max_mean_load}
        owner = assignment(st.hashed, st.table)
        if current_meets_target(st, owner, config.theta_max, config.best_effort) and len(old_table) <= config.table_max:
            return []                                     # balanced (or best effort met): keep the table
        fn = algorithm(config.algorithm, config.compact)
        kwargs = {"beta": config.beta} if config.algorithm in ("mixed", "minmig") else {}
        if config.algorithm == "mixed":
            kwargs["table_max"] = config.table_max
        kwargs["best_effort"] = config.best_effort
        plan = plan_with_margin(fn, st, config.theta_max, config.plan_margin, **kwargs)
        new_table = {keys[k]: int(d) for k, d in sorted(plan.table.items())}
        if new_table == old_table or not keep_new(plan, loads):
            return []
        predicted = plan.max_theta + 1
        out = {"algorithm": "mixed-routing", "partitions": P, "table": new_table, "status": plan.status,
               "achieved_theta": plan.max_theta, "lower_bound_max_mean": plan.lower_bound / (st.cost.sum() / P),
               "planner": config.algorithm, "theta_max": config.theta_max, "table_max": config.table_max,
               "predicted_loads": plan.loads.tolist(), "migration_cost": plan.migration,
               "moved": [keys[k] for k in plan.moved.tolist() if k < len(keys)],
               "based_on": found.based_on()}
        reason = (f"{config.algorithm} routing table from batch {latest.batch_id}: max/mean "
                  f"{inputs['max_mean_load']:.3f} > {1 + config.theta_max:.3f}; new table {len(new_table)} entries, "
                  f"{len(out['moved'])} keys move ({plan.migration:g} state {config.state_unit}), "
                  f"predicted max/mean {predicted:.3f} ({plan.status})")
        return [Proposal("partition_plan", out, reason, inputs, {"max_mean_load": predicted})]

    def observe(self, view: JobView, knob: str, config: MixedRoutingConfig) -> dict:
        return measured_balance(view)
