"""Issue #16, wire bounds: a report value the database cannot hold (integers beyond BIGINT / INTEGER,
NaN/Infinity anywhere, NUL in strings, too many tasks) is a 400 naming the field that stores nothing, on
SQLite and on a real PostgreSQL; a normal report is still 200, ``GET /api/v1/jobs`` stays valid JSON and
``/metrics`` exports only finite sample values."""
from __future__ import annotations

import copy
import json
import math

import pytest
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import func, select

from spark_governor.aggregators.models import metadata
from spark_governor.api.app import Settings, create_app
from spark_governor.bench.reports import make_report as _make_report


def make_report(*args, **kwargs):
    """The v1 report of whole task rows: its cases count and shape the rows (v3: tests/integration/test_edge_fold.py)."""
    return _make_report(*args, **{"schema_version": 1, **kwargs})
from spark_governor.policies.wire import MAX_TASKS_PER_REPORT

BIG64, BIG32 = 2**63, 2**31


@pytest.fixture
def engine(both_databases):
    return both_databases


@pytest.fixture
def client(engine):
    c = create_app(engine, Settings()).test_client()
    r = c.post("/api/v1/reports", json=make_report(job="job-ok", n_tasks=8, batches=2, reporter_id="ok"))
    assert r.status_code == 200, r.json
    return c


def row_counts(engine) -> dict:
    with engine.connect() as conn:
        return {t.name: conn.execute(select(func.count()).select_from(t)).scalar() for t in metadata.sorted_tables}


def _base() -> dict:
    rep = make_report(job="job-bad", n_tasks=4, batches=1, reporter_id="bad")
    rep["schema_version"] = 2
    rep["stages"] = [{"template_key": "t-map", "stage_id": 1, "attempt": 0, "num_tasks": 4,
                      "submission_ms": 1_700_000_000_000, "completion_ms": 1_700_000_000_500}]
    return rep


def _set(path: tuple, value):
    def mutate(rep: dict) -> None:
        obj = rep
        for p in path[:-1]:
            obj = obj[p]
        obj[path[-1]] = value
    return mutate


# (name, mutation, raw JSON literal replacing the placeholder 12345.5 or None, field named in the error)
CASES = [
    ("run_time_ms 2^63", _set(("tasks", 0, "run_time_ms"), BIG64), None, "tasks.0.run_time_ms"),
    ("seq 2^63", _set(("reporter", "seq"), BIG64), None, "reporter.seq"),
    ("input_records 2^63", _set(("tasks", 1, "input_records"), BIG64), None, "tasks.1.input_records"),
    ("num_input_rows 2^63", _set(("batches", 0, "num_input_rows"), BIG64), None, "batches.0.num_input_rows"),
    ("durations_ms 2^63", _set(("batches", 0, "durations_ms"), {"addBatch": BIG64}), None,
     "batches.0.durations_ms.addBatch"),
    ("partition 2^31 (INTEGER column)", _set(("tasks", 0, "partition"), BIG32), None, "tasks.0.partition"),
    ("stage_id 2^31", _set(("stages", 0, "stage_id"), BIG32), None, "stages.0.stage_id"),
    ("slots 2^31", _set(("reporter", "slots"), BIG32), None, "reporter.slots"),
    ("ack version 2^31", _set(("reporter", "applied"), [{"knob": "executors", "version": BIG32,
                                                         "status": "applied"}]), None, "reporter.applied.0.version"),
    ("rate NaN", _set(("batches", 0, "input_rows_per_second"), 12345.5), "NaN", "batches.0.input_rows_per_second"),
    ("rate Infinity", _set(("batches", 0, "processed_rows_per_second"), 12345.5), "Infinity",
     "batches.0.processed_rows_per_second"),
    ("rate 1e400", _set(("batches", 0, "input_rows_per_second"), 12345.5), "1e400", "batches.0.input_rows_per_second"),
    ("observed_metrics NaN", _set(("batches", 0, "observed_metrics"), {"m": {"avg": 12345.5}}), "NaN",
     "batches.0.observed_metrics.m"),
    ("observed_metrics huge int", _set(("batches", 0, "observed_metrics"), {"m": {"n": BIG64}}), None,
     "batches.0.observed_metrics.m"),
    ("state_operators -Infinity", _set(("batches", 0, "state_operators"), [{"memoryUsedBytes": 12345.5}]),
     "-Infinity", "batches.0.state_operators.0.memoryUsedBytes"),
    ("knob_state Infinity", _set(("reporter", "knob_state"), {"exchanges": {"cost": [1, 12345.5]}}), "Infinity",
     "reporter.knob_state.exchanges"),
    ("partition stats NaN", _set(("partitions",), [{"algorithm": "prompt", "partitions": 2, "reduce": 2,
                                                    "tuples": 10, "keys": 2, "bsi": 12345.5}]), "NaN",
     "partitions.0.bsi"),
    ("query state rate Infinity", _set(("queries",), [{"query_id": "q1", "observed_ms": 1, "status": "idle",
                                                        "arrival_rows_per_second": 12345.5}]), "Infinity",
     "queries.0.arrival_rows_per_second"),
    ("NUL in a string", _set(("tasks", 2, "executor_id"), "exec\x001"), None, "tasks.2.executor_id"),
]


@pytest.mark.parametrize("name,mutate,literal,field", CASES, ids=[c[0] for c in CASES])
def test_values_the_database_cannot_hold_are_400_and_store_nothing(client, engine, name, mutate, literal, field):
    rep = _base()
    mutate(rep)
    body = json.dumps(rep)
    if literal is not None:
        assert body.count("12345.5") == 1
        body = body.replace("12345.5", literal)
    before = row_counts(engine)
    r = client.post("/api/v1/reports", data=body, headers={"Content-Type": "application/json"})
    assert r.status_code == 400, r.get_data(as_text=True)
    assert field in r.json["error"], r.json
    assert row_counts(engine) == before
    # the API keeps answering valid JSON, /metrics finite values
    _assert_valid_reads(client)


def test_largest_storable_values_are_accepted(client, engine):
    rep = _base()
    rep["reporter"]["seq"] = BIG64 - 1
    rep["tasks"][0].update(run_time_ms=BIG64 - 1, input_records=BIG64 - 1, partition=BIG32 - 1)
    rep["batches"][0]["observed_metrics"] = {"m": {"n": BIG64 - 1, "x": 1.5e300}}
    r = client.post("/api/v1/reports", json=rep)
    assert r.status_code == 200, r.json
    assert r.json["accepted"]["tasks"] == 4
    _assert_valid_reads(client)


def test_too_many_tasks_is_400(client, engine):
    task = make_report(n_tasks=1)["tasks"][0]
    rep = {**_base(), "tasks": [task] * (MAX_TASKS_PER_REPORT + 1)}
    before = row_counts(engine)
    r = client.post("/api/v1/reports", data=json.dumps(rep), headers={"Content-Type": "application/json"})
    assert r.status_code == 400 and "tasks" in r.json["error"], r.json
    assert row_counts(engine) == before


def _no_constants(token: str):
    raise AssertionError(f"invalid JSON constant {token} in an API answer")


def _assert_valid_reads(client) -> None:
    r = client.get("/api/v1/jobs")
    assert r.status_code == 200
    jobs = json.loads(r.get_data(as_text=True), parse_constant=_no_constants)["jobs"]
    assert "job-ok" in {j["name"] for j in jobs}
    r = client.get("/metrics")
    assert r.status_code == 200
    values = [s.value for fam in text_string_to_metric_families(r.get_data(as_text=True)) for s in fam.samples]
    assert values and all(math.isfinite(v) for v in values)
