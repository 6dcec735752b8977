"""Scaling out on work in flight, without waiting for a completed micro-batch (issue #14).

A policy that reads only completed micro-batches reacts to a batch that runs far past the latency
bound only once it has completed, and not at all while no batch completes. The view's
:class:`policies.base.LiveStats` (``aggregators.liveness``, from the reporters' query states, at
least one a second) tells it earlier. Threshold and utilization-target ask :func:`pressure` first
and, when it answers, scale out at once (Kingman sizes for the probed live rate instead, :func:`uses_live_rate`;
its in-flight rules were removed by issue #44's ablation):

* **in flight past the bound**: the mean age in flight (:func:`mean_in_flight_age_s`: the oldest
  unprocessed record's age less half a trigger interval, never below the running batch's age)
  exceeds the latency bound, or the running batch's age exceeds the batch bound (``factor`` =
  age / bound: the work is at least that many times what the bound allows);
* **backlog growing**: the backlog right after each completed batch grows by at least
  ``min_growth`` seconds of work per second (``factor`` = 1 + growth: the load exceeds what the
  job processes by that fraction). With a ``horizon_s`` (:func:`horizon_s`: the provisioning delay
  and a batch period), only when the growth would carry the latency past the latency bound
  (:func:`projected_latency_s`) or the batch processing time past the policy's own batch threshold
  (:func:`projected_batch_s`) within the horizon: a record waits behind the backlog, so a backlog
  growing by g seconds of work per second makes the latency grow by about g per second, and the
  work waiting lands in the next batch. The backlog trend is a least-squares fit over a few batches
  (``aggregators.liveness``), whose troughs move with each batch's duration: a growth of 0.05–0.07
  is within the noise of three or four batches. Measured on the standalone cluster (2026-11-26, runs
  17–24): growths of 0.06–0.07 s/s, at mean latencies of 6–7 s against a 14 s bound, doubled the
  executors (whole task waves) where the plan kept the bound — about 0.1× static of the
  executor-seconds of a run; one came 1–2 s after the policy was enabled, from the start-up batches.
Threshold's, 3.7 s after the policy was enabled on run 31, then made it scale 2 → 1 during an 8x step
(0.522 of the spans).

Never for an idle query (its last trigger found no new data: nothing is in flight) or a
terminated one, and not before the job's first completed batch (the first batch of a run starts
Python workers and warms up the JVM; there is nothing to compare with yet).

After an executor decision the work in flight is judged from the decision on: the age compared
with the bound is at most the time since the decision (a batch that already ran past the bound
when executors were added must run past it *again* for another scale-out, instead of one every
evaluation while it finishes), and the backlog trend only once ``settle_s`` have passed (the
trend window: troughs from before the change would still show the old growth).

The bounds: the **latency bound** is the tightest whole-query latency constraint of the job
(records in flight older than it will leave late); the **batch bound**, for policies that size on
batch processing time against the trigger interval, ``overrun × trigger interval`` (a batch still
running after that long is already over the policy's own threshold). Only the running batch is
held to the batch bound: with a processing-time trigger a record normally waits up to an interval
for its batch, so the oldest record's age says nothing about overrunning.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional

from spark_governor.policies.base import JobView
from spark_governor.policies.cluster_inputs import cluster_of


@dataclass(frozen=True)
class Pressure:
    """Why a job must scale out now: ``reason`` for the decision, ``inputs`` for its record,
    ``factor`` ≥ 1: how many times the current capacity the work in flight asks for (a lower bound)."""

    kind: str  # in-flight | backlog
    reason: str
    factor: float
    inputs: dict = field(default_factory=dict)


def probed(view: JobView) -> bool:
    """Whether the job's sources are probed now (``LiveStats.arrival_probed``; ``collectors.source_probe``):
    its live arrival rate shows a rate step within a second, not once a batch at the new rate completes."""
    return view.live is not None and view.live.arrival_probed and bool(view.live.arrival_rows_per_second)


def uses_live_rate(view: JobView, setting: Optional[bool]) -> bool:
    """Whether a policy sizes for the live state's arrival rate: its ``live_rate`` ``setting`` when set
    (and the view has a live rate), else (unset, the default) whether the sources are :func:`probed` —
    a live rate extrapolated from completed batches' offsets shows a step no earlier than they do."""
    if setting is None:
        return probed(view)
    return setting and view.live is not None and bool(view.live.arrival_rows_per_second)


