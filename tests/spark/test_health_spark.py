"""Health verdicts reached by real local Spark jobs (issue #19): real reporters (``attach``), a real control
plane over HTTP, ``GET /api/v1/jobs/<job>/health``. One job per verdict: an idle source, an overloaded
one (more task work per batch than the trigger interval allows), a failing batch, and an overprovisioned
one (tiny batches against a long trigger interval)."""
import tempfile
import time

import pytest
import requests

from spark_governor.api.processes import wait_for

pytestmark = pytest.mark.spark
TOKEN = "health-test-token"


@pytest.fixture
def plane(start_plane):
    return start_plane(TOKEN, window_ms=1000, evaluation_interval_s=1.0)


def health(plane, job, window_s=10) -> dict:
    r = requests.get(f"{plane.url}/api/v1/jobs/{job}/health?window_s={window_s}", timeout=10)
    if r.status_code == 404:  # before the job's first report
        return {"state": None, "reason": r.json()["error"]}
    assert r.status_code == 200, r.text
    return r.json()


def run(spark, plane, tmp_path, job, foreach_batch, trigger, expect, rate="200", conf=None, after_start=None):
    """Attach, run a zipf query with ``foreach_batch`` until the verdict is ``expect``, stop; the verdict."""
    from spark_governor.collectors import attach
    from spark_governor.collectors.sources.zipf import register_zipf_source

    register_zipf_source(spark)
    rate_file = tmp_path / "rate"
    rate_file.write_text(rate)
    handle = attach(spark, job=job, endpoint=plane.url)
    for k, v in (conf or {}).items():
        spark.conf.set(k, v)
    try:
        src = (spark.readStream.format("zipf").option("rowsPerSecond", 200).option("rateFile", str(rate_file))
               .option("keys", 50).option("numPartitions", 2).load())
        query = (src.writeStream.foreachBatch(foreach_batch)
                 .option("checkpointLocation", tempfile.mkdtemp(prefix="sg-health-"))
                 .trigger(processingTime=trigger).start())
    finally:
        for k in conf or {}:
            spark.conf.unset(k)
    seen = []
    try:
        if after_start:
            after_start(query, rate_file)

        def reached():
            v = health(plane, job)
            seen.append((v["state"], v["reason"]))
            return v if v["state"] == expect else None

        v = wait_for(reached, 120, 0.5, f"verdict {expect!r} (seen: {seen[-5:]})")
        if query.isActive:  # /metrics: one state at 1 for the job, every other at 0
            lines = [ln for ln in requests.get(f"{plane.url}/metrics", timeout=10).text.splitlines()
                     if ln.startswith("spark_governor_health{") and f'spark_job="{job}"' in ln]
            assert len(lines) == 7 and sum(float(ln.split()[-1]) for ln in lines) == 1.0, lines
        return v
    finally:
        try:
            query.stop()
        except Exception:  # the failing job's query has terminated with its error already
            pass
        handle.detach(flush_timeout_s=10)


def test_idle_source(spark, plane, tmp_path):
    counts = []

    def foreach_batch(df, batch_id):
        counts.append(df.count())

    def go_quiet(query, rate_file):
        wait_for(lambda: sum(1 for c in counts if c > 0) >= 2 or not query.isActive, 120, 0.2, "batches with rows")
        assert query.isActive, query.exception()
        rate_file.write_text("0")

    v = run(spark, plane, tmp_path, "health-idle", foreach_batch, "1 second", "idle",
            conf={"spark.sql.streaming.noDataProgressEventInterval": "1000"}, after_start=go_quiet)
    assert v["recommended_executors"] is None and v["numbers"]["failed_tasks"] == 0
    assert [q["state"] for q in v["queries"]] == ["idle"]  # the one query's own verdict


def test_overloaded_source_is_underprovisioned(spark, plane, tmp_path):
    def foreach_batch(df, batch_id):
        # 16 tasks of 0.25 s each on 2 task slots: at least 2 s of work per 1 s trigger interval
        df.repartition(16).rdd.mapPartitions(lambda it: [time.sleep(0.25) or sum(1 for _ in it)]).collect()

    v = run(spark, plane, tmp_path, "health-overloaded", foreach_batch, "1 second", "underprovisioned")
    n = v["numbers"]
    assert n["batch_time_s"] > n["trigger_interval_s"] == 1.0
    assert "trigger interval" in v["reason"]
    assert v["recommended_executors"] > n["executors"] == 2  # local[2]: two task slots
    assert "task slots" in v["recommendation"]
    (q,) = v["queries"]
    assert q["state"] == "underprovisioned" and q["numbers"]["batch_time_s"] > 1.0


def test_failing_batch_is_unhealthy(spark, plane, tmp_path):
    def foreach_batch(df, batch_id):
        if batch_id >= 2:
            df.rdd.map(lambda r: 1 / 0).count()  # a task fails (local mode: no retry), so the batch fails
        df.count()

    v = run(spark, plane, tmp_path, "health-failing", foreach_batch, "1 second", "unhealthy")
    assert v["numbers"]["failed_tasks"] > 0 or "terminated" in v["reason"]


def test_tiny_batches_are_overprovisioned(spark, plane, tmp_path):
    def foreach_batch(df, batch_id):
        df.count()

    v = run(spark, plane, tmp_path, "health-over", foreach_batch, "4 seconds", "overprovisioned")
    n = v["numbers"]
    assert n["batch_time_s"] <= 0.5 * n["budget_s"] and n["utilization"] < 0.4
    assert v["recommended_executors"] == 1 and "about 1 task slot " in v["recommendation"]
