"""The signals Kingman sizes with beyond the thesis' model: the source's live arrival rate and the wait for the
trigger. The thesis scales on the last interval's measured load (§4.6.4); a micro-batch job on Spark has a trigger,
and a source that shows a rate step between batches. Each function states its units; rates are rows/s, times
seconds. (The rate trend, the recent peak, the provisioning delay and the warm-up the policy once sized with were
removed by issue #44's ablation: they bought nothing on any measured cluster.)"""
from __future__ import annotations

import statistics

from spark_governor.policies.base import JobView
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


def trigger_wait_s(view: JobView, cfg: KingmanConfig) -> float:
    """Mean wait of a record for the micro-batch that takes it (s): half the time between batch
    starts, max(trigger interval, mean batch processing time) / 2 (records arrive uniformly; a batch
    that overruns its interval delays the next one). The thesis has no trigger (digest §11.1: the
    trigger interval plays the role of the output-batch lifetime); 0 when neither is known."""
    interval = trigger_interval_s(view, cfg.trigger_interval_s) or 0.0
    recent = [b.processing_s for b in view.batches if b.trigger_ms >= view.since_ms(view.window_s)]
    return max(interval, statistics.fmean(recent) if recent else 0.0) / 2.0
