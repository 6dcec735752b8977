"""Prometheus identity and liveness of jobs on ``/metrics`` (issue 15, "Prometheus identity"; ``api.job_metrics``).

Reports go through a real in-process control plane into SQLite; the exposition is read with the
control plane's own collectors (``api.metrics.build_registry``) at chosen expiry settings, so the
test needs seconds of real time, not the default 600 s. The last test runs ``spark-governor serve``
(gunicorn) with ``SPARK_GOVERNOR_METRICS_EXPIRY=2`` and reads its ``/metrics``.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import requests
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from spark_governor.api.metrics import build_registry
from spark_governor.api.processes import free_port, wait_for

TOKEN = "identity-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def report(job: str, seq: int, now_ms: int, with_data: bool = True) -> dict:
    """Two streaming queries: ``q-named`` (named ``clicks``) and ``q-2`` (no name), each with two
    micro-batches that ended just before ``now_ms`` and a running state; without data: a heartbeat."""
    reporter = {"id": f"r-{job}", "seq": seq, "dropped_total": 0, "orphaned_total": 0, "app_id": "app",
                "master": "local[2]", "slots": 2, "executors": 0}
    out = {"schema_version": 1, "job": job, "reporter": reporter}
    if not with_data:
        return out
    out["batches"] = [{"query_id": qid, "run_id": f"run-{qid}", "name": name, "batch_id": b,
                       "trigger_ms": now_ms - 3000 + b * 1000, "batch_duration_ms": 500 + 100 * i,
                       "durations_ms": {"triggerExecution": 500 + 100 * i}, "num_input_rows": 10 * (i + 1),
                       "input_rows_per_second": 10.0, "processed_rows_per_second": 20.0, "state_operators": [],
                       "event_time": {}, "observed_metrics": {}}
                      for i, (qid, name) in enumerate((("q-named", "clicks"), ("q-2", None))) for b in range(2)]
    out["queries"] = [{"query_id": qid, "run_id": f"run-{qid}", "name": name, "observed_ms": now_ms, "status": "running",
                       "running_batch_id": 2, "running_batch_start_ms": now_ms - 200, "last_batch_id": 1,
                       "last_batch_end_ms": now_ms - 1500, "trigger_interval_ms": 1000, "backlog_rows": 5 * (i + 1),
                       "oldest_unprocessed_ms": now_ms - 300, "arrival_rows_per_second": 10.0, "sources": []}
                      for i, (qid, name) in enumerate((("q-named", "clicks"), ("q-2", None)))]
    return out


def post(plane, rep: dict) -> None:
    r = requests.post(f"{plane.url}/api/v1/reports", json=rep, timeout=10)
    assert r.status_code == 200, r.text


def exposition(engine, **kw) -> dict[str, dict[tuple, float]]:
    """``{family: {sorted label items: value}}`` of the registry's exposition."""
    registry, _ = build_registry(engine, **kw)
    text = generate_latest(registry).decode()
    assert 'job="' not in text.replace('spark_job="', "")  # never Prometheus's target label
    out: dict[str, dict] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return out


def of_job(metrics: dict, job: str) -> set[str]:
    """Names of the series that carry ``spark_job=job``."""
    return {name for name, series in metrics.items() for labels in series if ("spark_job", job) in labels}


def test_spark_job_and_query_labels(start_plane):
    plane = start_plane(TOKEN)
    post(plane, report("two-queries", 1, int(time.time() * 1000)))
    m = exposition(plane.engine)
    batch = m["spark_governor_batch_duration_seconds"]
    assert batch == {(("query", "clicks"), ("spark_job", "two-queries")): 0.5,
                     (("query", "q-2"), ("spark_job", "two-queries")): 0.6}
    assert m["spark_governor_batch_input_rows"][(("query", "q-2"), ("spark_job", "two-queries"))] == 20
    assert m["spark_governor_batch_interarrival_seconds"][(("query", "clicks"), ("spark_job", "two-queries"))] == 1.0
    assert set(m["spark_governor_backlog_rows"]) == {(("query", "clicks"), ("spark_job", "two-queries")),
                                                     (("query", "q-2"), ("spark_job", "two-queries"))}
    assert m["spark_governor_backlog_rows"][(("query", "q-2"), ("spark_job", "two-queries"))] >= 10
    assert m["spark_governor_queries"][(("spark_job", "two-queries"), ("state", "running"))] == 2
    measured = {k: v for k, v in m["spark_governor_batch_interval_seconds"].items() if ("source", "measured") in k}
    assert measured == {(("query", "clicks"), ("source", "measured"), ("spark_job", "two-queries")): 1.0,
                        (("query", "q-2"), ("source", "measured"), ("spark_job", "two-queries")): 1.0}
    assert m["spark_governor_job_up"] == {(("spark_job", "two-queries"),): 1.0}
    assert 0 <= m["spark_governor_job_last_report_age_seconds"][(("spark_job", "two-queries"),)] < 5


