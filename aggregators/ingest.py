"""Apply one validated report to the statistics store, in one transaction.

Per report (Lohrmann's runtime-graph aggregator, thesis §4.4; digest §11.3–11.4), the statistics are folded
with ``policies.task_fold``, the fold the reporters share:

* report schema v3 (issue #42): the reporter folded its finished tasks at the edge; its runtime windows
  (per ``(template, partition)``: counts, sums, moments of latency, service, service per record and
  interarrival, min and max) and template windows (per completed stage's template: launch interarrival and
  makespan moments) are merged into the stored windows with the exact Chan/Welford merge, in the database;
  its task spans (first launch, last finish per micro-batch) and executors' first tasks are kept (earliest
  and latest win); its task rows are detail, stored as they are and never folded again;
* schema v1/v2 (whole task rows, deprecated): every task row is stored and the control plane folds the
  report itself with the same functions — each task into the window of its finish time for its runtime vertex,
  the interarrival of task launches at that vertex carried over reports by ``runtime_vertices.last_launch_ms``,
  each newly completed stage run with the launches of its tasks stored so far — so that a job's statistics are
  the same whichever way its tasks travelled (tests/integration/test_edge_fold.py);
* micro-batch progress rows are stored as they are, and so are the queries' states between
  batches (``aggregators.liveness``).

Idempotency: a report whose ``(reporter.id, seq)`` was already applied is acknowledged and
ignored, so a reporter may retry a POST whose response it did not see.

Cost (issue #16): a fixed number of statements per report (about 15), whatever its size: rows of a
table go in one statement (``aggregators.bulk``), stored windows absorb the report's windows in one
upsert that merges them inside the database (``aggregators.welford.sql_merge``, the same Chan merge),
and rows already stored (stage runs, micro-batches) are skipped by ``ON CONFLICT DO NOTHING``.
The statements of the hot path are built once, with bound parameters (``_statement``): SQLAlchemy then
finds their compiled form by a memoized cache key instead of building and hashing a new expression tree
per report (about 20 µs each), and task rows go to the driver as tuples, not dicts.
Several reports in one transaction with the statements of about one: ``aggregators.ingest_batch`` (group
commit), which stores what this module stores for each of them in order.
"""
from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass
from functools import lru_cache
from operator import itemgetter

from sqlalchemy import bindparam, case, func, insert, select, tuple_, update
from sqlalchemy.engine import Connection

from spark_governor.aggregators.models import (RUNTIME_MOMENTS, RUNTIME_SUMS, TEMPLATE_MOMENTS, batches, jobs, reporters,
                                runtime_vertices, runtime_windows, stage_runs, task_spans, tasks, template_vertices,
                                template_windows)
from spark_governor.aggregators.bulk import insert_new_rows, insert_tuples, update_rows, upsert_rows
from spark_governor.aggregators.directives import apply_acks
from spark_governor.aggregators.cluster_profile import record_executor_events
from spark_governor.aggregators.liveness import store_query_states
from spark_governor.aggregators.partitions import store_partition_stats
from spark_governor.aggregators.runs import touch_run
from spark_governor.aggregators.welford import sql_extreme, sql_merge, sql_saturating_sum
from spark_governor.policies.task_fold import (completed, fold_tasks, merge_template_window, sampled, stage_window,
                                               template_window)
from spark_governor.policies.wire import INT64_MAX, Report, TaskRecord

DEFAULT_WINDOW_MS = 5_000


@dataclass
class IngestResult:
    job_id: int
    duplicate: bool = False
    tasks: int = 0
    stages: int = 0
    batches: int = 0


def _now_ms() -> int:
    return int(time.time() * 1000)


def _window(ts_ms: int, window_ms: int) -> int:
    return ts_ms - ts_ms % window_ms


