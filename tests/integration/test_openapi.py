"""The OpenAPI document matches the API: real requests and responses validated against it.

A control plane runs on 127.0.0.1; every documented operation is called over HTTP (good and bad
requests), each request and response is validated with openapi-core against the document the
server itself serves, and every Flask route must be documented.
"""
import gzip
import json
import re
import time
from pathlib import Path

import pytest
import requests
from openapi_core import OpenAPI
from openapi_core.contrib.requests import RequestsOpenAPIRequest, RequestsOpenAPIResponse
from openapi_core.exceptions import OpenAPIError

from spark_governor.bench.reports import gz
from spark_governor.bench.reports import make_report as _make_report


def make_report(*args, **kwargs):
    """A report folded with this module's control planes' 1 s windows."""
    return _make_report(*args, **{"window_ms": 1000, **kwargs})
from tests.integration.test_policy_api import report as ratio_report

TOKEN = "openapi-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
def plane(start_plane):
    return start_plane(TOKEN, window_ms=1000, evaluation_interval_s=3600)


class Checked:
    """Sends requests to the plane and validates each request and response against the document."""

    def __init__(self, plane) -> None:
        self.plane = plane
        self.doc = requests.get(f"{plane.url}/api/v1/openapi.json", timeout=10).json()
        self.spec = OpenAPI.from_dict(self.doc)
        self.session = requests.Session()
        self.called: set[tuple[str, str]] = set()

    def __call__(self, method: str, path: str, *, status: int, valid_request: bool = True,
                 validate_request_body: bool = True, **kwargs) -> requests.Response:
        prepared = requests.Request(method, self.plane.url + path, **kwargs).prepare()
        resp = self.session.send(prepared, timeout=30)
        assert resp.status_code == status, (method, path, resp.status_code, resp.text[:500])
        oa_request = RequestsOpenAPIRequest(prepared)
        if validate_request_body:
            if valid_request:
                self.spec.validate_request(oa_request)
            else:
                with pytest.raises(OpenAPIError):
                    self.spec.validate_request(oa_request)
        self.spec.validate_response(oa_request, RequestsOpenAPIResponse(resp))
        self.called.add((method.lower(), self._template(path)))
        return resp

    def _template(self, path: str) -> str:
        path = path.split("?")[0]
        for template in self.doc["paths"]:
            if re.fullmatch(re.sub(r"\{[^}]+\}", "[^/]+", template), path):
                return template
        raise AssertionError(f"{path} matches no documented path")


def documented_operations(doc: dict) -> set[tuple[str, str]]:
    return {(m, p) for p, item in doc["paths"].items() for m in item if m in ("get", "put", "post", "delete")}


def test_document_is_valid_openapi_and_covers_every_route(plane):
    from openapi_spec_validator import validate

    doc = requests.get(f"{plane.url}/api/v1/openapi.json", timeout=10).json()
    validate(doc)
    assert doc["openapi"].startswith("3.1")
    routes = set()
    for rule in plane.app.url_map.iter_rules():
        if rule.endpoint == "static":
            continue
        path = re.sub(r"<(?:[a-z]+:)?([a-z_]+)>", r"{\1}", rule.rule)
        routes |= {(m.lower(), path) for m in rule.methods - {"HEAD", "OPTIONS"}}
    assert routes == documented_operations(doc)


