"""The signals Kingman sizes with beyond the thesis' model (issue #14): the arrival rate's trend, live
value and recent peak, the cluster's provisioning delay and a new executor's warm-up, the wait for
the trigger. The thesis scales on the last interval's measured load, with workers that start and work
at once (§4.6.4); a micro-batch job on Spark has a trigger, executors that take seconds to register
and warm up, and a source that shows a rate step between batches. Each function states its units;
rates are rows/s, times seconds."""
from __future__ import annotations

import statistics
from typing import Optional

from spark_governor.policies import in_flight
from spark_governor.policies.base import JobView
from spark_governor.policies.cluster_inputs import ClusterInputs, cluster_of
from spark_governor.policies.kingman_config import KingmanConfig
from spark_governor.policies.threshold import trigger_interval_s
from spark_governor.policies.rate_model import arrival_rate


def rate_trend(view: JobView, span_s: float) -> Optional[float]:
    """Least-squares slope of the per-batch arrival rate (rows/s per second) over the batches
    triggered in the last ``span_s`` seconds; None with fewer than three such batches."""
    since = view.since_ms(span_s)
    pts = [(b.trigger_ms / 1000.0, b.input_rows_per_second) for b in view.batches
           if b.trigger_ms >= since and b.input_rows_per_second is not None]
    if len(pts) < 3:
        return None
    mx, my = statistics.fmean(x for x, _ in pts), statistics.fmean(y for _, y in pts)
    sxx = sum((x - mx) ** 2 for x, _ in pts)
    return sum((x - mx) * (y - my) for x, y in pts) / sxx if sxx > 0 else None


def provisioning_delay_s(cluster: Optional[ClusterInputs], cfg: KingmanConfig) -> Optional[float]:
    """Directive sent → new executors working (s): configured, else measured (``cluster``), else None."""
    if cfg.provisioning_delay_s is not None:
        return cfg.provisioning_delay_s
    return cluster.provisioning_delay_s if cluster is not None else None


def backlog_horizon_s(view: JobView, cfg: KingmanConfig) -> Optional[float]:
    """How far ahead (s) a growing backlog is projected against the bound (``backlog_projected``;
    ``policies.in_flight``; issue #14, not in the thesis, whose scaler sees no backlog): the
    provisioning delay (measured, else two batch periods) plus one batch period (max(trigger interval,
    mean batch time): the next evaluation comes about then). A growth that crosses the bound later
    is left to later evaluations, which see it again with its latency. None: off."""
    if not cfg.backlog_projected:
        return None
    delay = provisioning_delay_s(cluster_of(view), cfg) if cfg.cluster_model else None
    return in_flight.horizon_s(view, delay, 2 * trigger_wait_s(view, cfg))


def register_delay_s(cluster: Optional[ClusterInputs], cfg: KingmanConfig) -> Optional[float]:
    """Directive sent → new executors registered, offered tasks (s): the configured
    ``provisioning_delay_s``, else the measured registration delay, else the measured delay to their
    first finished task, else None. Unlike :func:`provisioning_delay_s` it leaves out the wait for the
    next micro-batch and the new executor's first task, which the trigger interval and the warm-up
    make, not the cluster's speed at providing executors."""
    if cfg.provisioning_delay_s is not None:
        return cfg.provisioning_delay_s
    if cluster is None:
        return None
    return cluster.register_s if cluster.register_s is not None else cluster.provisioning_delay_s


def load_growth(view: JobView, cfg: KingmanConfig, delay_s: Optional[float]) -> float:
    """The factor (≥ 1, ≤ ``max_load_growth``) by which the arrival rate is expected to have grown
    when executors asked for now are working: ``1 + slope·(delay + rate_span/2)/rate``, with the rate
    of :func:`arrival_rate` (the mean over the last ``rate_span_s``, i.e. centred half a span ago) and
    the slope of :func:`rate_trend`. Issue #14; the thesis scales on the load of the last interval
    (its workers start in well under a second, §4.6.4), so a linear extrapolation over the measured
    provisioning delay is this project's choice. 1 without a delay, a rate or a rising trend."""
    if not delay_s:
        return 1.0
    rate = arrival_rate(view, cfg.rate_span_s)
    slope = rate_trend(view, cfg.trend_span_s)
    if not rate or slope is None or slope <= 0:
        return 1.0
    return min(cfg.max_load_growth, 1.0 + slope * (delay_s + (cfg.rate_span_s or view.window_s) / 2.0) / rate)


def live_load(view: JobView, cfg: KingmanConfig) -> float:
    """The source's arrival rate in the live state (``LiveStats.arrival_rows_per_second``: rows
    arriving now, reported between batches) over the completed batches' (:func:`arrival_rate` over
    ``rate_span_s``), ≥ 1 (a measured rate, not an extrapolation: not capped by ``max_load_growth``);
    1 without either. A rate step shows in the live
    rate within a reporting interval, in the completed batches only once the first batch at the new
    rate has run (issue #14, "See the job between batches"); the thesis measures Ā at the input of a
    vertex from items already sent to it (§4.6.2), the same quantity — here read before the batch."""
    live = view.live
    if live is None or not live.arrival_rows_per_second:
        return 1.0
    rate = arrival_rate(view, cfg.rate_span_s)
    if not rate:
        return 1.0
    return max(1.0, live.arrival_rows_per_second / rate)