def bound_s(view: JobView) -> Optional[float]:
    """The latency bound work in flight is held to: the tightest whole-query constraint bound (s);
    None without one (a stage-sequence constraint does not bound records in flight)."""
    bounds = [c.bound_s for c in view.constraints if c.vertices is None]
    return min(bounds) if bounds else None


def batch_bound_s(trigger_interval_s: Optional[float], overrun: float) -> Optional[float]:
    """``overrun × trigger interval`` (s): how long a batch may run before it overruns; None
    without a processing-time trigger."""
    return overrun * trigger_interval_s if trigger_interval_s else None


def trigger_s(view: JobView, configured: Optional[float] = None) -> Optional[float]:
    """The query's processing-time trigger interval (s): configured, else as the reporter read it
    from the query; None when unknown or 0 (the default trigger: a batch as soon as the previous one
    ends, where a batch's age says nothing about an interval)."""
    interval = configured if configured else (view.live.trigger_interval_s if view.live else None)
    return interval or None


#: the backlog trend is not trusted within this long after an executor decision (s)
SETTLE_S = 30.0


def mean_in_flight_age_s(live, trigger: Optional[float]) -> Optional[float]:
    """The age (s) held against a bound on the *mean* record latency: with a processing-time trigger
    of ``trigger`` seconds the records of a micro-batch arrived spread over the interval before it
    started, so their mean age is the oldest one's less half an interval (the thesis bounds the mean,
    §4.6.1; its records have no trigger, digest §11.1). Measured on the standalone cluster (trigger
    8 s, bound 14 s): the oldest record of a batch three executors kept at a 9 s mean latency was
    14.3 s old when the batch ended, and the policy scaled 3 → 4 on it every time it had scaled
    down. Never below the running batch's age; without a trigger or a source counting rows, the
    larger of the two ages as before (``LiveStats.in_flight_age_s``)."""
    age = live.in_flight_age_s
    oldest = live.oldest_record_age_s
    if age is None or not trigger or oldest is None or live.oldest_record_source != "source":
        return age
    return max(live.running_batch_age_s or 0.0, oldest - trigger / 2.0)


def projected_latency_s(view: JobView, growth: float, horizon_s: float) -> float:
    """The record latency (s) expected ``horizon_s`` seconds from now when the backlog grows by
    ``growth`` seconds of work per second: the latency known now — the larger of the mean age in
    flight (:func:`mean_in_flight_age_s`) and the tightest whole-query constraint's measured mean
    latency — plus ``growth × horizon_s``."""
    known = [c.latency_s for c in sorted(view.constraints, key=lambda c: c.bound_s)
             if c.vertices is None and c.latency_s is not None][:1]
    age = mean_in_flight_age_s(view.live, trigger_s(view)) if view.live else None
    if age is not None:
        known.append(age)
    return max(known, default=0.0) + growth * horizon_s


def _mean_processing_s(view: JobView) -> Optional[float]:
    """Mean processing time (s) of the window's completed batches, else of the latest one; None
    without batches."""
    since = view.since_ms(view.window_s)
    recent = ([b.processing_s for b in view.batches if b.trigger_ms >= since]
              or [b.processing_s for b in view.batches[-1:]])
    return sum(recent) / len(recent) if recent else None


def projected_batch_s(view: JobView, growth: float, horizon_s: float) -> float:
    """The batch processing time (s) expected ``horizon_s`` seconds from now when the backlog grows by
    ``growth`` seconds of work per second: the larger of the mean processing time of the window's
    completed batches and the running batch's age, plus ``growth × horizon_s`` (the work that waits
    then lands in a batch)."""
    known = [x for x in (_mean_processing_s(view), view.live.running_batch_age_s if view.live else None)
             if x is not None]
    return max(known, default=0.0) + growth * horizon_s


def horizon_s(view: JobView, delay_s: Optional[float], period_s: Optional[float] = None,
              trigger: Optional[float] = None) -> float:
    """How far ahead (s) a growing backlog is projected: the provisioning delay ``delay_s`` (else two
    batch periods) plus one batch period, when the next evaluation looks again; the batch period is
    ``period_s``, else max(trigger interval — ``trigger`` or the query's —, mean processing time of
    the window's batches)."""
    if period_s is None:
        period_s = max(trigger_s(view, trigger) or 0.0, _mean_processing_s(view) or 0.0)
    return (delay_s if delay_s is not None else 2 * period_s) + period_s


