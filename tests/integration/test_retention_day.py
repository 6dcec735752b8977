"""Issue #16: a simulated day of 200 jobs keeps the database bounded.

Ingest (``aggregators.ingest.ingest_report``) and the retention purge
(``aggregators.retention.purge_older_than``) run on a simulated clock (``now_ms``): 200 jobs, each
sending one report per step of ``STEP_MIN`` simulated minutes (a micro-batch: its tasks, stages, the
batch and the query's state) for 24 simulated hours, with a 6 h retention purged after every step as
the scheduler does. The row count of every table and the SQLite file size at hour 24 stay within 1.3 ×
those at hour 12, while twice as many reports were ingested: the database plateaus after the
retention horizon instead of growing linearly. (Sizes are chosen for about 20 s on SQLite: 7 200
reports; a real reporter sends a report every second, so the plateau scales with the report rate.)

On PostgreSQL (about 11 ms per report here, so 50 jobs and one report per simulated hour) the same holds
for the row counts and for ``pg_total_relation_size`` of every table, with a plain ``VACUUM`` after each
purge standing in for autovacuum, which on a real server runs on its own (its one-minute nap is longer
than this whole simulated day) and makes the deleted rows' space reusable.
"""
from __future__ import annotations

import json
import os
import time

import pytest

from sqlalchemy import func, select, text

from spark_governor.aggregators.db import make_engine, upgrade
from spark_governor.aggregators.ingest import ingest_report
from spark_governor.aggregators.models import metadata
from spark_governor.aggregators.retention import purge_older_than
from spark_governor.bench.reports import make_report as _make_report


def make_report(*args, **kwargs):
    """The v1 report of whole task rows: its cases count and shape the rows (v3: tests/integration/test_edge_fold.py)."""
    return _make_report(*args, **{"schema_version": 1, **kwargs})
from spark_governor.policies.wire import parse_report

JOBS = 200
STEP_MIN = 40  # simulated minutes between two reports of a job
TASKS = 8  # tasks per report (two stages of four)
RETENTION_H = 6.0
DAY0_MS = 1_800_000_000_000  # the simulated clock's start (epoch ms)