@lru_cache(maxsize=None)
def _statement(name: str, variant=None):
    """The hot path's statements, built once with bound parameters (see the module's docstring)."""
    c = reporters.c
    if name == "job_id":
        return select(jobs.c.id).where(jobs.c.name == bindparam("p_name"))
    if name == "advance_reporter":  # variant: anonymous (token_name IS NULL) or not
        return update(reporters).where(
            c.id == bindparam("p_id"), c.job_id == bindparam("p_job"),
            c.token_name.is_(None) if variant else c.token_name == bindparam("p_token"),
            c.last_seq < bindparam("p_seq")).values(
            last_seq=bindparam("p_seq"), last_ms=bindparam("p_now"),
            dropped_total=case((c.dropped_total > bindparam("p_dropped"), c.dropped_total),
                               else_=bindparam("p_dropped")),
            orphaned_total=case((c.orphaned_total > bindparam("p_orphaned"), c.orphaned_total),
                                else_=bindparam("p_orphaned")),
            reports_total=c.reports_total + 1, tasks_total=c.tasks_total + bindparam("p_tasks"))
    if name == "templates":
        tv = template_vertices.c
        return select(template_vertices).where(tv.job_id == bindparam("p_job"),
                                               tv.key.in_(bindparam("p_keys", expanding=True)))
    if name == "runtime_vertices":
        rv = runtime_vertices.c
        return select(rv.id, rv.template_id, rv.partition, rv.last_launch_ms).where(
            rv.template_id.in_(bindparam("p_tids", expanding=True)),
            rv.partition.in_(bindparam("p_parts", expanding=True))).with_for_update()
    if name == "stage_launches":
        return (select(tasks.c.stage_id, tasks.c.stage_attempt, tasks.c.launch_ms)
                .where(tasks.c.job_id == bindparam("p_job"), tasks.c.app_id == bindparam("p_app"),
                       tuple_(tasks.c.stage_id, tasks.c.stage_attempt).in_(bindparam("p_stages", expanding=True)))
                .order_by(tasks.c.launch_ms))
    if name == "job_update":  # variant: the columns set, in order
        return update(jobs).where(jobs.c.id == bindparam("p_job_id")).values(
            {col: bindparam(f"p_{col}", type_=jobs.c[col].type) for col in variant})
    raise KeyError(name)


def _ensure_job(conn: Connection, report: Report, now: int) -> int:
    row = conn.execute(_statement("job_id"), {"p_name": report.job}).first()
    if row is not None:
        return row.id
    return conn.execute(insert(jobs).values(name=report.job, created_ms=now)).inserted_primary_key[0]


class ReporterConflict(Exception):
    """The report's ``reporter.id`` is bound to another job or another token (HTTP 403)."""


def _register_reporter(conn: Connection, job_id: int, report: Report, now: int, token: str | None = None) -> bool:
    """Record the reporter's counters; False if this (reporter, seq) was already applied.

    A reporter is bound to its job and to the token of its first report (None: anonymous), so no
    other caller can advance its sequence (and make its later reports look like duplicates)."""
    r = report.reporter
    c = reporters.c
    # the common case in one statement: a known reporter of this job and token, with a newer seq (the
    # WHERE is re-checked under the row lock, so concurrent retries of one seq apply it once)
    params = {"p_id": r.id, "p_job": job_id, "p_seq": r.seq, "p_now": now, "p_dropped": r.dropped_total,
              "p_orphaned": r.orphaned_total, "p_tasks": report.folded_tasks}
    if token is not None:
        params["p_token"] = token
    advanced = conn.execute(_statement("advance_reporter", token is None), params)
    if advanced.rowcount == 1:
        return True
    row = conn.execute(select(reporters).where(reporters.c.id == r.id).with_for_update()).first()
    if row is None:
        conn.execute(insert(reporters).values(
            id=r.id, job_id=job_id, last_seq=r.seq, dropped_total=r.dropped_total,
            orphaned_total=r.orphaned_total, reports_total=1, tasks_total=report.folded_tasks,
            first_ms=now, last_ms=now, token_name=token))
        return True
    if row.job_id != job_id or row.token_name != token:
        raise ReporterConflict(f"reporter.id: {r.id!r} is bound to another "
                               f"{'job' if row.job_id != job_id else 'token'}")
    if r.seq <= row.last_seq:
        return False
    conn.execute(update(reporters).where(reporters.c.id == r.id).values(
        last_seq=r.seq, last_ms=now,
        dropped_total=max(row.dropped_total, r.dropped_total),
        orphaned_total=max(row.orphaned_total, r.orphaned_total),
        reports_total=row.reports_total + 1, tasks_total=row.tasks_total + report.folded_tasks))
    return True


