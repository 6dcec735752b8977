"""Read side of the statistics store: jobs, template (stage) and runtime (task) statistics.

Template statistics are the exact Chan/Welford merge of their runtime vertices' windows
(Lohrmann §4.4.2 with counts, digest §9.7), never an average of averages: merged over the partitions by the
reporter (or by ingest, for whole-task reports) and kept in the template window, which is what is read here
(``policies.task_fold``). All durations in
seconds; rates in records per second; utilization is a fraction in [0, 1+] (busy slot time over
available slot time; digest §11.3: ρ_v = Σ executorRunTime_v / (p(v)·W) with
p(v) = min(numTasks_v, slots)).
"""
from __future__ import annotations

import time
from collections import defaultdict
from typing import Optional

from sqlalchemy import and_, func, or_, select
from sqlalchemy.engine import Connection

from spark_governor.aggregators.job_state import STOPPED_AFTER_S, job_state
from spark_governor.aggregators.models import (RUNTIME_MOMENTS, RUNTIME_SUMS, TEMPLATE_MOMENTS, batches, job_runs, jobs, reporters,
                                runtime_vertices, runtime_windows, tasks, template_vertices, template_windows)
from spark_governor.policies.moments import Moments
from spark_governor.policies.wire import EVENT_TIME_METRIC


class NotFound(LookupError):
    """A job or template that does not exist; message names it."""


def _moments(row, name: str) -> Moments:
    return Moments(row[f"{name}_n"], row[f"{name}_mean"], row[f"{name}_m2"])


def job_row(conn: Connection, name: str):
    row = conn.execute(select(jobs).where(jobs.c.name == name)).first()
    if row is None:
        raise NotFound(f"job {name!r} not found")
    return row


def _latest_runs(conn: Connection) -> dict[int, tuple[str, int]]:
    """job id → (run id, number of runs) of its latest run (by first report; ``aggregators.runs``)."""
    out: dict[int, tuple[str, int]] = {}
    counts: dict[int, int] = defaultdict(int)
    for r in conn.execute(select(job_runs.c.job_id, job_runs.c.run_id)
                          .order_by(job_runs.c.job_id, job_runs.c.first_ms, job_runs.c.id)):
        counts[r.job_id] += 1
        out[r.job_id] = (r.run_id, counts[r.job_id])
    return out


def list_jobs(conn: Connection, now_ms: Optional[int] = None, stopped_after_s: float = STOPPED_AFTER_S) -> list[dict]:
    """Every job with its state (``aggregators.job_state``), latest run and reporter counters."""
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    runs = _latest_runs(conn)
    drops = {r.job_id: r for r in conn.execute(
        select(reporters.c.job_id, func.sum(reporters.c.dropped_total).label("dropped"),
               func.sum(reporters.c.orphaned_total).label("orphaned"),
               func.sum(reporters.c.tasks_total).label("tasks"),
               func.count().label("reporters")).group_by(reporters.c.job_id))}
    out = []
    for j in conn.execute(select(jobs).order_by(jobs.c.name)):
        d = drops.get(j.id)
        state = job_state(conn, j, now_ms, stopped_after_s)
        latest_run, n_runs = runs.get(j.id, (None, 0))
        out.append({"name": j.name, "state": state.state, "state_reason": state.reason,
                    "latest_run": latest_run, "runs": n_runs,
                    "created_ms": j.created_ms, "last_report_ms": j.last_report_ms,
                    "slots": j.slots, "app_id": j.app_id, "master": j.master, "executors": j.executors,
                    "not_actuatable": j.not_actuatable or {}, "knob_state": j.knob_state or {},
                    "attachment": j.attachment, "can_apply": (j.attachment or {}).get("can_apply"),
                    "reporters": int(d.reporters) if d else 0,
                    "tasks_reported_total": int(d.tasks or 0) if d else 0,
                    "reporter_dropped_total": int(d.dropped or 0) if d else 0,
                    "reporter_orphaned_total": int(d.orphaned or 0) if d else 0})
    return out


def _window_stats(moments: dict[str, Moments], sums: dict[str, int], tasks: int, failed: int,
                  window_s: float, p: Optional[int]) -> dict:
    run_s = sums["run_time_ms"] / 1000.0
    out = {name: m.to_dict() for name, m in moments.items()}
    out.update({
        "tasks": tasks,
        "failed_tasks": failed,
        "records_in": sums["records_in"],
        "records_in_per_second": sums["records_in"] / window_s if window_s else None,
        "busy_seconds": run_s,
        "parallelism": p,
        "utilization": run_s / (p * window_s) if p and window_s else None,
        "shuffle_read_bytes": sums["shuffle_read_bytes"],
        "shuffle_write_bytes": sums["shuffle_write_bytes"],
        "shuffle_read_records": sums["shuffle_read_records"],
        "shuffle_write_records": sums["shuffle_write_records"],
        "cpu_seconds": sums["cpu_time_ns"] / 1e9,
        "gc_seconds": sums["gc_time_ms"] / 1000.0,
    })
    return out