def test_job_up_report_age_and_expiry(start_plane):
    """A job that stops reporting goes down after ``stopped_after_s`` and, after ``expiry_s``, exports nothing
    but ``job_up`` 0 and its report age, until ``up_horizon_s``; the job that keeps reporting is untouched,
    a pre-registered job never expires, and with expiry 0 nothing does."""
    plane = start_plane(TOKEN)
    now_ms = int(time.time() * 1000)
    post(plane, report("steady", 1, now_ms))
    post(plane, report("quitter", 1, now_ms))
    r = requests.put(f"{plane.url}/api/v1/jobs/planned/policies/threshold?register=true", headers=AUTH, timeout=10,
                     json={"mode": "dry-run", "config": {"trigger_interval_s": 2}})
    assert r.status_code == 200, r.text
    settings = dict(expiry_s=2.0, stopped_after_s=1.0)
    m = exposition(plane.engine, **settings)
    assert {"spark_governor_batch_duration_seconds", "spark_governor_tasks_ingested_total",
            "spark_governor_running_batch_age_seconds"} <= of_job(m, "quitter")
    assert m["spark_governor_job_up"] == {(("spark_job", "steady"),): 1.0, (("spark_job", "quitter"),): 1.0,
                                          (("spark_job", "planned"),): 0.0}  # registered, never reported
    assert (("spark_job", "planned"),) not in m["spark_governor_job_last_report_age_seconds"]

    time.sleep(1.3)
    post(plane, report("steady", 2, 0, with_data=False))  # a heartbeat
    m = exposition(plane.engine, **settings)
    assert m["spark_governor_job_up"][(("spark_job", "quitter"),)] == 0.0  # stopped, not yet expired
    assert m["spark_governor_job_up"][(("spark_job", "steady"),)] == 1.0
    assert "spark_governor_batch_duration_seconds" in of_job(m, "quitter")

    time.sleep(1.2)
    post(plane, report("steady", 3, 0, with_data=False))
    m = exposition(plane.engine, **settings)
    assert of_job(m, "quitter") == {"spark_governor_job_up", "spark_governor_job_last_report_age_seconds",
                                    "spark_governor_job_unfinished_queries"}
    assert m["spark_governor_job_up"][(("spark_job", "quitter"),)] == 0.0
    assert m["spark_governor_job_last_report_age_seconds"][(("spark_job", "quitter"),)] > 2.0
    # silent with its two queries last seen running: what SparkGovernorJobStoppedReporting fires on
    assert m["spark_governor_job_unfinished_queries"][(("spark_job", "quitter"),)] == 2.0
    # the job that kept reporting keeps its series (its batches are older than 2 s, but its queries report
    # a state within the stale horizon and its job-level series follow the job)
    assert {"spark_governor_tasks_ingested_total", "spark_governor_job_slots",
            "spark_governor_queries"} <= of_job(m, "steady")
    assert "spark_governor_decisions_made_total" in of_job(m, "planned")  # configured, never expires
    # up and age outlive the expiry only until the horizon
    m = exposition(plane.engine, **settings, up_horizon_s=2.0)
    assert of_job(m, "quitter") == set() and (("spark_job", "steady"),) in m["spark_governor_job_up"]
    # expiry 0: nothing expires
    m = exposition(plane.engine, expiry_s=0, stopped_after_s=1.0)
    assert {"spark_governor_batch_duration_seconds", "spark_governor_tasks_ingested_total"} <= of_job(m, "quitter")
    # and the history stays in SQL: the API still serves the stopped job's batches
    r = requests.get(f"{plane.url}/api/v1/jobs/quitter/batches", timeout=10)
    assert r.status_code == 200 and len(r.json()["batches"]) == 4, r.text


def test_serve_metrics_expiry_option(sqlite_url, tmp_path):
    """``serve --metrics-expiry`` / ``SPARK_GOVERNOR_METRICS_EXPIRY`` reach ``/metrics`` of the production server
    (gunicorn, through ``Settings``); a bad value exits with code 2 naming the option, before anything starts."""
    from click.testing import CliRunner

    from spark_governor.api.cli.serve import serve

    for args, env in ((["--metrics-expiry", "-5"], {}), ([], {"SPARK_GOVERNOR_METRICS_EXPIRY": "soon"})):
        r = CliRunner().invoke(serve, ["--db", sqlite_url, *args], env=env)
        assert r.exit_code == 2 and "--metrics-expiry" in r.output, r.output
    assert not (tmp_path / "sg.db").exists()  # nothing half-done

    port = free_port()
    log = open(tmp_path / "serve.log", "w")
    proc = subprocess.Popen([sys.executable, "-m", "spark_governor", "serve", "--port", str(port), "--db", sqlite_url,
                             "--workers", "1", "--threads", "2", "--anonymous-reports"], stdout=log, stderr=log,
                            env={**os.environ, "PROMETHEUS_MULTIPROC_DIR": "", "SPARK_GOVERNOR_METRICS_EXPIRY": "2"})
    url = f"http://127.0.0.1:{port}"
    try:
        def up():
            assert proc.poll() is None, (tmp_path / "serve.log").read_text()[-3000:]
            try:
                return requests.get(url + "/healthz", timeout=1).status_code == 200
            except requests.RequestException:
                return False

        wait_for(up, 90, 0.2, "serve healthy")
        r = requests.post(f"{url}/api/v1/reports", json=report("served", 1, int(time.time() * 1000)), timeout=10)
        assert r.status_code == 200, r.text
        reported = time.time()

        def exported() -> set[str]:
            return {fam.name for fam in text_string_to_metric_families(requests.get(url + "/metrics", timeout=10).text)
                    for s in fam.samples if s.labels.get("spark_job") == "served"}

        assert {"spark_governor_batch_duration_seconds", "spark_governor_job_up"} <= exported()
        time.sleep(max(0.0, reported + 2.5 - time.time()))
        assert exported() == {"spark_governor_job_up", "spark_governor_job_last_report_age_seconds",
                              "spark_governor_job_unfinished_queries"}
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
