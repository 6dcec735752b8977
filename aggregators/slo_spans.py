"""The latency SLO as counters: every span of a constraint judged once, good or bad (issue #45).

A burn-rate alert needs the share of bad spans over an hour, six hours or thirty days
(``rate()`` of counters), not the attainment gauge over the last 12 spans. Each pass of
:func:`judge` (the leading process's scheduler, every few seconds: ``api.scheduler``) takes, per
constraint, the complete spans after those already counted and adds them to the constraint's
``spans_good`` / ``spans_bad`` in SQL, moving ``judged_until_ms`` past them. The judgement is the
one the API shows (``aggregators.constraints.judged_spans``): a span is good when its mean record
latency is within the bound; spans without a completed micro-batch whose work in flight was already
older than the bound are bad (``in-flight``); spans nobody can judge (the job idle or silent) are
not counted.

Counted once. The counters live in the database, so every ``serve`` worker and replica exports the
same totals; a pass updates a constraint only where ``judged_until_ms`` still has the value it read
(compare-and-set), so two processes judging at once cannot count a span twice. A span is judged
only ``SETTLE_S`` seconds after it ends: its micro-batches' progress reaches the control plane up to
a reporter flush (1 s) and an ingest queue later, and a span judged before would miss them. A new
constraint counts from the first span that starts after its first pass; a pass that finds more than
``MAX_SPANS`` spans to judge (the control plane was down for long) judges the latest ``MAX_SPANS``
and skips the older ones, whose statistics retention may already have deleted.
"""
from __future__ import annotations

import logging

from sqlalchemy import select, update
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import DBAPIError

from spark_governor.aggregators.constraints import judged_spans
from spark_governor.aggregators.models import jobs, latency_constraints

#: seconds after its end before a span is judged (its batches' progress has arrived)
SETTLE_S = 10.0
#: at most this many spans of a constraint per pass
MAX_SPANS = 720
#: seconds between passes (the scheduler's): a counter moves in steps of at most this much
PASS_S = 2.0

log = logging.getLogger("spark_governor.slo")


def _judge_one(conn: Connection, c, job, now_ms: int, window_ms: int) -> tuple[int, int] | None:
    """``(good, bad)`` counted for constraint row ``c`` (None: nothing to judge yet, or another process did)."""
    span_ms = int(round(c.span_s * 1000))
    settled = int(now_ms - SETTLE_S * 1000)
    until = settled - settled % span_ms
    since = c.judged_until_ms
    if since is None:
        since = until  # a new constraint: counted from the next span on
    since = max(since, until - MAX_SPANS * span_ms)
    good = bad = 0
    if until > since and job.last_report_ms is not None and job.last_report_ms >= since:
        for s in judged_spans(conn, job.name, job.id, c, since, until, window_ms, now_ms=now_ms):
            if s["attained"]:
                good += 1
            else:
                bad += 1
    if c.judged_until_ms is not None and until <= c.judged_until_ms:
        return None
    old = latency_constraints.c.judged_until_ms
    res = conn.execute(update(latency_constraints).where(
        latency_constraints.c.id == c.id,
        old.is_(None) if c.judged_until_ms is None else old == c.judged_until_ms).values(
        spans_good=latency_constraints.c.spans_good + good, spans_bad=latency_constraints.c.spans_bad + bad,
        judged_until_ms=until))
    return (good, bad) if res.rowcount == 1 else None


def judge(engine: Engine, now_ms: int, window_ms: int = 5000) -> dict[tuple[str, str], tuple[int, int]]:
    """One pass over every constraint (module docstring): ``{(job, constraint): (good, bad)}`` added by it. Each
    constraint in its own transaction, so one constraint's failure or a concurrent pass leaves the others counted."""
    with engine.connect() as conn:
        rows = conn.execute(select(latency_constraints.c.id)).scalars().all()
    out = {}
    for cid in rows:
        try:
            with engine.begin() as conn:
                c = conn.execute(select(latency_constraints).where(latency_constraints.c.id == cid)).first()
                job = c and conn.execute(select(jobs.c.id, jobs.c.name, jobs.c.last_report_ms)
                                         .where(jobs.c.id == c.job_id)).first()
                if c is None or job is None:
                    continue
                counted = _judge_one(conn, c, job, now_ms, window_ms)
                if counted is not None:
                    out[(job.name, c.name)] = counted
        except DBAPIError:
            raise  # the database is down: the scheduler skips this pass
        except Exception:  # one constraint's bad data never stops the others' counts
            log.exception("judging the spans of constraint %s failed", cid)
    return out
