"""The Kingman policy keeps a latency constraint on a real Spark standalone cluster.

A paced Zipf job (tests/scaling_job.py) runs with a whole-query latency constraint; its input rate
rises until one executor cannot keep up, then falls. The policy adds executors soon after the
constraint is violated, releases them one by one when the load falls (never below the minimum),
every decision carries its prediction, and the prediction error of judged decisions is exported.
Scale-ins wait for the framework's cool-down: none within ``cooldown_intervals_after_up`` evaluation intervals of
a scale-up.
The bound (8 s against a 4 s trigger) leaves one executor room at the low rate on a loaded machine: at
6 s a scale-in to one executor could measure above the bound there, be rolled back as harmful and the
same scale-in refused for ``rollback_cooloff_s`` (CI, 2026-11-25).
"""
import re
import time

import pytest
import requests

from spark_governor.api.processes import wait_for
from tests.standalone import Driver

pytestmark = pytest.mark.spark
TOKEN = "kingman-test-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
def plane(start_plane):
    return start_plane(TOKEN, window_ms=4000, evaluation_interval_s=2.0)


def decisions(plane, job):
    return requests.get(f"{plane.url}/api/v1/jobs/{job}/decisions?limit=1000", timeout=10).json()["decisions"]


def evaluation(plane, job):
    """What the control plane says of the job (events, health, cluster profile), for a failure message."""
    return {what: requests.get(f"{plane.url}/api/v1/jobs/{job}/{what}", timeout=10).text[:3000]
            for what in ("events", "health", "cluster")}


def test_kingman_keeps_a_latency_constraint_with_few_executors(standalone_cluster, plane, tmp_path):
    job = "kingman-act"
    r = requests.put(f"{plane.url}/api/v1/jobs/{job}/constraints/e2e?register=true", headers=AUTH, timeout=10,
                     json={"bound_ms": 8000, "span_s": 4.0})
    assert r.status_code == 200, r.text
    r = requests.put(f"{plane.url}/api/v1/jobs/{job}/policies/kingman?register=true", headers=AUTH, timeout=10, json={
        "mode": "act", "config": {"trigger_interval_s": 4.0, "min_value": 1, "max_value": 3, "warmup_windows": 1,
                                  # the plan's own size, so the scale-in reaches the minimum; verified actions
                                  # and rollback have their own test (tests/spark/test_rollback_spark.py): on a
                                  # loaded machine a scale-in that measures above the bound is rolled back and
                                  # the same scale-in refused for rollback_cooloff_s (seen at load average 24)
                                  "spare_executors": 0, "rollback": False}})
    assert r.status_code == 200, r.text
    driver = Driver(tmp_path, standalone_cluster, plane, job)
    try:
        wait_for(lambda: (driver.samples() or [{}])[-1].get("batch") is not None, 240, 1, "first batches")
        wait_for(lambda: driver.executors() == 1, 60, 1, "initial size of one executor")
        driver.rate(24_000)  # 96 000 rows per 4 s batch × 50 µs = 4.8 s of work on one executor
        stepped = time.time()
        wait_for(lambda: (driver.executors() or 0) >= 2, 240, 1, "scale-out")
        ups = [d for d in decisions(plane, job) if d["new_value"] > d["old_value"]]
        assert ups and all(d["policy"] == "kingman" and d["mode"] == "act" for d in ups)
        first_up = min(d["created_ms"] for d in ups) / 1000.0
        assert first_up - stepped < 120, "scaled out within two minutes of the rate step"
        for d in ups:
            assert d["prediction"]["constraints"]["e2e"] is not None or d["inputs"]["plan"]["constraints"]["e2e"][
                "bottleneck"]
            assert 0 < d["prediction"]["utilization"]
            # a bottleneck is scaled out without a latency measurement (Eq. 4.12); otherwise one is behind it
            assert (d["inputs"]["latency_s"] or 0) > 0 or d["inputs"]["plan"]["constraints"]["e2e"]["bottleneck"]
        # under the higher rate the constraint is met again with more executors
        wait_for(lambda: (requests.get(f"{plane.url}/api/v1/jobs/{job}/constraints/e2e?spans=3", timeout=10)
                          .json()["latest"] or {}).get("attained"), 180, 2, "constraint attained again")
        peak = max(s["executors"] for s in driver.samples())
        driver.rate(100)
        try:
            wait_for(lambda: driver.executors() == 1, 300, 1, "scale-in to the minimum")
        except AssertionError as e:  # say why: the decisions and the latest evaluation
            raise AssertionError(f"{e}; executors {driver.executors()}; decisions "
                                 f"{[(d['created_ms'], d['old_value'], d['new_value'], d['reason']) for d in decisions(plane, job)]}"
                                 f"; evaluation {evaluation(plane, job)}") from None
        ds = decisions(plane, job)
        downs = [d for d in ds if d["new_value"] < d["old_value"]]
        assert downs and all(d["old_value"] - d["new_value"] == 1 for d in downs), "scale-in one at a time"
        assert all(1 <= d["new_value"] <= 3 for d in ds)
        assert len(downs) >= peak - 1
        # the cool-down after a scale-up (3 evaluation intervals of 2 s): no scale-in within it
        from spark_governor.policies.kingman_config import KingmanConfig
        from spark_governor.policies.safety import cooldown_s

        hold_ms = cooldown_s(KingmanConfig().cooldown_intervals_after_up, 2.0) * 1000
        for d in downs:
            before = [u["created_ms"] for u in ups if u["created_ms"] < d["created_ms"]]
            assert not before or d["created_ms"] - max(before) >= hold_ms, (d, before)
        # effects are judged against the predictions, and the error is exported
        wait_for(lambda: any(d["outcome"] for d in decisions(plane, job)), 60, 2, "a judged decision")
        metrics = requests.get(f"{plane.url}/metrics", timeout=10).text
        assert re.search(r'spark_governor_model_prediction_error_ratio\{policy="kingman",quantity="\w+",'
                         rf'spark_job="{job}"\}}', metrics)
        assert f'spark_governor_constraint_bound_seconds{{constraint="e2e",spark_job="{job}"}} 8.0' in metrics
    finally:
        driver.stop()
