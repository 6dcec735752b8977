"""``POST /api/v1/replays`` on a real control plane (127.0.0.1, SQLite), with a real Spark 4.3 event log
(``tests/data/replay_template.jsonl.gz``: one short streaming query, uncompressed)."""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
import requests

from spark_governor.api.auth import TokenSpec

LOG = gzip.decompress((Path(__file__).resolve().parents[1] / "data" / "replay_template.jsonl.gz").read_bytes())
WRITER, READER, TEAM = "w-secret-123456", "r-secret-123456", "t-secret-123456"


@pytest.fixture
def plane(sqlite_url):
    from spark_governor.api.server import ControlPlane

    p = ControlPlane(db_url=sqlite_url, port=0, tokens={
        "ops": TokenSpec(WRITER, ("write",)), "viewer": TokenSpec(READER, ("read",)),
        "team": TokenSpec(TEAM, ("write",), ("team-*",))}).start()
    yield p
    p.stop()


def post(plane, token=None, data=LOG, **params):
    headers = {"Content-Type": "application/octet-stream"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    return requests.post(f"{plane.url}/api/v1/replays", params=params, data=data, headers=headers, timeout=60)


def progress_in_log() -> list[dict]:
    out = []
    for line in LOG.splitlines():
        if b"QueryProgressEvent" in line:
            p = json.loads(line)["progress"]
            out.append({"batch_id": p["batchId"], "rows": sum(s["numInputRows"] for s in p["sources"])})
    return out


def test_upload_imports_with_the_logs_counts(plane):
    r = post(plane, WRITER, job="uploaded")
    assert r.status_code == 201, r.text
    body = r.json()
    truth = progress_in_log()
    assert body["streaming"] and body["batches"] == len(truth) > 0
    assert body["rows"] == sum(t["rows"] for t in truth) > 0
    assert body["tasks"] == LOG.count(b'"Event":"SparkListenerTaskEnd"')
    assert body["read"]["skipped"] == {}
    batches = requests.get(f"{plane.url}/api/v1/jobs/uploaded/batches?limit=100", timeout=10).json()
    assert sorted(b["batch_id"] for b in batches["batches"]) == sorted(t["batch_id"] for t in truth)
    again = post(plane, WRITER, job="uploaded")
    assert again.status_code == 409 and "already exists" in again.json()["error"]


def test_tokens_and_bad_parameters(plane):
    assert post(plane, None, job="x").status_code == 401
    assert post(plane, READER, job="x").status_code == 403
    assert post(plane, TEAM, job="other").status_code == 403
    bad = post(plane, WRITER, job="x", codec="gzip")
    assert bad.status_code == 400 and bad.json()["error"].startswith("codec:")
    bad = post(plane, WRITER, job="x", policy="kingman", config="{not json")
    assert bad.status_code == 400 and bad.json()["error"].startswith("config:")
    bad = post(plane, WRITER, job="x", policy="no-such-policy")
    assert bad.status_code == 400 and bad.json()["error"].startswith("policy:")
    empty = post(plane, WRITER, job="x", data=b"")
    assert empty.status_code == 400 and empty.json()["error"].startswith("body:")
    garbage = post(plane, WRITER, job="x", data=b"not an event log\n")
    assert garbage.status_code == 400
    jobs = requests.get(f"{plane.url}/api/v1/jobs", timeout=10).json()
    assert "x" not in [j["name"] for j in jobs["jobs"]]  # nothing half-written


def test_upload_with_policy_what_if(plane):
    cfg = {"warmup_windows": 1, "constraint": {"bound_ms": 100, "span_s": 1}}
    r = post(plane, TEAM, job="team-what-if", policy="kingman", config=json.dumps(cfg))
    assert r.status_code == 201, r.text
    w = r.json()["what_if"]
    assert w["policy"] == "kingman" and w["evaluations"] >= 1
    assert w["constraint"]["bound_ms"] == 100 and w["actual_executor_seconds"] > 0
    decisions = requests.get(f"{plane.url}/api/v1/jobs/team-what-if/decisions?limit=1000", timeout=10).json()
    assert len(decisions["decisions"]) == w["actions"]
    # the what-if decisions are on /metrics (so on the decisions dashboard), although the log's clock is old
    metrics = requests.get(f"{plane.url}/metrics", timeout=10).text
    made = [line for line in metrics.splitlines() if line.startswith("spark_governor_decisions_made_total{")
            and 'spark_job="team-what-if"' in line and 'policy="kingman"' in line]
    assert made and sum(float(line.split()[-1]) for line in made) == w["actions"]


def test_import_keeps_the_logs_clock_in_bookkeeping(sqlite_url, tmp_path):
    """Report arrival, the reporter's, the run's and the templates' first/last times carry the log's time
    (``ingest_report(now_ms=...)``), not the import's wall clock (the log is from 2026-11-25, a replay of
    it runs later; a wall-clock stamp would fall after the log's last event)."""
    from sqlalchemy import select

    from spark_governor.aggregators.db import make_engine, upgrade
    from spark_governor.aggregators.models import job_runs, jobs, reporters, template_vertices
    from spark_governor.api.replay import replay

    path = tmp_path / "local-1795598588754"
    path.write_bytes(LOG)
    upgrade(sqlite_url)
    engine = make_engine(sqlite_url)
    try:
        r = replay(engine, str(path), job="clocked", max_records=10)  # several reports
        assert r.reports > 1 and r.first_ms < r.last_ms
        with engine.connect() as conn:
            job = conn.execute(select(jobs).where(jobs.c.name == "clocked")).one()
            times = {"job created": job.created_ms, "last report": job.last_report_ms}
            for row in conn.execute(select(reporters).where(reporters.c.job_id == job.id)):
                times.update({"reporter first": row.first_ms, "reporter last": row.last_ms})
            for row in conn.execute(select(job_runs).where(job_runs.c.job_id == job.id)):
                times.update({"run first": row.first_ms, "run last": row.last_ms})
            tv = conn.execute(select(template_vertices).where(template_vertices.c.job_id == job.id)).all()
            assert tv
            times.update({f"template {t.key} {k}": getattr(t, k) for t in tv for k in ("first_ms", "last_ms")})
    finally:
        engine.dispose()
    outside = {k: v for k, v in times.items() if not r.first_ms <= v <= r.last_ms}
    assert not outside, (r.first_ms, r.last_ms, outside)
    assert times["last report"] == r.last_ms and times["job created"] < times["last report"]
