"""The ``chaining`` policy: Lohrmann's Dynamic Task Chaining on a Spark query's optional exchanges.

Knob ``exchanges``. The job marks optional shuffles with ``collectors.exchanges.OptionalExchanges``
(``exchange(df, name, partitions=n)``: present = ``repartition(n)``, removed = the neighbouring
stages are fused); its applier reports them in ``JobView.knob_state["exchanges"]``::

    {"exchanges": [{"name": "spread", "partitions": 6, "removed": false, "stage": 0}, ...]}

where ``stage`` is the ordinal (position within a micro-batch) of the stage that *ends* at a present
exchange (the exchange is the boundary between stage ``stage`` and ``stage + 1``), or of the fused
stage that contains a removed one; ``None`` until the job has run a batch with its current plan.

Every evaluation (thesis §4.7.4, Algorithm 9; digest 004 §4.3 and the Spark mapping §11.7):

* **Chain.** The stages of the micro-batch in ordinal order form the task sequence; a boundary is
  *optional* when a present declared exchange sits there, *required* otherwise. Each maximal run of
  stages joined by optional boundaries is a primary chain and goes through Algorithm 10
  (``policies.chaining.plan_exchanges``, default mode ``recommended``: the digest's §10.14
  resolution, so two equally loaded stages can chain). An optional exchange inside a chosen chain is
  removed. The ρ^max of each stage is taken *at the merged stage's partition count* (digest §11.7):
  the first stage of a run keeps its measured ρ^max (busiest partition's run time per second); a
  later stage, once fused, runs with the first stage's partitions, so its ρ^max there is its busy
  slot-seconds per second divided by that partition count (a round-robin exchange spreads rows
  evenly, so its own per-partition skew does not carry over).
* **Unchain.** A fused stage (one holding a removed exchange) whose measured ρ^max exceeds
  ``rho_max`` (0.9) regains parallelism: its exchanges are put back. This is the thesis's "load
  growth that pushes util > ρ_max makes the partitioning ineligible, so it splits".

Only stages that ran in the latest completed batch count (templates of a plan replaced by a
restart linger in the statistics window). Applying a change restarts the query from its checkpoint
(``collectors.supervisor``), which costs seconds, so the policy proposes nothing while a previous
exchanges directive is still pending, nothing within ``min_change_spacing_s`` of its last
decision on this knob (non-numeric knobs get no cool-down from ``policies.safety``), and nothing
before the current plan has completed ``min_batches`` micro-batches.

Units: utilizations are fractions of one task slot; times in seconds.
"""
from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field

from spark_governor.policies.base import JobView, Policy, Proposal, StageStats
from spark_governor.policies.chaining import CHAIN_EPS, CHAIN_UTILIZATION, Boundary, plan_exchanges
from spark_governor.policies.safety import SafetyConfig

PRESENT, REMOVED = "present", "removed"


class ChainingConfig(SafetyConfig):
    min_value: Optional[float] = Field(None, description="Unused: the exchanges knob is not numeric")
    rho_max: float = Field(CHAIN_UTILIZATION, gt=0, le=1, description="Chain utilization bound ρ_max (thesis: 0.9)")
    mode: Literal["recommended", "literal"] = Field(
        "recommended", description="Algorithm 10's acceptance test: 'literal' (strict variance decrease) or "
                                   "'recommended' (digest §10.14: equal loads may chain)")
    min_change_spacing_s: float = Field(60.0, ge=0, description="No new exchanges decision within this many "
                                                                "seconds of the previous one (a change restarts the query)")
    min_span_s: float = Field(4.0, ge=0, description="Statistics needed over at least this span before deciding")
    min_batches: int = Field(5, ge=1, description="Micro-batches the current plan must have completed (since the "
                                                  "previous exchanges decision) before deciding")


def declared_exchanges(view: JobView) -> list[dict]:
    """The exchanges the job declared (``knob_state["exchanges"]["exchanges"]``), validated loosely."""
    state = view.knob_state.get("exchanges") or {}
    out = []
    for e in state.get("exchanges") or []:
        if isinstance(e, dict) and isinstance(e.get("name"), str):
            out.append({"name": e["name"], "partitions": e.get("partitions"), "removed": bool(e.get("removed")),
                        "stage": e.get("stage") if isinstance(e.get("stage"), int) else None})
    return out


