"""A harmful directive is detected and rolled back on a real local Spark job (issue #19, verified actions).

The job reads a paced Zipf source whose micro-batch interval the control plane directs (the
``batch_interval`` knob, actuatable in local mode). A latency constraint of 3 s holds at a 1 s interval.
The operator then sets the static-interval policy to 8 s: every record now waits up to 8 s for its
batch, the constraint is violated where it held before, and the verification rolls the interval back to
1 s (a new decision and directive), marks the harmful decision ``rolled-back`` with the evidence, refuses
the same change during the cool-off although the policy keeps asking for it, and the SLO recovers."""
import os
import time

import pytest
import requests

from spark_governor.api.processes import wait_for
from spark_governor.collectors.batch_interval import BatchIntervalApplier
from spark_governor.collectors.sources.paced import register_paced_sources

pytestmark = pytest.mark.spark
TOKEN = "rollback-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
JOB = "rollback"


def put(plane, path, body):
    r = requests.put(f"{plane.url}{path}", headers=AUTH, json=body, timeout=10)
    assert r.status_code == 200, r.text


def decisions(plane) -> list:
    return requests.get(f"{plane.url}/api/v1/jobs/{JOB}/decisions?limit=1000", timeout=10).json()["decisions"]


def spans(plane) -> list:
    return requests.get(f"{plane.url}/api/v1/jobs/{JOB}/constraints/e2e?spans=60", timeout=10).json()["spans"]


def test_a_harmful_interval_is_rolled_back_and_the_slo_recovers(spark, start_plane, tmp_path):
    from spark_governor.collectors import attach

    plane = start_plane(TOKEN, window_ms=1000, evaluation_interval_s=1.0)
    put(plane, f"/api/v1/jobs/{JOB}/constraints/e2e?register=true", {"bound_ms": 3000, "span_s": 2.0})
    config = {"effectiveness_intervals": 3, "cooldown_intervals_after_any": 0, "rollback_cooloff_s": 600}
    put(plane, f"/api/v1/jobs/{JOB}/policies/static-interval", {"mode": "act", "config": {**config, "interval_s": 1.0}})
    register_paced_sources(spark)
    rate_file, control = str(tmp_path / "rate"), str(tmp_path / "interval")
    with open(rate_file, "w") as f:
        f.write("300")
    df = (spark.readStream.format("zipf-paced").option("rowsPerSecond", 300).option("rateFile", rate_file)
          .option("intervalFile", control).option("keys", 50).option("numPartitions", 2).load())
    handle = attach(spark, job=JOB, endpoint=plane.url, flush_interval_s=0.25,
                    appliers={"batch_interval": BatchIntervalApplier(control)})
    query = (df.writeStream.foreachBatch(lambda d, i: d.count())
             .option("checkpointLocation", str(tmp_path / "ckpt")).start())
    try:
        # the 1 s interval is applied and the constraint holds
        wait_for(lambda: os.path.exists(control) and [s for s in spans(plane) if s["attained"]], 180, 0.5,
                 "an attained span at 1 s")
        harmful_at = time.time()
        put(plane, f"/api/v1/jobs/{JOB}/policies/static-interval", {"mode": "act", "config": {**config, "interval_s": 8.0}})

        def rolled_back():
            ds = decisions(plane)
            bad = [d for d in ds if d["new_value"] == 8.0 and d["verification"] == "rolled-back"]
            back = [d for d in ds if d["new_value"] == 1.0 and d["created_ms"] > harmful_at * 1000
                    and (d["inputs"] or {}).get("rollback_of")]
            return (bad[0], back[0]) if bad and back else None

        bad, back = wait_for(rolled_back, 120, 0.5, "the harmful decision rolled back")
        assert back["inputs"]["rollback_of"] == bad["id"] and back["status"] in ("issued", "applied")
        assert any("SLO violated" in e for e in bad["outcome"]["evidence"]), bad["outcome"]
        assert bad["outcome"]["health_after"]["latency_s"] > 3.0 >= bad["outcome"]["health_before"]["latency_s"]
        rolled_ms = back["created_ms"]
        # the SLO recovers at 1 s, and the policy's repeated wish for 8 s is refused during the cool-off
        wait_for(lambda: [s for s in spans(plane) if s["start_ms"] > rolled_ms + 4000 and s["attained"]], 120, 0.5,
                 "an attained span after the rollback")
        time.sleep(3)
        again = [d for d in decisions(plane) if d["new_value"] == 8.0 and d["created_ms"] > rolled_ms]
        assert not again, again
        events = requests.get(f"{plane.url}/api/v1/jobs/{JOB}/events", timeout=10)
        if events.status_code == 200:
            assert any(e["kind"] == "rollback" for e in events.json()["events"])
        metrics = requests.get(f"{plane.url}/metrics", timeout=10).text
        assert any(line.startswith("spark_governor_decision_verifications{") and 'verification="rolled-back"' in line
                   and line.endswith(" 1.0") for line in metrics.splitlines())
    finally:
        query.stop()
        handle.detach(flush_timeout_s=10)
