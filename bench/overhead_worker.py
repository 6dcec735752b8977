"""One run of the overhead benchmark's job, in its own process (fresh JVM per run).

Processes ``--batches`` micro-batches of ``--rows`` rows each, back to back (default trigger),
with or without the reporters attached (``attach()``, or the JVM listener jar with ``--jar``: added by
configuration only, as ``spark-submit --jars/--conf`` would), and prints JSON with per-batch durations (ms).
Both reporters take their report token from the ``SPARK_GOVERNOR_TOKEN`` environment variable (set by
``bench.overhead``).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time


def main(argv=None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--endpoint", default=None, help="attach reporters to this control plane")
    ap.add_argument("--jar", action="store_true", help="report with the listener jar (--jars/--conf) instead of attach()")
    ap.add_argument("--batches", type=int, default=30)
    ap.add_argument("--rows", type=int, default=20_000)
    ap.add_argument("--warmup", type=int, default=3)
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

        handle = attach(spark, job="bench-overhead", endpoint=a.endpoint)
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
    stats = None
    if handle is not None:
        handle.detach(10)
        stats = handle.reporter.stats()
    spark.stop()  # the jar's listener flushes at application end; its counters stay readable
    if a.endpoint and a.jar:
        raw = jvm.io.sparkgovernor.SparkGovernorListener.reporterStats()
        stats = json.loads(raw) if raw else None
    print(json.dumps({"batch_ms": [p.batchDuration for p in progress], "wall_ms": wall_ms,
                      "rows": [p.numInputRows for p in progress], "reporter": stats}))


if __name__ == "__main__":
    sys.exit(main())
