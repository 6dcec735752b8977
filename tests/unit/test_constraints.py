"""Latency constraints: record-latency measurement per span, and the constraints API."""
import time

import pytest
from sqlalchemy import func, select

from spark_governor.aggregators import db
from spark_governor.aggregators.latency import BatchLatency, batch_latencies, span_latencies
from spark_governor.aggregators.models import latency_constraints
from spark_governor.api.app import Settings, create_app
from spark_governor.bench.reports import gz

TOKEN = "constraint-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


# -- measurement (pure) -----------------------------------------------------------------------
def test_estimated_latency_is_half_the_trigger_gap_plus_processing():
    bs = [BatchLatency("r", 0, 1.0, 10), BatchLatency("r", 4000, 1.5, 10), BatchLatency("r", 8000, 0.5, 30)]
    out = batch_latencies(bs)
    # the first batch of a run has no previous trigger: no estimate
    assert [(b.trigger_ms, lat, src) for b, lat, src in out] == [(4000, 2.0 + 1.5, "estimated"),
                                                                  (8000, 2.0 + 0.5, "estimated")]


def test_event_time_wait_is_used_when_reported_and_runs_are_separate():
    bs = [BatchLatency("a", 0, 1.0, 10, wait_s=0.25), BatchLatency("b", 1000, 1.0, 10),
          BatchLatency("b", 3000, 1.0, 10), BatchLatency("a", 4000, 2.0, 10, wait_s=3.0)]
    out = {(b.run_id, b.trigger_ms): (lat, src) for b, lat, src in batch_latencies(bs)}
    assert out == {("a", 0): (1.25, "event-time"), ("b", 3000): (2.0, "estimated"), ("a", 4000): (5.0, "event-time")}
    # without event time the same batches are estimated from their own run's triggers
    plain = {(b.run_id, b.trigger_ms): lat for b, lat, _ in batch_latencies(bs, use_event_time=False)}
    assert plain == {("b", 3000): 2.0, ("a", 4000): 4.0}


def test_span_mean_weights_records_and_assigns_by_completion():
    bs = [BatchLatency("r", 0, 0.5, 0, wait_s=0.0),        # no records: ignored
          BatchLatency("r", 1000, 1.0, 10, wait_s=1.0),   # completes at 2.0 s, latency 2.0
          BatchLatency("r", 3000, 1.0, 30, wait_s=3.0),   # completes at 4.0 s, latency 4.0
          BatchLatency("r", 4500, 1.0, 20, wait_s=0.5)]   # completes at 5.5 s: next span, latency 1.5
    spans = span_latencies(bs, span_s=5.0)
    assert [(s.start_ms, s.batches, s.records) for s in spans] == [(0, 2, 40), (5000, 1, 20)]
    assert spans[0].latency_s == pytest.approx((10 * 2.0 + 30 * 4.0) / 40)
    assert spans[1].latency_s == pytest.approx(1.5) and spans[1].source == "event-time"


# -- API ----------------------------------------------------------------------------------------
@pytest.fixture
def client(sqlite_url):
    from spark_governor.api.auth import store_tokens

    db.upgrade(sqlite_url)
    eng = db.make_engine(sqlite_url)
    store_tokens(eng, {"ops": TOKEN})
    app = create_app(eng, Settings(window_ms=5000))
    yield app.test_client(), eng
    eng.dispose()


def batch(i, trigger_ms, processing_ms, rows=100, wait_us=None):
    observed = {}
    if wait_us is not None:
        observed = {"spark_governor_event_time": {"records": rows, "min_us": trigger_ms * 1000 - 2_000_000,
                                                  "max_us": trigger_ms * 1000 - 1000, "wait_us_avg": wait_us}}
    return {"query_id": "q", "run_id": "run", "batch_id": i, "trigger_ms": trigger_ms,
            "batch_duration_ms": processing_ms, "durations_ms": {"triggerExecution": processing_ms},
            "num_input_rows": rows, "state_operators": [], "event_time": {}, "observed_metrics": observed}


