"""The control plane sees a real Spark job between its micro-batches (issue #14, "See the job between
batches"): real local Spark, real reporters (``attach``), a real control plane over HTTP, no mocks.

* A micro-batch whose ``foreachBatch`` sleeps far longer than the latency bound: while it still runs,
  its age, the oldest unprocessed record's age and the source's backlog reach the control plane, the
  constraint's spans are counted as violated, and threshold and utilization-target decide to scale out —
  all before the batch completes. (In ``local[2]`` the executor knob cannot be actuated: the decision is
  recorded as a recommendation in task slots, status ``not_actuatable``.)
* A query whose source has no new data is reported idle, not stuck: no in-flight age, no backlog,
  no violated span and no scale-out.
"""
import tempfile
import threading
import time

import pytest
import requests

from spark_governor.api.processes import wait_for

pytestmark = pytest.mark.spark
TOKEN = "live-test-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
BOUND_MS = 3000
SLEEP_S = 16.0  # the long batch: more than five times the bound
POLICIES = {
    # each executor policy with in-flight rules, in act mode, evaluated every second; the trigger interval is the
    # query's own (Kingman sizes for the probed live rate instead: its in-flight rules went with issue #44)
    "threshold": {"scaling_interval_s": 2.0, "max_value": 8},
    "utilization-target": {"max_value": 8},
}


@pytest.fixture
def plane(start_plane):
    return start_plane(TOKEN, window_ms=1000, evaluation_interval_s=1.0)


def put(plane, path, body):
    r = requests.put(f"{plane.url}{path}", headers=AUTH, json=body, timeout=10)
    assert r.status_code == 200, r.text


def live(plane, job) -> dict:
    return requests.get(f"{plane.url}/api/v1/jobs/{job}/live", timeout=10).json()["live"] or {}


def constraint(plane, job) -> dict:
    return requests.get(f"{plane.url}/api/v1/jobs/{job}/constraints/e2e?spans=60", timeout=10).json()


def decisions(plane, job) -> list:
    return requests.get(f"{plane.url}/api/v1/jobs/{job}/decisions?limit=1000", timeout=10).json()["decisions"]


def start_query(spark, rate_file: str, foreach_batch, rows_per_second: int = 200):
    from spark_governor.collectors.sources.zipf import register_zipf_source

    register_zipf_source(spark)
    src = (spark.readStream.format("zipf").option("rowsPerSecond", rows_per_second).option("rateFile", rate_file)
           .option("keys", 50).option("numPartitions", 1).load())
    return (src.writeStream.foreachBatch(foreach_batch).option("checkpointLocation", tempfile.mkdtemp(prefix="sg-live-"))
            .trigger(processingTime="1 second").start())


