"""The JVM listener jar attached by ``--jars``/``--conf`` only (issue #17), with real spark-submit runs:

* an unmodified PySpark streaming file shows up in the control plane with per-stage statistics, its attachment and
  the knobs it can apply; a policy needing a knob the jar cannot apply is refused with a reason;
* one run of a job reported both by ``attach()`` and by the jar gives the same stages, task counts and latency means;
* a small Java streaming job (compiled here) on a standalone cluster reports, and executor directives change its
  executors;
* a Spark Connect server started with the jar reports a Connect client's streaming query, and applies an executor
  directive;
* the jar alone shows the job between its batches (issue #14): a batch running far past the bound is seen running,
  with its id and age, its spans are counted violated and the executor policy scales out, all before it completes;
  the query is then reported idle (no new data), not stuck, and terminated when it stops;
* on a standalone cluster the jar alone lets the Kingman policy scale a running job out on a rate step (the scaling
  bench's job with ``--jar-only``: ``bench scaling-real --jar-only``), with the job's state between batches.
"""
from __future__ import annotations

import time

import pytest
import requests

from spark_governor.api.processes import free_port, wait_for
from tests.conftest import require
from tests.standalone import Driver
from tests.jar_support import (JOBS, batches_run, compile_java_job, jar_confs, job, listener_jar, run_submit,
                               spark_submit, stages, stop)

pytestmark = pytest.mark.spark
TOKEN = "jar-test-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
LOCAL = ["--master", "local[2]", "--conf", "spark.sql.shuffle.partitions=4", "--conf", "spark.ui.enabled=false"]


@pytest.fixture(scope="module")
def jar():
    return listener_jar(require)


@pytest.fixture
def plane(start_plane):
    return start_plane(TOKEN, window_ms=2000, evaluation_interval_s=2.0)


def reported_stages(plane, name: str, at_least: int = 2) -> list[dict]:
    """The job's template vertices with task statistics, once at least ``at_least`` have some."""
    def ready():
        found = [s for s in stages(plane, name) if s["summary"]["tasks"]]
        return found if len(found) >= at_least else None

    return wait_for(ready, 120, 1, f"per-stage statistics of {name}")


def approve_executors(plane, name: str, n: int) -> int:
    """Record a dry-run executor decision and approve it through the API: the real path of a directive."""
    from spark_governor.aggregators import directives as repo
    from spark_governor.aggregators import queries

    with plane.engine.begin() as conn:
        j = queries.job_row(conn, name)
        decision = repo.record_decision(conn, job_id=j.id, policy="threshold", knob="executors", old_value=j.executors,
                                        new_value=n, reason="test", inputs={}, prediction={}, mode="dry-run",
                                        status="recorded", created_ms=int(time.time() * 1000))
    r = requests.post(f"{plane.url}/api/v1/jobs/{name}/decisions/{decision}/approve", headers=AUTH, timeout=10)
    assert r.status_code == 200, r.text
    return r.json()["directive_version"]


def directive(plane, name: str) -> dict:
    items = requests.get(f"{plane.url}/api/v1/jobs/{name}/directives", timeout=10).json()["directives"]
    return next((d for d in items if d["knob"] == "executors"), {})


def test_unmodified_pyspark_file_reports_stages_and_its_knobs(jar, plane, tmp_path):
    text = run_submit([*LOCAL, *jar_confs(jar, plane.url, "py-file"), str(JOBS / "rate_count.py"),
                       str(tmp_path / "ckpt"), "6"], tmp_path / "submit.log")
    assert batches_run(text) >= 6 and "reporting job 'py-file'" in text, text[-3000:]
    found = reported_stages(plane, "py-file")
    operators = {op for s in found for op in s["operators"]}
    assert {"MicroBatchScan", "Exchange", "StateStoreSave"} <= operators
    for s in found:
        assert s["summary"]["latency"]["mean"] > 0 and s["summary"]["service"]["count"] > 0
    batches = requests.get(f"{plane.url}/api/v1/jobs/py-file/batches", timeout=10).json()["batches"]
    assert len([b for b in batches if b["num_input_rows"]]) >= 6
    j = job(plane, "py-file")
    assert j["attachment"]["kind"] == "jar" and j["can_apply"] == ["executors"]
    assert j["not_actuatable"]["executors"] == "local mode" and j["reporter_dropped_total"] == 0
    assert "jar-only attachment" in j["not_actuatable"]["batch_interval"]
    # a policy whose knob the jar can apply is accepted; one that needs the job's cooperation is refused
    r = requests.put(f"{plane.url}/api/v1/jobs/py-file/policies/threshold?register=true", headers=AUTH, timeout=10,
                     json={"mode": "dry-run", "config": {"trigger_interval_s": 1.0}})
    assert r.status_code == 200, r.text
    r = requests.put(f"{plane.url}/api/v1/jobs/py-file/policies/fixed-point?register=true", headers=AUTH, timeout=10,
                     json={"mode": "act", "config": {}})
    assert r.status_code == 409, r.text
    assert "batch_interval" in r.json()["error"] and "listener jar" in r.json()["error"]


