"""Issue #16: ``bench load`` against a real ``serve`` (gunicorn) on SQLite, a few jobs for a few seconds: every
offered report is answered, accepted and stored once (counted in the database), none overtakes its job's previous
one (which would be answered as a duplicate), and the server's CPU time per report is measured."""
from __future__ import annotations

import re

from spark_governor.bench.load import format_result, run_load


def test_bench_load_offers_accepts_and_stores_every_report(sqlite_url):
    lines: list[str] = []
    r = run_load(jobs=4, seconds=3, db_url=sqlite_url, workers=1, threads=4, tasks=10, policy_share=0.5,
                 evaluation_s=1.0, out=lines.append)
    assert "4 jobs (2 with a policy)" in lines[0]
    assert r.offered == 12 and r.answered == 12
    assert r.accepted == r.stored == 12 and r.duplicates == 0 and r.errors == {}
    # the policies were evaluated while the load ran (the scheduler's run histogram on /metrics)
    assert r.evaluation_runs >= 1 and r.evaluation_run_mean_s > 0
    assert 0 <= r.evaluation_runs_over_interval <= r.evaluation_runs
    assert r.generator_cpu_s > 0 and r.generator_cpu_ms_per_report > 0
    # group commit: every accepted report went through a committed ingest transaction
    assert 1 <= r.transactions <= r.accepted and r.reports_per_transaction >= 1
    assert r.p50_s is not None and 0 < r.p50_s <= r.p99_s
    assert r.server_cpu_s > 0 and r.cpu_ms_per_report > 0
    assert r.database_cpu_s is None  # SQLite: no separate database server
    text = format_result(r)
    assert re.search(r"accepted\s+12\s+stored\s+12 ", text), text
    assert "policy evaluation runs" in text and "load generator CPU" in text
    assert "0 answered as duplicates" in text and "ms per report" in text