def current_stages(view: JobView) -> list[StageStats]:
    """Stages of the query's current plan, in ordinal order: those that ran in the latest batch.

    Every stage of a batch is seen after the batch's trigger; a plan replaced by a restart leaves
    templates whose statistics stop before it. Needs ``last_seen_ms``; without batches, all stages."""
    stages = [s for s in view.stages if s.ordinal is not None]
    if view.batches:
        latest = view.batches[-1].trigger_ms
        recent = [s for s in stages if s.last_seen_ms is not None and s.last_seen_ms >= latest]
        stages = recent or stages
    by_ordinal: dict[int, StageStats] = {}
    for s in stages:  # one stage per ordinal: the most recently seen
        old = by_ordinal.get(s.ordinal)
        if old is None or (s.last_seen_ms or 0) > (old.last_seen_ms or 0):
            by_ordinal[s.ordinal] = s
    return [by_ordinal[k] for k in sorted(by_ordinal)]


def merged_rhos(stages: list[StageStats], boundaries: list[Boundary]) -> list[float]:
    """ρ^max per stage at the partition count of the run (of optional boundaries) it belongs to."""
    rhos, first = [], None
    for k, s in enumerate(stages):
        if k == 0 or boundaries[k - 1] is Boundary.REQUIRED:
            first = s
            rhos.append(float(s.utilization_max or 0.0))
        else:
            parts = first.max_tasks or first.parallelism or 1
            rhos.append(float(s.busy_slots or 0.0) / parts)
    return rhos


class ChainingPolicy(Policy):
    name = "chaining"
    knobs = ("exchanges",)
    Config = ChainingConfig
    description = ("Lohrmann's dynamic task chaining (Algorithm 10) on the job's optional exchanges: "
                   "remove an exchange when the fused stage stays at ρ^max ≤ 0.9, put it back when it does not")

    def evaluate(self, view: JobView, config: ChainingConfig) -> list[Proposal]:
        declared = declared_exchanges(view)
        if not declared or any(e["stage"] is None for e in declared):
            return []
        d = view.directives.get("exchanges")
        if d is not None and d.status == "pending":
            return []
        last = view.last_decision_ms.get("exchanges")
        if last is not None and (view.now_ms - last) / 1000.0 < config.min_change_spacing_s:
            return []
        since = last if last is not None else 0
        if sum(1 for b in view.batches if b.trigger_ms >= since) < config.min_batches:
            return []
        stages = current_stages(view)
        if not stages or any(s.utilization_max is None or (s.span_s or 0) < config.min_span_s for s in stages):
            return []
        ordinals = [s.ordinal for s in stages]
        position = {o: i for i, o in enumerate(ordinals)}
        current = {e["name"]: (REMOVED if e["removed"] else PRESENT) for e in declared}
        desired = dict(current)
        boundaries = [Boundary.REQUIRED] * (len(stages) - 1)
        at_boundary: dict[int, str] = {}
        inputs: dict = {"stages": {s.key: {"ordinal": s.ordinal, "name": s.name, "rho_max": s.utilization_max,
                                           "busy_slots": s.busy_slots, "partitions": s.max_tasks}
                                   for s in stages}}
        prediction: dict = {}
        # unchain: a fused stage above the bound regains its exchanges
        for e in declared:
            if not e["removed"]:
                continue
            fused = stages[position[e["stage"]]] if e["stage"] in position else None
            if fused is not None and fused.utilization_max > config.rho_max + CHAIN_EPS:
                desired[e["name"]] = PRESENT
                prediction[f"{e['name']}.fused_rho_max"] = fused.utilization_max
        # chain: Algorithm 10 over each run of stages joined by present optional exchanges
        for e in declared:
            i = position.get(e["stage"])
            if not e["removed"] and i is not None and i < len(boundaries):
                boundaries[i] = Boundary.OPTIONAL
                at_boundary[i] = e["name"]
        if at_boundary:
            rhos = merged_rhos(stages, boundaries)
            plan = plan_exchanges(rhos, boundaries, rho_max=config.rho_max, mode=config.mode)
            inputs["rho_at_merged_partitions"] = rhos
            for i, name in at_boundary.items():
                if plan.exchanges[i].remove:
                    desired[name] = REMOVED
            for group in plan.groups:
                if len(group) > 1:
                    prediction[f"chain.{'+'.join(str(ordinals[k]) for k in group)}.utilization"] = \
                        sum(rhos[k] for k in group)
        if desired == current:
            return []
        changed = sorted(n for n in desired if desired[n] != current[n])
        reason = "; ".join(f"{'chain' if desired[n] == REMOVED else 'unchain'} {n}" for n in changed)
        return [Proposal("exchanges", desired, reason, inputs=inputs, prediction=prediction)]