def measured_horizon_s(view: JobView, trigger: Optional[float] = None) -> float:
    """:func:`horizon_s` with the job's measured provisioning delay (``policies.cluster_inputs``),
    else two batch periods (threshold's and utilization-target's horizon; ``trigger``: a configured
    trigger interval, s)."""
    cluster = cluster_of(view)
    return horizon_s(view, cluster.provisioning_delay_s if cluster is not None else None, trigger=trigger)


def pressure(view: JobView, bound: Optional[float], min_growth: float = 0.05, knob: str = "executors",
             settle_s: float = SETTLE_S, batch_bound: Optional[float] = None,
             horizon_s: Optional[float] = None, growth_batch_bound: Optional[float] = None) -> Optional[Pressure]:
    """:class:`Pressure` to scale out now, or None (module docstring); ``bound`` is the latency
    bound, ``batch_bound`` the batch bound, all in seconds. ``horizon_s``: a growing backlog presses
    only when projected that far it carries the latency past ``bound`` (:func:`projected_latency_s`)
    or the batch processing time past ``growth_batch_bound`` (:func:`projected_batch_s`); None, or
    neither bound given: any growth of ``min_growth`` presses."""
    live = view.live
    if live is None or live.status in ("idle", "terminated") or not view.batches:
        return None
    last = view.last_decision_ms.get(knob)
    since_change = None if last is None else max(0.0, (view.now_ms - last) / 1000.0)
    inputs = {"live_status": live.status, "running_batch_id": live.running_batch_id,
              "running_batch_age_s": live.running_batch_age_s, "oldest_record_age_s": live.oldest_record_age_s,
              "backlog_rows": live.backlog_rows, "backlog_s": live.backlog_s,
              "backlog_growth_ratio": live.backlog_growth_ratio(), "in_flight_bound_s": bound,
              "batch_bound_s": batch_bound, "since_decision_s": since_change}

    def judged(age: float) -> float:
        return age if since_change is None else min(age, since_change)

    candidates = []  # (factor, reason)
    age = mean_in_flight_age_s(live, trigger_s(view))
    if bound and age is not None and judged(age) > bound:
        if age == live.running_batch_age_s:
            what = f"running batch in flight for {age:.1f} s"
        elif age == live.oldest_record_age_s:
            what = f"oldest unprocessed record in flight for {age:.1f} s"
        else:
            what = f"records in flight for a mean of {age:.1f} s (the oldest {live.oldest_record_age_s:.1f} s)"
        candidates.append((judged(age) / bound, f"{what} > bound {bound:.1f} s"))
    run = live.running_batch_age_s
    if batch_bound and run is not None and judged(run) > batch_bound:
        candidates.append((judged(run) / batch_bound, f"running batch in flight for {run:.1f} s > "
                                                      f"{batch_bound:.1f} s of its trigger interval"))
    if candidates:
        factor, reason = max(candidates)
        return Pressure("in-flight", f"{reason}, before it completes", factor,
                        {**inputs, "judged_age_s": judged(max(a for a in (age, run) if a is not None))})
    if (since_change is None or since_change >= settle_s) and live.backlog_growing(min_growth):
        g = live.backlog_growth_ratio()
        if horizon_s is not None and (bound or growth_batch_bound):
            inputs = {**inputs, "horizon_s": horizon_s}
            over = False
            if bound:
                inputs["projected_latency_s"] = projected_latency_s(view, g, horizon_s)
                over = inputs["projected_latency_s"] > bound
            if growth_batch_bound:
                inputs["projected_batch_s"] = projected_batch_s(view, g, horizon_s)
                over = over or inputs["projected_batch_s"] > growth_batch_bound
            if not over:
                return None
        return Pressure("backlog", f"backlog growing by {g:.2f} s of work per second "
                                   f"({live.backlog_rows or 0:.0f} rows waiting)", 1.0 + g,
                        {**inputs, "backlog_growing": True})
    return None


def scaled(current: int, p: Pressure, max_factor: float = 2.0) -> int:
    """The executors for ``current`` under pressure ``p``: at least one more, at most
    ``max_factor`` times as many (Lohrmann's ResolveBottlenecks doubles, thesis Eq. 4.12)."""
    return max(current + 1, math.ceil(current * min(max(p.factor, 1.0), max_factor) - 1e-9))
