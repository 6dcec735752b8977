"""Is a job running? ``registered``, ``active`` or ``stopped``, with the reason.

* ``registered``: pre-registered through the API (``aggregators.registration``), never reported;
* ``stopped``: no report for ``stopped_after_s`` (reporters send at least a heartbeat every 5 s
  while attached), or every streaming query of its latest run has terminated (the reporter's latest
  query states all say ``terminated``; ``aggregators.liveness``);
* ``active``: otherwise.

Policies evaluate only active jobs (``api.governor``): a stopped job gets no decisions. The API's
job list and ``/metrics`` (``spark_governor_job_up``) show the state.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from sqlalchemy import func, select
from sqlalchemy.engine import Connection

from spark_governor.aggregators.models import job_runs, jobs, query_states

#: a job without a report for this long is stopped (s)
STOPPED_AFTER_S = 30.0


@dataclass(frozen=True)
class JobState:
    state: str  # registered | active | stopped
    reason: Optional[str] = None

    @property
    def active(self) -> bool:
        return self.state == "active"


def _latest_statuses(conn: Connection, job_id: int) -> Optional[list[str]]:
    """The statuses in the latest query states the job's reporter sent (one per streaming query), or None when it
    sent none or they come from before its latest run (a new run that sent no state yet)."""
    latest = conn.execute(select(query_states.c.received_ms, query_states.c.observed_ms)
                          .where(query_states.c.job_id == job_id)
                          .order_by(query_states.c.observed_ms.desc(), query_states.c.id.desc()).limit(1)).first()
    if latest is None:
        return None
    run_start = conn.execute(select(func.max(job_runs.c.first_ms)).where(job_runs.c.job_id == job_id)).scalar()
    if run_start is not None and latest.received_ms < run_start:
        return None
    return [r.status for r in conn.execute(select(query_states.c.status).where(
        query_states.c.job_id == job_id, query_states.c.observed_ms >= latest.observed_ms - 60_000,
        query_states.c.received_ms == latest.received_ms))]


def _queries_terminated(conn: Connection, job_id: int) -> bool:
    """Whether the latest query states the job's reporter sent all say ``terminated`` (and belong to
    the latest run: a new run that sent no state yet is not stopped)."""
    statuses = set(_latest_statuses(conn, job_id) or ())
    return bool(statuses) and statuses == {"terminated"}


def unfinished_queries(conn: Connection, job_id: int) -> int:
    """Streaming queries whose latest reported state is not ``terminated``: a job silent with some is one whose
    driver died or lost the control plane, not one that stopped its queries (``SparkGovernorJobStoppedReporting``)."""
    return sum(1 for s in _latest_statuses(conn, job_id) or () if s != "terminated")


def job_state(conn: Connection, job, now_ms: int, stopped_after_s: float = STOPPED_AFTER_S) -> JobState:
    """The state of ``job`` (a ``jobs`` row) at ``now_ms`` (control-plane clock)."""
    if job.last_report_ms is None:
        return JobState("registered", "never reported")
    silent_s = (now_ms - job.last_report_ms) / 1000.0
    if silent_s > stopped_after_s:
        return JobState("stopped", f"no report for {silent_s:.0f} s")
    if _queries_terminated(conn, job.id):
        return JobState("stopped", "every streaming query terminated")
    return JobState("active")


def job_state_by_id(conn: Connection, job_id: int, now_ms: int, stopped_after_s: float = STOPPED_AFTER_S) -> JobState:
    row = conn.execute(select(jobs).where(jobs.c.id == job_id)).first()
    return job_state(conn, row, now_ms, stopped_after_s)
