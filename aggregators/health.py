"""Health verdict of a job: one word a person can act on, with the numbers behind it.

Computed on request and for ``/metrics`` (``api.health_metrics``) from the same :class:`~spark_governor.policies.base.JobView`
the policies see, plus the failed tasks of the window. The states, checked in this order:

``unknown``
    nothing measured yet (no completed batch and no live state).
``idle``
    no new data: every query's last trigger found nothing (``onQueryIdle``), or the recent batches
    read no rows while nothing waits. Not stuck.
``unhealthy``
    tasks failed within the window, or a query terminated; or the job falls behind although its
    *critical time* already exceeds the time budget, so more executors cannot help (the pipeline,
    the trigger interval or the SLO must change).
``no-progress``
    data is waiting but no micro-batch completed within the window and the work in flight is older
    than the budget (a stuck or far too slow batch).
``underprovisioned``
    the SLO is missed (attainment below ``slo_target`` or work in flight older than the bound), or
    batches take longer than the trigger interval, or the backlog grows; more executors help.
``overprovisioned``
    batches take at most ``over_fraction`` of the budget and the busy task slots are below
    ``over_utilization`` of the slots, with more than one executor (task slot in local mode).
``optimal``
    none of the above.

Quantities (seconds unless named otherwise):

* **batch time** ``P``: mean trigger execution time of the micro-batches that completed in the window;
* **critical time** ``C``: the least time a batch would take with unlimited executors — one task per
  stage, i.e. the sum over the batch's stages of their mean task service time (Qubole's streaminglens
  defines it the same way; we have means, not each stage's longest task, so ``C`` is a lower estimate);
* **budget** ``b``: the time a batch may take: the trigger interval ``T``; with a latency constraint
  (bound ``B``) also at most ``B`` minus the wait for the batch to start (measured, else ``T/2``);
* **utilization**: busy task slots (Σ over stages of busy slot-seconds per second) / task slots;
* **recommendation**: with ``E`` executors now, the parallel part ``P − C`` is assumed to shrink in
  proportion to the executors, so ``N = ceil(E · (P − C) / (target · b − C))`` executors would finish
  a batch in ``target · b`` (``target`` 0.8: headroom for noise). Our model, not a paper's: the
  Kingman policy sizes stage by stage; the verdict gives the quick figure a person reads.

Where streaminglens (which judged every five minutes against a batch SLA) has *No New Batches*, we
split two cases it merges: ``idle`` (no data: fine) and ``no-progress`` (data waiting, nothing
completes: not fine). Its *Unhealthy* ("increase ingestion at the source level") is our
``unhealthy`` when the critical time alone exceeds the budget; we add failing tasks to it.
"""
from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field, replace
from typing import Optional

from sqlalchemy import func, select
from sqlalchemy.engine import Connection

from spark_governor.aggregators import liveness, queries
from spark_governor.aggregators.models import stage_runs, template_vertices, template_windows
from spark_governor.aggregators.view import build_view
from spark_governor.policies.base import JobView, LiveStats

#: the window a verdict looks back over by default (seconds): the API's, ``/metrics``' and a replay's
DEFAULT_WINDOW_S = 60.0
#: every state, in the order the rules are checked (``unknown`` first)
STATES = ("unknown", "idle", "unhealthy", "no-progress", "underprovisioned", "overprovisioned", "optimal")


@dataclass(frozen=True)
class HealthConfig:
    """Thresholds of the verdict (fractions unless named otherwise)."""

    slo_target: float = 0.95  # a constraint's attainment below this is a missed SLO
    over_fraction: float = 0.5  # overprovisioned: batch time at most this share of the budget ...
    over_utilization: float = 0.4  # ... and busy slots below this share of the slots
    backlog_growth: float = 0.05  # growing backlog: seconds of work added per second
    target: float = 0.8  # the recommendation sizes a batch to this share of the budget


@dataclass(frozen=True)
class Verdict:
    """A job's health: ``state`` (one of :data:`STATES`), ``reason`` in words, ``numbers`` behind it
    (seconds, fractions, rows; None where unknown), ``recommended_executors`` and ``recommendation``
    (None where no change is advised or nothing can be sized)."""

    job: str
    state: str
    reason: str
    numbers: dict = field(default_factory=dict)
    recommended_executors: Optional[int] = None
    recommendation: Optional[str] = None
    evaluated_ms: int = 0
    queries: tuple = ()  # per streaming query: {"query_id", "name", "state", "reason", "numbers"}

    def as_dict(self) -> dict:
        return asdict(self)


def _s(x: Optional[float]) -> str:
    return "?" if x is None else f"{x:.2f} s"


def critical_time_s(view: JobView) -> Optional[float]:
    """Σ over the window's stages of their mean task service time (s): a batch with one task per stage."""
    means = [s.service_mean_s for s in view.stages if s.service_mean_s is not None]
    return sum(means) if means else None


