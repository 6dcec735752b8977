"""Issue #16, robustness: inputs that used to give 500 (huge ids and timestamps, a tiny constraint span, numbers
the database cannot hold), 0 for booleans, NaN/Infinity, and one bad constraint breaking /metrics for all jobs."""
from __future__ import annotations

import json

import pytest
from sqlalchemy import insert, select

from spark_governor.aggregators.db import make_engine, upgrade
from spark_governor.aggregators.models import jobs, latency_constraints, tasks
from spark_governor.api.app import Settings, create_app
from spark_governor.api.auth import store_tokens
from spark_governor.bench.reports import gz, make_report

TOKEN = "robust-token-1"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
def engine(sqlite_url):
    upgrade(sqlite_url)
    eng = make_engine(sqlite_url)
    store_tokens(eng, {"ops": TOKEN})
    yield eng
    eng.dispose()


@pytest.fixture
def client(engine):
    app = create_app(engine, Settings())
    c = app.test_client()
    assert c.post("/api/v1/reports", data=gz(make_report(job="job-a", n_tasks=8, batches=2)),
                  headers={"Content-Encoding": "gzip"}).status_code == 200
    return c


def test_huge_ids_and_timestamps_are_client_errors(client):
    assert client.get("/api/v1/jobs/job-a/decisions?since_ms=" + "9" * 30).status_code == 400
    assert client.get("/api/v1/jobs/job-a/decisions?until_ms=" + "9" * 19).status_code == 400
    assert client.get("/api/v1/jobs/job-a/decisions?since_ms=" + str(2**63 - 1)).status_code == 200
    r = client.post("/api/v1/jobs/job-a/decisions/" + "9" * 25 + "/approve", headers=AUTH)
    assert r.status_code == 404


def test_zero_is_not_a_boolean(client):
    r = client.put("/api/v1/jobs/job-a/policies/threshold?register=true", json={"enabled": 0}, headers=AUTH)
    assert r.status_code == 400 and "enabled" in r.json["error"]
    r = client.put("/api/v1/jobs/job-a/constraints/c1?register=true", json={"bound_ms": 100, "use_event_time": 1}, headers=AUTH)
    assert r.status_code == 400 and "use_event_time" in r.json["error"]


def test_a_tiny_constraint_span_is_refused(client):
    r = client.put("/api/v1/jobs/job-a/constraints/c1?register=true", json={"bound_ms": 100, "span_s": 0.0004}, headers=AUTH)
    assert r.status_code == 400 and "span_s" in r.json["error"]
    r = client.put("/api/v1/jobs/job-a/constraints/c1?register=true", data='{"bound_ms": NaN}',
                   headers={**AUTH, "Content-Type": "application/json"})
    assert r.status_code == 400
    r = client.put("/api/v1/jobs/job-a/constraints/c1?register=true", json={"bound_ms": 100, "span_s": 0.001}, headers=AUTH)
    assert r.status_code == 200
    assert client.get("/api/v1/jobs/job-a/constraints").status_code == 200


def test_one_bad_constraint_does_not_break_metrics_for_the_others(client, engine):
    assert client.post("/api/v1/reports", data=gz(make_report(job="job-b", n_tasks=4, reporter_id="rb")),
                       headers={"Content-Encoding": "gzip"}).status_code == 200
    r = client.put("/api/v1/jobs/job-b/constraints/ok?register=true", json={"bound_ms": 100, "span_s": 5}, headers=AUTH)
    assert r.status_code == 200
    with engine.begin() as conn:  # a row written before validation existed
        job_a = conn.execute(select(jobs.c.id).where(jobs.c.name == "job-a")).scalar()
        conn.execute(insert(latency_constraints).values(job_id=job_a, name="bad", vertices=None, bound_ms=100.0,
                                                        span_s=0.0001, event_time_metric=True, updated_ms=0))
    r = client.get("/metrics")
    assert r.status_code == 200
    assert 'spark_governor_constraint_bound_seconds{constraint="ok",spark_job="job-b"}' in r.get_data(as_text=True)


def test_database_sized_integers_and_sums_do_not_overflow(client, engine):
    """Values up to 2**63-1 are stored; window sums saturate instead of failing the insert."""
    rep = make_report(job="job-big", n_tasks=2, reporter_id="big", schema_version=1)  # whole task rows
    for t in rep["tasks"]:
        t["input_records"] = 2**63 - 1
        t["output_bytes"] = 2**63 - 1
    r = client.post("/api/v1/reports", data=gz(rep), headers={"Content-Encoding": "gzip"})
    assert r.status_code == 200, r.json
    with engine.connect() as conn:
        assert conn.execute(select(tasks.c.input_records).where(tasks.c.input_records == 2**63 - 1)).first()
    assert client.get("/api/v1/jobs/job-big/stages").status_code == 200
    assert json.loads(client.get("/api/v1/jobs").get_data())  # valid JSON


def test_reports_in_flight_are_bounded(sqlite_url, monkeypatch):
    """Beyond max_inflight_reports reports being parsed, a report waits up to 1 s and then gets 503 with Retry-After
    (bounded memory)."""
    import threading
    import time

    import requests

    import spark_governor.api.app as app_module
    from spark_governor.api.server import ControlPlane

    real = app_module.parse_report  # parsing is what max_inflight_reports bounds (storing is api.ingest_queue's)

    def slow(*args, **kwargs):
        time.sleep(2.5)
        return real(*args, **kwargs)

    monkeypatch.setattr(app_module, "parse_report", slow)
    plane = ControlPlane(db_url=sqlite_url, port=0, settings=Settings(max_inflight_reports=1)).start()
    try:
        statuses = []

        def send(i):
            r = requests.post(plane.url + "/api/v1/reports", data=gz(make_report(n_tasks=2, reporter_id=f"r{i}")),
                              headers={"Content-Encoding": "gzip"}, timeout=30)
            statuses.append((r.status_code, r.headers.get("Retry-After")))

        first = threading.Thread(target=send, args=(0,))
        first.start()
        time.sleep(0.5)
        send(1)
        first.join()
        assert sorted(statuses) == [(200, None), (503, "1")]
    finally:
        plane.stop()
