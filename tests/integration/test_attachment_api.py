"""Which knobs a job's attachment can apply (issue #17): the listener jar says so in every report, the job API
shows it, and a policy needing a knob the attachment can never apply is refused with the reason; jobs attached by
attach() (no attachment in their reports) are not refused. Test client on SQLite: no Spark."""
import json

import pytest

from spark_governor.aggregators import db
from spark_governor.api.app import Settings, create_app
from spark_governor.api.auth import store_tokens
from spark_governor.bench.reports import gz, make_report
from spark_governor.policies.wire import ReportError, parse_report

TOKEN = "attach-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
JAR_REASON = "not supported by a jar-only attachment: the batch interval is cut by spark-governor's paced sources"


@pytest.fixture
def client(sqlite_url):
    db.upgrade(sqlite_url)
    eng = db.make_engine(sqlite_url)
    store_tokens(eng, {"ops": TOKEN})
    yield create_app(eng, Settings()).test_client()
    eng.dispose()


def jar_report(job: str, seq: int = 1, master: str = "spark://127.0.0.1:7077") -> dict:
    r = make_report(job=job, n_tasks=8, seq=seq, reporter_id=f"jar-{job}")
    r["reporter"].update(master=master, not_actuatable={"batch_interval": JAR_REASON, "partition_plan": "no",
                                                        "exchanges": "no"},
                         attachment={"kind": "jar", "version": "0.1.0", "can_apply": ["executors"]})
    return r


def post(client, report) -> None:
    r = client.post("/api/v1/reports", data=gz(report), headers={"Content-Encoding": "gzip"})
    assert r.status_code == 200, r.json


def put_policy(client, job, policy, enabled=True, mode="act"):
    return client.put(f"/api/v1/jobs/{job}/policies/{policy}", headers=AUTH,
                      json={"enabled": enabled, "mode": mode, "config": {}})


def gz_free(report) -> bytes:
    return json.dumps(report).encode()


def test_wire_accepts_an_attachment_and_rejects_unknown_knobs():
    ok = jar_report("w")
    assert parse_report(gz_free(ok)).reporter.attachment.can_apply == ["executors"]
    bad = jar_report("w")
    bad["reporter"]["attachment"]["can_apply"] = ["routing"]
    with pytest.raises(ReportError, match="reporter.attachment.can_apply"):
        parse_report(gz_free(bad))


def test_job_api_shows_what_the_attachment_can_apply(client):
    post(client, jar_report("jar-job"))
    post(client, make_report(job="py-job", n_tasks=4))
    jobs = {j["name"]: j for j in client.get("/api/v1/jobs").json["jobs"]}
    assert jobs["jar-job"]["attachment"] == {"kind": "jar", "version": "0.1.0", "can_apply": ["executors"]}
    assert jobs["jar-job"]["can_apply"] == ["executors"]
    assert jobs["py-job"]["attachment"] is None and jobs["py-job"]["can_apply"] is None
    assert client.get("/api/v1/jobs/jar-job").json["can_apply"] == ["executors"]


def test_a_policy_needing_a_knob_the_jar_cannot_apply_is_refused(client):
    post(client, jar_report("jar-job"))
    r = put_policy(client, "jar-job", "fixed-point")
    assert r.status_code == 409
    assert r.json["error"].startswith("knob 'batch_interval': policy 'fixed-point' needs it")
    assert "listener jar" in r.json["error"] and JAR_REASON in r.json["error"]
    assert put_policy(client, "jar-job", "prompt").status_code == 409  # partition_plan
    assert put_policy(client, "jar-job", "chaining").status_code == 409  # exchanges
    assert put_policy(client, "jar-job", "fixed-point", enabled=False).status_code == 200  # disabled: harmless
    assert put_policy(client, "jar-job", "threshold").status_code == 200  # executors: the jar applies it
    # a job attached by attach() (no attachment in its reports) and a job not seen yet are not refused
    post(client, make_report(job="py-job", n_tasks=4))
    assert put_policy(client, "py-job", "fixed-point").status_code == 200
    r = client.put("/api/v1/jobs/new-job/policies/fixed-point?register=true", headers=AUTH,
                   json={"enabled": True, "mode": "act", "config": {}})
    assert r.status_code == 200
