"""A run's health on its own clock: the verdict at a given instant of the run, and the timeline of verdicts over
its life (issue #43).

A live job's verdict is taken now (``aggregators.health.job_health``). A run that has ended — a replayed event log
above all, whose clock is the log's — is judged where it was: at an instant ``t`` (epoch ms) of the run, from only
what had happened by ``t`` within the run (statistics windows that started before ``t``, batches that completed
before ``t``, failed tasks and query states up to ``t``: ``build_view(span=…)``), by the same rules and window as a
live job. So a replayed overloaded run is ``underprovisioned`` at its end, not ``unknown`` because the wall clock's
"last 60 s" holds none of it.

When a run's verdict is taken (:func:`verdict_instant`): the latest run of a live job that still reports is judged
now; every other run — an earlier run, a run that stopped reporting, a replayed run — at its end
(:func:`end_instant`: its last report, a replay's last event, or just before its queries' final termination).

The timeline (:func:`health_timeline`) judges the run every ``step`` from its first report to its end instant and merges
consecutive instants with the same state into segments ``{from_ms, to_ms, state, reason}``: ``from_ms`` is the
first instant judged so, ``to_ms`` the last (the next segment's ``from_ms`` is one step later). At most
:data:`MAX_POINTS` instants: the step grows with the run's length (never below one statistics window).
"""
from __future__ import annotations

import math
from dataclasses import replace
from typing import Optional

from sqlalchemy import select
from sqlalchemy.engine import Connection

from spark_governor.aggregators.health import HealthConfig, Verdict, job_health
from spark_governor.aggregators.models import query_states
from spark_governor.aggregators.runs import RunSpan

#: the most instants a timeline judges (each costs one view: ~20 ms on SQLite)
MAX_POINTS = 120


def end_instant(conn: Connection, job_id: int, run: RunSpan) -> int:
    """The instant an ended run is judged at (epoch ms, control-plane clock; a replay's is the log's): its last
    report, or just before its queries' final termination when it ended with one (a stopped query is how a run
    ends, not a fault of the run: judged at the termination, every finished run would be ``unhealthy``)."""
    rows = conn.execute(select(query_states.c.status, query_states.c.received_ms)
                        .where(query_states.c.job_id == job_id, query_states.c.received_ms >= run.first_ms,
                               query_states.c.received_ms <= run.last_ms)).all()
    live = [r.received_ms for r in rows if r.status != "terminated"]
    ended = [r.received_ms for r in rows if r.status == "terminated" and (not live or r.received_ms > max(live))]
    return max(run.first_ms, min(ended) - 1) if ended else run.last_ms


def verdict_instant(conn: Connection, job_id: int, run: RunSpan, replayed: bool, now_ms: int,
                    stopped_after_ms: int) -> int:
    """When ``run``'s verdict is taken (epoch ms): now for the latest run of a live job whose last report is at
    most ``stopped_after_ms`` old, else at its end (:func:`end_instant`; a replay's: the log's)."""
    if run.latest and not replayed and run.last_ms >= now_ms - stopped_after_ms:
        return now_ms
    return end_instant(conn, job_id, run)


def _until(run: Optional[RunSpan], at_ms: int) -> RunSpan:
    """``run``'s span cut at ``at_ms`` (inclusive)."""
    if run is None:
        return RunSpan("all", None, None, 0, at_ms, True, None, at_ms + 1)
    hi = at_ms + 1 if run.hi_ms is None else min(run.hi_ms, at_ms + 1)
    return replace(run, hi_ms=hi)


def verdict_at(conn: Connection, job: str, run: Optional[RunSpan], at_ms: int, window_s: float, window_ms: int,
               config: HealthConfig = HealthConfig()) -> Verdict:
    """The verdict of ``job``'s ``run`` (None: every run) at ``at_ms`` (epoch ms) over the ``window_s`` seconds
    before it, from what had happened by then within the run."""
    return job_health(conn, job, window_s, window_ms, now_ms=at_ms, config=config, span=_until(run, at_ms))


def run_verdict(conn: Connection, job: str, job_id: int, run: Optional[RunSpan], replayed: bool, now_ms: int,
                stopped_after_ms: int, window_s: float, window_ms: int) -> tuple[int, Verdict]:
    """``(instant, verdict)`` of ``job``'s ``run`` taken where :func:`verdict_instant` says (None: a job without
    runs, judged now)."""
    at_ms = now_ms if run is None else verdict_instant(conn, job_id, run, replayed, now_ms, stopped_after_ms)
    if at_ms == now_ms:
        return at_ms, job_health(conn, job, window_s, window_ms, now_ms)
    return at_ms, verdict_at(conn, job, run, at_ms, window_s, window_ms)


def timeline_step_ms(start_ms: int, end_ms: int, window_ms: int) -> int:
    """The step between judged instants: one statistics window, or longer so that at most :data:`MAX_POINTS`
    instants cover ``[start_ms, end_ms]``."""
    return max(window_ms, math.ceil((end_ms - start_ms) / (MAX_POINTS - 1)) if end_ms > start_ms else window_ms)


def health_timeline(conn: Connection, job: str, run: Optional[RunSpan], start_ms: int, end_ms: int,
                    window_s: float, window_ms: int, step_ms: Optional[int] = None,
                    config: HealthConfig = HealthConfig()) -> list[dict]:
    """Segments ``{from_ms, to_ms, state, reason, recommended_executors}`` (epoch ms) of the run's verdicts from
    ``start_ms`` + one step to ``end_ms`` (always judged), oldest first (module docstring)."""
    step = step_ms or timeline_step_ms(start_ms, end_ms, window_ms)
    instants = list(range(start_ms + step, end_ms, step)) + [end_ms]
    out: list[dict] = []
    for t in instants:
        v = verdict_at(conn, job, run, t, window_s, window_ms, config)
        if out and out[-1]["state"] == v.state:
            out[-1]["to_ms"] = t
            continue
        out.append({"from_ms": t, "to_ms": t, "state": v.state, "reason": v.reason,
                    "recommended_executors": v.recommended_executors})
    return out