def utilization(view: JobView) -> Optional[float]:
    """Busy task slots / task slots over the window (0..1 when the slots are right)."""
    busy = [s.busy_slots for s in view.stages if s.busy_slots is not None]
    if not busy or not view.slots:
        return None
    return sum(busy) / view.slots


def recommend(executors: Optional[int], batch_s: Optional[float], critical_s: Optional[float],
              budget_s: Optional[float], target: float) -> Optional[int]:
    """Executors that would finish a batch in ``target · budget_s`` (see the module docstring); None when
    unknowable or when no number of executors can (the critical time alone is too long)."""
    if not executors or batch_s is None or budget_s is None or budget_s <= 0:
        return None
    c = critical_s or 0.0
    room = target * budget_s - c
    if room <= 0:
        return None
    parallel = max(batch_s - c, 0.0)
    return max(1, math.ceil(executors * parallel / room - 1e-9))


def verdict(view: JobView, failed_tasks: int = 0, config: HealthConfig = HealthConfig()) -> Verdict:
    """The verdict on ``view`` (pure). ``failed_tasks``: tasks that failed within the view's window."""
    live = view.live
    window_ms = int(view.window_s * 1000)
    recent = [b for b in view.batches if b.trigger_ms >= view.now_ms - window_ms]
    t = view.trigger_interval_s()
    c = critical_time_s(view)
    p = sum(b.processing_s for b in recent) / len(recent) if recent else None
    e = view.current("executors") if view.executors is not None else None
    e = e if isinstance(e, int) else None
    constraint = min(view.constraints, key=lambda k: k.bound_s) if view.constraints else None
    bound = constraint.bound_s if constraint else None
    budget = t
    if bound is not None:
        wait = constraint.batching_wait_s if constraint.batching_wait_s is not None else (t or 0.0) / 2
        budget = bound - wait if budget is None else min(budget, bound - wait)
    util = utilization(view)
    growth = live.backlog_growth_ratio() if live is not None else None
    numbers = {
        "batch_time_s": p, "critical_time_s": c, "trigger_interval_s": t, "budget_s": budget, "bound_s": bound,
        "attainment": constraint.attainment if constraint else None,
        "latency_s": constraint.latency_s if constraint else None, "utilization": util,
        "executors": e, "batches": len(recent), "failed_tasks": failed_tasks,
        "backlog_rows": live.backlog_rows if live else None, "backlog_s": live.backlog_s if live else None,
        "backlog_growth_ratio": growth, "in_flight_age_s": live.in_flight_age_s if live else None,
        "live_status": live.status if live else None,
    }
    unit = view.executor_unit

    def out(state: str, reason: str, n: Optional[int] = None) -> Verdict:
        rec = None
        if n is not None and e is not None and n != e:
            rec = f"about {n} {unit[:-1] if n == 1 else unit} would meet the {'SLO' if bound is not None else 'trigger interval'}"
        return Verdict(view.job, state, reason, numbers, n if rec else None, rec, view.now_ms)

    n = recommend(e, p, c, budget, config.target)
    if live is None and not view.batches:
        return out("unknown", "nothing measured yet: no completed micro-batch and no live state")
    if failed_tasks > 0:
        return out("unhealthy", f"{failed_tasks} task(s) failed in the last {view.window_s:.0f} s")
    if live is not None and live.status == "terminated":
        return out("unhealthy", "the query terminated")
    if live is not None and live.idle:
        return out("idle", "no new data: the last trigger found nothing to process")
    rows = sum(b.num_input_rows for b in recent)
    waiting = bool(live and ((live.backlog_rows or 0) > 0 or (live.arrival_rows_per_second or 0) > 0
                             or live.running_batch_age_s is not None))
    if recent and rows == 0 and not waiting:
        return out("idle", f"the last {len(recent)} micro-batch(es) read no rows")
    in_flight = live.in_flight_age_s if live is not None else None
    if not recent and waiting:
        limit = budget if budget is not None else view.window_s
        if in_flight is not None and in_flight > limit:
            return out("no-progress", f"no micro-batch completed in the last {view.window_s:.0f} s while data "
                                      f"waits; work in flight is {_s(in_flight)} old (budget {_s(budget)})")
    overload = []  # signs that the job falls behind
    if bound is not None and live is not None and live.exceeds(bound):
        overload.append(f"work in flight is {_s(in_flight)} old, beyond the bound {_s(bound)}")
    if p is not None and t and p > t:
        overload.append(f"batches take {_s(p)} against a {_s(t)} trigger interval")
    if growth is not None and growth >= config.backlog_growth and not (live and live.idle):
        overload.append(f"the backlog grows by {growth:.2f} s of work per second")
    # the measured wait for a batch to start includes the queue behind batches that overrun: only a job that
    # keeps up is told its trigger alone breaks the bound (a replayed overloaded run was, 2026-12-07)
    if budget is not None and budget <= 0 and not overload:
        return out("unhealthy", f"the wait for a micro-batch to start alone exceeds the bound {_s(bound)}: "
                                f"shorten the trigger interval")
    reasons = []
    if constraint is not None and constraint.attainment is not None and constraint.attainment < config.slo_target:
        reasons.append(f"SLO attained in {constraint.attainment:.0%} of spans (target {config.slo_target:.0%}, "
                       f"bound {_s(bound)})")
    reasons += overload
    if reasons:
        if c is not None and budget is not None and 0 < budget and c >= config.target * budget:
            return out("unhealthy", "; ".join(reasons) + f"; the critical time {_s(c)} alone exceeds "
                                    f"{config.target:.0%} of the budget {_s(budget)}: more {unit} cannot help")
        return out("underprovisioned", "; ".join(reasons), n)
    if not recent:
        return out("unknown", f"no micro-batch completed in the last {view.window_s:.0f} s")
    spare = (e or 0) > 1
    if (spare and p is not None and budget is not None and p <= config.over_fraction * budget
            and util is not None and util < config.over_utilization):
        return out("overprovisioned", f"batches take {_s(p)} of a {_s(budget)} budget and {util:.0%} of the task "
                                      f"slots are busy", n)
    detail = f"batches take {_s(p)} of a {_s(budget)} budget" if budget is not None else f"batches take {_s(p)}"
    return out("optimal", detail + (f", {util:.0%} of the task slots busy" if util is not None else ""))