def _ensure_templates(conn: Connection, job_id: int, report: Report, now: int) -> dict[str, int]:
    described = {t.key: t for t in report.templates}
    keys = set(described) | template_keys(report)
    if not keys:
        return {}
    existing = {r.key: r for r in conn.execute(_statement("templates"), {"p_job": job_id, "p_keys": sorted(keys)})}
    ids: dict[str, int] = {}
    touched = []  # templates whose only change is last_ms: one statement for all of them
    for key in keys:
        d = described.get(key)
        row = existing.get(key)
        if row is None:
            values = dict(job_id=job_id, key=key, name=d.name if d else key, ordinal=d.ordinal if d else None,
                          operators=list(d.operators) if d else [], parents=list(d.parents) if d else [],
                          first_ms=now, last_ms=now)
            ids[key] = conn.execute(insert(template_vertices).values(**values)).inserted_primary_key[0]
        else:
            ids[key] = row.id
            values = {"last_ms": now}
            if d is not None and (row.name != d.name or row.ordinal != d.ordinal or row.parents != list(d.parents)):
                values.update(name=d.name, ordinal=d.ordinal, operators=list(d.operators), parents=list(d.parents))
            if len(values) > 1:
                conn.execute(update(template_vertices).where(template_vertices.c.id == row.id).values(**values))
            elif row.last_ms < now - 1000:
                touched.append({"_id": row.id, "last_ms": now})
    update_rows(conn, template_vertices, sorted(touched, key=itemgetter("_id")))
    return ids


def _ensure_runtime_vertices(conn: Connection, pairs: set[tuple[int, int]]) -> dict[tuple[int, int], list]:
    """Map (template_id, partition) → [runtime_vertex_id, last_launch_ms]."""
    out: dict[tuple[int, int], list] = {}
    if not pairs:
        return out
    # one statement for every template of the report (a superset of the pairs, filtered here)
    tids, parts = sorted({tid for tid, _ in pairs}), sorted({part for _, part in pairs})
    for r in conn.execute(_statement("runtime_vertices"), {"p_tids": tids, "p_parts": parts}):
        if (r.template_id, r.partition) in pairs:
            out[(r.template_id, r.partition)] = [r.id, r.last_launch_ms]
    for pair in sorted(pairs - set(out)):
        rid = conn.execute(insert(runtime_vertices).values(template_id=pair[0], partition=pair[1])).inserted_primary_key[0]
        out[pair] = [rid, None]
    return out


def template_keys(report: Report) -> set[str]:
    """The template keys a report's records refer to (besides those it describes)."""
    return ({s.template_key for s in report.stages} | {t.template_key for t in report.tasks}
            | {w.template_key for w in report.runtime_windows} | {w.template_key for w in report.template_windows})


#: (moment, its n, mean, M2, min and max columns) of a runtime window
_RUNTIME_MOMENT_COLUMNS = tuple((name, f"{name}_n", f"{name}_mean", f"{name}_m2", f"{name}_min", f"{name}_max")
                                for name in RUNTIME_MOMENTS)
_WINDOW_KEY = ("runtime_vertex_id", "window_start_ms")
#: a task row as stored: the wire record's fields (without its template key), whether it is in the uniform
#: sample, then where it belongs
_TASK_FIELDS = tuple(f for f in TaskRecord.model_fields if f != "template_key")
_TASK_COLUMNS = (*_TASK_FIELDS, "sampled", "job_id", "template_id", "runtime_vertex_id", "app_id")
_task_values = itemgetter(*_TASK_FIELDS)
#: how a stored runtime window absorbs the same window of a new report (aggregators.welford)
_WINDOW_MERGE = tuple(
    [(c, sql_saturating_sum(c, "runtime_windows", "excluded", INT64_MAX)) for c in ("tasks", "failed_tasks", *RUNTIME_SUMS)]
    + [item for name in RUNTIME_MOMENTS for item in sql_merge(name, "runtime_windows", "excluded").items()]
    + [(f"{name}_{end}", sql_extreme(f"{name}_{end}", "runtime_windows", "excluded", end))
       for name in RUNTIME_MOMENTS for end in ("min", "max")])


