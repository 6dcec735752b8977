"""The example streaming job: Zipf-distributed keys from the synthetic source, counted by key.

Used by ``make demo`` (``spark-governor demo``), the integration tests and the overhead
benchmark. Run directly: ``python -m spark_governor.collectors.demo_job --endpoint http://127.0.0.1:8787``.

The demo's sizing (:meth:`DemoConfig.two_cores`) is for a 2-core machine (``local[2]``): 2 000 rows/s over
1 000 keys, 2 source partitions, 4 shuffle (state-store) partitions and a 2 s trigger, so that a micro-batch
(0.5–1.5 s of a scan and a stateful count, mostly per-task overhead rather than rows) keeps up with its
trigger while the control plane and the reporter share the cores; a 1 s trigger falls behind there.

It stops cleanly: when the time is up the source stops producing (its rate file is set to 0), the running
micro-batch finishes and a trigger finds no new data, and only then is the query stopped — stopping a
query in the middle of a batch aborts its state-store commit (``CANNOT_WRITE_STATE_STORE``) and logs
Java stack traces. Sessions from :func:`build_session` log at WARN through a log4j2 configuration of
their own (no console progress bars, no startup chatter).
"""
from __future__ import annotations

import argparse
import hashlib
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

#: log4j2 configuration of the sessions this module builds: WARN, Spark's console layout, and the
#: few loggers that warn on every normal run at ERROR: Hadoop's native-library notice; the
#: "falling behind" warning, which the demo reports itself per batch and which the first batch —
#: JIT warm-up — always triggers; "Disabling AQE … stateful workloads" on every stateful query
#: start; "Failed to cancel job group" on every stop of an idle query.
SPARK_LOG4J2 = """\
rootLogger.level = warn
rootLogger.appenderRef.stdout.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n%ex
logger.jetty.name = org.sparkproject.jetty
logger.jetty.level = warn
logger.jetty2.name = org.sparkproject.jetty.util.component.AbstractLifeCycle
logger.jetty2.level = error
logger.native.name = org.apache.hadoop.util.NativeCodeLoader
logger.native.level = error
logger.behind.name = org.apache.spark.sql.execution.streaming.runtime.ProcessingTimeExecutor
logger.behind.level = error
logger.microbatch.name = org.apache.spark.sql.execution.streaming.runtime.MicroBatchExecution
logger.microbatch.level = error
logger.dag.name = org.apache.spark.scheduler.DAGScheduler
logger.dag.level = error
"""


#: at most this many warm-up batches (the empty one included), see :func:`run_demo_job`
MAX_WARM_UP_BATCHES = 4


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
    stop_timeout_s: float = 60.0  # how long a clean stop (or a warm-up batch) may take
    warm_up: bool = False  # warm-up batches (an empty one, then until one keeps up) before ``seconds`` count
    attach_after_warm_up: bool = False  # report only from then on (the control plane never sees the warm-up)

    @classmethod
    def two_cores(cls, **overrides) -> "DemoConfig":
        """The demo's sizing for a 2-core machine (``spark-governor demo``; see the module docstring):
        a 2 s trigger, so that batches keep up while the control plane and the reporter share the cores,
        and warm-up batches before the seconds count and the reporters attach. (The field defaults
        — a 1 s trigger, no warm-up — are what the tests and benchmarks that run this job assume.)"""
        return cls(**{"trigger_seconds": 2.0, "warm_up": True, "attach_after_warm_up": True, **overrides})


@dataclass
class DemoResult:
    batches: int
    input_rows: int
    batch_durations_ms: list
    query_id: str
    run_id: str
    wall_seconds: float
    reporter_stats: Optional[dict]
    clean_stop: bool = True  # the query stopped between batches (False: it had to be interrupted)


@dataclass(frozen=True)
class BatchProgress:
    """One completed micro-batch, as the demo's progress line shows it (seconds, rows)."""

    batch_id: int
    rows: int
    duration_s: float
    trigger_s: float
    elapsed_s: float  # since the warm-up (or the query's start)
    warm_up: bool = False  # one of the batches that warm Spark up (before ``seconds`` count)


def log4j2_config() -> str:
    """Path of :data:`SPARK_LOG4J2` written to the temporary folder (one file per content)."""
    digest = hashlib.sha256(SPARK_LOG4J2.encode()).hexdigest()[:12]
    path = Path(tempfile.gettempdir()) / f"spark-governor-log4j2-{digest}.properties"
    if not path.exists():
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(SPARK_LOG4J2)
        os.replace(tmp, path)
    return str(path)