@pytest.mark.parametrize("policy", list(POLICIES))
def test_a_long_batch_is_seen_violating_the_bound_and_scaled_out_before_it_completes(spark, plane, tmp_path, policy):
    from spark_governor.collectors import attach

    job = f"live-long-{policy}"
    put(plane, f"/api/v1/jobs/{job}/constraints/e2e?register=true", {"bound_ms": BOUND_MS, "span_s": 1.0})
    rate = tmp_path / "rate"
    rate.write_text("200")
    long_batch = {}
    sleeping, release = threading.Event(), threading.Event()

    def foreach_batch(df, batch_id):
        df.count()  # a Spark job of this micro-batch: its start carries the batch id
        if batch_id >= 2 and not long_batch:
            long_batch.update(id=batch_id, started=time.time())
            sleeping.set()
            release.wait(SLEEP_S)
            long_batch["ended"] = time.time()

    handle = attach(spark, job=job, endpoint=plane.url)
    query = start_query(spark, str(rate), foreach_batch)
    try:
        wait_for(lambda: sleeping.is_set() or not query.isActive, 240, 0.2, "the long batch")
        assert query.isActive, query.exception()
        # the policy starts now: the warm-up batches are behind us
        put(plane, f"/api/v1/jobs/{job}/policies/{policy}?register=true", {"mode": "act", "config": POLICIES[policy]})
        started = long_batch["started"]

        def late():
            s = live(plane, job)
            return (s.get("running_batch_age_s") or 0) * 1000 > BOUND_MS and s.get("status") == "running" and s

        seen = wait_for(late, SLEEP_S, 0.25, "the running batch's age past the bound")
        assert seen["running_batch_id"] == long_batch["id"]
        assert seen["oldest_record_source"] == "source" and seen["oldest_record_age_s"] >= seen["running_batch_age_s"]
        assert seen["backlog_rows"] > 0 and seen["backlog_s"] is not None and seen["backlog_s"] > 0
        (q,) = seen["queries"]
        assert q["trigger_interval_s"] == 1.0 and q["sources"][0]["backlog_rows"] > 0
        assert seen["arrival_probed"] is False  # no probe: the rate comes from the completed batches' offsets

        def violated():  # spans of the long batch (the warm-up batch may have had some too)
            spans = constraint(plane, job)["spans"]
            return [s for s in spans if s["source"] == "in-flight" and s["start_ms"] >= started * 1000 - 1000]

        flight = wait_for(violated, SLEEP_S, 0.25, "a violated span without a completed batch")
        assert all(not s["attained"] and s["latency_ms"] > BOUND_MS and s["batches"] == 0 for s in flight)

        def scaled_out():  # on the batch in flight (slow earlier batches may have scaled out already)
            return [d for d in decisions(plane, job) if d["policy"] == policy and d["knob"] == "executors"
                    and isinstance(d["new_value"], (int, float)) and d["new_value"] > (d["old_value"] or 0)
                    and d["inputs"].get("running_batch_id") == long_batch["id"]
                    and (d["inputs"].get("running_batch_age_s") or 0) * 1000 > BOUND_MS]

        ups = wait_for(scaled_out, SLEEP_S, 0.25, "a scale-out decision on the batch in flight")
        # all of it while the batch still runs
        assert "ended" not in long_batch, "the batch completed before the control plane reacted"
        up = ups[-1]
        assert up["created_ms"] >= started * 1000 and up["status"] in ("issued", "not_actuatable")
        assert "before it completes" in up["reason"]
        metrics = requests.get(f"{plane.url}/metrics", timeout=10).text
        age = [line for line in metrics.splitlines()
               if line.startswith("spark_governor_running_batch_age_seconds{") and f'spark_job="{job}"' in line]
        assert age and float(age[0].split()[-1]) * 1000 > BOUND_MS
        attainment = [line for line in metrics.splitlines()
                      if line.startswith("spark_governor_constraint_attainment_ratio") and f'spark_job="{job}"' in line]
        assert attainment and float(attainment[0].split()[-1]) < 1.0
    finally:
        release.set()
        query.stop()
        handle.detach(flush_timeout_s=10)
    assert long_batch["ended"] - long_batch["started"] < SLEEP_S + 1