def task_row(t: TaskRecord, job_id: int, template_id: int, runtime_vertex_id: int, app_id: str) -> tuple:
    """A task row as stored (``_TASK_COLUMNS``)."""
    d = t.__dict__  # a flat model: its fields as stored (model_dump costs ~8 µs per task)
    return (*_task_values(d), sampled(t.task_id), job_id, template_id, runtime_vertex_id, app_id)


def window_row(runtime_vertex_id: int, template_id: int, window_start_ms: int, window_ms: int, w) -> dict:
    """A runtime window row (flat columns) of a window record (``policies.task_fold`` / the wire's
    ``RuntimeWindowRecord``, a dict or a model): sums saturated at 2⁶³ − 1, moments as columns."""
    get = w.get if isinstance(w, dict) else w.__dict__.get
    values = {"runtime_vertex_id": runtime_vertex_id, "template_id": template_id, "window_start_ms": window_start_ms,
              "window_ms": window_ms, "tasks": get("tasks"), "failed_tasks": get("failed_tasks")}
    for name in RUNTIME_SUMS:
        values[name] = min(get(name), INT64_MAX)
    for name, n_col, mean_col, m2_col, min_col, max_col in _RUNTIME_MOMENT_COLUMNS:
        m = get(name)
        m = m if isinstance(m, dict) else m.__dict__
        values[n_col], values[mean_col], values[m2_col] = m["n"], float(m["mean"]), float(m["m2"])
        values[min_col] = None if m["min"] is None else float(m["min"])
        values[max_col] = None if m["max"] is None else float(m["max"])
    return values


def template_window_row(template_id: int, window_start_ms: int, window_ms: int, w) -> dict:
    """A template window row (flat columns) of a template-window record (``policies.task_fold.template_window``, a
    dict, or the wire's ``TemplateWindowRecord``): its stage part, its task part as :func:`window_row`'s, the
    partitions and the busiest one's run time."""
    get = w.get if isinstance(w, dict) else w.__dict__.get
    values = window_row(0, template_id, window_start_ms, window_ms, w)
    del values["runtime_vertex_id"]
    values.update(stages=get("stages"), max_num_tasks=get("max_num_tasks"), max_slots=get("max_slots"),
                  partitions=get("partitions"), max_vertex_run_time_ms=min(get("max_vertex_run_time_ms"), INT64_MAX))
    for name in TEMPLATE_MOMENTS:
        m = get(name)
        m = m if isinstance(m, dict) else m.__dict__
        values.update({f"{name}_n": m["n"], f"{name}_mean": float(m["mean"]), f"{name}_m2": float(m["m2"])})
    return values


def _fold_tasks(conn: Connection, job_id: int, report: Report, template_ids: dict[str, int],
                window_ms: int) -> tuple[int, dict]:
    """Store the report's task rows and the runtime windows it sent (v3) or folds (v1/v2); returns the tasks it
    accounts for and, for v1/v2, the task parts of its template windows (``(template id, window start) → record``,
    merged over partitions as a v3 reporter merges them)."""
    app_id = report.reporter.app_id or ""
    pairs = {(template_ids[t.template_key], t.partition) for t in report.tasks}
    pairs |= {(template_ids[w.template_key], w.partition) for w in report.runtime_windows}
    rvs = _ensure_runtime_vertices(conn, pairs)
    rows = [task_row(t, job_id, template_ids[t.template_key], rvs[(template_ids[t.template_key], t.partition)][0],
                     app_id) for t in sorted(report.tasks, key=lambda t: t.launch_ms)]
    insert_tuples(conn, tasks, _TASK_COLUMNS, rows)
    if report.schema_version >= 3:
        rows_w = [window_row(rvs[(template_ids[w.template_key], w.partition)][0], template_ids[w.template_key],
                             w.window_start_ms, window_ms, w) for w in report.runtime_windows]
        rows_w.sort(key=itemgetter(*_WINDOW_KEY))
        upsert_rows(conn, runtime_windows, rows_w, _WINDOW_KEY, _WINDOW_MERGE)
        return report.folded_tasks, {}
    last = {pair: rv[1] for pair, rv in rvs.items()}  # (template id, partition) → its last launch
    windows, parts = fold_tasks((t.__dict__ for t in report.tasks), window_ms, last,
                         lambda t: (template_ids[t["template_key"]], t["partition"]))
    update_rows(conn, runtime_vertices, sorted(({"_id": rvs[pair][0], "last_launch_ms": launch}
                                                for pair, launch in last.items() if launch is not None),
                                               key=itemgetter("_id")))
    # in key order: concurrent reports lock shared windows in the same order; one upsert: new windows inserted,
    # stored ones merged in the database (Chan's merge, sums saturated)
    upsert_rows(conn, runtime_windows, [window_row(rvs[key[0]][0], key[0][0], key[1], window_ms, windows[key])
                                        for key in sorted(windows, key=lambda k: (rvs[k[0]][0], k[1]))],
                _WINDOW_KEY, _WINDOW_MERGE)
    return len(rows), parts


