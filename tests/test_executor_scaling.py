"""Executor scaling of a running job on a real Spark standalone cluster (master + worker on 127.0.0.1).

The threshold policy in ``act`` mode adds executors when batches overrun their trigger interval
and releases them when the rate falls, never below its minimum; in ``dry-run`` the same load only
records decisions.
"""
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests

from tests.conftest import require, wait_for

pytestmark = pytest.mark.spark
TOKEN = "scaling-test-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    require(os.path.exists(Path(sys.executable).parent / "python"), "python")
    from tests.standalone import StandaloneCluster

    c = StandaloneCluster(tmp_path_factory.mktemp("standalone"), cores=4).start()
    yield c
    c.stop()


@pytest.fixture
def plane(tmp_path):
    from api.app import Settings
    from api.server import ControlPlane

    p = ControlPlane(db_url=f"sqlite:///{tmp_path / 'sg.db'}", port=0, tokens={"ops": TOKEN},
                     settings=Settings(window_ms=2000, evaluation_interval_s=2.0)).start()
    yield p
    p.stop()


class Driver:
    """The scaling job in its own process; the test steers its input rate through a file."""

    def __init__(self, tmp: Path, cluster, plane, job: str) -> None:
        self.tmp, self.job = tmp, job
        self.rate_file, self.stop_file, self.out = tmp / "rate", tmp / "stop", tmp / "out.jsonl"
        self.rate(300)
        self.proc = subprocess.Popen(
            [sys.executable, str(ROOT / "tests" / "scaling_job.py"), "--master", cluster.url, "--endpoint", plane.url,
             "--job", job, "--rate-file", str(self.rate_file), "--stop-file", str(self.stop_file),
             "--out", str(self.out), "--checkpoint", str(tmp / "ckpt")],
            stdout=open(tmp / "driver.log", "w"), stderr=subprocess.STDOUT,
            env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYTHONPATH": str(ROOT)})

    def rate(self, rows_per_second: float) -> None:
        tmp = self.rate_file.with_suffix(".tmp")
        tmp.write_text(str(rows_per_second))
        tmp.replace(self.rate_file)

    def samples(self) -> list[dict]:
        if not self.out.exists():
            return []
        return [json.loads(line) for line in self.out.read_text().splitlines() if line.strip()]

    def executors(self) -> int | None:
        s = self.samples()
        return s[-1]["executors"] if s else None

    def stop(self) -> None:
        self.stop_file.write_text("stop")
        try:
            self.proc.wait(90)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def configure(plane, job, mode):
    r = requests.put(f"{plane.url}/api/v1/jobs/{job}/policies/threshold", headers=AUTH, timeout=10, json={
        "mode": mode, "config": {"trigger_interval_s": 4.0, "scaling_interval_s": 8.0, "min_value": 1,
                                 "max_value": 4}})
    assert r.status_code == 200, r.text


def decisions(plane, job):
    return requests.get(f"{plane.url}/api/v1/jobs/{job}/decisions?limit=1000", timeout=10).json()["decisions"]


def test_threshold_policy_scales_executors_up_and_down(cluster, plane, tmp_path):
    job = "scaling-act"
    configure(plane, job, "act")
    driver = Driver(tmp_path, cluster, plane, job)
    try:
        wait_for(lambda: (driver.samples() or [{}])[-1].get("batch") is not None, 240, 1, "first batches")
        wait_for(lambda: driver.executors() == 1, 60, 1, "initial size of one executor")
        driver.rate(24_000)  # 96 000 rows per 4 s batch × 50 µs = 4.8 s of work on one executor: overrun
        wait_for(lambda: (driver.executors() or 0) >= 2, 240, 1, "scale-up")
        ups = [d for d in decisions(plane, job) if d["new_value"] > d["old_value"]]
        wait_for(lambda: any(d["status"] == "applied" for d in decisions(plane, job)
                             if d["new_value"] > d["old_value"]), 60, 1, "scale-up acknowledged")
        up = next(d for d in decisions(plane, job) if d["new_value"] > d["old_value"] and d["status"] == "applied")
        assert up["inputs"]["ratio"] >= 0.9 and up["mode"] == "act" and up["directive_version"] >= 1
        assert ups
        peak = max(s["executors"] for s in driver.samples())
        driver.rate(100)
        wait_for(lambda: driver.executors() == 1, 300, 1, "scale-down to the minimum")
        time.sleep(20)  # several more evaluations at low load
        tail = driver.samples()
        assert min(s["executors"] for s in tail if s["batch"] is not None) >= 1
        assert driver.executors() == 1
        downs = [d for d in decisions(plane, job) if d["new_value"] < d["old_value"]]
        assert len(downs) >= peak - 1 and all(d["new_value"] >= 1 for d in decisions(plane, job))
        applied = [a for a in tail[-1]["applied"] if a["status"] == "applied"]
        assert len(applied) >= 2  # the driver applied the up and the down directives
    finally:
        driver.stop()


def test_dry_run_changes_nothing_but_records_decisions(cluster, plane, tmp_path):
    job = "scaling-dry"
    configure(plane, job, "dry-run")
    driver = Driver(tmp_path, cluster, plane, job)
    try:
        wait_for(lambda: (driver.samples() or [{}])[-1].get("batch") is not None, 240, 1, "first batches")
        wait_for(lambda: driver.executors() == 1, 60, 1, "initial size of one executor")
        driver.rate(24_000)
        wait_for(lambda: any(d["new_value"] > d["old_value"] for d in decisions(plane, job)), 240, 1,
                 "a recorded scale-up")
        time.sleep(6)
        assert all(d["status"] == "recorded" and d["mode"] == "dry-run" for d in decisions(plane, job))
        assert {s["executors"] for s in driver.samples() if s["batch"] is not None} == {1}
        assert requests.get(f"{plane.url}/api/v1/jobs/{job}/directives", timeout=10).json()["directives"] == []
    finally:
        driver.stop()
