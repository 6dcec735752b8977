"""Write real Spark event logs for the replay tests (run as a script: ``python event_log_writer.py OUT``).

One JVM, one SparkContext after the other, each with its own event-log settings:

* ``plain``   — uncompressed JSON lines, one short streaming query (rate source, keyed count);
* ``lz4``, ``zstd``, ``snappy`` — the same query, compressed with that codec
  (``spark.eventLog.compress`` + ``spark.eventLog.compression.codec``);
* ``rolling`` — the same query, zstd, ``spark.eventLog.rolling.enabled`` (Spark 4's default layout) with the smallest allowed
  ``spark.eventLog.rolling.maxFileSize`` (10 MiB: Spark refuses less), an ``eventlog_v2_*`` directory;
* ``batch``   — a plain batch job (no streaming query), uncompressed;
* ``phases``  — a file-source query that idles, then falls behind (``_phases``), uncompressed.

The ``plain`` run is also reported live (``attach``) to an in-process control plane on the SQLite file
``OUT/live.db`` as job ``live-plain``, so a test can compare the replayed statistics with the live ones.
Spark's own record of each streaming run (``StreamingQuery.recentProgress``: batch ids and input rows)
is written beside the logs as ``OUT/truth.json``, the oracle for the imported counts.

Each streaming query runs until ``BATCHES`` micro-batches with input rows have completed. Prints one
line of JSON: ``{"name": path}`` of every log written.
"""
from __future__ import annotations

import glob
import json
import os
import sys
import time

BATCHES = 3


def _session(name: str, log_dir: str, conf: dict):
    from spark_governor.collectors.demo_job import build_session

    os.makedirs(log_dir, exist_ok=True)
    return build_session("local[2]", shuffle_partitions=4, app_name=f"replay-{name}",
                         conf={"spark.eventLog.enabled": "true", "spark.eventLog.dir": log_dir, **conf})


def _streaming(spark, checkpoint: str) -> list:
    from pyspark.sql import functions as F

    df = (spark.readStream.format("rate").option("rowsPerSecond", 40).option("numPartitions", 4).load()
          .groupBy((F.col("value") % 5).alias("k")).count())
    q = (df.writeStream.queryName("replay_counts").outputMode("update").format("noop")
         .option("checkpointLocation", checkpoint).trigger(processingTime="400 milliseconds").start())
    deadline = time.time() + 60
    while time.time() < deadline:
        done = [p for p in q.recentProgress if p.get("numInputRows", 0) > 0]
        if len(done) >= BATCHES:
            break
        time.sleep(0.1)
    q.stop()
    return [{"batch_id": p["batchId"], "rows": p["numInputRows"]} for p in q.recentProgress]


def _phases(spark, work: str, checkpoint: str) -> list:
    """A file-source query that idles, then falls behind: 8 s without files (the trigger finds no data: Spark
    posts ``QueryIdleEvent``s), then a file of 800 lines every 0.5 s for 16 s, read one file per 2 s trigger in 16
    partitions by a UDF that works 8 ms per line (6.4 s of work a file, 0.4 s a task: on 2 slots the batches
    overrun the trigger and the files pile up, and more slots would help — on a machine twice as loaded too)."""
    from pyspark.sql import functions as F

    incoming = os.path.join(work, "incoming")
    os.makedirs(incoming, exist_ok=True)

    def slow(line):
        import time as t
        t.sleep(0.008)
        return len(line)

    df = (spark.readStream.format("text").option("maxFilesPerTrigger", 1).load(incoming)
          .repartition(16).select(F.udf(slow, "int")("value").alias("n")).groupBy().sum("n"))
    q = (df.writeStream.queryName("phases").outputMode("complete").format("noop")
         .option("checkpointLocation", checkpoint).trigger(processingTime="2 seconds").start())
    time.sleep(8)
    for i in range(32):
        path = os.path.join(incoming, f"part-{i:03d}.txt")
        with open(path + ".tmp", "w") as f:
            f.write("\n".join(f"line {i} {j}" for j in range(800)))
        os.rename(path + ".tmp", path)
        time.sleep(0.5)
    q.stop()
    return [{"batch_id": p["batchId"], "rows": p["numInputRows"]} for p in q.recentProgress]


def _batch(spark) -> None:
    spark.range(0, 10_000, numPartitions=4).selectExpr("id % 7 as k").groupBy("k").count().collect()


def main(out: str) -> dict:
    variants = [
        ("plain", {"spark.eventLog.compress": "false", "spark.eventLog.rolling.enabled": "false"}),
        ("lz4", {"spark.eventLog.compress": "true", "spark.eventLog.compression.codec": "lz4",
                  "spark.eventLog.rolling.enabled": "false"}),
        ("zstd", {"spark.eventLog.compress": "true", "spark.eventLog.compression.codec": "zstd",
                  "spark.eventLog.rolling.enabled": "false"}),
        ("snappy", {"spark.eventLog.compress": "true", "spark.eventLog.compression.codec": "snappy",
                  "spark.eventLog.rolling.enabled": "false"}),
        ("rolling", {"spark.eventLog.compress": "true", "spark.eventLog.compression.codec": "zstd",
                     "spark.eventLog.rolling.enabled": "true",
                     "spark.eventLog.rolling.maxFileSize": "10m"}),
        ("batch", {"spark.eventLog.compress": "false", "spark.eventLog.rolling.enabled": "false"}),
        ("phases", {"spark.eventLog.compress": "false", "spark.eventLog.rolling.enabled": "false",
                    "spark.sql.streaming.noDataProgressEventInterval": "1000ms"}),
    ]
    from spark_governor.api.server import ControlPlane
    from spark_governor.collectors.attach import attach

    written, truth = {}, {}
    os.makedirs(out, exist_ok=True)
    plane = ControlPlane(db_url=f"sqlite:///{os.path.join(out, 'live.db')}", port=0).start()
    try:
        for name, conf in variants:
            log_dir = os.path.join(out, name)
            t0 = time.time()
            spark = _session(name, log_dir, conf)
            handle = attach(spark, "live-plain", plane.url) if name == "plain" else None
            t1 = time.time()
            try:
                if name == "batch":
                    _batch(spark)
                elif name == "phases":
                    truth[name] = _phases(spark, os.path.join(out, "phases-input"), os.path.join(out, "ckpt-phases"))
                else:
                    truth[name] = _streaming(spark, os.path.join(out, f"ckpt-{name}"))
            finally:
                t2 = time.time()
                if handle is not None:
                    # the live statistics are compared with the log's whole: give the last reports time to
                    # arrive on a loaded machine (the product's 5 s bound dropped 2 tasks of 30 there)
                    handle.detach(flush_timeout_s=30.0)
                spark.stop()
            print(f"{name}: start {t1 - t0:.1f} s, run {t2 - t1:.1f} s, stop {time.time() - t2:.1f} s",
                  file=sys.stderr)
            found = sorted(glob.glob(os.path.join(log_dir, "*")))
            written[name] = found[0]
    finally:
        plane.stop()
    with open(os.path.join(out, "truth.json"), "w") as f:
        json.dump(truth, f)
    return written


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1])))
