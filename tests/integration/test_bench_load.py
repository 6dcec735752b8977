"""Issue #16: ``bench load`` against a real ``serve`` (gunicorn) on SQLite, a few jobs for a few seconds: every
offered report is answered, accepted and stored once (counted in the database), none overtakes its job's previous
one (which would be answered as a duplicate), and the server's CPU time per report is measured."""
from __future__ import annotations

import gzip
import random
import re

import orjson
import pytest

from spark_governor.api.auth import hash_token
from spark_governor.api.load_floor import create_floor_app
from spark_governor.bench.load import format_result, job_report, run_load


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


@pytest.mark.postgres
def test_bench_load_against_two_replicas_on_one_postgres(fresh_postgres_db):
    """``bench load --replicas 2``: two serve processes on one PostgreSQL, each job's reports to one of them;
    every report stored once, the evaluations run by one replica only, the CPU of both counted."""
    lines: list[str] = []
    r = run_load(jobs=8, seconds=3, db_url=fresh_postgres_db, workers=1, threads=4, tasks=10, policy_share=0.5,
                 evaluation_s=1.0, replicas=2, senders=8, out=lines.append)
    assert "2 replicas x 1 workers" in lines[0] and r.replicas == 2
    assert r.offered == r.answered == r.accepted == r.stored == 24 and r.errors == {}
    assert r.evaluation_runs >= 1 and r.server_cpu_s > 0 and r.database_cpu_s > 0


def test_the_floor_answers_every_report_and_stores_nothing():
    """``bench load --floor``: the same load against the no-storage floor (api.load_floor) on gunicorn; every
    report is answered 200 and counted, nothing is stored, and its CPU per report is measured."""
    lines: list[str] = []
    r = run_load(jobs=4, seconds=3, db_url="", workers=1, threads=4, tasks=10, floor=True, out=lines.append)
    assert "the no-storage floor" in lines[0] and "0 with a policy" in lines[0]
    assert r.offered == r.answered == r.accepted == 12 and r.errors == {} and r.stored == 0
    assert r.server_cpu_s > 0 and r.cpu_ms_per_report > 0 and r.database_cpu_s is None
    assert r.transactions == 0 and r.evaluation_runs == 0
    assert "stored   nothing (the no-storage floor)" in format_result(r)


def test_the_floor_checks_the_token_and_the_body_as_serve_does():
    client = create_floor_app(hash_token("secret")).test_client()
    good = gzip.compress(orjson.dumps(job_report("j", "r", 1, 6, 1_700_000_000_000, random.Random(0))))  # v3
    gz = {"Content-Encoding": "gzip"}
    r = client.post("/api/v1/reports", data=good, headers={**gz, "Authorization": "Bearer secret"})
    assert r.status_code == 200 and r.json == {"accepted": {"tasks": 6, "stages": 2, "batches": 1},
                                               "duplicate": False, "directives": [], "window_ms": 5000}
    assert client.post("/api/v1/reports", data=good, headers={**gz, "Authorization": "Bearer nope"}).status_code == 401
    assert client.post("/api/v1/reports", data=good, headers=gz).status_code == 401
    bad = client.post("/api/v1/reports", data=b"not gzip", headers={**gz, "Authorization": "Bearer secret"})
    assert bad.status_code == 400 and "gzip" in bad.json["error"]
    bad = client.post("/api/v1/reports", data=gzip.compress(b'{"job": 1}'), headers={**gz, "Authorization": "Bearer secret"})
    assert bad.status_code == 400
    with pytest.raises(ValueError, match="SPARK_GOVERNOR_FLOOR_TOKEN_SHA256"):
        create_floor_app()


def test_the_cli_wants_a_database_or_the_floor_not_both():
    from click.testing import CliRunner

    from spark_governor.api.cli import main

    r = CliRunner().invoke(main, ["bench", "load", "--jobs", "1", "--seconds", "1"])
    assert r.exit_code == 2 and "--db" in r.output and "--floor" in r.output
    r = CliRunner().invoke(main, ["bench", "load", "--floor", "--db", "sqlite:///x.db"])
    assert r.exit_code == 2 and "--db" in r.output


def test_the_baseline_of_whole_task_reports_runs_first_on_a_database_of_its_own(tmp_path):
    """``bench load --baseline``: the same load of whole-task reports (schema v2) and then the folded one, each
    report stored once, the ratios printed and both runs in the JSON; the whole-task tasks all stored as rows, the
    folded ones a sample."""
    import json

    import sqlalchemy as sa
    from click.testing import CliRunner

    from spark_governor.api.cli import main
    from spark_governor.bench.load import baseline_url

    db, out = tmp_path / "load.db", tmp_path / "load.json"
    assert baseline_url(f"sqlite:///{db}") == f"sqlite:///{tmp_path / 'load-whole.db'}"
    r = CliRunner().invoke(main, ["bench", "load", "--jobs", "3", "--seconds", "2", "--db", f"sqlite:///{db}",
                                  "--workers", "1", "--threads", "4", "--tasks", "8", "--baseline", "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert "reports whole" in r.output and "reports folded" in r.output
    assert re.search(r"server CPU per report x\d+\.\d{3}", r.output), r.output
    got = json.loads(out.read_text())
    assert got["shape"] == "folded" and got["baseline"]["shape"] == "whole"
    for run in (got, got["baseline"]):
        assert run["offered"] == run["accepted"] == run["stored"] == 6 and run["errors"] == {}
    rows = {}
    for name in ("load.db", "load-whole.db"):
        with sa.create_engine(f"sqlite:///{tmp_path / name}").connect() as conn:
            rows[name] = conn.execute(sa.text("SELECT count(*) FROM tasks")).scalar()
    assert rows["load-whole.db"] == 9 * 8  # 3 jobs x (1 warm-up + 2 measured) reports x 8 task rows
    assert rows["load.db"] < rows["load-whole.db"]
    r = CliRunner().invoke(main, ["bench", "load", "--floor", "--baseline"])
    assert r.exit_code == 2 and "--baseline" in r.output
