"""Policy API, governor (evaluate → decide → realize), directives and their acknowledgement."""
import subprocess
import sys
import time

import pytest
import requests
from sqlalchemy import func, select

from spark_governor.aggregators.models import audit_log, directives, policy_configs
from spark_governor.api.app import Settings, create_app
from spark_governor.bench.reports import gz

TOKEN = "s3cret-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
def engine(both_databases):
    from spark_governor.api.auth import store_tokens

    store_tokens(both_databases, {"ops": TOKEN})
    return both_databases


@pytest.fixture
def app(engine):
    return create_app(engine, Settings(window_ms=5000, evaluation_interval_s=10))


@pytest.fixture
def client(app):
    return app.test_client()


def count(engine, table, *where):
    with engine.connect() as conn:
        return conn.execute(select(func.count()).select_from(table).where(*where)).scalar()


def report(job="job-a", seq=1, reporter_id="r1", ratio=None, now_ms=None, executors=2, not_actuatable=None,
           applied=(), interval_s=2.0, n=10):
    """A report carrying ``n`` recent batches whose processing time is ``ratio`` × interval."""
    now_ms = now_ms or int(time.time() * 1000)
    batches = []
    if ratio is not None:
        for i in range(n):
            batches.append({"query_id": "q", "run_id": "run", "batch_id": seq * 100 + i,
                            "trigger_ms": now_ms - int((n - i) * interval_s * 1000),
                            "batch_duration_ms": int(ratio * interval_s * 1000),
                            "durations_ms": {"triggerExecution": int(ratio * interval_s * 1000)},
                            "num_input_rows": 10, "state_operators": [], "event_time": {}, "observed_metrics": {}})
    return {"schema_version": 1, "job": job,
            "reporter": {"id": reporter_id, "seq": seq, "executors": executors, "slots": executors,
                         "not_actuatable": not_actuatable or {}, "applied": list(applied)},
            "batches": batches}


def post(client, rep):
    r = client.post("/api/v1/reports", data=gz(rep), headers={"Content-Encoding": "gzip"})
    assert r.status_code == 200, r.json
    return r.json


def put_policy(client, name="threshold", job="job-a", headers=AUTH, **body):
    """PUT a policy; a job that has not reported yet is pre-registered (``?register=true``)."""
    body.setdefault("config", {"trigger_interval_s": 2.0})
    return client.put(f"/api/v1/jobs/{job}/policies/{name}?register=true", json=body, headers=headers)


def governor(app):
    return app.extensions["spark_governor.governor"]


def job_id(engine, name="job-a"):
    from spark_governor.aggregators.models import jobs

    with engine.connect() as conn:
        return conn.execute(select(jobs.c.id).where(jobs.c.name == name)).scalar()


# -- writes, tokens, audit ------------------------------------------------------------------
def test_writes_need_a_valid_token_and_change_nothing(client, engine):
    r = put_policy(client, headers={})
    assert r.status_code == 401 and "bearer token" in r.json["error"]
    r = put_policy(client, headers={"Authorization": "Bearer wrong"})
    assert r.status_code == 401 and "invalid token" in r.json["error"]
    assert client.delete("/api/v1/jobs/job-a/policies/threshold").status_code == 401
    assert count(engine, policy_configs) == 0
    with engine.connect() as conn:
        audits = conn.execute(select(audit_log.c.who, audit_log.c.status, audit_log.c.method)).all()
    assert [(a.who, a.status) for a in audits] == [(None, 401)] * 3


def test_tokens_are_stored_hashed(engine):
    from spark_governor.aggregators.models import api_tokens

    with engine.connect() as conn:
        (row,) = conn.execute(select(api_tokens)).all()
    assert row.name == "ops" and TOKEN not in row.token_sha256 and len(row.token_sha256) == 64