_TEMPLATE_KEY = ("template_id", "window_start_ms")
#: how a stored template window absorbs the same window of a new report (aggregators.welford)
_TEMPLATE_MERGE = (
    ("stages", "template_windows.stages + excluded.stages"),
    ("max_num_tasks", "CASE WHEN excluded.max_num_tasks > template_windows.max_num_tasks "
                      "THEN excluded.max_num_tasks ELSE template_windows.max_num_tasks END"),
    ("max_slots", "CASE WHEN COALESCE(excluded.max_slots, 0) > COALESCE(template_windows.max_slots, 0) "
                  "THEN excluded.max_slots WHEN COALESCE(template_windows.max_slots, 0) = 0 THEN NULL "
                  "ELSE template_windows.max_slots END"),
    *[item for name in TEMPLATE_MOMENTS for item in sql_merge(name, "template_windows", "excluded").items()],
    *[(c, sql_saturating_sum(c, "template_windows", "excluded", INT64_MAX)) for c in ("tasks", "failed_tasks", *RUNTIME_SUMS)],
    *[item for name in RUNTIME_MOMENTS for item in sql_merge(name, "template_windows", "excluded").items()],
    *[(f"{name}_{end}", sql_extreme(f"{name}_{end}", "template_windows", "excluded", end))
      for name in RUNTIME_MOMENTS for end in ("min", "max")],
    *[(c, sql_extreme(c, "template_windows", "excluded", "max")) for c in ("partitions", "max_vertex_run_time_ms")])


def fold_stage(merged: dict, tid: int, s, launches: list[int], window_ms: int) -> None:
    """Fold completed stage run ``s`` of template ``tid`` into ``merged`` (template-window records keyed
    ``(template id, window start ms)``): ``policies.task_fold.stage_window`` of its task launches
    (``launches``, epoch ms, sorted), merged in report order."""
    key = (tid, _window(s.completion_ms, window_ms))
    rec = template_window(None, stage_window(s.__dict__, launches), 0, 0)
    merged[key] = rec if key not in merged else merge_template_window(merged[key], rec)


_VERTEX_RUNS = (select(runtime_windows.c.template_id, runtime_windows.c.window_start_ms,
                       func.count().label("partitions"), func.max(runtime_windows.c.run_time_ms).label("busiest"))
                .where(runtime_windows.c.template_id.in_(bindparam("p_tids", expanding=True)),
                       runtime_windows.c.window_start_ms.in_(bindparam("p_starts", expanding=True)))
                .group_by(runtime_windows.c.template_id, runtime_windows.c.window_start_ms))


def template_rows(conn: Connection, parts: dict, stage_parts: dict, window_ms: int) -> list[dict]:
    """The template window rows of a v1/v2 report (or batch of them), in key order: the task parts (``parts``,
    ``policies.task_fold.fold_tasks``: its tasks merged over the partitions) and stage parts (``stage_parts``,
    :func:`fold_stage`) of each window, with the partitions and the busiest one's run time read from the runtime
    windows as stored now (after the report's)."""
    keys = sorted(set(parts) | set(stage_parts))
    if not keys:
        return []
    runs = {(r.template_id, r.window_start_ms): r for r in conn.execute(
        _VERTEX_RUNS, {"p_tids": sorted({k[0] for k in keys}), "p_starts": sorted({k[1] for k in keys})})}
    out = []
    for key in keys:
        r = runs.get(key)
        rec = template_window(parts.get(key), None, r.partitions if r else 0, r.busiest if r else 0)
        if key in stage_parts:
            rec = merge_template_window(rec, stage_parts[key])
        out.append(template_window_row(key[0], key[1], window_ms, rec))
    return out