def test_attach_and_the_jar_report_the_same_stages_tasks_and_latency(jar, plane, tmp_path):
    """One run of rate_count.py, reported twice: by attach() (job same-attach) and by the jar (job same-jar)."""
    run_submit([*LOCAL, *jar_confs(jar, plane.url, "same-jar"), str(JOBS / "attach_and_run.py"), plane.url,
                "same-attach", str(tmp_path / "ckpt"), "8"], tmp_path / "submit.log")
    by_attach = {s["key"]: s for s in reported_stages(plane, "same-attach")}
    by_jar = {s["key"]: s for s in reported_stages(plane, "same-jar")}
    assert set(by_attach) == set(by_jar) and len(by_jar) >= 2  # the same template keys
    for key, a in by_attach.items():
        b = by_jar[key]
        assert (a["name"], a["operators"], a["parents"]) == (b["name"], b["operators"], b["parents"])
        for field in ("tasks", "records_in", "shuffle_read_records", "shuffle_write_records"):
            assert a["summary"][field] == b["summary"][field], (key, field)
        assert a["summary"]["makespan"]["count"] == b["summary"]["makespan"]["count"]  # stage attempts
        for stat in ("latency", "service"):
            ma, mb = a["summary"][stat]["mean"], b["summary"][stat]["mean"]
            assert abs(ma - mb) <= 0.05 * max(ma, mb), (key, stat, ma, mb)
    ja, jj = job(plane, "same-attach"), job(plane, "same-jar")
    assert ja["tasks_reported_total"] == jj["tasks_reported_total"] > 0
    nb = [len(requests.get(f"{plane.url}/api/v1/jobs/{n}/batches", timeout=10).json()["batches"])
          for n in ("same-attach", "same-jar")]
    assert nb[0] == nb[1] >= 8


def test_java_job_on_a_standalone_cluster_applies_executor_directives(jar, plane, standalone_cluster, tmp_path):
    job_jar = compile_java_job(JOBS / "RateCount.java", tmp_path)
    stop_file = tmp_path / "stop"
    proc = spark_submit(["--master", standalone_cluster.url, "--class", "RateCount",
                         "--conf", "spark.executor.cores=1", "--conf", "spark.executor.memory=512m",
                         "--conf", "spark.sql.shuffle.partitions=4", "--conf", "spark.ui.enabled=false",
                         "--conf", "spark.driver.host=127.0.0.1", *jar_confs(jar, plane.url, "java-job"),
                         str(job_jar), str(tmp_path / "ckpt"), str(stop_file)], tmp_path / "driver.log")
    try:
        found = reported_stages(plane, "java-job")
        assert {"MicroBatchScan", "StateStoreSave"} <= {op for s in found for op in s["operators"]}
        assert job(plane, "java-job")["master"] == standalone_cluster.url
        assert "executors" not in job(plane, "java-job")["not_actuatable"]
        for target in (1, 3):
            version = approve_executors(plane, "java-job", target)
            wait_for(lambda: job(plane, "java-job")["executors"] == target, 180, 1, f"{target} executors")
            d = wait_for(lambda: directive(plane, "java-job") if directive(plane, "java-job").get(
                "applied_version") == version else None, 60, 1, "directive acknowledged")
            assert d["status"] == "applied" and f"requested {target} executors" in d["message"]
        before = sum(s["summary"]["tasks"] for s in stages(plane, "java-job"))
        wait_for(lambda: sum(s["summary"]["tasks"] for s in stages(plane, "java-job")) > before, 60, 1,
                 "batches go on after scaling")
    finally:
        stop_file.write_text("stop")
        try:
            proc.wait(90)
        finally:
            stop(proc)
    assert proc.returncode == 0, (tmp_path / "driver.log").read_text()[-3000:]


