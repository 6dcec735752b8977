"""Issue #45: the rules that ship (``api.prometheus_rules``) — checked and unit-tested by ``promtool``, and loaded by
a real Prometheus scraping a real ``serve`` (two gunicorn workers, SQLite) whose job violates its latency bound:
the fast-burn alert fires, and resolves once the job recovers; the SLO counters on ``/metrics`` equal the
attainment the API reports over the same spans."""
from __future__ import annotations

import gzip
import json
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest
import requests
import yaml

from spark_governor.api import prometheus_rules
from spark_governor.api.processes import wait_for
from tests.conftest import require
from tests.serve_process import ServeProcess

TESTS = Path(__file__).resolve().parents[1] / "prometheus" / "rules_test.yml"
REPORT_SECRET, OPS_SECRET = "rules-report-secret-1", "rules-ops-secret-123"
TOKENS = {"reporter": f"report={REPORT_SECRET}", "ops": f"write={OPS_SECRET}"}
JOB, SLO = "orders", "fresh"


def _promtool() -> str:
    binary = shutil.which("promtool")
    require(binary is not None, "promtool (Debian package prometheus)")
    return binary


def test_the_shipped_rule_files_are_the_generated_ones():
    """deploy/prometheus/spark-governor.rules.yml and the kustomize base's PrometheusRule are render()'s output
    (regenerate with ``python -m spark_governor.api.prometheus_rules``) and hold the same groups."""
    assert prometheus_rules.RULES_FILE.read_text() == prometheus_rules.rule_file()
    assert prometheus_rules.OPERATOR_FILE.read_text() == prometheus_rules.operator_file()
    plain = yaml.safe_load(prometheus_rules.RULES_FILE.read_text())
    operator = yaml.safe_load(prometheus_rules.OPERATOR_FILE.read_text())
    assert operator["kind"] == "PrometheusRule" and operator["spec"] == plain
    kustomization = yaml.safe_load((prometheus_rules.OPERATOR_FILE.parent / "kustomization.yaml").read_text())
    assert prometheus_rules.OPERATOR_FILE.name in kustomization["resources"]
    compose = (prometheus_rules.REPO / "deploy" / "docker" / "compose.yaml").read_text()
    assert "../prometheus/spark-governor.rules.yml" in compose
    for config in ("deploy/prometheus.yml", "deploy/docker/prometheus/prometheus.yml"):
        assert yaml.safe_load((prometheus_rules.REPO / config).read_text())["rule_files"], config
    # every alert has a severity, a summary naming the job (or the control plane's) and a runbook section
    from markdown.extensions.toc import slugify

    runbook = (prometheus_rules.REPO / "docs" / "alerts.md").read_text()
    sections = {slugify(line.lstrip("#").strip(), "-") for line in runbook.splitlines() if line.startswith("## ")}
    alerts = [r for g in plain["groups"] for r in g["rules"] if "alert" in r]
    assert len(alerts) == 9
    for rule in alerts:
        assert rule["labels"]["severity"] in ("page", "ticket")
        assert "spark_job" in rule["annotations"]["summary"] or rule["alert"] == "SparkGovernorEvaluationsSkipped"
        section = rule["annotations"]["runbook"].split("#")[1]
        assert section in sections and rule["alert"] in runbook, rule["alert"]