def _fold_stages(conn: Connection, job_id: int, report: Report, template_ids: dict[str, int], window_ms: int,
                 parts: dict) -> int:
    """Store new stage runs and merge the report's template windows (v3: as sent; v1/v2: its task parts ``parts``
    and its newly completed stage runs folded), with a fixed number of statements per report (not per stage): one
    insert of the runs not stored yet (``ON CONFLICT DO NOTHING``, returning the new ones), for v1/v2 one read of
    the task launches of every newly completed stage and one of the runtime windows' partitions, one upsert of the
    template windows (merged in the database, like the runtime windows)."""
    new = set()
    app_id = report.reporter.app_id or ""
    by_key = {}
    if report.stages:
        rows, seen = [], set()
        for s in report.stages:
            if (s.stage_id, s.attempt) in seen:
                continue
            seen.add((s.stage_id, s.attempt))
            values = dict(s.__dict__)
            del values["template_key"]
            tid = template_ids[s.template_key]
            rows.append(dict(job_id=job_id, template_id=tid, app_id=app_id, **values))
            by_key[(s.stage_id, s.attempt)] = (tid, s)
        new = insert_new_rows(conn, stage_runs, rows, ("job_id", "app_id", "stage_id", "attempt"),
                              ("stage_id", "attempt"))
    if report.schema_version >= 3:
        rows_t = [template_window_row(template_ids[w.template_key], w.window_start_ms, window_ms, w)
                  for w in report.template_windows]
        upsert_rows(conn, template_windows, sorted(rows_t, key=itemgetter(*_TEMPLATE_KEY)), _TEMPLATE_KEY,
                    _TEMPLATE_MERGE)
        return len(new)
    done = [by_key[k] for k in by_key if k in new and completed(by_key[k][1].__dict__)]
    launches: dict[tuple[int, int], list[int]] = defaultdict(list)
    wanted = [(s.stage_id, s.attempt) for _tid, s in done]
    for chunk in range(0, len(wanted), 400):
        for r in conn.execute(_statement("stage_launches"),
                              {"p_job": job_id, "p_app": app_id, "p_stages": wanted[chunk:chunk + 400]}):
            launches[(r.stage_id, r.stage_attempt)].append(r.launch_ms)
    merged: dict[tuple[int, int], dict] = {}
    for tid, s in done:  # in report order; the stored window absorbs their merge in the database
        fold_stage(merged, tid, s, launches.get((s.stage_id, s.attempt), []), window_ms)
    upsert_rows(conn, template_windows, template_rows(conn, parts, merged, window_ms), _TEMPLATE_KEY, _TEMPLATE_MERGE)
    return len(new)


_SPAN_KEY = ("job_id", "app_id", "query_id", "batch_id")
#: a stored span absorbs a new one: the earliest launch, the latest finish
_SPAN_MERGE = (("first_launch_ms", "CASE WHEN excluded.first_launch_ms < task_spans.first_launch_ms "
                                   "THEN excluded.first_launch_ms ELSE task_spans.first_launch_ms END"),
               ("last_finish_ms", "CASE WHEN excluded.last_finish_ms > task_spans.last_finish_ms "
                                  "THEN excluded.last_finish_ms ELSE task_spans.last_finish_ms END"))