def post(client, batches, seq=1):
    rep = {"schema_version": 1, "job": "lat-job", "reporter": {"id": "r", "seq": seq}, "batches": batches}
    r = client.post("/api/v1/reports", data=gz(rep), headers={"Content-Encoding": "gzip"})
    assert r.status_code == 200, r.json


def test_bad_constraints_are_refused_naming_the_field_and_store_nothing(client):
    c, eng = client
    for body, field in (({"bound_ms": 0}, "bound_ms"), ({}, "bound_ms"), ({"bound_ms": 10, "span_s": -1}, "span_s"),
                        ({"bound_ms": 10, "vertices": []}, "vertices"), ({"bound_ms": 10, "vertices": ["a", "a"]},
                                                                         "vertices"),
                        ({"bound_ms": 10, "extra": 1}, "extra")):
        r = c.put("/api/v1/jobs/lat-job/constraints/c1?register=true", json=body, headers=AUTH)
        assert r.status_code == 400 and r.json["error"].startswith(field), (body, r.json)
    assert c.put("/api/v1/jobs/lat-job/constraints/c1?register=true", json={"bound_ms": 10}).status_code == 401
    assert c.put("/api/v1/jobs/lat-job/constraints/bad name?register=true", json={"bound_ms": 10},
                 headers=AUTH).json["error"].startswith("name")
    with eng.connect() as conn:
        assert conn.execute(select(func.count()).select_from(latency_constraints)).scalar() == 0


def test_measured_latency_bound_and_attainment_per_span(client):
    c, _ = client
    span_ms = 5000
    base = (int(time.time() * 1000) // span_ms - 6) * span_ms  # six complete spans ago
    # spans 0-1: event-time wait 0.5 s + 1 s processing = 1.5 s; spans 2-3: 3 s wait + 1 s = 4 s
    batches = [batch(k, base + k * 2500, 1000, wait_us=500_000 if k < 4 else 3_000_000) for k in range(8)]
    post(c, batches)
    assert c.put("/api/v1/jobs/lat-job/constraints/e2e?register=true", json={"bound_ms": 2000}, headers=AUTH).status_code == 200
    got = c.get("/api/v1/jobs/lat-job/constraints/e2e?spans=10").json
    rows = [(s["start_ms"] - base, round(s["latency_ms"]), s["attained"], s["source"]) for s in got["spans"]]
    # batch k completes at base + 2.5k + 1 s: spans [0,5) hold k=0,1; [5,10) k=2,3; ...
    assert rows == [(0, 1500, True, "event-time"), (5000, 1500, True, "event-time"),
                    (10000, 4000, False, "event-time"), (15000, 4000, False, "event-time")]
    assert got["attainment"] == 0.5 and got["latest"]["latency_ms"] == pytest.approx(4000)
    # without event time the same batches are estimated: gap 2.5 s / 2 + 1 s
    c.put("/api/v1/jobs/lat-job/constraints/e2e?register=true", json={"bound_ms": 2000, "use_event_time": False}, headers=AUTH)
    est = c.get("/api/v1/jobs/lat-job/constraints/e2e?spans=10").json
    assert {round(s["latency_ms"]) for s in est["spans"]} == {2250} and est["source"] == "estimated"
    assert est["attainment"] == 0.0


def test_constraints_of_a_job_share_one_span(client):
    c, _ = client
    assert c.put("/api/v1/jobs/lat-job/constraints/a?register=true", json={"bound_ms": 10, "span_s": 5}, headers=AUTH).status_code == 200
    r = c.put("/api/v1/jobs/lat-job/constraints/b?register=true", json={"bound_ms": 10, "span_s": 10}, headers=AUTH)
    assert r.status_code == 409 and r.json["error"].startswith("span_s")
    # the only constraint may change its own span
    assert c.put("/api/v1/jobs/lat-job/constraints/a?register=true", json={"bound_ms": 10, "span_s": 10}, headers=AUTH).status_code == 200
