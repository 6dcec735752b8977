"""POST /api/v1/reports: validation, atomicity, idempotency, and the read endpoints."""
import gzip
import json

import pytest
from sqlalchemy import func, select

from spark_governor.aggregators.models import metadata
from spark_governor.policies.moments import Moments
from spark_governor.api.app import Settings, create_app
from spark_governor.bench.reports import gz
from spark_governor.bench.reports import make_report as _make_report


def make_report(*args, **kwargs):
    """The v1 report of whole task rows (its cases shape them); tests/integration/test_edge_fold.py has v3."""
    return _make_report(*args, **{"schema_version": 1, **kwargs})


@pytest.fixture
def engine(both_databases):
    """Every ingest test runs against SQLite and a real PostgreSQL."""
    return both_databases


@pytest.fixture
def client(engine):
    return create_app(engine, Settings(window_ms=5000, max_body_bytes=256 * 1024,
                                       max_decompressed_bytes=1024 * 1024)).test_client()


def row_counts(engine) -> dict:
    with engine.connect() as conn:
        return {t.name: conn.execute(select(func.count()).select_from(t)).scalar() for t in metadata.sorted_tables}


def post(client, body: bytes, gzip_it=False, **headers):
    if gzip_it:
        headers["Content-Encoding"] = "gzip"
    return client.post("/api/v1/reports", data=body, headers={"Content-Type": "application/json", **headers})


def test_valid_report_is_stored(client, engine):
    r = post(client, gz(make_report(n_tasks=16, batches=3)), gzip_it=True)
    assert r.status_code == 200, r.json
    assert r.json["accepted"] == {"tasks": 16, "stages": 0, "batches": 3}
    counts = row_counts(engine)
    assert counts["tasks"] == 16 and counts["batches"] == 3 and counts["template_vertices"] == 2
    assert counts["runtime_vertices"] == 8


BAD_CASES = [
    ("not json", b"{not json", "body: Invalid JSON"),
    ("truncated json", json.dumps(make_report()).encode()[:-40], "body: Invalid JSON"),
    ("wrong type", json.dumps({**make_report(), "tasks": [{**make_report()["tasks"][0], "launch_ms": "soon"}]}).encode(),
     "tasks.0.launch_ms"),
    ("float for int", json.dumps({**make_report(), "tasks": [{**make_report()["tasks"][0], "run_time_ms": 1.5}]}).encode(),
     "tasks.0.run_time_ms"),
    ("negative", json.dumps({**make_report(), "tasks": [{**make_report()["tasks"][0], "partition": -1}]}).encode(),
     "tasks.0.partition"),
    ("missing field", json.dumps({k: v for k, v in make_report().items() if k != "job"}).encode(), "job"),
    ("unknown field", json.dumps({**make_report(), "extra": 1}).encode(), "extra"),
    ("bad schema version", json.dumps({**make_report(), "schema_version": 4}).encode(), "schema_version"),
    ("running state without its start", json.dumps({**make_report(), "schema_version": 2, "queries": [
        {"query_id": "q", "observed_ms": 1, "status": "running"}]}).encode(), "queries.0"),
    ("bad job name", json.dumps({**make_report(), "job": "a b/c"}).encode(), "job"),
    ("finish before launch", json.dumps({**make_report(), "tasks": [
        {**make_report()["tasks"][0], "finish_ms": 1}]}).encode(), "finish_ms"),
    ("empty", b"", "body"),
    ("oversized knob state", json.dumps({**make_report(), "reporter": {**make_report()["reporter"], "knob_state": {
        "exchanges": {"exchanges": ["x" * 20_000]}}}}).encode(), "knob_state.exchanges"),
    ("knob state of an unknown knob", json.dumps({**make_report(), "reporter": {**make_report()["reporter"],
                                                   "knob_state": {"threads": 1}}}).encode(), "knob_state.threads"),
]


@pytest.mark.parametrize("name,body,field", BAD_CASES, ids=[c[0] for c in BAD_CASES])
def test_bad_reports_get_400_naming_the_field_and_store_nothing(client, engine, name, body, field):
    before = row_counts(engine)
    r = post(client, body)
    assert r.status_code == 400, r.json
    assert field in r.json["error"]
    assert row_counts(engine) == before


def test_knob_state_is_kept_per_job(client, engine):
    state = {"exchanges": [{"name": "spread", "partitions": 6, "removed": False, "stage": 0}],
             "value": {"spread": "present"}}
    rep = make_report()
    rep["reporter"]["knob_state"] = {"exchanges": state}
    assert post(client, json.dumps(rep).encode()).status_code == 200
    job = client.get(f"/api/v1/jobs/{rep['job']}").json
    assert job["knob_state"] == {"exchanges": state}
    # a later report without knob state keeps the last one
    rep2 = make_report(seq=2, reporter_id=rep["reporter"]["id"])
    assert "knob_state" not in rep2["reporter"]
    assert post(client, json.dumps(rep2).encode()).status_code == 200
    assert client.get(f"/api/v1/jobs/{rep['job']}").json["knob_state"] == {"exchanges": state}