def test_real_requests_and_responses_match_the_document(plane):
    call = Checked(plane)
    # -- ingest: JSON, gzip, bad ----------------------------------------------------------------
    rep = make_report(job="oa-job", n_tasks=40, batches=4, seed=3, start_ms=int(time.time() * 1000) - 600_000)
    body = call("POST", "/api/v1/reports", status=200, json=rep).json()
    assert body["accepted"]["tasks"] == 40
    rep2 = make_report(job="oa-job", n_tasks=8, seq=2, reporter_id=rep["reporter"]["id"], seed=4)
    call("POST", "/api/v1/reports", status=200, data=gz(rep2),
         headers={"Content-Encoding": "gzip", "Content-Type": "application/json"}, validate_request_body=False)
    bad = json.loads(json.dumps(rep))
    bad["tasks"][0]["launch_ms"] = -1
    r = call("POST", "/api/v1/reports", status=400, json=bad, valid_request=False)
    assert "tasks.0.launch_ms" in r.json()["error"]
    call("POST", "/api/v1/reports", status=415, data=b"{}", headers={"Content-Encoding": "br",
                                                                       "Content-Type": "application/json"},
         valid_request=False)
    log = gzip.decompress((Path(__file__).resolve().parents[1] / "data" / "replay_template.jsonl.gz").read_bytes())
    octet = {**AUTH, "Content-Type": "application/octet-stream"}
    assert call("POST", "/api/v1/replays?job=oa-replay", status=201, data=log, headers=octet).json()["batches"] > 0
    call("POST", "/api/v1/replays?job=oa-replay", status=409, data=log, headers=octet)
    call("POST", "/api/v1/replays?job=oa-replay-2&codec=gzip", status=400, data=log, headers=octet, valid_request=False)
    call("POST", "/api/v1/replays?job=oa-replay-2", status=401, data=log,
         headers={"Content-Type": "application/octet-stream"}, valid_request=False)

    # -- statistics ---------------------------------------------------------------------------
    assert call("GET", "/api/v1/jobs", status=200).json()["jobs"][0]["name"] == "oa-job"
    call("GET", "/api/v1/jobs/oa-job", status=200)
    call("GET", "/api/v1/jobs/nope", status=404)
    stages = call("GET", "/api/v1/jobs/oa-job/stages?windows=100", status=200).json()["stages"]
    assert stages and stages[0]["summary"]["tasks"] > 0
    call("GET", "/api/v1/jobs/oa-job/stages?windows=0", status=400, valid_request=False)
    call("GET", f"/api/v1/jobs/oa-job/stages/{stages[0]['key']}/tasks?windows=100", status=200)
    call("GET", "/api/v1/jobs/oa-job/stages/no-such-template/tasks", status=404)
    assert len(call("GET", "/api/v1/jobs/oa-job/batches?limit=10", status=200).json()["batches"]) == 4
    call("GET", "/api/v1/jobs/oa-job/batches?limit=abc", status=400, valid_request=False)
    (run,) = call("GET", "/api/v1/jobs/oa-job/runs", status=200).json()["runs"]
    assert run["latest"] and run["batches"] == 4
    cluster = call("GET", "/api/v1/jobs/oa-job/cluster", status=200).json()
    assert cluster["job"] == "oa-job" and cluster["run_id"] == run["run_id"] and cluster["driver_overhead"]["samples"] >= 1
    call("GET", "/api/v1/jobs/nope/cluster", status=404)
    call("GET", f"/api/v1/jobs/oa-job/batches?run={run['run_id']}", status=200)
    call("GET", "/api/v1/jobs/oa-job/stages?run=all", status=200)
    call("GET", "/api/v1/jobs/oa-job/batches?run=no-such-run", status=404)
    call("GET", "/api/v1/jobs/nope/runs", status=404)
    # -- the job between micro-batches (schema v2 query states) -----------------------------------
    now = int(time.time() * 1000)
    states = {"schema_version": 2, "job": "oa-job", "reporter": {"id": "oa-live", "seq": 1}, "queries": [
        {"query_id": "q-1", "run_id": "run-1", "name": "clicks", "observed_ms": now, "status": "running",
         "running_batch_id": 7, "running_batch_start_ms": now - 4000, "last_batch_id": 6,
         "last_batch_end_ms": now - 4100, "trigger_interval_ms": 1000, "backlog_rows": 5000,
         "oldest_unprocessed_ms": now - 5000, "arrival_rows_per_second": 1000.0,
         "sources": [{"description": "zipf", "processed_offset": '{"rows":1000,"t_ms":1}', "processed_rows": 1000,
                      "available_rows": 6000, "backlog_rows": 5000, "oldest_unprocessed_ms": now - 5000,
                      "arrival_rows_per_second": 1000.0}]}]}
    call("POST", "/api/v1/reports", status=200, json=states)
    live = call("GET", "/api/v1/jobs/oa-job/live?window_s=60", status=200).json()["live"]
    assert live["status"] == "running" and live["running_batch_age_s"] >= 4.0 and live["backlog_rows"] >= 5000
    call("GET", "/api/v1/jobs/oa-job/live?window_s=0", status=400, valid_request=False)
    call("GET", "/api/v1/jobs/nope/live", status=404)
    health = call("GET", "/api/v1/jobs/oa-job/health?window_s=60", status=200).json()
    assert health["state"] in ("unknown", "no-progress", "underprovisioned", "optimal", "overprovisioned", "idle")
    call("GET", "/api/v1/jobs/oa-job/health?window_s=0", status=400, valid_request=False)
    call("GET", "/api/v1/jobs/nope/health", status=404)
    # -- policies -------------------------------------------------------------------------------
    names = [p["name"] for p in call("GET", "/api/v1/policies", status=200).json()["policies"]]
    assert "threshold" in names
    url = "/api/v1/jobs/oa-job/policies/threshold"
    call("PUT", url, status=401, json={"mode": "act"}, valid_request=False)  # no token
    call("PUT", url, status=401, json={"mode": "act"}, headers={"Authorization": "Bearer wrong"})
    r = call("PUT", url, status=400, json={"mode": "act", "config": {"scaling_up_ratio": 7}}, headers=AUTH)
    assert "config.scaling_up_ratio" in r.json()["error"]
    call("PUT", url, status=400, json={"mode": "sometimes"}, headers=AUTH, valid_request=False)
    call("PUT", url, status=200, json={"mode": "dry-run", "config": {"trigger_interval_s": 2.0}}, headers=AUTH)
    call("PUT", "/api/v1/jobs/oa-job/policies/utilization-threshold", status=409, json={}, headers=AUTH)
    call("PUT", "/api/v1/jobs/oa-job/policies/no-such-policy", status=404, json={}, headers=AUTH)
    call("GET", "/api/v1/jobs/oa-job/policies", status=200)
    call("GET", url, status=200)
    call("GET", "/api/v1/jobs/oa-job/policies/utilization-threshold", status=404)
    # -- decisions, approval, directives ----------------------------------------------------------
    now = int(time.time() * 1000)
    call("POST", "/api/v1/reports", status=200, json=ratio_report(job="oa-job", seq=3, ratio=0.95, now_ms=now,
                                                                  reporter_id=rep["reporter"]["id"]))
    from spark_governor.aggregators.queries import job_row

    with plane.engine.connect() as conn:
        jid = job_row(conn, "oa-job").id
    (did,) = plane.app.extensions["spark_governor.governor"].evaluate_job(jid, now)
    (d,) = call("GET", "/api/v1/jobs/oa-job/decisions?policy=threshold&knob=executors&mode=dry-run",
                status=200).json()["decisions"]
    assert d["status"] == "recorded"
    call("GET", f"/api/v1/jobs/oa-job/decisions?since_ms={now - 1000}&until_ms={now + 1000}&limit=5", status=200)
    call("GET", "/api/v1/jobs/oa-job/decisions?since_ms=yesterday", status=400, valid_request=False)
    call("POST", f"/api/v1/jobs/oa-job/decisions/{did}/approve", status=401, valid_request=False)
    approved = call("POST", f"/api/v1/jobs/oa-job/decisions/{did}/approve", status=200, headers=AUTH).json()
    assert approved["directive_version"] == 1
    call("POST", f"/api/v1/jobs/oa-job/decisions/{did}/approve", status=409, headers=AUTH)
    call("POST", "/api/v1/jobs/oa-job/decisions/99999/approve", status=404, headers=AUTH)
    pending = call("POST", "/api/v1/reports", status=200,
                   json=ratio_report(job="oa-job", seq=4, reporter_id=rep["reporter"]["id"])).json()["directives"]
    assert pending == [{"knob": "executors", "version": 1, "value": 3}]
    call("POST", "/api/v1/reports", status=200, json=ratio_report(
        job="oa-job", seq=5, executors=3, reporter_id=rep["reporter"]["id"],
        applied=[{"knob": "executors", "version": 1, "status": "applied", "message": "requested 3 executors"}]))
    (dv,) = call("GET", "/api/v1/jobs/oa-job/directives", status=200).json()["directives"]
    assert dv["status"] == "applied"
    # -- latency constraints --------------------------------------------------------------------
    curl = "/api/v1/jobs/oa-job/constraints/e2e"
    call("PUT", curl, status=401, json={"bound_ms": 5000}, valid_request=False)
    r = call("PUT", curl, status=400, json={"bound_ms": -1}, headers=AUTH, valid_request=False)
    assert r.json()["error"].startswith("bound_ms")
    call("PUT", curl, status=200, json={"bound_ms": 5000}, headers=AUTH)
    call("PUT", "/api/v1/jobs/oa-job/constraints/map-stage", status=200, headers=AUTH,
         json={"bound_ms": 800, "vertices": [stages[0]["key"]]})
    call("PUT", "/api/v1/jobs/oa-job/constraints/other-span", status=409, json={"bound_ms": 5000, "span_s": 7},
         headers=AUTH)
    listed = call("GET", "/api/v1/jobs/oa-job/constraints?spans=60", status=200).json()["constraints"]
    assert [c["name"] for c in listed] == ["e2e", "map-stage"]
    e2e = call("GET", f"{curl}?spans=60", status=200).json()
    assert e2e["spans"] and e2e["source"] == "estimated"
    call("GET", f"{curl}?spans=0", status=400, valid_request=False)
    call("GET", "/api/v1/jobs/oa-job/constraints/none", status=404)
    call("DELETE", "/api/v1/jobs/oa-job/constraints/map-stage", status=200, headers=AUTH)
    call("DELETE", "/api/v1/jobs/oa-job/constraints/map-stage", status=404, headers=AUTH)
    call("GET", "/api/v1/jobs/oa-job/events", status=200)
    call("GET", "/api/v1/jobs/oa-job/holds", status=200)
    # -- partitioning (full coverage in tests/test_partitioning_plane.py) -----------------------
    call("GET", "/api/v1/jobs/oa-job/partitioning?limit=5", status=200)
    call("GET", "/api/v1/jobs/oa-job/partitioning/plan", status=404)
    # -- removal, health, metrics, the document itself -----------------------------------------------
    call("DELETE", url, status=401, valid_request=False)
    call("DELETE", url, status=200, headers=AUTH)
    call("DELETE", url, status=404, headers=AUTH)
    call("GET", "/healthz", status=200)
    call("GET", "/metrics", status=200)
    call("GET", "/api/v1/openapi.json", status=200)
    call("GET", "/api/docs", status=200)
    call("GET", "/api/docs/swagger-ui.css", status=200)
    call("GET", "/api/docs/no-such-file.js", status=404)
    # a job that never reported: 404, unless pre-registered explicitly
    call("PUT", "/api/v1/jobs/oa-typo/policies/threshold", status=404, json={}, headers=AUTH)
    call("PUT", "/api/v1/jobs/oa-typo/constraints/e2e", status=404, json={"bound_ms": 5000}, headers=AUTH)
    call("PUT", "/api/v1/jobs/oa-later/constraints/e2e?register=true", status=200, json={"bound_ms": 5000},
         headers=AUTH)
    call("PUT", "/api/v1/jobs/oa-later/policies/threshold?register=true", status=200, json={}, headers=AUTH)
    assert call.called == documented_operations(call.doc), "every documented operation is exercised"


def test_a_response_with_an_undocumented_field_fails_validation(plane):
    """The check can fail: a response carrying a field the document does not name is refused."""
    call = Checked(plane)
    prepared = requests.Request("GET", plane.url + "/api/v1/jobs").prepare()
    resp = requests.Session().send(prepared, timeout=10)
    resp._content = json.dumps({"jobs": [], "surprise": 1}).encode()
    with pytest.raises(OpenAPIError):
        call.spec.validate_response(RequestsOpenAPIRequest(prepared), RequestsOpenAPIResponse(resp))