def test_promtool_checks_the_rules_and_their_unit_tests_cover_every_alert(tmp_path):
    promtool = _promtool()
    spec = tmp_path / "operator-spec.yml"
    spec.write_text(yaml.safe_dump(yaml.safe_load(prometheus_rules.OPERATOR_FILE.read_text())["spec"]))
    for path in (prometheus_rules.RULES_FILE, spec):
        done = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True)
        assert done.returncode == 0, done.stdout + done.stderr
    done = subprocess.run([promtool, "test", "rules", str(TESTS)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    # each alert is seen firing and not firing
    cases = [c for t in yaml.safe_load(TESTS.read_text())["tests"] for c in t.get("alert_rule_test", [])]
    names = {r["alert"] for g in prometheus_rules.render()["groups"] for r in g["rules"] if "alert" in r}
    assert {c["alertname"] for c in cases if c["exp_alerts"]} == names
    assert {c["alertname"] for c in cases if not c["exp_alerts"]} == names


#: the SLO windows in seconds for the live test: the same rules, shortened
SHORT = {"5m": "6s", "30m": "12s", "1h": "20s", "6h": "40s", "1d": "60s", "3d": "90s", "30d": "2m"}


class Job:
    """A streaming job's reporter in a thread: one micro-batch a second, 1 000 rows, reported as it ends; its
    processing time (ms) is ``processing_ms`` (a trigger every second: a record waits 0.5 s for its batch)."""

    def __init__(self, url: str) -> None:
        self.url, self.processing_ms, self.seq, self.batch = url, 300, 0, 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.last_end_ms = 0

    def _run(self) -> None:
        while not self.stop.is_set():
            now = int(time.time() * 1000)
            self.seq += 1
            self.batch += 1
            b = {"query_id": "q", "run_id": "run-1", "batch_id": self.batch, "trigger_ms": now - self.processing_ms,
                 "batch_duration_ms": self.processing_ms, "durations_ms": {"triggerExecution": self.processing_ms},
                 "num_input_rows": 1000, "input_rows_per_second": 1000.0, "processed_rows_per_second": 1000.0}
            body = gzip.compress(json.dumps({"schema_version": 2, "job": JOB, "reporter": {"id": "r", "seq": self.seq},
                                             "batches": [b]}).encode())
            r = requests.post(f"{self.url}/api/v1/reports", data=body, timeout=5, headers={
                "Content-Type": "application/json", "Content-Encoding": "gzip",
                "Authorization": f"Bearer {REPORT_SECRET}"})
            assert r.status_code == 200, r.text
            self.last_end_ms = now
            self.stop.wait(1.0 - (time.time() % 1.0))

    def __enter__(self) -> "Job":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join(10)


def _alert_state(prom: str) -> str:
    """The fast-burn alert's state for the job: inactive, pending or firing."""
    alerts = requests.get(f"{prom}/api/v1/alerts", timeout=5).json()["data"]["alerts"]
    mine = [a for a in alerts if a["labels"].get("alertname") == "SparkGovernorLatencySLOFastBurn"
            and a["labels"].get("spark_job") == JOB]
    return mine[0]["state"] if mine else "inactive"


def _counters(url: str) -> dict:
    from prometheus_client.parser import text_string_to_metric_families

    out = {}
    for family in text_string_to_metric_families(requests.get(f"{url}/metrics", timeout=5).text):
        for s in family.samples:
            if s.name == "spark_governor_constraint_spans_total" and s.labels["spark_job"] == JOB:
                out[s.labels["result"]] = s.value
    return out


def test_fast_burn_fires_on_a_violated_bound_resolves_after_and_counters_match_the_api(
        tmp_path, sqlite_url, prometheus_factory):
    rules = tmp_path / "rules.yml"
    rules.write_text(prometheus_rules.dump(prometheus_rules.render(
        windows=SHORT, for_={"SparkGovernorLatencySLOFastBurn": "0s", "SparkGovernorLatencySLOSlowBurn": "0s"},
        slow_interval=None)))
    serve = ServeProcess(sqlite_url, tmp_path, TOKENS, ("--workers", "2")).start()
    try:
        ops = {"Authorization": f"Bearer {OPS_SECRET}"}
        r = requests.put(f"{serve.url}/api/v1/jobs/{JOB}/constraints/{SLO}", json={"bound_ms": 1000, "objective": 1.5},
                         headers=ops, params={"register": "true"}, timeout=5)
        assert r.status_code == 400 and "objective" in r.json()["error"]
        # 1 s spans, 95 %: the fast burn (14.4x) fires when more than 72 % of the spans are over the bound
        r = requests.put(f"{serve.url}/api/v1/jobs/{JOB}/constraints/{SLO}",
                         json={"bound_ms": 1000, "span_s": 1, "objective": 0.95}, headers=ops,
                         params={"register": "true"}, timeout=5)
        assert r.status_code == 200 and r.json()["objective"] == 0.95, r.text
        detail = f"{serve.url}/api/v1/jobs/{JOB}/constraints/{SLO}"
        wait_for(lambda: requests.get(detail, timeout=5).json()["slo"]["judged_until_ms"] is not None, 30,
                 what="the first SLO pass")
        first_until = requests.get(detail, timeout=5).json()["slo"]["judged_until_ms"]
        prom = prometheus_factory([f"127.0.0.1:{serve.port}"], rules=(rules,))
        with Job(serve.url) as job:
            time.sleep(3)  # within the bound: latency 0.5 s + 0.3 s
            assert _alert_state(prom) == "inactive"
            job.processing_ms = 900  # 0.5 s + 0.9 s > 1 s: every span bad
            wait_for(lambda: _alert_state(prom) == "firing", 120, 0.5, what="the fast-burn alert firing")
            burn = requests.get(f"{prom}/api/v1/query", params={
                "query": f'spark_governor:constraint_burn_rate:rate1h{{spark_job="{JOB}"}}'}, timeout=5).json()
            assert float(burn["data"]["result"][0]["value"][1]) > 14.4
            objective = requests.get(f"{prom}/api/v1/query", params={
                "query": f'spark_governor:constraint_objective:ratio{{spark_job="{JOB}"}}'}, timeout=5).json()
            assert float(objective["data"]["result"][0]["value"][1]) == 0.95
            job.processing_ms = 300  # recovered
            wait_for(lambda: _alert_state(prom) == "inactive", 120, 0.5, what="the fast-burn alert resolved")
        # the job stopped: once its last spans are judged, the counters stay
        wait_for(lambda: requests.get(detail, timeout=5).json()["slo"]["judged_until_ms"] > job.last_end_ms + 1000,
                 30, what="the last spans judged")
        slo = requests.get(detail, timeout=5).json()["slo"]
        assert slo["spans_good"] > 0 and slo["spans_bad"] > 0
        # every worker's /metrics exports the database's counts (gunicorn hands each scrape to either worker)
        for _ in range(6):
            assert _counters(serve.url) == {"good": slo["spans_good"], "bad": slo["spans_bad"]}
        # the attainment the API reports over the same spans
        until = slo["judged_until_ms"]
        m = requests.get(detail, params={"until_ms": until, "spans": (until - first_until) // 1000}, timeout=5).json()
        assert len(m["spans"]) == slo["spans_good"] + slo["spans_bad"]
        assert m["attainment"] == pytest.approx(slo["spans_good"] / len(m["spans"]))
        assert sum(s["attained"] for s in m["spans"]) == slo["spans_good"]
    finally:
        serve.stop("graceful")