def test_spark_connect_client_query_reports_and_applies_executors(jar, plane, standalone_cluster, tmp_path):
    port = free_port()
    server = spark_submit(["--master", standalone_cluster.url,
                           "--class", "org.apache.spark.sql.connect.service.SparkConnectServer",
                           "--conf", "spark.connect.grpc.binding.address=127.0.0.1",
                           "--conf", f"spark.connect.grpc.binding.port={port}",
                           "--conf", "spark.executor.cores=1", "--conf", "spark.executor.memory=512m",
                           "--conf", "spark.sql.shuffle.partitions=4", "--conf", "spark.ui.enabled=false",
                           "--conf", "spark.driver.host=127.0.0.1", *jar_confs(jar, plane.url, "connect-job")],
                          tmp_path / "server.log")
    client = None
    stop_file = tmp_path / "stop"
    try:
        wait_for(lambda: "Spark Connect server started" in (tmp_path / "server.log").read_text()
                 or server.poll() is not None, 180, 1, "Spark Connect server")
        assert server.poll() is None, (tmp_path / "server.log").read_text()[-3000:]
        pytest.importorskip("grpc", reason="the Connect client needs pyspark[connect] (grpcio, ...)")
        import subprocess
        import sys

        from tests.jar_support import env
        client = subprocess.Popen([sys.executable, str(JOBS / "connect_client.py"), f"sc://127.0.0.1:{port}",
                                   str(tmp_path / "ckpt"), str(stop_file)], env=env(),
                                  stdout=open(tmp_path / "client.log", "w"), stderr=subprocess.STDOUT)
        found = reported_stages(plane, "connect-job")
        assert {"MicroBatchScan", "StateStoreSave"} <= {op for s in found for op in s["operators"]}
        batches = requests.get(f"{plane.url}/api/v1/jobs/connect-job/batches", timeout=10).json()["batches"]
        assert {b["name"] for b in batches} == {"connect_rate_count"}
        # the client's query between batches, polled from the server's shared state (not its own session)
        state = requests.get(f"{plane.url}/api/v1/jobs/connect-job/live", timeout=10).json()["live"]
        (q,) = state["queries"]
        assert q["name"] == "connect_rate_count" and q["trigger_interval_s"] == 1.0, state
        assert q["status"] in ("running", "waiting") and q["last_batch_id"] is not None
        version = approve_executors(plane, "connect-job", 1)
        wait_for(lambda: job(plane, "connect-job")["executors"] == 1, 180, 1, "1 executor")
        wait_for(lambda: directive(plane, "connect-job").get("applied_version") == version, 60, 1, "acknowledged")
        assert directive(plane, "connect-job")["status"] == "applied"
    finally:
        stop_file.write_text("stop")
        if client is not None:
            try:
                client.wait(60)
            finally:
                stop(client)
        stop(server)


