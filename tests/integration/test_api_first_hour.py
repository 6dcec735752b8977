"""Issue #15: the API does not invent or keep jobs, answers unknown jobs alike, separates runs, serves
an interactive page without a CDN; decisions on a not-actuatable knob say so; stopped jobs get none."""
import time

import pytest
from sqlalchemy import select

from spark_governor.aggregators import db
from spark_governor.aggregators.models import decisions, jobs
from spark_governor.api.app import Settings, create_app
from spark_governor.bench.reports import gz
from spark_governor.bench.reports import make_report as _make_report


def make_report(*args, **kwargs):
    """A report folded with this module's control planes' 1 s windows."""
    return _make_report(*args, **{"window_ms": 1000, **kwargs})
from tests.integration.test_policy_api import report as ratio_report

TOKEN = "first-hour-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
def engine(sqlite_url):
    db.upgrade(sqlite_url)
    eng = db.make_engine(sqlite_url)
    from spark_governor.api.auth import store_tokens

    store_tokens(eng, {"ops": TOKEN})
    yield eng
    eng.dispose()


@pytest.fixture
def app(engine):
    return create_app(engine, Settings(window_ms=1000, evaluation_interval_s=10, stopped_after_s=30))


@pytest.fixture
def client(app):
    return app.test_client()


def post(client, rep):
    r = client.post("/api/v1/reports", data=gz(rep), headers={"Content-Encoding": "gzip"})
    assert r.status_code == 200, r.json
    return r.json


def job_names(client):
    return [j["name"] for j in client.get("/api/v1/jobs").json["jobs"]]


# -- the API does not invent or keep jobs ---------------------------------------------------------
def test_configuring_a_job_that_never_reported_is_refused(client, engine):
    r = client.put("/api/v1/jobs/typo/policies/threshold", json={}, headers=AUTH)
    assert r.status_code == 404 and "'typo'" in r.json["error"] and "register=true" in r.json["error"]
    r = client.put("/api/v1/jobs/typo/constraints/e2e", json={"bound_ms": 5000}, headers=AUTH)
    assert r.status_code == 404 and "'typo'" in r.json["error"]
    assert job_names(client) == []
    assert 'typo' not in client.get("/metrics").get_data(as_text=True)
    assert client.put("/api/v1/jobs/typo/policies/threshold?register=maybe", json={}, headers=AUTH).status_code == 400


def test_a_pre_registered_job_is_removed_with_its_last_configuration(client, engine):
    assert client.put("/api/v1/jobs/later/policies/threshold?register=true", json={}, headers=AUTH).status_code == 200
    assert client.put("/api/v1/jobs/later/constraints/e2e", json={"bound_ms": 900}, headers=AUTH).status_code == 200
    (j,) = client.get("/api/v1/jobs").json["jobs"]
    assert (j["name"], j["state"], j["state_reason"]) == ("later", "registered", "never reported")
    assert client.delete("/api/v1/jobs/later/policies/threshold", headers=AUTH).status_code == 200
    assert job_names(client) == ["later"]  # its constraint is still configured
    assert client.delete("/api/v1/jobs/later/constraints/e2e", headers=AUTH).status_code == 200
    assert job_names(client) == []
    assert client.get("/api/v1/jobs/later").status_code == 404


def test_a_job_that_reported_stays_after_its_last_configuration_is_deleted(client):
    post(client, make_report(job="real", n_tasks=4))
    assert client.put("/api/v1/jobs/real/policies/threshold", json={}, headers=AUTH).status_code == 200
    assert client.delete("/api/v1/jobs/real/policies/threshold", headers=AUTH).status_code == 200
    assert job_names(client) == ["real"]


UNKNOWN_JOB_READS = ["", "/stages", "/stages/t-map/tasks", "/batches", "/runs", "/live", "/policies",
                     "/policies/threshold", "/decisions", "/directives", "/events", "/holds", "/constraints",
                     "/constraints/e2e", "/partitioning", "/partitioning/plan"]


def test_unknown_job_reads_answer_404_naming_the_job_everywhere(client):
    post(client, make_report(job="real", n_tasks=4))
    for suffix in UNKNOWN_JOB_READS:
        r = client.get(f"/api/v1/jobs/nope{suffix}")
        assert r.status_code == 404, (suffix, r.status_code, r.json)
        assert r.json["error"] == "job 'nope' not found", suffix
        assert client.get(f"/api/v1/jobs/real{suffix}").status_code in (200, 404)  # the route exists


