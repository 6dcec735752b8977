"""The signals Kingman sizes with beyond the thesis' model: the source's live arrival rate, the work a planned load
adds to a micro-batch, and the wait for the trigger. The thesis scales on the last interval's measured load
(§4.6.4); a micro-batch job on Spark has a trigger, fixed costs per batch and per task, and a source that shows a
rate step between batches. Each function states its units; rates are rows/s, times
seconds. (The rate trend, the recent peak, the provisioning delay and the warm-up the policy once sized with were
removed by issue #44's ablation: they bought nothing on any measured cluster.)"""
from __future__ import annotations

import statistics

from spark_governor.policies.base import JobView
from spark_governor.policies.cluster_inputs import cluster_of
from spark_governor.policies.kingman_config import KingmanConfig
from spark_governor.policies.threshold import trigger_interval_s
from spark_governor.policies.rate_model import arrival_rate


def live_load(view: JobView) -> float:
    """The source's arrival rate in the live state (``LiveStats.arrival_rows_per_second``: rows
    arriving now, reported between batches) over the completed batches' (:func:`arrival_rate` over the
    statistics span), ≥ 1; 1 without either. A rate step shows in the live rate within a reporting
    interval, in the completed batches only once the first batch at the new rate has run (issue #14,
    "See the job between batches"); the thesis measures Ā at the input of a vertex from items already
    sent to it (§4.6.2), the same quantity — here read before the batch."""
    live = view.live
    if live is None or not live.arrival_rows_per_second:
        return 1.0
    rate = arrival_rate(view)
    if not rate:
        return 1.0
    return max(1.0, live.arrival_rows_per_second / rate)


#: rows per batch must differ by this factor across the span's batches before a line is fitted through them
ROW_SPREAD = 1.5


def row_share(view: JobView) -> float:
    """The share of a micro-batch's processing time that grows with its rows, in [0, 1], at the span's mean
    batch: a least-squares line processing_s = F + r · rows through the span's batches where their rows
    differ by :data:`ROW_SPREAD` or more (r · rows̄ / (F + r · rows̄); 1 when F < 0), else 1 − the measured
    driver overhead per batch (``ClusterInputs.driver_overhead_s``: batch duration − its tasks' span, which
    no row lengthens) over the mean batch time; 1 without either (the thesis' assumption: all work per item)."""
    since = view.since_ms(view.window_s)
    points = [(b.num_input_rows, b.processing_s) for b in view.batches if b.trigger_ms >= since]
    if not points:
        return 1.0
    rows = [r for r, _ in points]
    mean_s = statistics.fmean(s for _, s in points)
    if mean_s <= 0:
        return 1.0
    if len(points) >= 3 and min(rows) > 0 and max(rows) >= ROW_SPREAD * min(rows):
        slope, intercept = statistics.linear_regression(rows, [s for _, s in points])
        if slope > 0:
            per_row = slope * statistics.fmean(rows)
            return 1.0 if intercept < 0 else min(1.0, per_row / (per_row + intercept))
    cluster = cluster_of(view)
    if cluster is not None and cluster.driver_overhead_s is not None:
        return min(1.0, max(0.0, 1.0 - cluster.driver_overhead_s / mean_s))
    return 1.0


def work_growth(view: JobView, load: float) -> float:
    """The factor by which a batch's work grows when ``load`` times the measured rows arrive:
    1 + (load − 1) · :func:`row_share` (a batch has the same tasks and driver work whatever its rows; only
    the per-row part grows). The thesis divides Ā by the load with S̄ kept (§4.6.2: per-item work), which on a
    micro-batch job counts the fixed per-batch and per-task times as growing too — measured on the standalone
    cluster, a 2k → 8k rows/s step read as a 4× load where the batch time grew 2.2× (issue #44). 1 for ``load`` 1."""
    if load == 1.0:
        return 1.0
    return 1.0 + (load - 1.0) * row_share(view)


def trigger_wait_s(view: JobView, cfg: KingmanConfig) -> float:
    """Mean wait of a record for the micro-batch that takes it (s): half the time between batch
    starts, max(trigger interval, mean batch processing time) / 2 (records arrive uniformly; a batch
    that overruns its interval delays the next one). The thesis has no trigger (digest §11.1: the
    trigger interval plays the role of the output-batch lifetime); 0 when neither is known."""
    interval = trigger_interval_s(view, cfg.trigger_interval_s) or 0.0
    recent = [b.processing_s for b in view.batches if b.trigger_ms >= view.since_ms(view.window_s)]
    return max(interval, statistics.fmean(recent) if recent else 0.0) / 2.0
