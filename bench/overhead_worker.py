"""One run of the overhead benchmark's job, in its own process (fresh JVM per run).

Processes ``--batches`` micro-batches of ``--rows`` rows each, back to back (default trigger),
with or without the reporters attached (``attach()``, or the JVM listener jar with ``--jar``: added by
configuration only, as ``spark-submit --jars/--conf`` would), and prints JSON with per-batch durations (ms).
Both reporters take their report token from the ``SPARK_GOVERNOR_TOKEN`` environment variable (set by
``bench.overhead``).

For the hostile rows (issue #16: an endpoint that never answers, or drips a byte every few seconds) ``--job``,
``--post-deadline`` (seconds, the whole of one POST) and ``--max-retries`` go to ``attach()``; after the run the
JSON also says how long ``detach(--stop-timeout)`` took (seconds) and which reporter threads
(``spark-governor-reporter-*``) were still alive after it.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time


def main(argv=None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--endpoint", default=None, help="attach reporters to this control plane")
    ap.add_argument("--jar", action="store_true", help="report with the listener jar (--jars/--conf) instead of attach()")
    ap.add_argument("--batches", type=int, default=30)
    ap.add_argument("--rows", type=int, default=20_000)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--job", default="bench-overhead", help="job name of the attach() reporter")
    ap.add_argument("--post-deadline", type=float, default=None, help="attach(): seconds per POST in total")
    ap.add_argument("--max-retries", type=int, default=None, help="attach(): resends of a report before it is dropped")
    ap.add_argument("--stop-timeout", type=float, default=10.0, help="detach(): seconds for the last flush")
    a = ap.parse_args(argv)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from spark_governor.collectors.demo_job import build_session
    from spark_governor.collectors.sources.zipf import register_zipf_source

    if a.endpoint and a.jar:  # configuration only: the same switches spark-submit would get
        import shlex

        from spark_governor.collectors.jvm.build import submit_args

        os.environ["PYSPARK_SUBMIT_ARGS"] = shlex.join(
            submit_args(a.endpoint, "bench-overhead-jar", interval="1s")) + " pyspark-shell"
    spark = build_session("local[2]", 4, app_name="sg-bench-overhead")
    spark.sparkContext.setLogLevel("ERROR")
    handle = None
    if a.endpoint and not a.jar:
        from spark_governor.collectors import attach

        opts = {k: v for k, v in (("post_deadline_s", a.post_deadline), ("max_retries", a.max_retries)) if v is not None}
        handle = attach(spark, job=a.job, endpoint=a.endpoint, **opts)
    jvm = spark._jvm
    register_zipf_source(spark)
    total = a.batches + a.warmup
    src = (spark.readStream.format("zipf").option("rowsPerSecond", 10_000_000).option("keys", 10_000)
           .option("skew", 1.1).option("maxRowsPerBatch", a.rows).option("numPartitions", 2).load())
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as ckpt:
        q = (src.groupBy("key").count().writeStream.outputMode("update").format("noop")
             .option("checkpointLocation", ckpt).start())
        t0 = time.time()
        while len([p for p in q.recentProgress if p.numInputRows]) < total and time.time() - t0 < 600:
            time.sleep(0.2)
        q.stop()
        wall_ms = (time.time() - t0) * 1000
        progress = [p for p in q.recentProgress if p.numInputRows][a.warmup:total]
    stats, detach_s, alive = None, None, []
    if handle is not None:
        t_stop = time.monotonic()
        handle.detach(a.stop_timeout)
        detach_s = time.monotonic() - t_stop
        alive = [t.name for t in threading.enumerate() if t.name.startswith("spark-governor-reporter-")]
        stats = handle.reporter.stats()
    spark.stop()  # the jar's listener flushes at application end; its counters stay readable
    if a.endpoint and a.jar:
        raw = jvm.io.sparkgovernor.SparkGovernorListener.reporterStats()
        stats = json.loads(raw) if raw else None
    print(json.dumps({"batch_ms": [p.batchDuration for p in progress], "wall_ms": wall_ms,
                      "rows": [p.numInputRows for p in progress], "reporter": stats,
                      "detach_s": detach_s, "reporter_threads_after_stop": alive}))


if __name__ == "__main__":
    sys.exit(main())