def _template(conn: Connection, job_id: int, key: str):
    row = conn.execute(select(template_vertices).where(
        template_vertices.c.job_id == job_id, template_vertices.c.key == key)).first()
    if row is None:
        raise NotFound(f"stage template {key!r} not found")
    return row


def span_conditions(column, span) -> list:
    """``column`` (epoch ms) within a run's span ``[span.lo_ms, span.hi_ms)`` (``aggregators.runs``);
    no condition without a span."""
    cond = []
    if span is not None and span.lo_ms is not None:
        cond.append(column >= span.lo_ms)
    if span is not None and span.hi_ms is not None:
        cond.append(column < span.hi_ms)
    return cond


def _recent_window_starts(conn: Connection, template_id: int, limit: int, span=None, table=runtime_windows) -> list[int]:
    """The latest ``limit`` window starts of the template's ``table`` (template windows: those with tasks)."""
    cond = [table.c.template_id == template_id, *span_conditions(table.c.window_start_ms, span)]
    if table is template_windows:
        cond.append(table.c.tasks + table.c.failed_tasks > 0)
    return sorted(r[0] for r in conn.execute(
        select(table.c.window_start_ms).where(*cond)
        .group_by(table.c.window_start_ms).order_by(table.c.window_start_ms.desc()).limit(limit)))


def template_stats(conn: Connection, job: str, windows: int = 12, span=None) -> list[dict]:
    """Per template vertex: its last ``windows`` windows (merged over partitions) and a summary; only
    windows within ``span`` (one run of the job, ``aggregators.runs.RunSpan``) when given."""
    j = job_row(conn, job)
    out = []
    for t in conn.execute(select(template_vertices).where(template_vertices.c.job_id == j.id)
                          .order_by(template_vertices.c.ordinal, template_vertices.c.key)):
        starts = _recent_window_starts(conn, t.id, windows, span, template_windows)
        per_window = []
        summary_moments: dict[str, Moments] = defaultdict(Moments)
        summary_sums: dict[str, int] = defaultdict(int)
        summary_tasks = summary_failed = 0
        if starts:
            tw = conn.execute(select(template_windows).where(
                template_windows.c.template_id == t.id, template_windows.c.window_start_ms.in_(starts))
                .order_by(template_windows.c.window_start_ms)).mappings().all()
            for twr in tw:
                window_ms = twr["window_ms"]
                moments = {n: _moments(twr, n) for n in (*RUNTIME_MOMENTS, *TEMPLATE_MOMENTS)}
                sums = {n: twr[n] for n in RUNTIME_SUMS}
                slots = twr["max_slots"] or j.slots
                num_tasks = twr["max_num_tasks"] or twr["partitions"]
                p = min(num_tasks, slots) if slots else num_tasks
                stats = _window_stats(moments, sums, twr["tasks"], twr["failed_tasks"], window_ms / 1000.0, p)
                stats.update(window_start_ms=twr["window_start_ms"], window_ms=window_ms, partitions=twr["partitions"],
                             num_tasks=num_tasks, stages=twr["stages"],
                             utilization_max=twr["max_vertex_run_time_ms"] / window_ms)
                per_window.append(stats)
                for n, m in moments.items():
                    summary_moments[n] = summary_moments[n].merge(m)
                for n, v in sums.items():
                    summary_sums[n] += v
                summary_tasks += stats["tasks"]
                summary_failed += stats["failed_tasks"]
        summary = None
        if per_window:
            span_s = sum(w["window_ms"] for w in per_window) / 1000.0
            ps = [w["parallelism"] for w in per_window if w["parallelism"]]
            summary = _window_stats(dict(summary_moments), dict(summary_sums), summary_tasks, summary_failed,
                                    span_s, max(ps) if ps else None)
            summary.update(windows=len(per_window), span_seconds=span_s)
        out.append({"key": t.key, "name": t.name, "ordinal": t.ordinal, "operators": t.operators,
                    "parents": t.parents, "first_ms": t.first_ms, "last_ms": t.last_ms,
                    "windows": per_window, "latest": per_window[-1] if per_window else None,
                    "summary": summary})
    return out


def runtime_stats(conn: Connection, job: str, template_key: str, windows: int = 12, span=None,
                  task_limit: int = 100) -> dict:
    """Per runtime vertex (partition) of one template: its last ``windows`` windows (within ``span``); the job's
    task detail and the template's latest ``task_limit`` task rows."""
    j = job_row(conn, job)
    t = _template(conn, j.id, template_key)
    starts = _recent_window_starts(conn, t.id, windows, span)
    by_part: dict[int, list] = defaultdict(list)
    if starts:
        q = (select(runtime_windows, runtime_vertices.c.partition)
             .join(runtime_vertices, runtime_vertices.c.id == runtime_windows.c.runtime_vertex_id)
             .where(runtime_windows.c.template_id == t.id, runtime_windows.c.window_start_ms >= starts[0],
                    runtime_windows.c.window_start_ms <= starts[-1])
             .order_by(runtime_vertices.c.partition, runtime_windows.c.window_start_ms))
        for r in conn.execute(q).mappings():
            moments = {n: _moments(r, n) for n in RUNTIME_MOMENTS}
            sums = {n: r[n] for n in RUNTIME_SUMS}
            stats = _window_stats(moments, sums, r["tasks"], r["failed_tasks"], r["window_ms"] / 1000.0, 1)
            stats.update(window_start_ms=r["window_start_ms"], window_ms=r["window_ms"])
            by_part[r["partition"]].append(stats)
    return {"key": t.key, "name": t.name,
            "partitions": [{"partition": p, "windows": w, "latest": w[-1]} for p, w in sorted(by_part.items())],
            "task_detail": task_detail(j.task_detail), "task_rows": task_rows(conn, t.id, task_limit, span)}