def build_session(master: str = "local[2]", shuffle_partitions: int = 4, app_name: str = "spark-governor-demo",
                  conf: Optional[dict] = None, quiet: bool = True):
    """A local SparkSession suitable for small streaming jobs (Python workers use this interpreter).

    ``quiet``: log at WARN through :data:`SPARK_LOG4J2` (applies when this call starts the JVM) and
    without console progress bars. In local mode Spark binds to 127.0.0.1 unless ``SPARK_LOCAL_IP``
    says otherwise. ``conf``: further Spark settings."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    if master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    builder = (SparkSession.builder.master(master).appName(app_name)
               .config("spark.sql.shuffle.partitions", shuffle_partitions)
               .config("spark.ui.enabled", "false")
               .config("spark.sql.streaming.stateStore.stateSchemaCheck", "false"))
    if quiet:
        builder = (builder.config("spark.ui.showConsoleProgress", "false")
                   .config("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile=file:{log4j2_config()}"))
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    if quiet:
        spark.sparkContext.setLogLevel("WARN")
    return spark


def start_query(spark, cfg: DemoConfig, checkpoint: str, rate_file: Optional[str] = None):
    """Start the keyed count over the Zipf source; returns the StreamingQuery. ``rate_file``: a file
    holding the source's rows per second, re-read at every trigger (0 stops producing)."""
    from spark_governor.collectors.observe import observe_event_time
    from spark_governor.collectors.sources.zipf import register_zipf_source

    register_zipf_source(spark)
    reader = (spark.readStream.format("zipf").option("rowsPerSecond", cfg.rows_per_second)
              .option("keys", cfg.keys).option("skew", cfg.skew).option("seed", cfg.seed)
              .option("numPartitions", cfg.source_partitions))
    if rate_file is not None:
        reader = reader.option("rateFile", rate_file)
    counts = observe_event_time(reader.load(), "event_time").groupBy("key").count()
    return (counts.writeStream.queryName(cfg.job.replace("-", "_")).outputMode("update").format("noop")
            .option("checkpointLocation", checkpoint)
            .trigger(processingTime=f"{cfg.trigger_seconds} seconds").start())


def _is_idle(query) -> bool:
    """No micro-batch running and the latest trigger found no new data."""
    status = query.status
    return not status["isTriggerActive"] and not status["isDataAvailable"]


def stop_gracefully(query, rate_file: Optional[str], timeout_s: float = 60.0, poll_s: float = 0.05) -> bool:
    """Stop ``query`` between micro-batches: stop the source producing (``rate_file`` ← 0), wait until
    the running batch has finished and a trigger found no new data, then stop. True when it stopped
    that way; False when it had to be stopped mid-batch after ``timeout_s`` (or had no rate file)."""
    if not query.isActive:
        return True
    clean = False
    if rate_file is not None:
        Path(rate_file).write_text("0")
        deadline = time.time() + timeout_s
        while query.isActive and time.time() < deadline:
            try:
                if _is_idle(query):
                    clean = True
                    break
            except Exception:  # the query may terminate while we ask
                break
            time.sleep(poll_s)
    query.stop()
    return clean


def _wait_for_batch(query, after_id: int, timeout_s: float) -> Optional[BatchProgress]:
    """The first completed batch with an id above ``after_id`` (as a warm-up batch), or None after
    ``timeout_s`` or when the query stops."""
    deadline = time.time() + timeout_s
    while query.isActive and time.time() < deadline:
        batch = _latest_batch(query, time.time(), warm_up=True)
        if batch is not None and batch.batch_id > after_id:
            return batch
        query.awaitTermination(0.1)
    return None


def _latest_batch(query, started: float, warm_up: bool = False) -> Optional[BatchProgress]:
    p = query.lastProgress
    if p is None or p.numInputRows is None:
        return None
    return BatchProgress(p.batchId, p.numInputRows, (p.batchDuration or 0) / 1000.0,
                         (p.durationMs or {}).get("triggerExecution", p.batchDuration or 0) / 1000.0,
                         time.time() - started, warm_up)