def report(job: int, k: int, now_ms: int):
    """Job ``job``'s ``k``-th report at ``now_ms``: micro-batch ``k`` (finished 2 s ago), its tasks and two
    stages, and the query's state."""
    r = make_report(job=f"day-job-{job:03d}", n_tasks=TASKS, seq=k + 1, reporter_id=f"day-rep-{job:03d}",
                    start_ms=now_ms - 3000, seed=k, batches=1)
    for t in r["tasks"]:
        t["batch_id"], t["stage_id"] = k, 2 * k + t["stage_id"]
    r["batches"][0].update(batch_id=k, trigger_ms=now_ms - 3000)
    r["stages"] = [{"template_key": key, "query_id": "q1", "batch_id": k, "stage_id": 2 * k + i, "attempt": 0,
                    "num_tasks": TASKS // 2, "submission_ms": now_ms - 3000, "completion_ms": now_ms - 2000}
                   for i, key in enumerate(("t-map", "t-reduce"))]
    r["schema_version"] = 2
    r["queries"] = [{"query_id": "q1", "run_id": "r1", "observed_ms": now_ms - 1000, "status": "waiting",
                     "last_batch_id": k}]
    return parse_report(json.dumps(r).encode())


def row_counts(engine) -> dict[str, int]:
    with engine.connect() as conn:
        return {t.name: conn.execute(select(func.count()).select_from(t)).scalar() for t in metadata.sorted_tables}


def file_bytes(engine, path: str) -> int:
    """The SQLite database's size on disk (bytes) once its write-ahead log is checkpointed into it."""
    with engine.connect() as conn:
        conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
    return sum(os.path.getsize(p) for p in (path, path + "-wal") if os.path.exists(p))


def simulate_day(engine, jobs: int, step_min: int, size, vacuum: bool = False):
    """Ingest one report per job every ``step_min`` simulated minutes for 24 h, purging after every step;
    returns ``({hour: (row counts, size(engine))} at 6/12/18/24 h, rows purged per table, seconds)``."""
    measured: dict[int, tuple[dict[str, int], int]] = {}
    purged: dict[str, int] = {}
    started = time.perf_counter()
    for k in range(24 * 60 // step_min):
        now_ms = DAY0_MS + (k + 1) * step_min * 60_000
        with engine.begin() as conn:  # one transaction per simulated step
            for job in range(jobs):
                assert not ingest_report(conn, report(job, k, now_ms), now_ms=now_ms).duplicate
        for table, n in purge_older_than(engine, RETENTION_H * 3600, now_ms=now_ms).items():
            purged[table] = purged.get(table, 0) + n
        if vacuum:
            with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
                conn.exec_driver_sql("VACUUM")
        hour = (k + 1) * step_min / 60
        if hour in (6, 12, 18, 24):
            measured[int(hour)] = row_counts(engine), size(engine)
    return measured, purged, time.perf_counter() - started


def check_plateau(measured, purged, jobs: int, step_min: int) -> None:
    (rows12, size12), (rows24, size24) = measured[12], measured[24]
    steps_per_hour = 60 / step_min
    per_job_reports = RETENTION_H * steps_per_hour + 1  # the retention horizon, plus the step in progress
    assert rows24["tasks"] <= jobs * TASKS * per_job_reports, rows24["tasks"]
    assert rows24["batches"] <= jobs * per_job_reports, rows24["batches"]
    assert purged["tasks"] >= jobs * TASKS * (24 - RETENTION_H - 1) * steps_per_hour  # old rows really went
    for table, n in rows24.items():  # every table plateaus (the aged ones and the per-job ones alike)
        assert n <= 1.3 * rows12[table] + 5, (table, rows12[table], n)
    assert size24 <= 1.3 * size12, (size12, size24)
    assert rows24["jobs"] == jobs  # the jobs themselves and their cumulative counters are kept


def test_a_simulated_day_of_200_jobs_keeps_the_database_bounded(tmp_path):
    path = str(tmp_path / "day.db")
    url = f"sqlite:///{path}"
    upgrade(url)
    engine = make_engine(url)
    try:
        measured, purged, elapsed = simulate_day(engine, JOBS, STEP_MIN, lambda e: file_bytes(e, path))
    finally:
        engine.dispose()
    print(f"\nSQLite, {JOBS} jobs x one report per {STEP_MIN} simulated min, 24 h, retention {RETENTION_H:.0f} h: "
          f"{elapsed:.1f} s; file bytes at 6/12/18/24 h: {[measured[h][1] for h in (6, 12, 18, 24)]}; "
          f"rows at 12 h {sum(measured[12][0].values())}, at 24 h {sum(measured[24][0].values())}; purged {purged}")
    check_plateau(measured, purged, JOBS, STEP_MIN)


def relation_bytes(engine) -> int:
    """``pg_total_relation_size`` (bytes: table, indexes, TOAST) summed over our tables."""
    with engine.connect() as conn:
        return sum(conn.execute(text("SELECT pg_total_relation_size(CAST(:t AS regclass))"), {"t": t.name}).scalar()
                   for t in metadata.sorted_tables)


@pytest.mark.postgres
def test_a_simulated_day_keeps_postgres_bounded(fresh_postgres_db):
    upgrade(fresh_postgres_db)
    engine = make_engine(fresh_postgres_db)
    jobs, step_min = 50, 60
    try:
        measured, purged, elapsed = simulate_day(engine, jobs, step_min, relation_bytes, vacuum=True)
    finally:
        engine.dispose()
    print(f"\nPostgreSQL, {jobs} jobs x one report per {step_min} simulated min, 24 h, retention {RETENTION_H:.0f} h: "
          f"{elapsed:.1f} s; relation bytes at 6/12/18/24 h: {[measured[h][1] for h in (6, 12, 18, 24)]}")
    check_plateau(measured, purged, jobs, step_min)