def test_bad_task_late_in_a_good_report_stores_nothing(client, engine):
    rep = make_report(n_tasks=50)
    rep["tasks"][49]["shuffle_read_bytes"] = "lots"
    r = post(client, gz(rep), gzip_it=True)
    assert r.status_code == 400 and "tasks.49.shuffle_read_bytes" in r.json["error"]
    assert all(v == 0 for v in row_counts(engine).values())


def test_truncated_gzip_is_rejected(client, engine):
    r = post(client, gz(make_report())[:-20], gzip_it=True)
    assert r.status_code == 400 and "gzip" in r.json["error"]
    assert all(v == 0 for v in row_counts(engine).values())


def test_oversized_reports_get_413(client, engine):
    big = json.dumps(make_report(n_tasks=2000)).encode()
    assert len(big) > 256 * 1024
    r = post(client, big)
    assert r.status_code == 413 and "body" in r.json["error"]
    # a small gzip body that inflates beyond the decompressed limit
    bomb = gzip.compress(b'{"schema_version": 1, "job": "' + b"a" * (2 * 1024 * 1024) + b'"}')
    r = post(client, bomb, gzip_it=True)
    assert r.status_code == 413
    assert all(v == 0 for v in row_counts(engine).values())


def test_unsupported_encoding(client):
    r = post(client, b"{}", **{"Content-Encoding": "br"})
    assert r.status_code == 415 and "Content-Encoding" in r.json["error"]


def test_retried_report_is_applied_once(client, engine):
    rep = make_report(n_tasks=8, seq=5, reporter_id="rep-1")
    assert post(client, gz(rep), gzip_it=True).json["duplicate"] is False
    again = post(client, gz(rep), gzip_it=True)
    assert again.status_code == 200 and again.json["duplicate"] is True
    assert row_counts(engine)["tasks"] == 8


def test_template_stats_merge_runtime_windows_exactly(client, engine):
    rep = make_report(n_tasks=400, partitions=5, seed=3)
    assert post(client, gz(rep), gzip_it=True).status_code == 200
    stages = client.get("/api/v1/jobs/job-a/stages?windows=1000").json["stages"]
    assert [s["key"] for s in stages] == ["t-map", "t-reduce"]
    for s in stages:
        mine = [t for t in rep["tasks"] if t["template_key"] == s["key"]]
        for w in s["windows"]:
            ws = w["window_start_ms"]
            in_w = [t for t in mine if ws <= t["finish_ms"] < ws + 5000]
            direct = Moments.of([t["run_time_ms"] / 1000 for t in in_w])
            assert w["tasks"] == len(in_w)
            assert w["service"]["count"] == direct.n
            assert w["service"]["mean"] == pytest.approx(direct.mean)
            assert w["service"]["variance"] == pytest.approx(direct.variance)
            lat = Moments.of([(t["finish_ms"] - t["stage_submission_ms"]) / 1000 for t in in_w])
            assert w["latency"]["mean"] == pytest.approx(lat.mean)
            assert w["latency"]["variance"] == pytest.approx(lat.variance)
        total = Moments.of([t["run_time_ms"] / 1000 for t in mine])
        assert s["summary"]["service"]["count"] == total.n
        assert s["summary"]["service"]["mean"] == pytest.approx(total.mean)
        assert s["summary"]["service"]["variance"] == pytest.approx(total.variance)


def test_split_reports_merge_like_one(client, engine, tmp_path):
    """Folding tasks into stored windows across reports equals folding them at once."""
    rep = make_report(n_tasks=120, partitions=3, seed=9)
    first, second = dict(rep, tasks=rep["tasks"][:70]), dict(rep, tasks=rep["tasks"][70:])
    second = {**second, "reporter": {**rep["reporter"], "seq": 2}}
    assert post(client, gz(first), gzip_it=True).status_code == 200
    assert post(client, gz(second), gzip_it=True).status_code == 200
    split = client.get("/api/v1/jobs/job-a/stages/t-map/tasks?windows=1000").json
    from spark_governor.aggregators import db as dbm
    url2 = f"sqlite:///{tmp_path / 'other.db'}"
    dbm.upgrade(url2)
    eng2 = dbm.make_engine(url2)
    c2 = create_app(eng2, Settings(window_ms=5000)).test_client()
    assert post(c2, gz(rep), gzip_it=True).status_code == 200
    whole = c2.get("/api/v1/jobs/job-a/stages/t-map/tasks?windows=1000").json
    eng2.dispose()
    assert len(split["partitions"]) == 3
    for a, b in zip(split["partitions"], whole["partitions"]):
        for wa, wb in zip(a["windows"], b["windows"]):
            for stat in ("service", "latency", "interarrival", "service_per_record"):
                assert wa[stat]["count"] == wb[stat]["count"]
                for k in ("mean", "variance"):
                    assert wa[stat][k] == pytest.approx(wb[stat][k]) if wb[stat][k] is not None else wa[stat][k] is None


