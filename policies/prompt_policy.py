"""The ``prompt`` policy: Prompt's partition plan (SIGMOD'20, digest 000) for the next micro-batch.

Knob ``partition_plan``. Inputs: the job's per-batch partition statistics (``JobView.partition_stats``;
key counts reported by ``collectors.partition_plan``, exact or Algorithm 1's approximate counts).
Every evaluation that sees a batch newer than the one the current plan was made from:

1. **Algorithm 4** (``policies.partitioning.elasticity``) is replayed over the recent batches with
   W_i = processing time / trigger interval (seconds / seconds; the interval configured or
   inferred from the batches' trigger times), the batch's tuples (data rate) and distinct keys
   (data distribution), using the (P, R) each batch actually ran with; if the latest batch fires
   a scale-out/-in, the new Map/Reduce task counts go into the plan; otherwise (P, R) stay.
2. **Algorithms 2 + 3** (``prompt`` partitioner) plan the latest batch's reported key counts into
   P blocks and R buckets — the plan for batch n is made from batch n−1's statistics (the
   paper plans on the current batch; a control plane can only see finished batches).
3. The directive value is the plan in ``PartitionPlan.to_dict`` form, its assignment limited to the
   ``max_plan_keys`` most frequent keys (every split key is among them: a split key is above the
   mean count); the job spreads other keys by crc32 (``collectors.partition_plan.realize``).

The proposal's ``prediction`` holds the plan's metrics on the batch it was made from (BSI, BCI,
KSR, MPI, max/mean block load); ``observe`` reports the max/mean block load measured on the latest
applied batch, so the effectiveness check compares planned with realized balance.
"""
from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field

from spark_governor.policies.base import JobView, PartitionBatchStats, Policy, Proposal
from spark_governor.policies.partitioning.base import KeyCounts
from spark_governor.policies.partitioning.elasticity import Elasticity, ElasticityConfig
from spark_governor.policies.partitioning.metrics import plan_metrics
from spark_governor.policies.partitioning.registry import get_partitioner
from spark_governor.policies.plan_inputs import measured_balance, unplanned_batches
from spark_governor.policies.safety import SafetyConfig
from spark_governor.policies.threshold import trigger_interval_s


class PromptConfig(SafetyConfig):
    min_value: Optional[float] = Field(None, description="Unused: the knob's value is a plan, not a number")
    partitions: int = Field(4, ge=1, le=4096, description="Map blocks P before Algorithm 4 changes it")
    reduce: Optional[int] = Field(None, ge=1, le=4096, description="Reduce buckets R (default: P)")
    zigzag_start: Literal["first", "continue"] = "first"
    overflow: Literal["spread", "single"] = "spread"
    split_above_capacity: bool = False
    elasticity: bool = Field(True, description="Change P and R with Algorithm 4")
    thres: float = Field(0.9, gt=0, description="Scale out when W > thres for d batches")
    step: float = Field(0.1, gt=0, description="Scale in when W <= thres - step for d batches")
    d: int = Field(3, ge=1, description="Consecutive batches, and the grace period, of Algorithm 4")
    p_min: int = Field(1, ge=1)
    p_max: int = Field(64, ge=1)
    r_min: int = Field(1, ge=1)
    r_max: int = Field(64, ge=1)
    eps: float = Field(0.0, ge=0, description="Relative tolerance for 'data rate / keys increased'")
    trigger_interval_s: Optional[float] = Field(None, gt=0, description="Batch interval; inferred when unset")
    max_plan_keys: int = Field(1000, ge=1, le=10_000, description="Keys listed in the directive; others are hashed")


def elasticity_step(stats: tuple[PartitionBatchStats, ...], interval_s: float, cfg: PromptConfig):
    """Algorithm 4 replayed over ``stats`` (oldest first); the step of the latest batch."""
    ec = ElasticityConfig(thres=cfg.thres, step=cfg.step, d=cfg.d, p_min=cfg.p_min, p_max=cfg.p_max,
                          r_min=cfg.r_min, r_max=cfg.r_max, eps=cfg.eps)
    machine = Elasticity(stats[0].partitions, stats[0].reduce, ec)
    step = None
    for s in stats:
        if s.processing_s is None:
            continue
        machine.p, machine.r = s.partitions, s.reduce  # what the batch actually ran with
        step = machine.observe(s.processing_s / interval_s, s.tuples, s.keys)
    return step


class PromptPolicy(Policy):
    name = "prompt"
    knobs = ("partition_plan",)
    Config = PromptConfig
    description = "Prompt (SIGMOD'20): balanced key-split Map blocks, load-aware Reduce buckets, elastic P/R"

    def evaluate(self, view: JobView, config: PromptConfig) -> list[Proposal]:
        found = unplanned_batches(view)  # None: nothing reported, or already planned from the latest batch
        if found is None or found.latest is not view.partition_stats[-1]:
            return []
        stats, latest = view.partition_stats, found.latest  # all batches (Algorithm 4 needs no key counts)
        if found.current.get("partitions") and found.current.get("reduce"):
            p, r = int(found.current["partitions"]), int(found.current["reduce"])
        else:
            p, r = config.partitions, config.reduce or config.partitions
        interval = trigger_interval_s(view, config.trigger_interval_s)
        elastic = None
        if config.elasticity and interval:
            step = elasticity_step(stats, interval, config)
            if step is not None:
                elastic = {"action": step.action, "zone": step.zone, "reason": step.reason,
                           "w": latest.processing_s / interval if latest.processing_s is not None else None}
                if step.action in ("out", "in"):
                    p, r = step.p, step.r
        batch = KeyCounts.from_mapping(latest.key_counts)
        partitioner = get_partitioner("prompt", zigzag_start=config.zigzag_start, overflow=config.overflow,
                                      split_above_capacity=config.split_above_capacity)
        plan = partitioner.plan(batch, p, r)
        m = plan_metrics(plan)
        top = set(batch.keys[i] for i in batch.descending()[:config.max_plan_keys])
        value = plan.to_dict()
        value["assignment"] = {k: e for k, e in value["assignment"].items() if k in top}
        for derived in ("block_loads", "block_cardinalities", "bucket_loads"):
            value.pop(derived)
        value["based_on"] = found.based_on()
        value["elasticity"] = elastic
        inputs = {"tuples": latest.tuples, "keys": latest.keys, "planned_keys": len(batch.keys),
                  "batch_id": latest.batch_id, "measured_max_mean_load": latest.max_mean_load,
                  "w": elastic["w"] if elastic else None}
        prediction = {"max_mean_load": m.max_mean_load, "mpi": m.mpi, "bsi": m.bsi, "bci": m.bci, "ksr": m.ksr}
        reason = (f"Prompt plan from batch {latest.batch_id}: P={p} R={r}, predicted max/mean load "
                  f"{m.max_mean_load:.3f}, KSR {m.ksr:.3f}"
                  + (f"; Algorithm 4: {elastic['action']} ({elastic['reason']})" if elastic and elastic["action"] in ("out", "in") else ""))
        return [Proposal("partition_plan", value, reason, inputs, prediction)]

    def observe(self, view: JobView, knob: str, config: PromptConfig) -> dict:
        return measured_balance(view)