def run_demo_job(cfg: DemoConfig, spark=None,
                 on_batch: Optional[Callable[[BatchProgress], None]] = None) -> DemoResult:
    """Run the job for ``cfg.seconds`` seconds (wall clock), with reporters if ``cfg.endpoint``, and stop it
    cleanly (:func:`stop_gracefully`). ``on_batch`` is called (from this thread, about every 0.5 s) with
    each newly completed micro-batch.

    With ``cfg.warm_up`` the seconds count after warm-up batches: a first, empty one (the source produces
    nothing until it is done: it takes several seconds while Spark starts its Python workers and state
    store, and rows piling up meanwhile would make the next batch a latency spike), then batches with rows
    until one keeps up with the trigger interval (the data path warms up too; at most
    :data:`MAX_WARM_UP_BATCHES` in all). With ``cfg.attach_after_warm_up`` the reporters attach only after
    them: a policy would read their durations and backlog as an overload."""
    own = spark is None
    spark = spark or build_session(cfg.master, cfg.shuffle_partitions,
                                   conf={"spark.sql.adaptive.enabled": "false"})  # AQE: not for streaming
    handle = None

    def attach_reporters():
        from spark_governor.collectors import attach

        return attach(spark, job=cfg.job, endpoint=cfg.endpoint, **cfg.reporter_options)

    late = cfg.warm_up and cfg.attach_after_warm_up
    if cfg.endpoint and not late:
        handle = attach_reporters()
    t0 = time.time()
    with tempfile.TemporaryDirectory(prefix="sg-ckpt-", ignore_cleanup_errors=True) as tmp:
        rate_file = Path(tmp) / "rows-per-second"
        rate_file.write_text("0" if cfg.warm_up else str(cfg.rows_per_second))
        query = start_query(spark, cfg, str(Path(tmp) / "checkpoint"), str(rate_file))
        clean = False
        try:
            seen = -1
            if cfg.warm_up:
                # an empty batch starts the Python workers and the state store (several seconds: rows piling
                # up meanwhile would make the next batch a latency spike) ...
                batch = _wait_for_batch(query, seen, cfg.stop_timeout_s)
                rate_file.write_text(str(cfg.rows_per_second))
                # ... and the first batches with rows warm up the data path: until one keeps up with the trigger
                for _ in range(MAX_WARM_UP_BATCHES):
                    if batch is None:
                        break
                    seen = batch.batch_id
                    if on_batch is not None:
                        on_batch(batch)
                    if batch.rows and batch.duration_s <= cfg.trigger_seconds:
                        break
                    batch = _wait_for_batch(query, seen, cfg.stop_timeout_s)
                if cfg.endpoint and late:
                    handle = attach_reporters()
            started = time.time()
            while query.isActive:
                remaining = started + cfg.seconds - time.time()
                if remaining <= 0:
                    break
                query.awaitTermination(max(0.001, min(0.5, remaining)))  # Spark wants at least 1 ms
                if on_batch is not None:
                    batch = _latest_batch(query, started)
                    if batch is not None and batch.batch_id > seen:
                        seen = batch.batch_id
                        on_batch(batch)
            clean = stop_gracefully(query, str(rate_file), cfg.stop_timeout_s)
            if on_batch is not None:
                batch = _latest_batch(query, started)
                if batch is not None and batch.batch_id > seen:
                    on_batch(batch)
        finally:
            if query.isActive:
                query.stop()
        progress = [p for p in query.recentProgress if p.numInputRows is not None]
    wall = time.time() - t0
    stats = None
    if handle is not None:
        handle.detach(flush_timeout_s=10)
        stats = handle.reporter.stats()
    result = DemoResult(len(progress), sum(p.numInputRows for p in progress),
                        [p.batchDuration for p in progress], query.id, query.runId, wall, stats, clean)
    if own:
        spark.stop()
    return result


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--endpoint", default="http://127.0.0.1:8787")
    ap.add_argument("--job", default="zipf-demo")
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--rate", type=int, default=DemoConfig.rows_per_second)
    ap.add_argument("--trigger", type=float, default=DemoConfig.two_cores().trigger_seconds)
    ap.add_argument("--no-report", action="store_true")
    a = ap.parse_args(argv)

    def line(b: BatchProgress) -> None:
        print(f"batch {b.batch_id}: {b.rows} rows in {b.duration_s:.2f} s", file=sys.stderr)

    r = run_demo_job(DemoConfig.two_cores(job=a.job, endpoint=None if a.no_report else a.endpoint,
                                          seconds=a.seconds, rows_per_second=a.rate, trigger_seconds=a.trigger),
                     on_batch=line)
    print(f"batches={r.batches} input_rows={r.input_rows} wall={r.wall_seconds:.1f}s clean_stop={r.clean_stop} "
          f"reporter={r.reporter_stats}")


if __name__ == "__main__":
    main()
