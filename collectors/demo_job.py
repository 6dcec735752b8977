"""The example streaming job: Zipf-distributed keys from the synthetic source, counted by key.

Used by ``make demo`` (``spark-governor demo``), the integration tests and the overhead
benchmark. Run directly: ``python -m collectors.demo_job --endpoint http://127.0.0.1:8787``.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Optional


@dataclass
class DemoConfig:
    job: str = "zipf-demo"
    endpoint: Optional[str] = "http://127.0.0.1:8787"  # None: run without reporters
    seconds: float = 60.0
    rows_per_second: int = 2000
    keys: int = 1000
    skew: float = 1.1
    source_partitions: int = 2
    shuffle_partitions: int = 4
    trigger_seconds: float = 1.0
    master: str = "local[2]"
    seed: int = 7
    reporter_options: dict = field(default_factory=dict)


@dataclass
class DemoResult:
    batches: int
    input_rows: int
    batch_durations_ms: list
    query_id: str
    run_id: str
    wall_seconds: float
    reporter_stats: Optional[dict]


def build_session(master: str = "local[2]", shuffle_partitions: int = 4, app_name: str = "spark-governor-demo"):
    """A local SparkSession suitable for small streaming jobs (Python workers use this interpreter)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    return (SparkSession.builder.master(master).appName(app_name)
            .config("spark.sql.shuffle.partitions", shuffle_partitions)
            .config("spark.ui.enabled", "false")
            .config("spark.sql.streaming.stateStore.stateSchemaCheck", "false")
            .getOrCreate())


def start_query(spark, cfg: DemoConfig, checkpoint: str):
    """Start the keyed count over the Zipf source; returns the StreamingQuery."""
    from spark_governor.collectors.observe import observe_event_time
    from spark_governor.collectors.sources.zipf import register_zipf_source

    register_zipf_source(spark)
    src = (spark.readStream.format("zipf").option("rowsPerSecond", cfg.rows_per_second)
           .option("keys", cfg.keys).option("skew", cfg.skew).option("seed", cfg.seed)
           .option("numPartitions", cfg.source_partitions).load())
    counts = observe_event_time(src, "event_time").groupBy("key").count()
    return (counts.writeStream.queryName(cfg.job.replace("-", "_")).outputMode("update").format("noop")
            .option("checkpointLocation", checkpoint)
            .trigger(processingTime=f"{cfg.trigger_seconds} seconds").start())


def run_demo_job(cfg: DemoConfig, spark=None) -> DemoResult:
    """Run the job for ``cfg.seconds`` seconds (wall clock), with reporters if ``cfg.endpoint``."""
    own = spark is None
    spark = spark or build_session(cfg.master, cfg.shuffle_partitions)
    handle = None
    if cfg.endpoint:
        from spark_governor.collectors import attach

        handle = attach(spark, job=cfg.job, endpoint=cfg.endpoint, **cfg.reporter_options)
    started = time.time()
    with tempfile.TemporaryDirectory(prefix="sg-ckpt-", ignore_cleanup_errors=True) as ckpt:
        query = start_query(spark, cfg, ckpt)
        try:
            query.awaitTermination(cfg.seconds)
        finally:
            query.stop()
        progress = [p for p in query.recentProgress if p.numInputRows is not None]
    wall = time.time() - started
    stats = None
    if handle is not None:
        handle.detach(flush_timeout_s=10)
        stats = handle.reporter.stats()
    result = DemoResult(len(progress), sum(p.numInputRows for p in progress),
                        [p.batchDuration for p in progress], query.id, query.runId, wall, stats)
    if own:
        spark.stop()
    return result


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--endpoint", default="http://127.0.0.1:8787")
    ap.add_argument("--job", default="zipf-demo")
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--rate", type=int, default=2000)
    ap.add_argument("--no-report", action="store_true")
    a = ap.parse_args(argv)
    r = run_demo_job(DemoConfig(job=a.job, endpoint=None if a.no_report else a.endpoint,
                                seconds=a.seconds, rows_per_second=a.rate))
    print(f"batches={r.batches} input_rows={r.input_rows} wall={r.wall_seconds:.1f}s reporter={r.reporter_stats}")


if __name__ == "__main__":
    main()