def test_policy_crud_and_catalogue(client, engine):
    catalogue = client.get("/api/v1/policies").json["policies"]
    threshold = next(p for p in catalogue if p["name"] == "threshold")
    assert threshold["knobs"] == ["executors"]
    assert threshold["config_schema"]["properties"]["scale_up_ratio"]["default"] == 0.9
    r = put_policy(client, mode="act")
    assert r.status_code == 200 and r.json["mode"] == "act" and r.json["config"]["scale_up_ratio"] == 0.9
    assert client.get("/api/v1/jobs/job-a/policies/threshold").json["enabled"] is True
    assert [p["policy"] for p in client.get("/api/v1/jobs/job-a/policies").json["policies"]] == ["threshold"]
    assert client.delete("/api/v1/jobs/job-a/policies/threshold", headers=AUTH).status_code == 200
    assert client.get("/api/v1/jobs/job-a/policies/threshold").status_code == 404
    with engine.connect() as conn:
        audits = conn.execute(select(audit_log.c.who, audit_log.c.method, audit_log.c.status)).all()
    assert [(a.who, a.method, a.status) for a in audits] == [("ops", "PUT", 200), ("ops", "DELETE", 200)]


@pytest.mark.parametrize("body,field", [
    ({"config": {"scale_up_ratio": "high"}}, "config.scale_up_ratio"),
    ({"config": {"scale_up_ratio": 0.2, "scale_down_ratio": 0.3}}, "scale_down_ratio must be below"),
    ({"config": {"unknown_knob": 1}}, "config.unknown_knob"),
    ({"mode": "sometimes"}, "mode"),
    ({"enabled": "yes please"}, "enabled"),
])
def test_bad_policy_config_is_refused_naming_the_field(client, engine, body, field):
    r = client.put("/api/v1/jobs/job-a/policies/threshold", json=body, headers=AUTH)
    assert r.status_code == 400 and field in r.json["error"]
    assert count(engine, policy_configs) == 0


def test_unknown_policy_is_404(client):
    r = put_policy(client, name="no-such-policy")
    assert r.status_code == 404 and "no-such-policy" in r.json["error"]


def test_conflicting_knob_owner_is_409(client, engine):
    assert put_policy(client).status_code == 200
    r = put_policy(client, name="utilization-threshold", config={})
    assert r.status_code == 409 and "'threshold'" in r.json["error"] and "executors" in r.json["error"]
    assert count(engine, policy_configs) == 1
    # disabled, it may be configured; enabling it later conflicts again
    assert put_policy(client, name="utilization-threshold", config={}, enabled=False).status_code == 200
    assert put_policy(client, name="utilization-threshold", config={}, enabled=True).status_code == 409


# -- governor ---------------------------------------------------------------------------------
def test_act_mode_issues_a_directive_that_the_driver_acknowledges(app, client, engine):
    now = int(time.time() * 1000)
    post(client, report(ratio=0.95, now_ms=now))
    put_policy(client, mode="act")
    (did,) = governor(app).evaluate_job(job_id(engine), now)
    (d,) = client.get("/api/v1/jobs/job-a/decisions").json["decisions"]
    assert d["id"] == did and d["status"] == "issued" and (d["old_value"], d["new_value"]) == (2, 3)
    assert d["inputs"]["ratio"] == pytest.approx(0.95, abs=0.01) and d["prediction"]["ratio"] < d["inputs"]["ratio"]
    # the directive comes back in the next report's response, the ack marks it applied
    resp = post(client, report(seq=2))
    assert resp["directives"] == [{"knob": "executors", "version": 1, "value": 3}]
    post(client, report(seq=3, executors=3, applied=[{"knob": "executors", "version": 1, "status": "applied",
                                                      "message": "requested 3 executors"}]))
    (d,) = client.get("/api/v1/jobs/job-a/decisions").json["decisions"]
    assert d["status"] == "applied" and d["applied_ms"] is not None
    (dv,) = client.get("/api/v1/jobs/job-a/directives").json["directives"]
    assert (dv["version"], dv["applied_version"], dv["status"]) == (1, 1, "applied")
    # a stale or repeated ack changes nothing
    post(client, report(seq=4, applied=[{"knob": "executors", "version": 1, "status": "failed"}]))
    assert client.get("/api/v1/jobs/job-a/directives").json["directives"][0]["status"] == "applied"


def test_local_mode_keeps_a_recommendation(app, client, engine):
    now = int(time.time() * 1000)
    post(client, report(ratio=1.5, now_ms=now, executors=0, not_actuatable={"executors": "local mode"}))
    put_policy(client, mode="act", config={"trigger_interval_s": 2.0, "min_value": 0})
    governor(app).evaluate_job(job_id(engine), now)
    (d,) = client.get("/api/v1/jobs/job-a/decisions").json["decisions"]
    assert d["status"] == "not_actuatable" and d["status_message"] == "not actuatable: local mode"
    assert count(engine, directives) == 0
    info = client.get("/api/v1/jobs/job-a/directives").json
    assert info["not_actuatable"] == {"executors": "not actuatable: local mode"}