def span_rows(job_id: int, report: Report) -> list[dict]:
    """The task-span rows of a v3 report (``task_spans``), one per micro-batch, in key order."""
    app_id = report.reporter.app_id or ""
    merged: dict[tuple, dict] = {}
    for sp in report.task_spans:
        key = (job_id, app_id, sp.query_id, sp.batch_id)
        row = merged.get(key)
        if row is None:
            merged[key] = {"job_id": job_id, "app_id": app_id, "query_id": sp.query_id, "batch_id": sp.batch_id,
                           "first_launch_ms": sp.first_launch_ms, "last_finish_ms": sp.last_finish_ms}
        else:
            row["first_launch_ms"] = min(row["first_launch_ms"], sp.first_launch_ms)
            row["last_finish_ms"] = max(row["last_finish_ms"], sp.last_finish_ms)
    return [merged[k] for k in sorted(merged)]


def store_spans(conn: Connection, rows: list[dict]) -> None:
    """Upsert task-span rows (:func:`span_rows`), the earliest launch and latest finish winning."""
    upsert_rows(conn, task_spans, rows, _SPAN_KEY, _SPAN_MERGE)


def _store_batches(conn: Connection, job_id: int, report: Report, job_run_id: str | None = None) -> int:
    if not report.batches:
        return 0
    rows = [dict(job_id=job_id, job_run_id=job_run_id, **b.model_dump()) for b in report.batches]
    # one statement: batches already stored (a retried report, an overlapping one) are skipped
    return len(insert_new_rows(conn, batches, rows, ("job_id", "run_id", "batch_id"), ("run_id", "batch_id")))


def job_values(report: Report, now: int) -> dict:
    """The job columns a report sets (its reporter's state), in a fixed order: the job update statement is
    built once per set of columns (``_statement("job_update", ...)``)."""
    r = report.reporter
    values = {"last_report_ms": now, "not_actuatable": dict(r.not_actuatable)}
    if r.slots is not None:
        values["slots"] = r.slots
    if r.executors is not None:
        values["executors"] = r.executors
    if r.knob_state:
        values["knob_state"] = dict(r.knob_state)
    if r.attachment is not None:
        values["attachment"] = r.attachment.model_dump(mode="json")
    if r.app_id:
        values.update(app_id=r.app_id, master=r.master)
    if r.task_detail is not None:
        values["task_detail"] = r.task_detail
    return values


def ingest_report(conn: Connection, report: Report, window_ms: int = DEFAULT_WINDOW_MS,
                  token: str | None = None, now_ms: int | None = None) -> IngestResult:
    """Store ``report`` using ``conn`` (the caller owns the transaction); ``token``: the name of the
    caller's token (None: anonymous), to which the reporter is bound (``ReporterConflict``).

    ``now_ms`` (ms since the epoch): the time the bookkeeping columns record — the job's creation and
    last report, the reporter's first/last report, the templates' first/last seen, the run's first/last
    report, partition and query-state arrival, directive acknowledgements; default the control plane's
    wall clock. A replay passes the log's time (``api.replay``), so an imported run keeps the log's
    clock throughout."""
    now = _now_ms() if now_ms is None else int(now_ms)
    job_id = _ensure_job(conn, report, now)
    if not _register_reporter(conn, job_id, report, now, token):
        return IngestResult(job_id, duplicate=True)
    job_run_id = touch_run(conn, job_id, report, now)  # aggregators.runs: one run per application
    template_ids = _ensure_templates(conn, job_id, report, now)
    result = IngestResult(job_id)
    parts: dict = {}
    if report.tasks or report.runtime_windows:
        result.tasks, parts = _fold_tasks(conn, job_id, report, template_ids, window_ms)
    if report.schema_version >= 3:
        result.tasks = report.folded_tasks
    result.stages = _fold_stages(conn, job_id, report, template_ids, window_ms, parts)
    if report.task_spans:
        store_spans(conn, span_rows(job_id, report))
    result.batches = _store_batches(conn, job_id, report, job_run_id)
    store_partition_stats(conn, job_id, report, now)
    store_query_states(conn, job_id, report, now)
    if report.executors:  # registration times for the provisioning delay (aggregators.cluster_profile)
        record_executor_events(conn, job_id, job_run_id, [e.model_dump() for e in report.executors])
    if report.reporter.applied:
        apply_acks(conn, job_id, list(report.reporter.applied), now)
    values = job_values(report, now)
    conn.execute(_statement("job_update", tuple(values)), {"p_job_id": job_id, **{f"p_{k}": v for k, v in values.items()}})
    return result
