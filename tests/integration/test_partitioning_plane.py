"""Partition statistics through the control plane: wire → SQL → JobView → prompt policy → directive,
the partitioning API and /metrics (real SQLite, and PostgreSQL where available)."""
import time

import numpy as np
import pytest

from spark_governor.aggregators import db
from spark_governor.api.app import Settings, create_app
from spark_governor.bench.partition_data import zipf_counts
from spark_governor.bench.reports import gz
from spark_governor.collectors.partition_plan import PlanRunner
from spark_governor.collectors.plan_placement import realize
from spark_governor.policies.partitioning.base import KeyCounts
from spark_governor.policies.wire import MAX_KEY_COUNTS

TOKEN = "s3cret-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def app(request, sqlite_url):
    url = sqlite_url if request.param == "sqlite" else request.getfixturevalue("fresh_postgres_db")
    db.upgrade(url)
    eng = db.make_engine(url)
    from spark_governor.api.auth import store_tokens

    store_tokens(eng, {"ops": TOKEN})
    yield create_app(eng, Settings(window_ms=5000, evaluation_interval_s=10))
    eng.dispose()


def partition_record(batch_id, w, tuples=5000, keys=300, P=4, R=4, z=1.3, interval_s=2.0):
    counts = zipf_counts(z, keys, tuples, seed=batch_id)
    order = counts.descending()
    return {"batch_id": batch_id, "algorithm": "prompt", "source": "batch", "partitions": P, "reduce": R,
            "tuples": counts.total, "keys": keys,  # the key support: distinct keys stay level
            "key_counts": [[counts.keys[i], int(counts.counts[i])] for i in order],
            "block_loads": [counts.total // P] * (P - 1) + [counts.total - (counts.total // P) * (P - 1)],
            "bsi": 0.5, "bci": 3.0, "ksr": 1.1, "mpi": 1.5, "max_mean_load": 1.0004, "bsi_buckets": 10.0,
            "split_keys": 3, "stats_ms": 120.0, "planning_ms": 4.5, "processing_ms": w * interval_s * 1000}


def report(seq, partitions=(), applied=()):
    return {"schema_version": 1, "job": "job-p", "reporter": {"id": "r1", "seq": seq, "applied": list(applied)},
            "partitions": list(partitions)}


def post(client, rep, status=200):
    r = client.post("/api/v1/reports", data=gz(rep), headers={"Content-Encoding": "gzip"})
    assert r.status_code == status, r.json
    return r.json


def test_old_reports_stay_valid_and_bounds_are_named(app):
    client = app.test_client()
    post(client, report(1))  # no partitions field at all
    too_many = partition_record(1, 0.5)
    too_many["key_counts"] = [[f"k{i}", 1] for i in range(MAX_KEY_COUNTS + 1)]
    too_many["tuples"] = MAX_KEY_COUNTS + 1
    r = post(client, report(2, [too_many]), status=400)
    assert "partitions.0.key_counts" in r["error"]
    bad = partition_record(1, 0.5)
    bad["block_loads"] = [1, 2]
    assert "block_loads" in post(client, report(3, [bad]), status=400)["error"]


def test_prompt_policy_plans_the_next_batch_and_scales_out(app):
    client = app.test_client()
    # three batches above W = 0.9 with growing data rate: Algorithm 4 adds a Map task (d = 3)
    recs = [partition_record(i, w, tuples=5000 + 500 * i) for i, w in enumerate([0.5, 0.95, 0.97, 0.99])]
    for i, rec in enumerate(recs):
        post(client, report(i + 1, [rec]))
    r = client.put("/api/v1/jobs/job-p/policies/prompt?register=true", headers=AUTH,
                   json={"mode": "act", "config": {"trigger_interval_s": 2.0, "partitions": 4, "d": 3}})
    assert r.status_code == 200, r.json
    gov = app.extensions["spark_governor.governor"]
    from sqlalchemy import select
    from spark_governor.aggregators.models import jobs

    with app.extensions["spark_governor.engine"].connect() as conn:
        jid = conn.execute(select(jobs.c.id).where(jobs.c.name == "job-p")).scalar()
    (did,) = gov.evaluate_job(jid, int(time.time() * 1000))
    (d,) = [x for x in client.get("/api/v1/jobs/job-p/decisions").json["decisions"] if x["id"] == did]
    assert d["status"] == "issued" and d["prediction"]["max_mean_load"] <= 1.01
    plan = client.get("/api/v1/jobs/job-p/partitioning/plan").json["plan"]
    assert (plan["partitions"], plan["reduce"]) == (5, 4)  # rate up, keys about equal → Map +1
    assert plan["elasticity"]["action"] == "out" and plan["based_on"]["batch_id"] == 3
    assert sum(c for e in plan["assignment"].values() for _, c in e["blocks"]) == recs[-1]["tuples"]
    # nothing new: no second decision from the same batch
    assert gov.evaluate_job(jid, int(time.time() * 1000)) == []
    # the directive reaches the job, whose applier takes it and realizes it on the next batch
    resp = post(client, report(10))
    (directive,) = [x for x in resp["directives"] if x["knob"] == "partition_plan"]
    runner = PlanRunner("k", {"n": ("count", None)}, source="directive")
    status, _ = runner.applier(directive["value"])
    assert status == "applied" and runner.partitions == 5
    nxt = KeyCounts.from_mapping(recs[-1]["key_counts"])
    realized = realize(directive["value"], nxt)
    assert realized.block_loads().max() / realized.block_loads().mean() <= 1.01
    post(client, report(11, applied=[{"knob": "partition_plan", "version": directive["version"], "status": "applied"}]))
    assert client.get("/api/v1/jobs/job-p/partitioning/plan").json["status"] == "applied"
    # the partitioning endpoint: batches, top keys of the latest, the plan decision
    body = client.get("/api/v1/jobs/job-p/partitioning?limit=3&top=5").json
    assert [b["batch_id"] for b in body["batches"]] == [1, 2, 3]
    assert len(body["batches"][-1]["top_keys"]) == 5 and body["batches"][0]["top_keys"] is None
    assert body["plan"]["partitions"] == 5 and body["plan"]["elasticity"]["action"] == "out"
    assert client.get("/api/v1/jobs/job-p/partitioning?limit=0").status_code == 400
    assert client.get("/api/v1/jobs/nope/partitioning").status_code == 404
    # /metrics
    text = client.get("/metrics").data.decode()
    assert 'spark_governor_partition_max_mean_load{spark_job="job-p"} 1.0004' in text
    assert 'spark_governor_partition_block_tuples{block="0",spark_job="job-p"}' in text
    assert 'spark_governor_partition_batches_total{spark_job="job-p"} 4.0' in text
    assert 'spark_governor_partition_predicted_max_mean_load{policy="prompt",spark_job="job-p"}' in text
    assert 'spark_governor_partition_batch_seconds{spark_job="job-p"} 1.98' in text


def test_policy_without_statistics_does_nothing(app):
    from spark_governor.policies.base import JobView
    from spark_governor.policies.prompt_policy import PromptConfig, PromptPolicy

    assert PromptPolicy().evaluate(JobView(job="j", now_ms=0, window_s=10), PromptConfig()) == []


def test_partitioning_responses_match_the_openapi_document(start_plane):
    from tests.integration.test_openapi import Checked

    plane = start_plane(TOKEN, window_ms=1000, evaluation_interval_s=3600)
    call = Checked(plane)
    rec = partition_record(7, 0.5)
    call("POST", "/api/v1/reports", status=200, json=report(1, [rec]))
    body = call("GET", "/api/v1/jobs/job-p/partitioning?limit=5&top=3", status=200).json()
    assert body["batches"][0]["top_keys"] == rec["key_counts"][:3] and body["plan"] is None
    call("GET", "/api/v1/jobs/job-p/partitioning?top=x", status=400, valid_request=False)
    call("GET", "/api/v1/jobs/job-p/partitioning/plan", status=404)
    call("PUT", "/api/v1/jobs/job-p/policies/prompt?register=true", status=200, headers=AUTH,
         json={"mode": "act", "config": {"trigger_interval_s": 2.0}})
    plane.app.extensions["spark_governor.governor"].evaluate_all(int(time.time() * 1000))
    plan = call("GET", "/api/v1/jobs/job-p/partitioning/plan", status=200).json()
    assert plan["version"] == 1 and plan["plan"]["algorithm"] == "prompt"
    assert call("GET", "/api/v1/jobs/job-p/partitioning", status=200).json()["plan"]["planned_keys"] > 0
