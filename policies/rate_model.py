"""DS2's rate model of a micro-batch job (Kalavri et al., OSDI 2018, §3; as ``policies.utilization_target``
applies it): the sources' arrival rate, a stage's *true* processing rate per slot (records per busy
slot-second), the load a pool of slots carries at a target rate and the fewest slots that keep it under a
utilization. Units: rates in records (rows) per second, times in seconds, loads and utilizations as shares
(0.7 = 70 %). Pure: no I/O. Used by utilization-target (its whole model), Kingman (the arrival rate its live
rate is measured against) and the catch-up sizing (``policies.catch_up``, utilization-target's)."""
from __future__ import annotations

import math
from typing import Optional

from spark_governor.policies.base import JobView, StageStats
from spark_governor.policies.queueing import same_waves_slots

EPS = 1e-9


def arrival_rate(view: JobView, span_s: Optional[float] = None) -> Optional[float]:
    """Σ input rows / Σ trigger gaps (rows/s) of the batches triggered in the last ``span_s`` seconds
    (default: the view's window); the latest batch with a rate when none was; None without batches."""
    known = [b for b in view.batches if b.input_rows_per_second and b.input_rows_per_second > 0]
    since = view.since_ms(view.window_s if span_s is None else span_s)
    recent = [b for b in known if b.trigger_ms >= since] or known[-1:]
    gaps = sum(b.num_input_rows / b.input_rows_per_second for b in recent)
    return sum(b.num_input_rows for b in recent) / gaps if gaps > 0 else None


def true_rate_per_slot(s: StageStats) -> Optional[float]:
    """DS2's true processing rate of one slot of stage ``s``: records per busy slot-second over its
    latest statistics window (records_in_per_second / (utilization · parallelism)); None when unknown."""
    if not (s.parallelism and s.utilization and s.records_in_per_second):
        return None
    return s.records_in_per_second / (s.utilization * s.parallelism)


def stage_model(view: JobView, rate: float) -> Optional[dict]:
    """The stages run at ``rate`` (rows/s at the first stage): per stage its true processing rate per
    slot (``tpr_per_slot``), its ``target_rate`` (``rate`` × its records per first-stage record) and
    ``max_tasks``; None when a stage has no true rate or the first stage no records."""
    if not view.stages or not view.stages[0].records_in_per_second:
        return None
    first = view.stages[0].records_in_per_second
    stages = {}
    for s in view.stages:
        tpr = true_rate_per_slot(s)
        if tpr is None:
            return None
        stages[s.key] = {"tpr_per_slot": tpr, "target_rate": rate * (s.records_in_per_second or 0.0) / first,
                         "max_tasks": s.max_tasks}
    return {"target_rate": rate, "stages": stages}


def effective_slots(slots: int, tasks: Optional[int], waves: bool = False) -> int:
    """The slots a stage of ``tasks`` tasks per run (None: unknown) keeps busy on ``slots`` slots: at most
    its tasks; with ``waves``, the fewest slots that run its tasks in as many waves
    (``queueing.same_waves_slots``): a stage ends at a barrier, so 4 tasks on 3 slots run in 2 waves, as
    on 2 (not in DS2, whose operators have no barrier; this project's, as Kingman's ``wave_sizing``).
    200 tasks on 7 slots still count 7 (29 waves either way)."""
    if not tasks:
        return slots
    return same_waves_slots((tasks,), slots) if waves else min(slots, tasks)


def stage_load(model: dict, slots: int, waves: bool = False) -> float:
    """ρ(C): fraction of wall-clock time ``slots`` slots are busy at the target rate. ``model["stages"]``
    maps a stage to its ``target_rate`` (records/s), ``tpr_per_slot`` (records per busy slot-second)
    and ``max_tasks`` (tasks per run; None: unknown); a stage runs on :func:`effective_slots` of them."""
    return sum(v["target_rate"] / (v["tpr_per_slot"] * effective_slots(slots, v["max_tasks"], waves))
               for v in model["stages"].values())


def slots_needed(model: dict, target: float, waves: bool = False) -> int:
    """Fewest slots C with ρ(C) ≤ ``target`` (:func:`stage_load`, in whole task waves with ``waves``);
    when no C is enough, the most any stage can use."""
    stages = model["stages"].values()
    demand = sum(v["target_rate"] / v["tpr_per_slot"] for v in stages)  # busy slots at the target rate
    c = first = max(1, math.ceil(demand / target - EPS))  # enough without task-count caps; fewer never is
    caps = [v["max_tasks"] for v in stages if v["max_tasks"]]
    if len(caps) == len(model["stages"]):  # ρ is constant from the largest cap on
        limit = max(caps)
        while c < limit and stage_load(model, c, waves) > target + EPS:
            c += 1
        return min(c, limit)
    limit = 4 * first + max(caps, default=0)  # a stage without a known task count: bounded scan
    while c < limit and stage_load(model, c, waves) > target + EPS:
        c += 1
    return c