def test_a_probed_source_shows_a_rate_step_while_a_long_batch_runs(spark, plane, tmp_path):
    """A source probe (``collectors.source_probe``): the reporter reads the source's rate file between
    batches, so a rate step during a long batch reaches the control plane's live state (rate and
    backlog) before any batch at the new rate completes; the offsets alone would still say 200 rows/s."""
    from spark_governor.collectors import attach
    from spark_governor.collectors.source_probe import RateFileProbe

    job = "live-probed"
    rate = tmp_path / "rate"
    rate.write_text("200")
    long_batch = {}
    sleeping, release = threading.Event(), threading.Event()

    def foreach_batch(df, batch_id):
        df.count()
        if batch_id >= 2 and not long_batch:
            long_batch.update(id=batch_id)
            sleeping.set()
            release.wait(SLEEP_S)
            long_batch["ended"] = time.time()

    handle = attach(spark, job=job, endpoint=plane.url, source_probes=[RateFileProbe(str(rate), 200)])
    query = start_query(spark, str(rate), foreach_batch)
    try:
        wait_for(lambda: sleeping.is_set() or not query.isActive, 240, 0.2, "the long batch")
        assert query.isActive, query.exception()
        rate.write_text("2000")  # a 10x step while the batch runs
        stepped = time.time()

        def step_seen():
            s = live(plane, job)
            return s.get("status") == "running" and s.get("arrival_probed") and \
                (s.get("arrival_rows_per_second") or 0) > 1800 and s

        seen = wait_for(step_seen, SLEEP_S - 2, 0.25, "the probed rate step in the live state")
        assert time.time() - stepped < 6  # a couple of snapshots, not a batch
        (src,) = seen["queries"][0]["sources"]
        assert src["arrival_probed"] is True and src["arrival_rows_per_second"] == pytest.approx(2000, rel=0.1)
        # the rows offered since the step are counted at the new rate: 5 000 within a few seconds, where the
        # offsets' 200 rows/s would not reach 3 500 in the whole batch
        wait_for(lambda: (live(plane, job).get("backlog_rows") or 0) > 5000, 6, 0.25, "the backlog at the new rate")
        assert "ended" not in long_batch, "the batch completed before the step was seen"
    finally:
        release.set()
        query.stop()
        handle.detach(flush_timeout_s=10)


def test_an_idle_query_is_reported_idle_not_stuck_and_not_scaled(spark, plane, tmp_path):
    from spark_governor.collectors import attach

    job = "live-idle"
    put(plane, f"/api/v1/jobs/{job}/constraints/e2e?register=true", {"bound_ms": BOUND_MS, "span_s": 1.0})
    rate = tmp_path / "rate"
    rate.write_text("200")
    batches = []

    def foreach_batch(df, batch_id):
        batches.append((batch_id, df.count()))

    handle = attach(spark, job=job, endpoint=plane.url)
    spark.conf.set("spark.sql.streaming.noDataProgressEventInterval", "1000")  # onQueryIdle every second
    try:
        query = start_query(spark, str(rate), foreach_batch)
    finally:
        spark.conf.unset("spark.sql.streaming.noDataProgressEventInterval")
    try:
        wait_for(lambda: len([b for b in batches if b[1] > 0]) >= 2 or not query.isActive, 240, 0.2, "batches")
        assert query.isActive, query.exception()
        rate.write_text("0")  # the source has no new data from now on
        wait_for(lambda: live(plane, job).get("status") == "idle", 30, 0.25, "the query reported idle")
        quiet_since = time.time()
        # the threshold policy scales out when no batch completes at all, but not for an idle query
        put(plane, f"/api/v1/jobs/{job}/policies/threshold?register=true", {"mode": "act", "config": POLICIES["threshold"]})
        wait_for(lambda: (live(plane, job).get("queries") or [{}])[0].get("last_idle_ms") is not None, 30, 0.25,
                 "onQueryIdle")
        time.sleep(6)  # several evaluations and spans while idle
        s = live(plane, job)
        assert s["status"] == "idle" and s["running_batch_age_s"] is None and s["oldest_record_age_s"] is None
        assert s["backlog_rows"] == 0
        spans = constraint(plane, job)["spans"]
        assert not [x for x in spans if x["source"] == "in-flight"]
        assert not [d for d in decisions(plane, job) if d["created_ms"] >= quiet_since * 1000
                    and d["new_value"] > (d["old_value"] or 0)]
        metrics = requests.get(f"{plane.url}/metrics", timeout=10).text
        assert f'spark_governor_queries{{spark_job="{job}",state="idle"}} 1.0' in metrics
        assert any(line.startswith("spark_governor_running_batch_age_seconds{") and line.endswith(f'spark_job="{job}"}} 0.0')
                   for line in metrics.splitlines())
    finally:
        query.stop()
        handle.detach(flush_timeout_s=10)