# -- runs ------------------------------------------------------------------------------------------
def run_report(app_id: str, reporter: str, start_ms: int, batches: int, seq: int = 1, window_ms: int = 1000) -> dict:
    rep = make_report(job="rerun", n_tasks=16, batches=batches, start_ms=start_ms, reporter_id=reporter, seq=seq,
                      window_ms=window_ms, final=True)  # each run's only report: its windows go with it
    rep["reporter"]["app_id"] = app_id
    for b in rep["batches"]:
        b["run_id"] = f"query-run-{app_id}"
    return rep


def test_a_job_run_again_under_the_same_name_shows_its_runs_separately(client):
    t0 = int(time.time() * 1000)
    post(client, run_report("local-111", "rep-1", t0 - 120_000, batches=3))
    time.sleep(1.2)
    t1 = int(time.time() * 1000)
    post(client, run_report("local-222", "rep-2", t1, batches=5))

    runs = client.get("/api/v1/jobs/rerun/runs").json["runs"]
    assert [(r["run_id"], r["latest"], r["batches"]) for r in runs] == [("local-222", True, 5), ("local-111", False, 3)]
    (j,) = client.get("/api/v1/jobs").json["jobs"]
    assert (j["latest_run"], j["runs"]) == ("local-222", 2)

    latest = client.get("/api/v1/jobs/rerun/batches").json  # the latest run by default
    assert latest["run"]["run_id"] == "local-222" and len(latest["batches"]) == 5
    assert {b["job_run_id"] for b in latest["batches"]} == {"local-222"}
    first = client.get("/api/v1/jobs/rerun/batches?run=local-111").json
    assert first["run"]["run_id"] == "local-111" and len(first["batches"]) == 3
    assert len(client.get("/api/v1/jobs/rerun/batches?run=all").json["batches"]) == 8
    r = client.get("/api/v1/jobs/rerun/batches?run=local-999")
    assert r.status_code == 404 and "local-999" in r.json["error"]

    def tasks(run: str = "") -> int:
        stages = client.get(f"/api/v1/jobs/rerun/stages?windows=1000{run}").json["stages"]
        return sum(s["summary"]["tasks"] for s in stages if s["summary"])

    assert tasks() == 16 and tasks("&run=local-111") == 16 and tasks("&run=all") == 32
    key = client.get("/api/v1/jobs/rerun/stages").json["stages"][0]["key"]
    parts = client.get(f"/api/v1/jobs/rerun/stages/{key}/tasks?windows=1000&run=local-111").json
    assert parts["run"]["run_id"] == "local-111"
    assert sum(w["tasks"] for p in parts["partitions"] for w in p["windows"]) == 8


# -- the interactive API page ------------------------------------------------------------------------
def test_swagger_ui_is_served_locally_from_the_openapi_document(client):
    page = client.get("/api/docs")
    assert page.status_code == 200 and page.mimetype == "text/html"
    html = page.get_data(as_text=True)
    assert "/api/v1/openapi.json" in html
    assert "http://" not in html and "https://" not in html  # no CDN: every asset comes from this server
    import re

    for asset in re.findall(r'(?:src|href)="([^"]+)"', html):
        r = client.get(asset)
        assert r.status_code == 200 and len(r.data) > 0, asset
    assert "SwaggerUIBundle" in client.get("/api/docs/swagger-ui-bundle.js").get_data(as_text=True)
    assert client.get("/api/docs/../../etc/passwd").status_code == 404


def test_the_api_page_is_open_when_reads_need_a_token(engine):
    client = create_app(engine, Settings(open_reads=False)).test_client()
    assert client.get("/api/v1/jobs").status_code == 401
    assert client.get("/api/docs").status_code == 200
    assert client.get("/api/docs/swagger-ui.css").status_code == 200


# -- decisions on a not-actuatable knob -----------------------------------------------------------------
def test_a_dry_run_decision_on_a_not_actuatable_knob_says_not_actuatable(client, app, engine):
    now = int(time.time() * 1000)
    post(client, ratio_report(ratio=1.5, now_ms=now, executors=0, not_actuatable={"executors": "local mode"}))
    r = client.put("/api/v1/jobs/job-a/policies/threshold", headers=AUTH,
                   json={"mode": "dry-run", "config": {"trigger_interval_s": 2.0}})
    assert r.status_code == 200
    with engine.connect() as conn:
        jid = conn.execute(select(jobs.c.id).where(jobs.c.name == "job-a")).scalar()
    (did,) = app.extensions["spark_governor.governor"].evaluate_job(jid, now)
    (d,) = client.get("/api/v1/jobs/job-a/decisions").json["decisions"]
    assert (d["mode"], d["status"], d["status_message"]) == ("dry-run", "not_actuatable", "not actuatable: local mode")
    r = client.post(f"/api/v1/jobs/job-a/decisions/{did}/approve", headers=AUTH)
    assert r.status_code == 409


