"""Repository of decisions, directives (desired state per job and knob) and knob histories.

Directives carry a version per (job, knob) that only grows; the driver applies a version once
and acknowledges it in its next report (``reporter.applied``), which updates the directive and
the decision that issued it.
"""
from __future__ import annotations

from typing import Any, Optional

from sqlalchemy import bindparam, insert, select, update
from sqlalchemy.engine import Connection

from spark_governor.aggregators.models import decisions, directives, events, knob_states
from spark_governor.policies.safety import KnobHistory
from spark_governor.policies.wire import DirectiveAck


#: read on every report: built once, with a bound parameter (SQLAlchemy's compiled cache then finds it
#: without rebuilding and hashing the expression; see aggregators.ingest)
_CURRENT = select(directives).where(directives.c.job_id == bindparam("p_job")).order_by(directives.c.knob)


def current_directives(conn: Connection, job_id: int) -> list[dict]:
    """Every knob's desired state for the job: ``{knob, version, value, status, ...}``."""
    return [directive_dict(r) for r in conn.execute(_CURRENT, {"p_job": job_id})]


def directive_dict(r) -> dict:
    """A ``directives`` row as ``current_directives`` gives it."""
    return {"knob": r.knob, "version": r.version, "value": r.value, "status": r.status,
            "applied_version": r.applied_version, "message": r.message, "decision_id": r.decision_id,
            "created_ms": r.created_ms, "applied_ms": r.applied_ms}


def issue_directive(conn: Connection, job_id: int, knob: str, value: Any, decision_id: int, now_ms: int) -> int:
    """Set a new desired value; returns the new version (previous + 1)."""
    row = conn.execute(select(directives).where(directives.c.job_id == job_id, directives.c.knob == knob)
                       .with_for_update()).first()
    if row is None:
        conn.execute(insert(directives).values(job_id=job_id, knob=knob, version=1, value=value,
                                               decision_id=decision_id, created_ms=now_ms, status="pending"))
        return 1
    version = row.version + 1
    conn.execute(update(directives).where(directives.c.id == row.id).values(
        version=version, value=value, decision_id=decision_id, created_ms=now_ms, status="pending", message=None))
    if row.decision_id is not None and row.status == "pending":
        conn.execute(update(decisions).where(decisions.c.id == row.decision_id, decisions.c.status == "issued")
                     .values(status="superseded"))
    return version


def apply_acks(conn: Connection, job_id: int, acks: list[DirectiveAck], now_ms: int) -> None:
    """Record what the driver applied; stale acks (older versions) are ignored."""
    for ack in acks:
        row = conn.execute(select(directives).where(directives.c.job_id == job_id, directives.c.knob == ack.knob)).first()
        if row is None or ack.version > row.version or (row.applied_version or 0) >= ack.version:
            continue
        conn.execute(update(directives).where(directives.c.id == row.id).values(
            applied_version=ack.version, applied_ms=now_ms,
            status=ack.status if ack.version == row.version else row.status, message=ack.message))
        conn.execute(update(decisions).where(
            decisions.c.job_id == job_id, decisions.c.knob == ack.knob, decisions.c.directive_version == ack.version,
            decisions.c.status.in_(("issued", "superseded"))).values(
            status=ack.status, status_message=ack.message, applied_ms=now_ms))


def record_decision(conn: Connection, **values) -> int:
    return conn.execute(insert(decisions).values(**values)).inserted_primary_key[0]


def knob_history(conn: Connection, job_id: int, knob: str) -> KnobHistory:
    r = conn.execute(select(knob_states).where(knob_states.c.job_id == job_id, knob_states.c.knob == knob)).first()
    if r is None:
        return KnobHistory()
    return KnobHistory(r.last_change_ms, r.last_direction, r.consecutive_ineffective_ups, r.held)


def save_knob_history(conn: Connection, job_id: int, knob: str, h: KnobHistory) -> None:
    values = dict(last_change_ms=h.last_change_ms, last_direction=h.last_direction,
                  consecutive_ineffective_ups=h.consecutive_ineffective_ups, held=h.held)
    res = conn.execute(update(knob_states).where(knob_states.c.job_id == job_id, knob_states.c.knob == knob)
                       .values(**values))
    if res.rowcount == 0:
        conn.execute(insert(knob_states).values(job_id=job_id, knob=knob, **values))


def record_event(conn: Connection, job_id: Optional[int], kind: str, message: str, now_ms: int,
                 policy: Optional[str] = None) -> None:
    conn.execute(insert(events).values(job_id=job_id, kind=kind, policy=policy, message=message[:4000],
                                       created_ms=now_ms))
