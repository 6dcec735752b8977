"""Which jobs exist: a job exists once it reported, or when it was explicitly pre-registered.

The configuration API (policies, latency constraints) never invents a job: configuring a job that
never reported answers 404, unless the request asks to pre-register it (``?register=true``), so a
policy can be set before the job's first report. A pre-registered job that never reported is
removed again when its last configuration (policy or constraint) is deleted, so a typo leaves
nothing behind.
"""
from __future__ import annotations

from sqlalchemy import delete, func, insert, select
from sqlalchemy.engine import Connection

from spark_governor.aggregators.models import jobs, latency_constraints, policy_configs
from spark_governor.aggregators.queries import NotFound

REGISTER_HINT = "it has never reported; add ?register=true to configure it before its first report"


def configurable_job(conn: Connection, job: str, register: bool, now_ms: int) -> int:
    """The id of ``job`` for a configuration write; a job that does not exist is created only when
    ``register`` (pre-registration), else :class:`NotFound` (404) naming the job."""
    jid = conn.execute(select(jobs.c.id).where(jobs.c.name == job)).scalar()
    if jid is not None:
        return jid
    if not register:
        raise NotFound(f"job {job!r} not found ({REGISTER_HINT})")
    return conn.execute(insert(jobs).values(name=job, created_ms=now_ms)).inserted_primary_key[0]


def forget_if_unreported(conn: Connection, job_id: int) -> bool:
    """Delete the job when it never reported and has no configuration left; True if deleted."""
    reported = conn.execute(select(jobs.c.last_report_ms).where(jobs.c.id == job_id)).scalar()
    if reported is not None:
        return False
    for table in (policy_configs, latency_constraints):
        if conn.execute(select(func.count()).select_from(table).where(table.c.job_id == job_id)).scalar():
            return False
    conn.execute(delete(jobs).where(jobs.c.id == job_id))
    return True


def register_flag(raw: str | None) -> bool:
    """``?register=`` as a boolean (absent: false); ValueError for anything but true/false/1/0."""
    if raw is None:
        return False
    value = raw.strip().lower()
    if value in ("1", "true", "yes"):
        return True
    if value in ("0", "false", "no", ""):
        return False
    raise ValueError("register: must be true or false")
