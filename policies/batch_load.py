"""A micro-batch under a planned load: what a rate step does to its batches (issue #14).

Kingman plans for a load it has not measured yet: the rate trend over the provisioning delay
(``kingman_signals.load_growth``), the source's live rate ahead of the completed batches
(``live_load``) and the recent peak a scale-down must keep (``peak_load``). The thesis holds S̄_v,
c_A, c_S and e_v when p* changes (§4.6.2) and is silent on a changing load; its vertices receive
records one by one, so more load is shorter interarrival (``queueing.with_load``: Ā / load, e_v kept).

A micro-batch is not such a vertex. Its stages run the same tasks per batch whatever the rate (the
partitions), each task longer by the load, and they start together, so a task waits for the waves
before it: its wait grows with the task time, not as Kingman's ρ/(1 − ρ). Measured on the standalone
cluster (run 104, 2 executors, 4 partitions, 8 s trigger): batches of 16 000, 64 000 and 128 000 rows
took 1.7, 4.0 and 7.2 s, i.e. 0.8 s + 50 µs per row. The thesis' rule, fitted at 64 000 rows
(ρ 0.43), put the wait at 128 000 rows ×8.5 and the query load at 1.01 (the whole batch time
doubled): a bottleneck, so 2 → 4 executors where 2 kept the bound at ρ 0.9.

So with ``batch_load`` (Kingman's default; off: the thesis' rule):

- each stage's task service S̄_v is ×load with Ā_v kept (``queueing.with_batch_load``), and its
  slot wait at the current parallelism ×load, e_v refitted to that;
- the batch time is ``fixed + variable × load``, the fixed part (seconds per batch: the driver's
  planning and commit, the tasks' start) the intercept of batch time against rows over the batches
  since the last executor change (:func:`batch_fixed_s`); the query load (batch time / trigger
  interval) and the record latency grow by the variable part only (:func:`loaded_fixed_latency_s`).

Units: seconds, rows; loads are factors of the measured arrival rate. Pure: no I/O.
"""
from __future__ import annotations

import math
import statistics
from typing import Optional

from spark_governor.policies.base import JobView

#: Batches needed for the fit of batch time against rows.
MIN_BATCHES = 3

#: The rows of the fitted batches must spread by this share of their mean: batches of one size say
#: nothing of the intercept.
MIN_ROWS_SPREAD = 0.25


def batch_fixed_s(view: JobView, since_ms: Optional[int], fallback_s: float = 0.0) -> float:
    """The part of a batch's processing time (s) that does not grow with its rows: the intercept ``a``
    of the least-squares line ``processing_s = a + b·rows`` over the batches with rows triggered at or
    after ``since_ms`` (the last executor change: one pool; None: all the view's batches), kept within
    [0, the shortest of them]. ``fallback_s`` (the measured driver overhead per batch, else 0: the
    thesis' proportional rule) when fewer than :data:`MIN_BATCHES` batches, rows that spread less than
    :data:`MIN_ROWS_SPREAD` of their mean, or a slope ≤ 0."""
    pts = [(float(b.num_input_rows), b.processing_s) for b in view.batches
           if b.num_input_rows > 0 and b.processing_s > 0 and (since_ms is None or b.trigger_ms >= since_ms)]
    if len(pts) < MIN_BATCHES:
        return fallback_s
    xs, ys = [x for x, _ in pts], [y for _, y in pts]
    if max(xs) - min(xs) < MIN_ROWS_SPREAD * statistics.fmean(xs):
        return fallback_s
    slope, intercept = statistics.linear_regression(xs, ys)
    if slope <= 0:
        return fallback_s
    return min(max(intercept, 0.0), min(ys))


def batch_time_at(mean_s: float, fixed_s: float, load: float) -> float:
    """A batch's processing time (s) at ``load`` times the rate of batches whose mean is ``mean_s``:
    ``fixed + (mean − fixed)·load`` (the fixed part no more than the mean)."""
    fixed = min(max(fixed_s, 0.0), mean_s)
    return fixed + (mean_s - fixed) * load


def loaded_fixed_latency_s(fixed_s: float, queue_s: float, variable_s: float, load: float) -> float:
    """The non-queueing part of the record latency (s) at ``load``: the measured one (``fixed_s``) plus
    what the batch's variable time (``variable_s``, s) gains beyond the stages' slot wait at the
    current size (``queue_s``, which the loaded models carry ×load themselves). At the current size
    the predicted latency is then the measured one + (load − 1)·variable_s: a batch longer by its rows'
    work, waited for by every record of it."""
    return max(0.0, fixed_s + (load - 1.0) * max(0.0, variable_s - queue_s))


def waves(p_maxes, slots: int) -> int:
    """Task waves of a batch on ``slots`` slots: those of its stage with the most tasks (``ceil(p / slots)``)."""
    return math.ceil(max(p_maxes) / max(slots, 1))


def query_slots(mean_s: float, fixed_s: float, load: float, interval_s: float, p_maxes, slots_now: int,
                max_utilization: float) -> int:
    """The fewest slots (≥ ``slots_now``) whose batch at ``load`` takes at most ``max_utilization`` of the
    trigger interval (s): the batch's variable time (``mean_s − fixed_s``, measured on ``slots_now``)
    × load × the task waves on the slots over those on ``slots_now`` (:func:`waves`), plus the fixed
    part. A batch longer than its trigger delays the next: the thesis' utilization floor (§4.6.4,
    ``max_utilization``) on the query as a whole, which a stage's ρ misses (the driver's fixed part, the
    stages one after another). ``slots_now`` when it holds there; else the next counts at which the
    waves fall; the most tasks of a stage when none does."""
    fixed = min(max(fixed_s, 0.0), mean_s)
    top = max(p_maxes)
    now_waves = waves(p_maxes, slots_now)
    c = slots_now
    while True:
        if fixed + (mean_s - fixed) * load * waves(p_maxes, c) / now_waves <= max_utilization * interval_s:
            return c
        if c >= top:
            return top
        c += 1