# -- stopped jobs get no decisions ------------------------------------------------------------------------
def _evaluate(app, engine, now_ms):
    app.extensions["spark_governor.governor"].evaluate_all(now_ms)
    with engine.connect() as conn:
        return conn.execute(select(decisions.c.id)).all()


def test_a_job_that_stopped_reporting_gets_no_decisions_and_shows_stopped(client, app, engine):
    now = int(time.time() * 1000)
    post(client, ratio_report(ratio=1.5, now_ms=now))
    assert client.put("/api/v1/jobs/job-a/policies/threshold", headers=AUTH,
                      json={"mode": "act", "config": {"trigger_interval_s": 2.0}}).status_code == 200
    # two minutes later, no report since: stopped, no decision
    assert _evaluate(app, engine, now + 120_000) == []
    with engine.connect() as conn:
        from spark_governor.aggregators.queries import list_jobs

        (j,) = list_jobs(conn, now_ms=now + 120_000)
    assert j["state"] == "stopped" and j["state_reason"].startswith("no report for")
    assert client.get("/api/v1/jobs").json["jobs"][0]["state"] == "active"  # reported just now
    assert len(_evaluate(app, engine, int(time.time() * 1000))) == 1  # while it reports, it is evaluated


def test_a_job_whose_queries_terminated_gets_no_decisions(client, app, engine):
    now = int(time.time() * 1000)
    post(client, ratio_report(ratio=1.5, now_ms=now))
    assert client.put("/api/v1/jobs/job-a/policies/threshold", headers=AUTH,
                      json={"mode": "act", "config": {"trigger_interval_s": 2.0}}).status_code == 200
    state = {"query_id": "q", "run_id": "run", "name": "q", "observed_ms": now, "status": "terminated"}
    post(client, {"schema_version": 2, "job": "job-a", "reporter": {"id": "r1", "seq": 2}, "queries": [state]})
    post(client, {"schema_version": 2, "job": "job-a", "reporter": {"id": "r1", "seq": 3}})  # a heartbeat after
    (j,) = client.get("/api/v1/jobs").json["jobs"]
    assert (j["state"], j["state_reason"]) == ("stopped", "every streaming query terminated")
    assert _evaluate(app, engine, int(time.time() * 1000)) == []
    from spark_governor.aggregators.job_state import unfinished_queries

    with engine.connect() as conn:  # a job that stopped its queries: nothing for the stopped-reporting alert
        assert unfinished_queries(conn, conn.execute(select(jobs.c.id)).scalar()) == 0
    # the query starts again: the job is active and evaluated again
    state.update(status="waiting", observed_ms=now + 1000, run_id="run-2")
    post(client, {"schema_version": 2, "job": "job-a", "reporter": {"id": "r1", "seq": 4}, "queries": [state]})
    assert client.get("/api/v1/jobs/job-a").json["state"] == "active"
    assert len(_evaluate(app, engine, int(time.time() * 1000))) == 1
    with engine.connect() as conn:
        assert unfinished_queries(conn, conn.execute(select(jobs.c.id)).scalar()) == 1


def test_stats_cli_shows_the_latest_run_and_picks_another(control_plane):
    import requests
    from click.testing import CliRunner

    from spark_governor.api.cli import main

    t0 = int(time.time() * 1000)
    for rep in (run_report("local-111", "rep-1", t0 - 120_000, batches=3, window_ms=5000), None,
                run_report("local-222", "rep-2", t0 + 1500, batches=5, window_ms=5000)):
        if rep is None:
            time.sleep(1.2)
            continue
        requests.post(control_plane.url + "/api/v1/reports", data=gz(rep), headers={"Content-Encoding": "gzip"},
                      timeout=10).raise_for_status()

    def stats(*args):
        r = CliRunner().invoke(main, ["stats", "rerun", "--endpoint", control_plane.url, *args])
        assert r.exit_code == 0, r.output
        return r.output

    out = stats()
    assert "rerun: run local-222 (latest); 2 runs" in out and "\n5 " in out
    assert "rerun: run local-111;" in stats("--run", "local-111")
    assert "rerun: all runs merged" in stats("--run", "all")
    import json

    out = stats("--json")
    assert json.loads(out[out.index("{"):])["run"]["run_id"] == "local-222"
    r = CliRunner().invoke(main, ["stats", "rerun", "--endpoint", control_plane.url, "--run", "nope"])
    assert r.exit_code == 1 and "run 'nope'" in r.output