def test_the_jar_alone_shows_a_long_batch_before_it_completes_and_then_an_idle_query(jar, plane, tmp_path):
    name, bound_ms, sleep_s = "jar-live", 3000, 16.0
    auth_put = lambda path, body: requests.put(f"{plane.url}{path}", headers=AUTH, json=body, timeout=10)  # noqa: E731
    assert auth_put(f"/api/v1/jobs/{name}/constraints/e2e?register=true", {"bound_ms": bound_ms, "span_s": 1.0}).ok
    inputs, marks = tmp_path / "in", tmp_path / "marks"
    inputs.mkdir()
    marks.mkdir()
    proc = spark_submit([*LOCAL, *jar_confs(jar, plane.url, name), str(JOBS / "long_batch.py"), str(inputs),
                         str(tmp_path / "ckpt"), str(marks), str(sleep_s), "12"], tmp_path / "driver.log")

    def live() -> dict:
        return requests.get(f"{plane.url}/api/v1/jobs/{name}/live", timeout=10).json().get("live") or {}

    try:
        wait_for(lambda: (marks / "sleeping").exists() or proc.poll() is not None, 240, 0.2, "the long batch")
        assert proc.poll() is None, (tmp_path / "driver.log").read_text()[-3000:]
        r = auth_put(f"/api/v1/jobs/{name}/policies/threshold?register=true",
                     {"mode": "act", "config": {"scaling_interval_s": 2.0, "max_value": 8}})
        assert r.status_code == 200, r.text
        started = float((marks / "sleeping").read_text())
        seen = wait_for(lambda: (s := live()).get("status") == "running"
                        and (s.get("running_batch_age_s") or 0) * 1000 > bound_ms and s, sleep_s, 0.25,
                        "the running batch's age past the bound, from the jar")
        assert seen["running_batch_id"] == 1  # a file source: its offsets count files, not rows (no backlog)
        (q,) = seen["queries"]
        assert q["trigger_interval_s"] == 1.0 and q["last_batch_id"] == 0  # polled from the driver's session

        def violated():
            spans = requests.get(f"{plane.url}/api/v1/jobs/{name}/constraints/e2e?spans=60", timeout=10).json()["spans"]
            return [s for s in spans if s["source"] == "in-flight" and s["start_ms"] >= started * 1000 - 1000]

        flight = wait_for(violated, sleep_s, 0.25, "a violated span without a completed batch")
        assert all(not s["attained"] and s["latency_ms"] > bound_ms and s["batches"] == 0 for s in flight)

        def scaled_out():
            items = requests.get(f"{plane.url}/api/v1/jobs/{name}/decisions?limit=1000", timeout=10).json()["decisions"]
            return [d for d in items if d["knob"] == "executors" and d["inputs"].get("running_batch_id") == 1
                    and isinstance(d["new_value"], (int, float)) and d["new_value"] > (d["old_value"] or 0)]

        (up, *_) = wait_for(scaled_out, sleep_s, 0.25, "a scale-out decision on the batch in flight")
        assert "before it completes" in up["reason"]
        assert not (marks / "woke").exists(), "the batch completed before the control plane saw it"
        # no new data after it: idle, not stuck; then terminated when the job stops it
        idle = wait_for(lambda: (s := live()).get("status") == "idle" and s, 60, 0.5, "the idle query")
        assert idle["running_batch_age_s"] is None and not idle["backlog_rows"]
        assert (marks / "woke").exists()
        proc.wait(120)
        assert proc.returncode == 0, (tmp_path / "driver.log").read_text()[-3000:]
        assert live().get("status") == "terminated", live()
    finally:
        stop(proc)


def test_the_jar_alone_lets_kingman_scale_a_job_out_on_a_standalone_cluster(jar, plane, standalone_cluster, tmp_path):
    name = "jar-kingman"
    r = requests.put(f"{plane.url}/api/v1/jobs/{name}/constraints/e2e?register=true", headers=AUTH, timeout=10,
                     json={"bound_ms": 8000, "span_s": 4.0})
    assert r.status_code == 200, r.text
    r = requests.put(f"{plane.url}/api/v1/jobs/{name}/policies/kingman?register=true", headers=AUTH, timeout=10,
                     json={"mode": "act", "config": {"trigger_interval_s": 4.0, "min_value": 1, "max_value": 3,
                                                     "warmup_windows": 1, "rollback": False}})
    assert r.status_code == 200, r.text
    driver = Driver(tmp_path, standalone_cluster, plane, name, extra_args=("--jar-only", "--launch-hold"))
    try:
        wait_for(lambda: (driver.samples() or [{}])[-1].get("batch") is not None, 240, 1, "first batches")
        j = job(plane, name)
        assert j["attachment"]["kind"] == "jar" and "executors" not in j["not_actuatable"], j
        assert driver.samples()[-1]["applied"] is None  # no attach(): the jar applies the directives
        driver.rate(24_000)  # 96 000 rows per 4 s batch × 50 µs = 4.8 s of work on one executor
        stepped = time.time()
        wait_for(lambda: (driver.executors() or 0) >= 2, 240, 1, "scale-out, applied by the jar")
        ups = [d for d in requests.get(f"{plane.url}/api/v1/jobs/{name}/decisions?limit=100", timeout=10)
               .json()["decisions"] if d["new_value"] > d["old_value"]]
        assert ups and all(d["policy"] == "kingman" for d in ups)
        assert min(d["created_ms"] for d in ups) / 1000.0 - stepped < 120
        wait_for(lambda: directive(plane, name).get("status") == "applied", 60, 1, "the directive acknowledged")
        # the job between batches, from the jar: the trigger, and the source's rows from its offsets
        state = requests.get(f"{plane.url}/api/v1/jobs/{name}/live", timeout=10).json()["live"]
        (q,) = state["queries"]
        assert q["trigger_interval_s"] == 4.0 and q["sources"][0]["processed_rows"] > 0, state
        assert state["arrival_rows_per_second"] > 0 and state["arrival_probed"] is False
    finally:
        driver.stop()