#: what each ``task_detail`` mode keeps as task rows (``policies.task_fold``)
_HOLDS = {
    None: "every task (its reporter sends whole task rows: report schema v1/v2)",
    "none": "no task rows beyond those the cluster profile reads: each executor's first 32 tasks by launch and a "
            "uniform sample of one task in 16",
    "failed": "failed tasks, each executor's first 32 tasks by launch and a uniform sample of one task in 16",
    "all": "every task",
}


def task_detail(mode: Optional[str]) -> dict:
    """``{"mode", "holds"}``: what task rows are stored for a job whose reporter sends ``mode``."""
    return {"mode": mode, "holds": _HOLDS.get(mode, _HOLDS[None])}


_TASK_ROW_COLUMNS = ("task_id", "partition", "attempt", "stage_id", "stage_attempt", "batch_id", "executor_id",
                     "launch_ms", "finish_ms", "run_time_ms", "input_records", "shuffle_read_records", "successful",
                     "speculative", "failure_reason", "detail")


def task_rows(conn: Connection, template_id: int, limit: int, span=None) -> list[dict]:
    """The latest ``limit`` stored task rows of a template (by finish time, newest first), within ``span``."""
    cols = [tasks.c[c] for c in _TASK_ROW_COLUMNS]
    q = (select(*cols).where(tasks.c.template_id == template_id, *span_conditions(tasks.c.finish_ms, span))
         .order_by(tasks.c.finish_ms.desc()).limit(limit))
    return [dict(r._mapping) for r in conn.execute(q)]


def batch_stats(conn: Connection, job: str, limit: int = 100, span=None) -> dict:
    """The last ``limit`` micro-batches and the interarrival moments of their trigger times (s); only
    the batches of one run (``span.run_id``; batches stored before runs were recorded: by time) when given."""
    j = job_row(conn, job)
    q = select(batches).where(batches.c.job_id == j.id)
    if span is not None:
        q = q.where(or_(batches.c.job_run_id == span.run_id,
                        and_(batches.c.job_run_id.is_(None), *span_conditions(batches.c.trigger_ms, span))))
    rows = list(reversed(conn.execute(q.order_by(batches.c.trigger_ms.desc()).limit(limit)).mappings().all()))
    gaps: list[float] = []
    last_by_run: dict[str, int] = {}
    for r in rows:
        prev = last_by_run.get(r["run_id"])
        if prev is not None and r["trigger_ms"] > prev:
            gaps.append((r["trigger_ms"] - prev) / 1000.0)
        last_by_run[r["run_id"]] = r["trigger_ms"]
    items = [{k: v for k, v in r.items() if k not in ("id", "job_id")} for r in rows]
    span_s = gaps_n = 0.0
    for item in items:
        item["record_interarrival_s"], item["record_wait_s"] = _event_time(item["observed_metrics"])
        obs = item["observed_metrics"].get(EVENT_TIME_METRIC) or {}
        if item["record_interarrival_s"] is not None:
            span_s += (obs["max_us"] - obs["min_us"]) / 1e6
            gaps_n += obs["records"] - 1
    durations = Moments.of([r["batch_duration_ms"] / 1000.0 for r in rows])
    return {"batches": items, "interarrival": Moments.of(gaps).to_dict(), "duration": durations.to_dict(),
            "record_interarrival": {"mean": span_s / gaps_n if gaps_n else None, "gaps": int(gaps_n)}}


def _event_time(observed: dict) -> tuple[Optional[float], Optional[float]]:
    """(mean record interarrival s, mean record wait s) of one batch from its observed metrics.

    Only the mean interarrival is exact from (count, min, max); its variance would need every
    record's timestamp, which the observation does not carry.
    """
    obs = observed.get(EVENT_TIME_METRIC)
    if not isinstance(obs, dict):
        return None, None
    try:
        n, lo, hi = int(obs["records"]), float(obs["min_us"]), float(obs["max_us"])
    except (KeyError, TypeError, ValueError):
        return None, None
    wait = obs.get("wait_us_avg")
    wait_s = float(wait) / 1e6 if isinstance(wait, (int, float)) else None
    return ((hi - lo) / 1e6 / (n - 1) if n > 1 else None), wait_s