def failed_tasks(conn: Connection, job_id: int, since_ms: int,
                 until_ms: Optional[int] = None) -> dict[Optional[str], int]:
    """Tasks of the job that finished unsuccessfully in the windows that end after ``since_ms`` (and start before
    ``until_ms`` when given; epoch ms), by
    query id (a stage template's query, from its stage runs; None when no run of it was reported). Read from the
    template windows, which count every failed task whether the reporter folded it or sent it whole (issue #42),
    so at the windows' granularity: a failure up to one window older than ``since_ms`` counts."""
    query_of = (select(stage_runs.c.template_id, func.min(stage_runs.c.query_id).label("query_id"))
                .where(stage_runs.c.job_id == job_id).group_by(stage_runs.c.template_id).subquery())
    tw = template_windows.c
    return {q: int(n) for q, n in conn.execute(
        select(query_of.c.query_id, func.sum(tw.failed_tasks))
        .select_from(template_windows.join(template_vertices, template_vertices.c.id == tw.template_id)
                     .outerjoin(query_of, query_of.c.template_id == tw.template_id))
        .where(template_vertices.c.job_id == job_id, tw.window_start_ms + tw.window_ms > since_ms,
               tw.failed_tasks > 0, *([] if until_ms is None else [tw.window_start_ms < until_ms]))
        .group_by(query_of.c.query_id)).all()}


_LIVE = ("status", "observed_ms", "running_batch_id", "running_batch_age_s", "oldest_record_age_s",
         "oldest_record_source", "backlog_rows", "backlog_s", "processing_rows_per_second",
         "arrival_rows_per_second", "backlog_growth_rows_per_second", "trigger_interval_s")


def query_view(view: JobView, q: dict) -> JobView:
    """The job's view narrowed to one query (a ``liveness.live`` query entry): its batches and its live
    state. Stages are the job's, not the query's, so they are left out (no critical time, no utilization)."""
    mine = tuple(b for b in view.batches if b.query_id == q["query_id"])
    since = view.now_ms - int(view.window_s * 1000)
    live = LiveStats(queries=1, completed_batches=sum(1 for b in mine if b.trigger_ms >= since),
                     **{k: q.get(k) for k in _LIVE})
    return replace(view, stages=(), batches=mine, live=live, partition_stats=())


def job_health(conn: Connection, job: str, window_s: float, window_ms: int, now_ms: Optional[int] = None,
               config: HealthConfig = HealthConfig(), span=None) -> Verdict:
    """The job's verdict now, over the last ``window_s`` seconds, with one verdict per streaming query that
    has a current state (raises ``queries.NotFound`` for an unknown job). ``span``: only what lies within it
    (``aggregators.view.build_view``), for a verdict at a past ``now_ms`` (``aggregators.health_timeline``)."""
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    view = build_view(conn, job, window_s, window_ms, now_ms=now_ms, span=span)
    j = queries.job_row(conn, job)
    failed = failed_tasks(conn, j.id, now_ms - int(window_s * 1000), span.hi_ms if span is not None else None)
    per_query = []
    for q in (liveness.live(conn, j.id, now_ms, window_s) or {}).get("queries", []):
        v = verdict(query_view(view, q), failed.get(q["query_id"], 0), config)
        per_query.append({"query_id": q["query_id"], "name": q["name"], "state": v.state, "reason": v.reason,
                          "numbers": v.numbers})
    return replace(verdict(view, sum(failed.values()), config), queries=tuple(per_query))