def test_dry_run_records_and_approval_issues(app, client, engine):
    now = int(time.time() * 1000)
    post(client, report(ratio=0.2, now_ms=now, executors=4))
    put_policy(client, mode="dry-run")
    (did,) = governor(app).evaluate_job(job_id(engine), now)
    (d,) = client.get("/api/v1/jobs/job-a/decisions?mode=dry-run").json["decisions"]
    assert d["status"] == "recorded" and d["new_value"] == 3
    assert count(engine, directives) == 0
    assert client.post(f"/api/v1/jobs/job-a/decisions/{did}/approve").status_code == 401
    r = client.post(f"/api/v1/jobs/job-a/decisions/{did}/approve", headers=AUTH)
    assert r.status_code == 200 and r.json["directive_version"] == 1
    assert r.json["decision"]["status"] == "issued" and r.json["decision"]["status_message"] == "approved by ops"
    assert client.post(f"/api/v1/jobs/job-a/decisions/{did}/approve", headers=AUTH).status_code == 409
    assert client.post("/api/v1/jobs/job-a/decisions/9999/approve", headers=AUTH).status_code == 404


def test_decision_filters(app, client, engine):
    now = int(time.time() * 1000)
    post(client, report(ratio=0.95, now_ms=now))
    put_policy(client, mode="dry-run")
    governor(app).evaluate_job(job_id(engine), now)
    assert len(client.get("/api/v1/jobs/job-a/decisions?policy=threshold&knob=executors").json["decisions"]) == 1
    assert client.get("/api/v1/jobs/job-a/decisions?knob=batch_interval").json["decisions"] == []
    assert client.get(f"/api/v1/jobs/job-a/decisions?since_ms={now + 1}").json["decisions"] == []
    assert client.get("/api/v1/jobs/job-a/decisions?since_ms=yesterday").status_code == 400


def test_ineffective_scale_ups_are_held(app, client, engine):
    """Scale-ups that do not lower the ratio: after K of them the knob is held, visibly."""
    g = governor(app)
    g.stopped_after_s = 3600.0  # the simulated clock runs ahead of the reports' arrival: not a stopped job
    put_policy(client, mode="act", config={"trigger_interval_s": 2.0, "scaling_interval_s": 20,
                                           "max_ineffective_scale_ups": 2, "effectiveness_intervals": 1})
    t = int(time.time() * 1000)
    executors, seq = 2, 1
    for _ in range(3):
        post(client, report(seq=seq, ratio=1.0, now_ms=t, executors=executors))
        seq += 1
        g.evaluate_job(job_id(engine), t)
        dv = client.get("/api/v1/jobs/job-a/directives").json["directives"]
        if dv and dv[0]["status"] == "pending":
            executors = dv[0]["value"]
            post(client, report(seq=seq, executors=executors, applied=[
                {"knob": "executors", "version": dv[0]["version"], "status": "applied"}]))
            seq += 1
        t += 31_000  # past the cool-down, the scaling interval and the effectiveness window
    ds = client.get("/api/v1/jobs/job-a/decisions").json["decisions"]
    judged = [d for d in ds if d["effective"] is not None]
    assert len(judged) >= 2 and all(d["effective"] is False for d in judged)
    holds = client.get("/api/v1/jobs/job-a/holds").json["knobs"]
    assert holds == [{"knob": "executors", "held": True, "consecutive_ineffective_scale_ups": 2,
                      "last_change_ms": holds[0]["last_change_ms"]}]
    events = client.get("/api/v1/jobs/job-a/events").json["events"]
    assert any(e["kind"] == "hold" for e in events)
    metrics = client.get("/metrics").get_data(as_text=True)
    assert 'spark_governor_knob_held{knob="executors",spark_job="job-a"} 1.0' in metrics


