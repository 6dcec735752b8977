"""Driver of the executor-scaling tests and of ``bench scaling-real``, run as its own process against
a standalone cluster (``bench.standalone.Driver`` starts it).

Runs a paced Zipf query whose per-row work (a sleep in ``mapInPandas``) is spread over the
executors, with reporters attached (``attach()``, or with ``--jar-only`` the listener jar by configuration
alone, as ``spark-submit --jars … --conf …`` would: no source probe, no executor warm-up), and writes one
JSON line per second: time, executors
registered, and the latest batch's processing time; and one line per completed micro-batch
(``{"progress": {...}}``: batch id, trigger start in epoch ms, triggerExecution ms, addBatch ms —
the part of the batch that runs its jobs; the rest is the driver's offset/planning/commit work —, input
rows).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from datetime import datetime


def main(argv=None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--master", required=True)
    ap.add_argument("--endpoint", required=True)
    ap.add_argument("--job", default="scaling")
    ap.add_argument("--rate-file", required=True)
    ap.add_argument("--stop-file", required=True, help="the job stops when this file exists")
    ap.add_argument("--out", required=True)
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--row-cost-us", type=float, default=50.0)
    ap.add_argument("--initial-executors", type=int, default=1)
    ap.add_argument("--trigger-seconds", type=float, default=4.0)
    ap.add_argument("--no-probe", action="store_true", help="no source probe: the live state knows the "
                                                            "source's offsets from completed batches only")
    ap.add_argument("--no-warm", action="store_true", help="no warm-up of added executors "
                                                           "(collectors.executor_warmup)")
    ap.add_argument("--launch-hold", action="store_true", help="the listener jar's launch hold: an added executor "
                                                               "takes no waiting task cold (collectors.launch_hold)")
    ap.add_argument("--jar-only", action="store_true", help="no attach(): the listener jar reports and applies "
                                                            "executors, attached by Spark confs alone")
    ap.add_argument("--event-log", help="write Spark's event log into this directory (spark-governor replay reads it)")
    ap.add_argument("--task-detail", default=None, help="attach()'s task_detail: none, failed (default) or all")
    a = ap.parse_args(argv)
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from spark_governor.collectors import attach
    from spark_governor.collectors.source_probe import RateFileProbe
    from spark_governor.collectors.sources.zipf import register_zipf_source

    builder = (SparkSession.builder.master(a.master).appName("sg-scaling-test")
               .config("spark.executor.cores", 1).config("spark.executor.memory", "512m")
               .config("spark.dynamicAllocation.enabled", "false")
               .config("spark.sql.shuffle.partitions", 4).config("spark.ui.enabled", "false")
               .config("spark.driver.host", "127.0.0.1"))
    if a.event_log:
        builder = builder.config("spark.eventLog.enabled", "true").config("spark.eventLog.dir", a.event_log)
    if a.launch_hold or a.jar_only:
        from spark_governor.collectors.jvm.build import find_jar, submit_confs

        jar = str(find_jar())  # one machine: the driver and the executors read the same file
        builder = builder.config("spark.driver.extraClassPath", jar).config("spark.executor.extraClassPath", jar)
        confs = submit_confs(a.endpoint, a.job, interval="500ms", launch_hold=a.launch_hold)
        if not a.jar_only:  # attach() reports: only the jar's Spark plugin
            confs = {k: v for k, v in confs.items() if k == "spark.plugins"}
        for key, value in confs.items():
            builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    from spark_governor.collectors.appliers import ExecutorApplier

    # a standalone app takes every free core at start; begin from a small, known size. Executors
    # the master launched before the limit register later, so keep killing idle extras until the
    # count has stayed at the initial size for a few seconds.
    sizer = ExecutorApplier(spark.sparkContext)
    print("initial size:", sizer(a.initial_executors), flush=True)
    deadline, stable_since = time.time() + 120, None
    while time.time() < deadline:
        sizer.reconcile()
        if len(sizer.executor_ids()) == a.initial_executors:
            stable_since = stable_since or time.time()
            if time.time() - stable_since >= 5:
                break
        else:
            stable_since = None
        time.sleep(0.5)
    print("executors at start:", sizer.executor_ids(), flush=True)
    # the project's own source: the reporter reads its rate file between batches (collectors.source_probe)
    probes = [] if a.no_probe else [RateFileProbe(a.rate_file, rows_per_second=100)]
    handle = None if a.jar_only else attach(spark, job=a.job, endpoint=a.endpoint, flush_interval_s=0.5,
                                            source_probes=probes, task_detail=a.task_detail,
                                            **({"warm_modules": None} if a.no_warm else {}))
    warmer = handle.warmer if handle else None
    register_zipf_source(spark)
    cost = a.row_cost_us / 1e6

    def work(batches):
        for pdf in batches:
            time.sleep(len(pdf) * cost)
            yield pdf

    src = (spark.readStream.format("zipf").option("rateFile", a.rate_file).option("rowsPerSecond", 100)
           .option("keys", 100).option("numPartitions", 4).load())
    q = (src.mapInPandas(work, src.schema).groupBy("key").count().writeStream.outputMode("update")
         .format("noop").option("checkpointLocation", a.checkpoint).trigger(processingTime=f"{a.trigger_seconds} seconds").start())
    jsc = spark.sparkContext._jsc.sc()
    seen = -1
    with open(a.out, "w") as out:
        while not os.path.exists(a.stop_file) and q.isActive:
            p = q.lastProgress
            # recentProgress converts up to 100 progress objects: only when a batch was missed
            for prog in (q.recentProgress if p is not None and p.batchId > seen + 1 else [p] if p is not None else []):
                if prog.batchId > seen:
                    seen = prog.batchId
                    out.write(json.dumps({"progress": {
                        "batch": prog.batchId, "rows": prog.numInputRows,
                        "trigger_ms": int(datetime.fromisoformat(prog.timestamp.replace("Z", "+00:00")).timestamp() * 1000),
                        "processing_ms": prog.durationMs.get("triggerExecution"),
                        "add_batch_ms": prog.durationMs.get("addBatch")}}) + "\n")
            out.write(json.dumps({"t": time.time(), "executors": jsc.getExecutorIds().size(),
                                  "batch": p.batchId if p else None,
                                  "processing_ms": p.durationMs.get("triggerExecution") if p else None,
                                  "applied": handle.reporter.apply_log if handle else None,
                                  "warmed": dict(warmer.ran_on) if warmer else None,
                                  "warm_job_s": list(warmer.job_s) if warmer else None,
                                  "held_s": dict(warmer.held_s) if warmer else None,
                                  "slot_held_s": dict(warmer.slot_held_s) if warmer else None}) + "\n")
            out.flush()
            time.sleep(1)
    q.stop()
    if handle is not None:
        handle.detach(5)
    spark.stop()


if __name__ == "__main__":
    main()
