"""Catch-up sizing: the slots that keep up with the arrival rate *and* work off the rows waiting within
a horizon (issue #14; not in the thesis, whose scaler sees no backlog: under a bottleneck it doubles,
Eq. 4.12, and lets later intervals double again).

A job that falls behind — its first minutes on too few executors, a rate step met on the old pool, a
restart with a source's lag — has rows waiting that the arrival rate alone does not count. Doubling
once per evaluation reaches the size that drains them in log₂ steps, each an evaluation interval
and a provisioning delay apart, while the rows keep waiting. This sizes for it at once, from what the
control plane measures (DS2's view of a stage, as ``policies.utilization_target``):

* λ, rows/s: the sources' arrival rate (the live state's, else the completed batches', Σ rows / Σ
  trigger gaps: ``utilization_target.arrival_rate``);
* B, rows: the rows available and not processed now (``LiveStats.backlog_rows``, the running batch's
  included), plus what the backlog grows by while new executors are provisioned (its measured trend,
  rows/s, × the provisioning delay, s);
* H, s: the horizon to work B off in (the caller's: Kingman uses the latency bound);
* per stage v: its records per source row (records_in_v / records_in_first) and its true processing
  rate per slot (records per busy slot-second, ``utilization_target.true_rate_per_slot``).

Busy slots at the catch-up rate: Σ_v (λ + B / H) · records_v / records_first / tpr_v; slots =
busy slots / ρ_max, at most the largest task count of a stage (more slots run no task). Pure: no I/O.
"""
from __future__ import annotations

from typing import Optional

from spark_governor.policies.base import JobView
from spark_governor.policies.utilization_target import arrival_rate, true_rate_per_slot


def waiting(view: JobView, delay_s: Optional[float] = None) -> Optional[tuple[float, float]]:
    """(λ rows/s, B rows) of the module docstring: the arrival rate, and the rows waiting now plus
    their measured growth (rows/s, when growing) over ``delay_s`` (the provisioning delay, s; None:
    0); None without a live state, a backlog or a rate."""
    live = view.live
    if live is None or not live.backlog_rows or live.backlog_rows <= 0:
        return None
    rate = live.arrival_rows_per_second or arrival_rate(view)
    if not rate:
        return None
    growth = max(0.0, live.backlog_growth_rows_per_second or 0.0)
    return rate, live.backlog_rows + growth * (delay_s or 0.0)


def catch_up_rate(view: JobView, horizon_s: float, delay_s: Optional[float] = None) -> Optional[float]:
    """λ + B / H (rows/s, :func:`waiting`); None when nothing waits or ``horizon_s`` ≤ 0."""
    w = waiting(view, delay_s)
    if w is None or horizon_s <= 0:
        return None
    return w[0] + w[1] / horizon_s


def catch_up_slots(view: JobView, horizon_s: float, max_utilization: float,
                   delay_s: Optional[float] = None) -> Optional[float]:
    """Slots (not rounded) that run the stages at the catch-up rate (:func:`catch_up_rate`) at
    ``max_utilization`` (ρ_max, 0–1); None when a stage's true rate is unknown or nothing waits."""
    target = catch_up_rate(view, horizon_s, delay_s)
    if target is None or not view.stages or not view.stages[0].records_in_per_second or max_utilization <= 0:
        return None
    first = view.stages[0].records_in_per_second
    busy = 0.0
    for s in view.stages:
        tpr = true_rate_per_slot(s)
        if tpr is None:
            return None
        busy += target * (s.records_in_per_second or 0.0) / first / tpr
    slots = busy / max_utilization
    caps = [s.max_tasks for s in view.stages if s.max_tasks]
    return min(slots, max(caps)) if caps and len(caps) == len(view.stages) else slots