# -- third-party policies ---------------------------------------------------------------------
@pytest.fixture(scope="session")
def plugin_installed(tmp_path_factory):
    """pip-installs tests/plugin_policy into a temporary target and puts it on sys.path."""
    from pathlib import Path

    target = tmp_path_factory.mktemp("plugin")
    src = Path(__file__).parent.parent / "plugin_policy"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target), str(src)],
                   check=True)
    sys.path.insert(0, str(target))
    yield target
    sys.path.remove(str(target))


def test_third_party_policy_from_its_own_package(plugin_installed, app, client, engine):
    names = [p["name"] for p in client.get("/api/v1/policies").json["policies"]]
    assert "fixed-executors" in names
    now = int(time.time() * 1000)
    post(client, report(now_ms=now, executors=1))
    assert put_policy(client, name="fixed-executors", mode="act", config={"target": 3}).status_code == 200
    governor(app).evaluate_job(job_id(engine), now)
    (d,) = client.get("/api/v1/jobs/job-a/decisions").json["decisions"]
    assert (d["policy"], d["new_value"], d["status"]) == ("fixed-executors", 3, "issued")


def test_a_failing_policy_is_an_event_and_others_still_run(plugin_installed, app, client, engine):
    now = int(time.time() * 1000)
    post(client, report(job="job-a", now_ms=now))
    post(client, report(job="job-b", reporter_id="r2", ratio=0.95, now_ms=now))
    assert put_policy(client, name="always-fails", job="job-a", config={}).status_code == 200
    assert put_policy(client, name="threshold", job="job-b", mode="act").status_code == 200
    governor(app).evaluate_all(now)
    events = client.get("/api/v1/jobs/job-a/events").json["events"]
    assert events[0]["kind"] == "policy_error" and "always fails" in events[0]["message"]
    assert len(client.get("/api/v1/jobs/job-b/decisions").json["decisions"]) == 1


# -- restart ------------------------------------------------------------------------------------
def test_restart_loses_no_decision_and_reissues_nothing(sqlite_url):
    from spark_governor.api.server import ControlPlane
    from spark_governor.collectors.reporter import Reporter
    from spark_governor.api.processes import wait_for

    plane = ControlPlane(db_url=sqlite_url, port=0, tokens={"ops": TOKEN}).start()
    port = plane.port
    calls = []

    def applier(value):
        calls.append(value)
        return "applied", f"set {value}"

    rep = Reporter("restart-job", plane.url, flush_interval_s=0.1, heartbeat_s=0.2, backoff_max_s=0.5,
                   appliers={"executors": applier}, live_state=lambda: {"executors": 2, "slots": 2}).start()
    try:
        now = int(time.time() * 1000)
        requests.post(plane.url + "/api/v1/reports", data=gz(report(job="restart-job", reporter_id="feeder",
                                                                     ratio=0.95, now_ms=now)),
                      headers={"Content-Encoding": "gzip"}, timeout=10).raise_for_status()
        r = requests.put(plane.url + "/api/v1/jobs/restart-job/policies/threshold", headers=AUTH, timeout=10,
                         json={"mode": "act", "config": {"trigger_interval_s": 2.0}})
        assert r.status_code == 200
        plane.app.extensions["spark_governor.governor"].evaluate_all(now)
        wait_for(lambda: calls == [3], 20, what="directive applied")

        def decision_status():
            return requests.get(plane.url + "/api/v1/jobs/restart-job/decisions", timeout=5).json()["decisions"]

        wait_for(lambda: decision_status()[0]["status"] == "applied", 20, what="ack stored")
        plane.stop()
        time.sleep(1.0)  # the reporter fails and backs off meanwhile
        plane = ControlPlane(db_url=sqlite_url, port=port, tokens={"ops": TOKEN}).start()
        wait_for(lambda: rep.sent_reports >= 3 and rep.last_error is None or rep.failed_posts > 0, 20)
        before = rep.sent_reports
        wait_for(lambda: rep.sent_reports >= before + 3, 20, what="reports after restart")
        ds = decision_status()
        assert len(ds) == 1 and ds[0]["status"] == "applied"
        (dv,) = requests.get(plane.url + "/api/v1/jobs/restart-job/directives", timeout=5).json()["directives"]
        assert (dv["version"], dv["applied_version"]) == (1, 1)
        assert calls == [3]  # applied once, not again after the restart
    finally:
        rep.stop(0.5)
        plane.stop()
