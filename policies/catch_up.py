"""Catch-up sizing: the slots that keep up with the arrival rate *and* work off the rows waiting within
a horizon (issue #14; not in the thesis, whose scaler sees no backlog: under a bottleneck it doubles,
Eq. 4.12, and lets later intervals double again).

A job that falls behind — its first minutes on too few executors, a rate step met on the old pool, a
restart with a source's lag — has rows waiting that the arrival rate alone does not count. Doubling
once per evaluation reaches the size that drains them in log₂ steps, each an evaluation interval
and a provisioning delay apart, while the rows keep waiting. This sizes for it at once, from what the
control plane measures (DS2's view of a stage, as ``policies.utilization_target``):

* λ, rows/s: the sources' arrival rate (the live state's, else the completed batches', Σ rows / Σ
  trigger gaps: ``rate_model.arrival_rate``);
* B, rows: the rows available and not processed now (``LiveStats.backlog_rows``, the running batch's
  included), plus what the backlog grows by while new executors are provisioned (its measured trend,
  rows/s, × the provisioning delay, s);
* H, s: the horizon to work B off in (the caller's: Kingman uses the latency bound);
* per stage v: its records per source row (records_in_v / records_in_first) and its true processing
  rate per slot (records per busy slot-second, ``rate_model.true_rate_per_slot``).

The fewest slots whose busy share at the catch-up rate λ + B / H is within ρ_max: busy slots
Σ_v (λ + B / H) · records_v / records_first / tpr_v over ρ_max, a stage running on at most its task
count (DS2's sizing, ``rate_model.slots_needed``, at that rate). Pure: no I/O.
"""
from __future__ import annotations

import math
from typing import Optional

from spark_governor.policies.base import JobView
from spark_governor.policies.rate_model import arrival_rate, slots_needed, stage_model


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


def catch_up_slots(view: JobView, rate: float, max_utilization: float) -> Optional[int]:
    """Fewest slots that run the stages at ``rate`` (rows/s at the first stage; the catch-up rate
    λ + B / H) within ``max_utilization`` (ρ_max, 0–1): DS2's sizing at that rate
    (``rate_model.stage_model``, ``slots_needed``: a stage's task count caps its slots).
    None when a stage's true rate is unknown."""
    model = stage_model(view, rate)
    return slots_needed(model, max_utilization) if model is not None and max_utilization > 0 else None


def catch_up_executors(view: JobView, horizon_s: float, delay_s: Optional[float], max_utilization: float,
                       slots_per_executor: int) -> Optional[dict]:
    """The executors (``slots_per_executor`` task slots each) that keep up with the arrival rate and
    work the rows waiting (:func:`waiting`, their growth counted over ``delay_s``, the provisioning
    delay, s) off within ``horizon_s`` seconds, at ``max_utilization`` (:func:`catch_up_slots`).
    Returns ``executors``, the catch-up rate ``rows_per_second`` (λ + B / H), ``backlog_rows`` (B),
    ``horizon_s`` and ``provisioning_delay_s``, what a decision records; None without a backlog, a
    rate or a stage's true rate."""
    w = waiting(view, delay_s)
    if w is None or horizon_s <= 0:
        return None
    rate = w[0] + w[1] / horizon_s
    slots = catch_up_slots(view, rate, max_utilization)
    if slots is None:
        return None
    return {"executors": math.ceil(slots / slots_per_executor), "rows_per_second": rate, "backlog_rows": w[1],
            "horizon_s": horizon_s, "provisioning_delay_s": delay_s}


def describe(catch_up: dict) -> str:
    """The words a decision sized by :func:`catch_up_executors` adds to its reason."""
    return (f"sized to catch up: {catch_up['backlog_rows']:,.0f} rows waiting worked off within "
            f"{catch_up['horizon_s']:g} s at {catch_up['rows_per_second']:,.0f} rows/s")
