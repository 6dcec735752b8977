"""Runs of a job: each start of the job under the same name is a run of its own.

A run is identified by ``run_id``: the Spark application id the reporter sends
(``reporter.app_id``, e.g. ``local-1764052012345`` or ``app-20261125…``; ``attach()`` and the
listener jar both send it); reporters that send none share the run ``unknown-app``. Every report updates its run's first and
last report times; micro-batches are stored with their run (``batches.job_run_id``), so a job run
again under the same name does not merge its batches with the previous run's.

Stage and task statistics are kept per time window, not per run: a window belongs to the run in
progress when it started. The boundary between consecutive runs is the earlier of the previous
run's last report and the next run's first report, so sequential runs are separated exactly
(up to the one window in which the earlier run ended); runs that overlap in time under one name
cannot be separated in stage statistics (their batches still are).

The statistics endpoints show the latest run by default, another with ``?run=<run_id>``, and all
runs merged with ``?run=all``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

from sqlalchemy import bindparam, func, insert, select, update
from sqlalchemy.engine import Connection

from spark_governor.aggregators.bulk import update_rows
from spark_governor.aggregators.models import batches, executor_events, job_runs
from spark_governor.aggregators.queries import NotFound
from spark_governor.policies.wire import Report

ALL_RUNS = "all"
#: the one run of every reporter that sends no application id (runs cannot be told apart without it)
NO_APP_ID = "unknown-app"


def run_key(report: Report) -> str:
    return report.reporter.app_id or NO_APP_ID


#: read on every report: built once with bound parameters (see aggregators.ingest)
_RUN = select(job_runs.c.id, job_runs.c.last_ms).where(job_runs.c.job_id == bindparam("p_job"),
                                                       job_runs.c.run_id == bindparam("p_run"))


def touch_run(conn: Connection, job_id: int, report: Report, now_ms: int) -> str:
    """Record that ``report`` arrived for its run (created at its first report); returns the run id."""
    key = run_key(report)
    row = conn.execute(_RUN, {"p_job": job_id, "p_run": key}).first()
    if row is None:
        conn.execute(insert(job_runs).values(job_id=job_id, run_id=key, app_id=report.reporter.app_id,
                                             master=report.reporter.master, first_ms=now_ms, last_ms=now_ms))
    elif row.last_ms < now_ms - 1000:  # at most one write a second per run
        conn.execute(update(job_runs).where(job_runs.c.id == row.id).values(last_ms=now_ms))
    return key


_RUNS = select(job_runs.c.id, job_runs.c.job_id, job_runs.c.run_id, job_runs.c.last_ms).where(
    job_runs.c.job_id.in_(bindparam("p_jobs", expanding=True)), job_runs.c.run_id.in_(bindparam("p_runs", expanding=True)))


def touch_runs(conn: Connection, touches: Sequence[tuple[int, Report, int]]) -> list[str]:
    """``touch_run`` for each ``(job_id, report, now_ms)`` in order (a batch of reports, ``aggregators.ingest_batch``),
    leaving the same rows, with a fixed number of statements: one read of every run concerned, one insert of the
    new runs (in order of first appearance) and one update of the stored runs' ``last_ms``; returns the run ids."""
    keys = [(job_id, run_key(report)) for job_id, report, _now in touches]
    if not keys:
        return []
    stored = {(r.job_id, r.run_id): [r.id, r.last_ms, r.last_ms] for r in conn.execute(
        _RUNS, {"p_jobs": sorted({k[0] for k in keys}), "p_runs": sorted({k[1] for k in keys})})}
    new: dict[tuple[int, str], dict] = {}
    for (job_id, report, now), key in zip(touches, keys):
        if key in stored:  # [id, last_ms as stored, last_ms after the reports so far]
            st = stored[key]
            if st[2] < now - 1000:
                st[2] = now
        elif key in new:
            row = new[key]
            if row["last_ms"] < now - 1000:
                row["last_ms"] = now
        else:
            new[key] = dict(job_id=job_id, run_id=key[1], app_id=report.reporter.app_id,
                            master=report.reporter.master, first_ms=now, last_ms=now)
    if new:
        conn.execute(insert(job_runs), list(new.values()))
    update_rows(conn, job_runs, sorted(({"_id": st[0], "last_ms": st[2]} for st in stored.values() if st[2] != st[1]),
                                       key=lambda r: r["_id"]))
    return [k[1] for k in keys]


