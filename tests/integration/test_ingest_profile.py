"""Issue #16: ``python -m spark_governor.bench.ingest_profile`` measures the CPU per report of the ingest
transaction and of the whole ``POST /api/v1/reports`` path (Flask test client, with a report token) on a
real SQLite database, and every profiled report is stored (the Flask path refuses a duplicate answer)."""
from __future__ import annotations

from sqlalchemy import func, select

from spark_governor.aggregators.db import make_engine
from spark_governor.aggregators.models import reporters
from spark_governor.bench.ingest_profile import profile, profile_flask


def test_ingest_profile_measures_both_paths_and_stores_every_report(sqlite_url):
    lines: list[str] = []
    r = profile(sqlite_url, jobs=2, rounds=2, tasks=4, out=lines.append)
    f = profile_flask(sqlite_url, jobs=2, rounds=2, tasks=4, out=lines.append)
    assert r["reports"] == f["reports"] == 4
    assert r["transaction_cpu_ms"] > 0 and r["statements"] > 0 and f["cpu_ms"] > 0
    assert "through POST /api/v1/reports" in lines[1] and "ms CPU" in lines[1]
    engine = make_engine(sqlite_url)
    try:
        with engine.connect() as conn:  # 2 warm-up + 4 profiled reports of 4 tasks, by each path
            # folded at the edge (schema v3): counted by the reporters, not stored as rows
            assert conn.execute(select(func.sum(reporters.c.tasks_total))).scalar() == 2 * (2 + 4) * 4
    finally:
        engine.dispose()
