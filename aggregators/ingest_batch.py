"""Apply several validated reports in one transaction (group commit, issue #16).

``ingest_reports`` stores a batch of reports with the same result as ``aggregators.ingest.ingest_report``
applied to each of them in order, in one transaction owned by the caller; ``current_directives_of`` reads
the pending directives of every job of the batch.

A report that cannot be applied (``ReporterConflict``: its reporter is bound to another job or token)
raises ``BatchItemError`` naming its index: the caller rolls the transaction back and applies the batch
again without it (``api.ingest_queue``), so one bad report never costs the others their answer.

The reports of one batch must have distinct ``reporter.id`` (a reporter sends one report at a time and
waits for its answer, so this holds for every well-behaved reporter; ``api.ingest_queue`` defers a
second report of the same reporter to the next batch).

Cost: the statements of about ONE report for the whole batch, whatever the number of reports — one read of
the jobs by name, one conditional advance of every reporter (PostgreSQL: ``UPDATE … FROM unnest(…) RETURNING``;
the reporters it did not advance, new, duplicate or conflicting, are then read once), one read and one update of
the runs (``aggregators.runs.touch_runs``), of the templates and of the runtime vertices of every job, one insert
of the new stage runs, one read of the earlier task launches of the newly completed stages, one COPY of all task
rows, one upsert of the runtime windows and one of the template windows, one insert of the new micro-batches, of
the query states and of the partition statistics, one update of the jobs. Rare parts stay per report, in order:
executor events (``aggregators.cluster_profile.record_executor_events``), directive acknowledgements
(``aggregators.directives.apply_acks``), a template whose description changed; new jobs, runs, templates and
runtime vertices (a job's first reports) are inserted in one statement per table.

Equivalence with ``ingest_report`` one report after the other (tests/integration/test_ingest_batch.py), every
table, ids included:

* state that a report reads and the next one changes (a runtime vertex's last launch — the interarrival times
  of thesis §4.4.1 —, a run's or a template's last report time, a template's description, the first report
  of a stage run or micro-batch) is carried from report to report in Python, in batch order, and written once;
* windows of several reports with the same key are merged in Python with Chan et al.'s exact merge
  (``policies.moments.Moments.merge``, thesis §4.4.1, digest §2.4) before the one upsert that merges them
  into the stored window, so the moments equal the one-by-one result up to rounding (the merge order differs);
  counts and sums are exact (saturated at 2⁶³ − 1 as one by one);
* the task launches of a stage completed by report k are those stored before the batch (read before the
  batch's tasks are copied) plus those of reports 1…k of the batch, as one by one;
* rows are inserted in batch order (report by report, and within a report in ``ingest_report``'s order), and
  every row ``ingest_report`` sends is sent (``ON CONFLICT DO NOTHING`` consumes a sequence value on
  PostgreSQL even for a row it skips), so generated ids are the same too.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from functools import lru_cache
from operator import itemgetter
from typing import Optional, Sequence

from sqlalchemy import bindparam, insert, select, update
from sqlalchemy.engine import Connection

from spark_governor.aggregators.bulk import insert_new_rows, insert_tuples, update_rows, upsert_rows
from spark_governor.aggregators.cluster_profile import record_executor_events
from spark_governor.aggregators.directives import apply_acks, directive_dict
from spark_governor.aggregators.ingest import (_TASK_COLUMNS, _TEMPLATE_KEY, _TEMPLATE_MERGE, _WINDOW_KEY,
                                               _WINDOW_MERGE, DEFAULT_WINDOW_MS, IngestResult, ReporterConflict,
                                               _now_ms, _statement, fold_stage, job_values, span_rows, store_spans,
                                               task_row, template_keys, template_rows, template_window_row,
                                               window_row)
from spark_governor.aggregators.liveness import query_state_rows
from spark_governor.aggregators.models import (batches, directives, jobs, partition_stats, query_states, reporters,
                                               runtime_vertices, runtime_windows, stage_runs, tasks, template_vertices,
                                               template_windows)
from spark_governor.aggregators.partitions import partition_rows
from spark_governor.aggregators.runs import touch_runs
from spark_governor.policies.task_fold import (RUNTIME_MOMENTS, RUNTIME_SUMS, TEMPLATE_MOMENTS, completed, fold_tasks,
                                               merge_runtime_window, merge_template_window)
from spark_governor.policies.wire import Report


@dataclass
class Pending:
    """One report of a batch: the validated report, the name of the caller's token (None: anonymous) and
    the bookkeeping time in ms since the epoch (None: the wall clock, see ``ingest_report``)."""
    report: Report
    token: Optional[str] = None
    now_ms: Optional[int] = None


class BatchItemError(Exception):
    """The report at ``index`` of the batch cannot be applied (``cause``: the ``ReporterConflict``)."""

    def __init__(self, index: int, cause: Exception):
        super().__init__(f"report {index} of the batch: {cause}")
        self.index = index
        self.cause = cause


@dataclass
class _Item:
    """An accepted (not duplicate) report of the batch and what ingest learns about it on the way."""
    index: int
    report: Report
    job_id: int
    now: int
    app_id: str = ""
    run_id: str = ""
    template_ids: Optional[dict] = None


# -- statements, built once (see aggregators.ingest on SQLAlchemy's compiled cache) --------------------------
_JOBS = select(jobs.c.id, jobs.c.name).where(jobs.c.name.in_(bindparam("p_names", expanding=True)))
_REPORTERS = select(reporters).where(reporters.c.id.in_(bindparam("p_ids", expanding=True))).with_for_update()
_TEMPLATES = select(template_vertices).where(template_vertices.c.job_id.in_(bindparam("p_jobs", expanding=True)),
                                             template_vertices.c.key.in_(bindparam("p_keys", expanding=True)))
_RUNTIME_VERTICES = select(runtime_vertices.c.id, runtime_vertices.c.template_id, runtime_vertices.c.partition,
                           runtime_vertices.c.last_launch_ms).where(
    runtime_vertices.c.template_id.in_(bindparam("p_tids", expanding=True)),
    runtime_vertices.c.partition.in_(bindparam("p_parts", expanding=True))).order_by(
    runtime_vertices.c.id).with_for_update()  # locked in id order: concurrent batches of one job cannot deadlock
#: a superset of the stage attempts wanted (each column in its list: the index on (job, app, stage, attempt)
#: serves it on SQLite and PostgreSQL, where a 4-column row-value IN made SQLite scan), filtered in Python
_LAUNCHES = select(tasks.c.job_id, tasks.c.app_id, tasks.c.stage_id, tasks.c.stage_attempt, tasks.c.launch_ms).where(
    tasks.c.job_id.in_(bindparam("p_jobs", expanding=True)), tasks.c.app_id.in_(bindparam("p_apps", expanding=True)),
    tasks.c.stage_id.in_(bindparam("p_stages", expanding=True)),
    tasks.c.stage_attempt.in_(bindparam("p_attempts", expanding=True)))
_DIRECTIVES = select(directives).where(directives.c.job_id.in_(bindparam("p_jobs", expanding=True))).order_by(
    directives.c.job_id, directives.c.knob)
_REPORTER_UPDATE = update(reporters).where(reporters.c.id == bindparam("_id")).values(
    {k: bindparam(k) for k in ("last_seq", "last_ms", "dropped_total", "orphaned_total", "reports_total", "tasks_total")})
#: PostgreSQL: advance every known reporter of its job and token whose seq is newer, in one statement (the
#: WHERE is re-checked under each row's lock, as ``ingest._register_reporter``'s)
_PG_ADVANCE = (
    "UPDATE reporters AS r SET last_seq = v.seq, last_ms = v.now, "
    "dropped_total = CASE WHEN r.dropped_total > v.dropped THEN r.dropped_total ELSE v.dropped END, "
    "orphaned_total = CASE WHEN r.orphaned_total > v.orphaned THEN r.orphaned_total ELSE v.orphaned END, "
    "reports_total = r.reports_total + 1, tasks_total = r.tasks_total + v.tasks "
    "FROM unnest(%b::varchar[], %b::integer[], %b::varchar[], %b::bigint[], %b::bigint[], %b::bigint[], "
    "%b::bigint[], %b::bigint[]) AS v(id, job_id, token, seq, now, dropped, orphaned, tasks) "
    "WHERE r.id = v.id AND r.job_id = v.job_id AND r.token_name IS NOT DISTINCT FROM v.token "
    "AND r.last_seq < v.seq RETURNING r.id")


@lru_cache(maxsize=8)
def _insert_returning_ids(table):
    return insert(table).returning(table.c.id, sort_by_parameter_order=True)


def _insert_ids(conn: Connection, table, rows: list[dict]) -> list[int]:
    """INSERT ``rows`` in one statement; their new ids, in order."""
    if not rows:
        return []
    if len(rows) == 1:
        return [conn.execute(insert(table).values(**rows[0])).inserted_primary_key[0]]
    return [r[0] for r in conn.execute(_insert_returning_ids(table), rows)]


# -- jobs and reporters ----------------------------------------------------------------------------------
def _ensure_jobs(conn: Connection, items: Sequence[Pending], nows: list[int]) -> list[int]:
    """The job id of each item; new jobs are created (``created_ms``: their first report's time)."""
    first: dict[str, int] = {}
    for it, now in zip(items, nows):
        first.setdefault(it.report.job, now)
    ids = {r.name: r.id for r in conn.execute(_JOBS, {"p_names": list(first)})}
    new = [name for name in first if name not in ids]
    ids.update(zip(new, _insert_ids(conn, jobs, [{"name": n, "created_ms": first[n]} for n in new])))
    return [ids[it.report.job] for it in items]


def _register_reporters(conn: Connection, items: Sequence[Pending], job_ids: list[int], nows: list[int]) -> list[bool]:
    """``ingest._register_reporter`` for every item: False for a duplicate; ``BatchItemError`` for the first
    item (by index) whose reporter is bound to another job or token."""
    reps = [it.report.reporter for it in items]
    advanced: set[str] = set()
    if conn.dialect.name == "postgresql":
        arrays = ([r.id for r in reps], job_ids, [it.token for it in items], [r.seq for r in reps], nows,
                  [r.dropped_total for r in reps], [r.orphaned_total for r in reps],
                  [it.report.folded_tasks for it in items])
        advanced = {row[0] for row in conn.exec_driver_sql(_PG_ADVANCE, tuple(list(a) for a in arrays))}
    rest = [i for i, r in enumerate(reps) if r.id not in advanced]
    accepted = [True] * len(items)
    if not rest:
        return accepted
    # the reporters not advanced yet (all of them on SQLite, a single writer: no race to re-check)
    stored = {row.id: row for row in conn.execute(_REPORTERS, {"p_ids": [reps[i].id for i in rest]})}
    new_rows, updates = [], []
    for i in rest:
        r, it, now = reps[i], items[i], nows[i]
        row = stored.get(r.id)
        if row is None:
            new_rows.append(dict(id=r.id, job_id=job_ids[i], last_seq=r.seq, dropped_total=r.dropped_total,
                                 orphaned_total=r.orphaned_total, reports_total=1,
                                 tasks_total=it.report.folded_tasks,
                                 first_ms=now, last_ms=now, token_name=it.token))
        elif row.job_id != job_ids[i] or row.token_name != it.token:
            raise BatchItemError(i, ReporterConflict(
                f"reporter.id: {r.id!r} is bound to another {'job' if row.job_id != job_ids[i] else 'token'}"))
        elif r.seq <= row.last_seq:
            accepted[i] = False
        else:
            updates.append({"_id": r.id, "last_seq": r.seq, "last_ms": now,
                            "dropped_total": max(row.dropped_total, r.dropped_total),
                            "orphaned_total": max(row.orphaned_total, r.orphaned_total),
                            "reports_total": row.reports_total + 1,
                            "tasks_total": row.tasks_total + it.report.folded_tasks})
    if updates:
        conn.execute(_REPORTER_UPDATE, updates)
    if new_rows:
        conn.execute(insert(reporters), new_rows)
    return accepted


# -- templates and runtime vertices ----------------------------------------------------------------------
def _ensure_templates(conn: Connection, accepted: list[_Item]) -> None:
    """``ingest._ensure_templates`` for every item in order (sets ``item.template_ids``)."""
    wanted = []
    for item in accepted:
        r = item.report
        described = {t.key: t for t in r.templates}
        # the same set, built the same way, as ingest_report: new templates are inserted in its iteration order
        keys = set(described) | template_keys(r)
        wanted.append((item, described, keys))
    all_keys = sorted({k for _i, _d, keys in wanted for k in keys})
    if not all_keys:
        for item in accepted:
            item.template_ids = {}
        return
    state: dict[tuple[int, str], dict] = {}  # (job, key) -> the row as it stands after the reports so far
    for row in conn.execute(_TEMPLATES, {"p_jobs": sorted({i.job_id for i in accepted}), "p_keys": all_keys}):
        state[(row.job_id, row.key)] = {"_id": row.id, "name": row.name, "ordinal": row.ordinal,
                                        "operators": row.operators, "parents": row.parents, "last_ms": row.last_ms,
                                        "_change": None}
    new: list[dict] = []
    for item, described, keys in wanted:
        now = item.now
        for key in keys:
            d = described.get(key)
            row = state.get((item.job_id, key))
            if row is None:
                row = dict(job_id=item.job_id, key=key, name=d.name if d else key, ordinal=d.ordinal if d else None,
                           operators=list(d.operators) if d else [], parents=list(d.parents) if d else [],
                           first_ms=now, last_ms=now)
                state[(item.job_id, key)] = row
                new.append(row)
            elif d is not None and (row["name"] != d.name or row["ordinal"] != d.ordinal
                                    or row["parents"] != list(d.parents)):
                row.update(name=d.name, ordinal=d.ordinal, operators=list(d.operators), parents=list(d.parents),
                           last_ms=now)
                if "_id" in row:
                    row["_change"] = "description"
            elif row["last_ms"] < now - 1000:
                row["last_ms"] = now
                if "_id" in row and row["_change"] is None:
                    row["_change"] = "touch"
    for row, rid in zip(new, _insert_ids(conn, template_vertices, new)):
        row["_id"] = rid
    touched = []
    for row in sorted((r for r in state.values() if r.get("_change")), key=itemgetter("_id")):
        if row["_change"] == "touch":
            touched.append({"_id": row["_id"], "last_ms": row["last_ms"]})
        else:  # rare: a template renamed or re-parented
            conn.execute(update(template_vertices).where(template_vertices.c.id == row["_id"]).values(
                name=row["name"], ordinal=row["ordinal"], operators=row["operators"], parents=row["parents"],
                last_ms=row["last_ms"]))
    update_rows(conn, template_vertices, touched)
    for item, _d, keys in wanted:
        item.template_ids = {k: state[(item.job_id, k)]["_id"] for k in keys}


def _ensure_runtime_vertices(conn: Connection, accepted: list[_Item]) -> dict[tuple[int, int], list]:
    """(template_id, partition) → [runtime_vertex_id, last_launch_ms] for every task of the batch; new ones are
    inserted as ``ingest_report`` would, report by report (each report's new pairs in sorted order)."""
    per_report = [{(item.template_ids[t.template_key], t.partition) for t in item.report.tasks}
                  | {(item.template_ids[w.template_key], w.partition) for w in item.report.runtime_windows}
                  for item in accepted]
    pairs = set().union(*per_report) if per_report else set()
    out: dict[tuple[int, int], list] = {}
    if not pairs:
        return out
    for r in conn.execute(_RUNTIME_VERTICES, {"p_tids": sorted({t for t, _ in pairs}),
                                               "p_parts": sorted({p for _, p in pairs})}):
        if (r.template_id, r.partition) in pairs:
            out[(r.template_id, r.partition)] = [r.id, r.last_launch_ms]
    new: list[tuple[int, int]] = []
    known = set(out)
    for report_pairs in per_report:
        fresh = sorted(report_pairs - known)
        new.extend(fresh)
        known.update(fresh)
    ids = _insert_ids(conn, runtime_vertices, [{"template_id": t, "partition": p} for t, p in new])
    for pair, rid in zip(new, ids):
        out[pair] = [rid, None]
    return out


# -- tasks and stages ------------------------------------------------------------------------------------
def _fold_tasks(accepted: list[_Item], rvs: dict, window_ms: int, results: list[IngestResult]):
    """``ingest._fold_tasks`` for every item, without its statements: the task rows in batch order, the
    runtime windows of the batch (each report's windows — sent by a v3 reporter, else folded here — merged in
    batch order), the runtime vertices' last launches ((template id, partition) → ms), the task parts of the v1/v2
    reports' template windows (merged in batch order) and, per stage attempt of the batch's v1/v2 reports, the task
    launches with the index of their report."""
    rows: list[tuple] = []
    windows: dict[tuple[int, int], dict] = {}
    parts: dict[tuple[int, int], dict] = {}
    launches: dict[tuple, list[tuple[int, int]]] = defaultdict(list)
    rv_template = {}
    last = {pair: rv[1] for pair, rv in rvs.items()}
    for item in accepted:
        report = item.report
        tids = item.template_ids
        n0 = len(rows)
        for t in sorted(report.tasks, key=lambda t: t.launch_ms):
            tid = tids[t.template_key]
            rid = rvs[(tid, t.partition)][0]
            rv_template[rid] = tid
            rows.append(task_row(t, item.job_id, tid, rid, item.app_id))
            if report.schema_version < 3:
                launches[(item.job_id, item.app_id, t.stage_id, t.stage_attempt)].append((item.index, t.launch_ms))
        if report.schema_version >= 3:
            results[item.index].tasks = report.folded_tasks
            mine = {}
            for w in report.runtime_windows:
                tid = tids[w.template_key]
                rid = rvs[(tid, w.partition)][0]
                rv_template[rid] = tid
                mine[(rid, w.window_start_ms)] = w.model_dump()
        else:
            results[item.index].tasks = len(rows) - n0
            folded, tasks_of = fold_tasks((t.__dict__ for t in report.tasks), window_ms, last,
                                          lambda t: (tids[t["template_key"]], t["partition"]))
            mine = {(rvs[pair][0], start): w for (pair, start), w in folded.items()}
            for key, w in tasks_of.items():
                parts[key] = w if key not in parts else merge_runtime_window(parts[key], w)
        for key, w in mine.items():  # this report's window as ingest_report would upsert it, merged into the
            stored = windows.get(key)  # same window of the batch's earlier reports as the upsert would merge it
            windows[key] = w if stored is None else merge_runtime_window(stored, w)
    # key order: concurrent transactions lock alike
    window_rows = [window_row(key[0], rv_template[key[0]], key[1], window_ms, windows[key]) for key in sorted(windows)]
    return rows, window_rows, launches, last, parts


def _store_stage_runs(conn: Connection, accepted: list[_Item], results: list[IngestResult]) -> list[tuple]:
    """Insert the stage runs not stored yet (one statement for the batch); returns the newly completed ones as
    (item, template id, stage record) of the v1/v2 reports (a v3 reporter folded its own), in batch order. A stage
    run sent by several reports is new for the first."""
    rows, owners = [], []
    for item in accepted:
        seen = set()
        for s in item.report.stages:
            if (s.stage_id, s.attempt) in seen:
                continue
            seen.add((s.stage_id, s.attempt))
            values = dict(s.__dict__)
            del values["template_key"]
            tid = item.template_ids[s.template_key]
            rows.append(dict(job_id=item.job_id, template_id=tid, app_id=item.app_id, **values))
            owners.append((item, tid, s))
    if not rows:
        return []
    new = insert_new_rows(conn, stage_runs, rows, ("job_id", "app_id", "stage_id", "attempt"),
                          ("job_id", "app_id", "stage_id", "attempt"))
    done = []
    for item, tid, s in owners:
        key = (item.job_id, item.app_id, s.stage_id, s.attempt)
        if key not in new:
            continue
        new.discard(key)  # the first report that sends it stored it
        results[item.index].stages += 1
        if item.report.schema_version < 3 and completed(s.__dict__):
            done.append((item, tid, s))
    return done


def _stored_launches(conn: Connection, completed: list[tuple]) -> dict[tuple, list[int]]:
    """Launch times of the tasks stored before the batch, per stage attempt of ``completed`` (read before the
    batch's own tasks are stored)."""
    out: dict[tuple, list[int]] = defaultdict(list)
    wanted = sorted({(item.job_id, item.app_id, s.stage_id, s.attempt) for item, _tid, s in completed})
    for chunk in range(0, len(wanted), 400):
        part = wanted[chunk:chunk + 400]
        keep = set(part)
        params = {f"p_{name}": sorted({w[k] for w in part}) for k, name in enumerate(("jobs", "apps", "stages", "attempts"))}
        for r in conn.execute(_LAUNCHES, params):
            key = (r.job_id, r.app_id, r.stage_id, r.stage_attempt)
            if key in keep:
                out[key].append(r.launch_ms)
    return out


def _template_windows(conn: Connection, accepted: list[_Item], completed: list[tuple], stored: dict,
                      batch_launches: dict, parts: dict, window_ms: int) -> list[dict]:
    """``ingest._fold_stages``'s template windows of the batch, merged in batch order: a v3 report's as it sent
    them; the v1/v2 reports' task parts (``parts``) and the stage parts folded from their newly completed stages (a
    stage completed by report k sees the launches stored before the batch and those of reports 1…k), with the
    partitions read from the runtime windows as stored after the batch's (``ingest.template_rows``)."""
    stage_parts: dict[tuple[int, int], dict] = {}
    by_item = defaultdict(list)
    for item, tid, s in completed:
        by_item[item.index].append((tid, s))
    sent: dict[tuple[int, int], dict] = {}
    for item in accepted:
        if item.report.schema_version >= 3:
            for w in item.report.template_windows:
                key = (item.template_ids[w.template_key], w.window_start_ms)
                rec = w.model_dump()
                sent[key] = rec if key not in sent else merge_template_window(sent[key], rec)
            continue
        for tid, s in by_item.get(item.index, ()):
            key4 = (item.job_id, item.app_id, s.stage_id, s.attempt)
            ls = sorted(stored.get(key4, []) + [ms for idx, ms in batch_launches.get(key4, ()) if idx <= item.index])
            fold_stage(stage_parts, tid, s, ls, window_ms)
    rows = {(r["template_id"], r["window_start_ms"]): r for r in template_rows(conn, parts, stage_parts, window_ms)}
    for key, rec in sent.items():
        row = template_window_row(key[0], key[1], window_ms, rec)
        if key in rows:  # a v1/v2 and a v3 report of the batch on one template window: both merged
            row = template_window_row(key[0], key[1], window_ms, merge_template_window(
                rec, _record_of(rows[key])))
        rows[key] = row
    return [rows[k] for k in sorted(rows)]


def _record_of(row: dict) -> dict:
    """A template window row back as a record (the rare batch with reports of both schemas on one window)."""
    out = {k: row[k] for k in ("stages", "max_num_tasks", "max_slots", "tasks", "failed_tasks", "partitions",
                               "max_vertex_run_time_ms", *RUNTIME_SUMS)}
    for name in (*RUNTIME_MOMENTS, *TEMPLATE_MOMENTS):
        out[name] = {"n": row[f"{name}_n"], "mean": row[f"{name}_mean"], "m2": row[f"{name}_m2"],
                     "min": row.get(f"{name}_min"), "max": row.get(f"{name}_max")}
    return out


def _store_batches(conn: Connection, accepted: list[_Item], results: list[IngestResult]) -> None:
    rows, owners = [], []
    for item in accepted:
        for b in item.report.batches:
            rows.append(dict(job_id=item.job_id, job_run_id=item.run_id, **b.model_dump()))
            owners.append((item, (item.job_id, b.run_id, b.batch_id)))
    if not rows:
        return
    new = insert_new_rows(conn, batches, rows, ("job_id", "run_id", "batch_id"), ("job_id", "run_id", "batch_id"))
    for item, key in owners:
        if key in new:
            new.discard(key)
            results[item.index].batches += 1


# -- the job row -----------------------------------------------------------------------------------------
def _update_jobs(conn: Connection, accepted: list[_Item]) -> None:
    """Each job's row as its last report of the batch leaves it (a column a report does not set keeps the value
    of the previous report that did); one statement per set of columns (usually one for the batch)."""
    final: dict[int, dict] = {}
    for item in accepted:
        final.setdefault(item.job_id, {}).update(job_values(item.report, item.now))
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for job_id in sorted(final):
        values = final[job_id]
        groups[tuple(values)].append({"_id": job_id, **values})
    for cols, rows in groups.items():
        if conn.dialect.name == "postgresql":
            update_rows(conn, jobs, rows)
        else:
            conn.execute(_statement("job_update", cols),
                         [{"p_job_id": r["_id"], **{f"p_{c}": r[c] for c in cols}} for r in rows])


# -- the batch -------------------------------------------------------------------------------------------
def ingest_reports(conn: Connection, items: Sequence[Pending],
                   window_ms: int = DEFAULT_WINDOW_MS) -> list[IngestResult]:
    """Store ``items`` using ``conn`` (the caller owns the transaction); one ``IngestResult`` per item, in
    order. Raises ``BatchItemError`` for an item that cannot be applied and ``ValueError`` when two items
    share a ``reporter.id``."""
    ids = [it.report.reporter.id for it in items]
    if len(set(ids)) != len(ids):
        raise ValueError("reporter.id: a batch holds at most one report per reporter")
    if not items:
        return []
    nows = [_now_ms() if it.now_ms is None else int(it.now_ms) for it in items]
    job_ids = _ensure_jobs(conn, items, nows)
    ok = _register_reporters(conn, items, job_ids, nows)
    results = [IngestResult(job_id, duplicate=not fresh) for job_id, fresh in zip(job_ids, ok)]
    accepted = [_Item(i, it.report, job_ids[i], nows[i], it.report.reporter.app_id or "")
                for i, it in enumerate(items) if ok[i]]
    if not accepted:
        return results
    for item, run_id in zip(accepted, touch_runs(conn, [(i.job_id, i.report, i.now) for i in accepted])):
        item.run_id = run_id
    _ensure_templates(conn, accepted)
    rvs = _ensure_runtime_vertices(conn, accepted)
    task_rows, window_rows, batch_launches, last, parts = _fold_tasks(accepted, rvs, window_ms, results)
    completed = _store_stage_runs(conn, accepted, results)
    stored_launches = _stored_launches(conn, completed) if completed else {}
    insert_tuples(conn, tasks, _TASK_COLUMNS, task_rows)
    update_rows(conn, runtime_vertices, sorted(({"_id": rvs[pair][0], "last_launch_ms": launch}
                                                for pair, launch in last.items()
                                                if launch is not None and launch != rvs[pair][1]),
                                               key=itemgetter("_id")))
    upsert_rows(conn, runtime_windows, window_rows, _WINDOW_KEY, _WINDOW_MERGE)
    upsert_rows(conn, template_windows, _template_windows(conn, accepted, completed, stored_launches, batch_launches,
                                                          parts, window_ms), _TEMPLATE_KEY, _TEMPLATE_MERGE)
    spans: dict[tuple, dict] = {}
    for item in accepted:
        for row in span_rows(item.job_id, item.report) if item.report.task_spans else ():
            key = (row["job_id"], row["app_id"], row["query_id"], row["batch_id"])
            old = spans.get(key)
            if old is not None:
                row["first_launch_ms"] = min(row["first_launch_ms"], old["first_launch_ms"])
                row["last_finish_ms"] = max(row["last_finish_ms"], old["last_finish_ms"])
            spans[key] = row
    if spans:
        store_spans(conn, [spans[k] for k in sorted(spans)])
    _store_batches(conn, accepted, results)
    rows = [row for item in accepted if item.report.partitions for row in partition_rows(item.job_id, item.report, item.now)]
    if rows:
        conn.execute(insert(partition_stats), rows)
    rows = [row for item in accepted if item.report.queries for row in query_state_rows(item.job_id, item.report, item.now)]
    if rows:
        conn.execute(insert(query_states), rows)
    for item in accepted:  # rare: per report, in order
        if item.report.executors:
            record_executor_events(conn, item.job_id, item.run_id, [e.model_dump() for e in item.report.executors])
        if item.report.reporter.applied:
            apply_acks(conn, item.job_id, list(item.report.reporter.applied), item.now)
    _update_jobs(conn, accepted)
    return results


def current_directives_of(conn: Connection, job_ids: Sequence[int]) -> dict[int, list[dict]]:
    """The directives of each job in ``job_ids`` (as ``aggregators.directives.current_directives``), in one
    statement."""
    wanted = list(dict.fromkeys(job_ids))
    out: dict[int, list[dict]] = {job_id: [] for job_id in wanted}
    if wanted:
        for r in conn.execute(_DIRECTIVES, {"p_jobs": wanted}):
            out[r.job_id].append(directive_dict(r))
    return out