def test_read_endpoints_and_errors(client):
    assert client.get("/api/v1/jobs/nope/stages").status_code == 404
    assert "nope" in client.get("/api/v1/jobs/nope/stages").json["error"]
    post(client, gz(make_report(n_tasks=8, batches=4)), gzip_it=True)
    jobs = client.get("/api/v1/jobs").json["jobs"]
    assert jobs[0]["name"] == "job-a" and jobs[0]["tasks_reported_total"] == 8
    assert client.get("/api/v1/jobs/job-a/stages?windows=zero").status_code == 400
    assert "windows" in client.get("/api/v1/jobs/job-a/stages?windows=0").json["error"]
    assert client.get("/api/v1/jobs/job-a/stages/missing/tasks").status_code == 404
    b = client.get("/api/v1/jobs/job-a/batches").json
    assert len(b["batches"]) == 4 and b["interarrival"]["mean"] == pytest.approx(1.0)
    assert client.get("/healthz").json == {"status": "ok"}
    text = client.get("/metrics").get_data(as_text=True)
    assert "spark_governor_tasks_ingested_total" in text


def test_retention_purges_old_rows(client, engine):
    from spark_governor.aggregators.retention import purge_older_than

    post(client, gz(make_report(n_tasks=40, batches=2)), gzip_it=True)
    kept = purge_older_than(engine, horizon_s=3600, now_ms=1_700_000_000_000 + 1000)
    assert kept["tasks"] == 0
    deleted = purge_older_than(engine, horizon_s=60, now_ms=1_700_000_000_000 + 3_600_000, chunk=7)
    assert deleted["tasks"] == 40 and deleted["batches"] == 2
    counts = row_counts(engine)
    assert counts["tasks"] == 0 and counts["runtime_windows"] == 0 and counts["jobs"] == 1


def test_concurrent_reporters_store_every_task_once(engine):
    """Several reporters posting at once (threads, one transaction each) lose and duplicate nothing."""
    import threading

    app = create_app(engine, Settings(window_ms=5000))
    errors = []

    def reporter(k):
        client = app.test_client()
        for seq in range(1, 6):
            rep = make_report(n_tasks=60, seq=seq, reporter_id=f"rep-{k}", seed=seq * 10 + k, partitions=6)
            r = post(client, gz(rep), gzip_it=True)
            if r.status_code != 200:
                errors.append(r.json)

    threads = [threading.Thread(target=reporter, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    counts = row_counts(engine)
    assert counts["tasks"] == 4 * 5 * 60 and counts["runtime_vertices"] == 12 and counts["template_vertices"] == 2
    client = app.test_client()
    stages = client.get("/api/v1/jobs/job-a/stages?windows=1000").json["stages"]
    assert sum(s["summary"]["tasks"] for s in stages) == 4 * 5 * 60


def test_scheduler_runs_retention(engine):
    """The APScheduler job inside serve purges old statistics on its own."""
    from spark_governor.api.scheduler import build_scheduler
    from spark_governor.api.processes import wait_for

    app = create_app(engine, Settings())
    post(app.test_client(), gz(make_report(n_tasks=20)), gzip_it=True)  # tasks from 2023: older than 1 h
    scheduler = build_scheduler(engine, retention_s=3600, retention_interval_s=0.2)
    scheduler.start()
    try:
        wait_for(lambda: row_counts(engine)["tasks"] == 0, 20, what="retention run")
    finally:
        scheduler.shutdown(wait=True)
    assert row_counts(engine)["jobs"] == 1


def test_executor_registration_times_are_kept(client, engine):
    """A report's executor events land in ``executor_events`` for its run; a later removal fills in."""
    from spark_governor.aggregators.models import executor_events

    report = make_report(n_tasks=2)
    report["executors"] = [{"executor_id": "1", "added_ms": 1_700_000_000_500, "cores": 2}]
    assert post(client, json.dumps(report).encode()).status_code == 200
    later = make_report(n_tasks=2, seq=2)
    later["executors"] = [{"executor_id": "1", "removed_ms": 1_700_000_090_000}]
    assert post(client, json.dumps(later).encode()).status_code == 200
    with engine.connect() as conn:
        rows = conn.execute(select(executor_events)).mappings().all()
    assert [(r["executor_id"], r["added_ms"], r["removed_ms"], r["cores"]) for r in rows] == \
        [("1", 1_700_000_000_500, 1_700_000_090_000, 2)]