def rate_rising(view: JobView, cfg: KingmanConfig, delay_s: Optional[float]) -> bool:
    """Whether the arrival rate is rising by more than ``spare_rise_margin`` (a share, e.g. 0.1 = 10 %)
    of the measured rate (:func:`arrival_rate` over ``rate_span_s``, rows/s): the live rate (rows/s
    arriving now, :func:`live_load`) above it by that share, or the trend (:func:`rate_trend`, least
    squares over ``trend_span_s``) extrapolated over ``delay_s`` + half a ``rate_span_s`` (seconds; the
    provisioning delay, 0 when unknown) above it by that share. ``spare_when: rising`` keeps the spare
    executors only then (issue #14; not in the thesis, which sizes for the measured rate, §4.6.4): a
    step is sized in parts while the first batches at the new rate complete, and the spare covers the
    part not yet measured; on a flat or falling rate it is only cost. The trend fitted over
    ``trend_span_s`` stays up for that long after a step, so the spare is released lazily."""
    if live_load(view, cfg) > 1.0 + cfg.spare_rise_margin:
        return True
    rate = arrival_rate(view, cfg.rate_span_s)
    slope = rate_trend(view, cfg.trend_span_s)
    if not rate or slope is None or slope <= 0:
        return False
    horizon = (delay_s or 0.0) + (cfg.rate_span_s or view.window_s) / 2.0
    return slope * horizon / rate > cfg.spare_rise_margin


def warm_equivalent(cluster: Optional[ClusterInputs], current: int, target: int, horizon_s: float) -> float:
    """The warm executors' worth (≥ ``current``, ≤ ``target``) of a pool of ``target`` executors,
    ``target − current`` of them new and warming up: over the next ``horizon_s`` seconds (the time
    between batch starts) a new executor works ``warmup_factor`` times slower for its measured
    ``warmup_s`` (``aggregators.cluster_profile``), so it delivers η = 1 − min(1, warmup_s/horizon)·(1 −
    1/factor) of a warm one: ``current + (target − current)·η``. ``target`` itself without a measured
    warm-up (factor ≤ 1 or no duration), for a scale-in or without a horizon.

    Not in the thesis: its workers start and work at full speed in well under a second (§4.6.4, "almost
    instantly visible"), so Algorithm 8 sizes for the steady state only. On Spark a new executor starts
    Python workers and loads state first (issue #14; measured on the standalone cluster: the first
    tasks 1.1–2.8× the steady service for 4–7 s), and the batch that runs on it then is the one a
    scale-out was for. Averaging the slowdown over one interval is this project's approximation: the
    latency bound is on the mean over a constraint span (one to two batches), not on every task."""
    if cluster is None or target <= current or not horizon_s or horizon_s <= 0:
        return float(target)
    f, d = cluster.warmup_factor, cluster.warmup_s
    if not f or f <= 1.0 or not d or d <= 0:
        return float(target)
    eta = 1.0 - min(1.0, d / horizon_s) * (1.0 - 1.0 / f)
    return current + (target - current) * eta


def peak_load(view: JobView, cfg: KingmanConfig, span_s: float) -> float:
    """The highest arrival rate over the last ``span_s`` seconds relative to the current one (≥ 1):
    the rate of :func:`arrival_rate` over ``rate_span_s`` ending at each batch triggered within the
    span, the largest over the current. A lazy scale-down must keep the bound at that load (Flink's
    autoscaler keeps the highest parallelism wanted over ``scale-down.interval``; extension)."""
    rate = arrival_rate(view, cfg.rate_span_s)
    if not rate or span_s <= 0:
        return 1.0
    window_ms = int((cfg.rate_span_s or view.window_s) * 1000)
    known = [b for b in view.batches if b.input_rows_per_second and b.input_rows_per_second > 0]
    best, since = rate, view.since_ms(span_s)
    for end in (b.trigger_ms for b in known if b.trigger_ms >= since):
        recent = [b for b in known if end - window_ms <= b.trigger_ms <= end]
        gaps = sum(b.num_input_rows / b.input_rows_per_second for b in recent)
        if gaps > 0:
            best = max(best, sum(b.num_input_rows for b in recent) / gaps)
    return best / rate


def trigger_wait_s(view: JobView, cfg: KingmanConfig) -> float:
    """Mean wait of a record for the micro-batch that takes it (s): half the time between batch
    starts, max(trigger interval, mean batch processing time) / 2 (records arrive uniformly; a batch
    that overruns its interval delays the next one). The thesis has no trigger (digest §11.1: the
    trigger interval plays the role of the output-batch lifetime); 0 when neither is known."""
    interval = trigger_interval_s(view, cfg.trigger_interval_s) or 0.0
    recent = [b.processing_s for b in view.batches if b.trigger_ms >= view.since_ms(view.window_s)]
    return max(interval, statistics.fmean(recent) if recent else 0.0) / 2.0