@dataclass(frozen=True)
class RunSpan:
    """One run and the time span its stage windows are taken from: ``[lo_ms, hi_ms)``, None: open."""

    run_id: str
    app_id: Optional[str]
    master: Optional[str]
    first_ms: int
    last_ms: int
    latest: bool
    lo_ms: Optional[int]
    hi_ms: Optional[int]

    def to_json(self) -> dict:
        return {"run_id": self.run_id, "app_id": self.app_id, "master": self.master, "first_ms": self.first_ms,
                "last_ms": self.last_ms, "latest": self.latest}


def run_spans(conn: Connection, job_id: int) -> list[RunSpan]:
    """The job's runs, oldest first, with their time spans (see the module docstring)."""
    rows = conn.execute(select(job_runs).where(job_runs.c.job_id == job_id)
                        .order_by(job_runs.c.first_ms, job_runs.c.id)).all()
    bounds = [min(prev.last_ms, cur.first_ms) for prev, cur in zip(rows, rows[1:])]
    out = []
    for i, r in enumerate(rows):
        out.append(RunSpan(r.run_id, r.app_id, r.master, r.first_ms, r.last_ms, latest=i == len(rows) - 1,
                           lo_ms=bounds[i - 1] if i > 0 else None, hi_ms=bounds[i] if i < len(bounds) else None))
    return out


def select_run(conn: Connection, job: str, job_id: int, run: Optional[str]) -> Optional[RunSpan]:
    """The run the statistics show: ``run`` None → the latest; ``"all"`` → None (every run merged);
    otherwise that run, or :class:`NotFound` naming it. None also for a job without recorded runs."""
    if run == ALL_RUNS:
        return None
    spans = run_spans(conn, job_id)
    if run is None:
        return spans[-1] if spans else None
    for s in spans:
        if s.run_id == run:
            return s
    raise NotFound(f"run {run!r} of job {job!r} not found (see /api/v1/jobs/{job}/runs)")


def batch_counts(conn: Connection, job_id: int) -> dict[str, int]:
    """Micro-batches stored per run id."""
    return {r.job_run_id: int(r.n) for r in conn.execute(
        select(batches.c.job_run_id, func.count().label("n")).where(batches.c.job_id == job_id)
        .group_by(batches.c.job_run_id)) if r.job_run_id is not None}



def executor_usage(conn: Connection, job_id: int, span: RunSpan) -> tuple[Optional[float], Optional[int]]:
    """``(executor-seconds, most executors at once)`` of the run from its executors' registration and removal
    times (``executor_events``: driver clock, epoch ms; the executors ``attach()`` found registered count from
    the attach): each executor from its registration to its removal, or to the run's latest report while it is
    still registered, clipped to ``[first_ms, last_ms]`` of the run. ``(None, None)`` for a run that reported
    no executor (local mode, or a reporter older than the executor events)."""
    rows = conn.execute(select(executor_events.c.added_ms, executor_events.c.removed_ms).where(
        executor_events.c.job_id == job_id, executor_events.c.run_id == span.run_id,
        executor_events.c.added_ms.is_not(None))).all()
    if not rows:
        return None, None
    edges, total_ms = [], 0
    for added, removed in rows:
        lo, hi = max(added, span.first_ms), min(removed if removed is not None else span.last_ms, span.last_ms)
        if hi > lo:
            total_ms += hi - lo
            edges += [(lo, 1), (hi, -1)]
    peak = n = 0
    for _, step in sorted(edges, key=lambda e: (e[0], e[1])):  # a removal before an addition at the same instant
        n += step
        peak = max(peak, n)
    return total_ms / 1000.0, peak
