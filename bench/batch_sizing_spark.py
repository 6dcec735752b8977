"""Short real-Spark version of ``bench batch-sizing`` (local mode, the paced Zipf source).

For each controller, a keyed count over ``zipf-paced`` runs three phases of ``phase_s`` seconds at
``rate``, ``2·rate`` and ``rate`` rows/s (``rateFile``); the ``foreachBatch`` body also sleeps
``cost_per_row_s`` per row, so processing time is Spark's own overhead + c·N (a Reduce-like linear
workload with a visible rate dependence). A driver-side loop polls the query's progress every
``poll_s``, builds the policy's ``JobView`` from it (the same ``BatchStats`` the control plane
builds) and applies the policy's value with ``BatchIntervalApplier`` — the policy and actuation
code of the product without the HTTP round trip. Per batch: x = the gate's interval,
q = its queueing, p = ``triggerExecution``; latency = x + q + p (seconds). Measured: the batches
that start after a ``warmup_s`` warm-up at ``rate`` (the first batch of a query starts Spark's
Python workers); every source absorbs a backlog older than ``MAX_QUEUEING_S`` in one batch.
"""
from __future__ import annotations

import os
import shutil
import tempfile
import threading
import time
from typing import Callable

import numpy as np

from spark_governor.collectors.batch_interval import BatchIntervalApplier
from spark_governor.policies.base import BatchStats, DirectiveState, JobView
from spark_governor.policies.registry import get_policy, validate_config


#: every controller's source absorbs a backlog older than this (``maxQueueingSeconds``): the first
#: batch of a query (Python worker start-up) can take tens of seconds on a loaded machine
MAX_QUEUEING_S = 5.0


def progress_batches(query) -> list[BatchStats]:
    """``BatchStats`` of the executed batches in ``query.recentProgress`` (as the control plane's)."""
    from spark_governor.collectors.events import batch_record

    out = []
    for p in query.recentProgress:
        if "addBatch" not in (p["durationMs"] or {}):
            continue
        rec = batch_record(dict(p.jsonValue()) if hasattr(p, "jsonValue") else p)
        d = rec["durations_ms"]
        out.append(BatchStats(rec["batch_id"], rec["trigger_ms"], d.get("triggerExecution", 0) / 1000.0,
                              rec["num_input_rows"], None, None,
                              interval_s=d["batchInterval"] / 1000.0 if "batchInterval" in d else None,
                              queueing_s=d["batchQueueing"] / 1000.0 if "batchQueueing" in d else None))
    return out


class LocalLoop(threading.Thread):
    """Evaluates a batch_interval policy on the query's progress and applies its value."""

    def __init__(self, query, policy: str, config: dict, applier: BatchIntervalApplier, poll_s: float = 0.2):
        super().__init__(daemon=True)
        cls = get_policy(policy)
        self.policy, self.config = cls(), validate_config(cls, config)
        self.query, self.applier, self.poll_s = query, applier, poll_s
        self.current = None
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.wait(self.poll_s):
            try:
                batches = tuple(progress_batches(self.query))
            except Exception:
                continue
            dirs = {} if self.current is None else {
                "batch_interval": DirectiveState("batch_interval", 1, self.current, 1, "applied")}
            view = JobView("bench", int(time.time() * 1000), 10.0, batches=batches, directives=dirs)
            for p in self.policy.evaluate(view, self.config):
                if p.value != self.current:
                    status, _ = self.applier(p.value)
                    if status == "applied":
                        self.current = p.value


def run_one(spark, policy: str, config: dict, rate: float, phase_s: float, cost_per_row_s: float,
            warmup_s: float = 20.0, log: Callable[[str], None] = print) -> tuple[list[BatchStats], int]:
    """Batches of one controller measured after the warm-up, and the epoch ms the phases started."""
    tmp = tempfile.mkdtemp(prefix="sg-bs-")
    try:
        rate_file, control = os.path.join(tmp, "rate"), os.path.join(tmp, "interval")
        with open(rate_file, "w") as f:
            f.write(str(rate))
        df = (spark.readStream.format("zipf-paced").option("rowsPerSecond", rate).option("rateFile", rate_file)
              .option("intervalFile", control).option("keys", 200).option("numPartitions", 2)
              .option("maxQueueingSeconds", MAX_QUEUEING_S).load())

        def sink(batch_df, batch_id):
            rows = sum(r["count"] for r in batch_df.groupBy("key").count().collect())
            time.sleep(cost_per_row_s * rows)

        query = (df.writeStream.foreachBatch(sink).option("checkpointLocation", os.path.join(tmp, "ckpt"))
                 .queryName(f"bench_{policy.replace('-', '_')}").start())
        loop = LocalLoop(query, policy, config, BatchIntervalApplier(control))
        loop.start()
        try:
            deadline = time.time() + 300
            while not progress_batches(query) and time.time() < deadline:
                time.sleep(0.2)
            time.sleep(warmup_s)
            t0 = time.time()
            for k, r in enumerate((rate, 2 * rate, rate)):
                with open(rate_file + ".tmp", "w") as f:
                    f.write(str(r))
                os.replace(rate_file + ".tmp", rate_file)
                time.sleep(max(0.0, t0 + (k + 1) * phase_s - time.time()))
        finally:
            loop.stopped.set()
            batches = progress_batches(query)
            query.stop()
        log(f"  {policy} {config}: {len(batches)} batches")
        # Spark's batch 0 ends at the initial offset (no rows, no interval): not a paced batch
        return [b for b in batches if b.interval_s is not None and b.trigger_ms >= t0 * 1000], int(t0 * 1000)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def summarize(batches: list[BatchStats], t0_ms: int, steps_ms: tuple[int, ...]) -> dict:
    lat = np.array([b.interval_s + (b.queueing_s or 0) + b.processing_s for b in batches])
    unstable = [b.processing_s > b.interval_s for b in batches]
    worst = 0
    for step in steps_ms:
        after = [u for b, u in zip(batches, unstable) if b.trigger_ms >= step]
        count = 0
        for a, c in zip(after, after[1:]):
            if not a and not c:
                break
            count += a
        worst = max(worst, count)
    return {"batches": len(batches), "mean_latency_s": float(lat.mean()), "p95_latency_s": float(np.percentile(lat, 95)),
            "unstable_fraction": float(np.mean(unstable)), "max_unstable_after_step": worst,
            "intervals": [round(b.interval_s, 3) for b in batches]}


def run_spark_bench(rate: float = 2000.0, phase_s: float = 15.0, cost_per_row_s: float = 1e-4,
                    statics: tuple[float, ...] = (0.5, 0.7, 1.0, 2.0), warmup_s: float = 20.0,
                    log: Callable[[str], None] = print, spark=None) -> dict:
    from spark_governor.collectors.demo_job import build_session
    from spark_governor.collectors.sources.paced import register_paced_sources

    own = spark is None
    spark = spark or build_session("local[2]", shuffle_partitions=4, app_name="spark-governor-bench-batch-sizing")
    register_paced_sources(spark)
    # keep every batch of a run in recentProgress (default 100: fast controllers would lose the first phase)
    spark.conf.set("spark.sql.streaming.numRecentProgressUpdates", "2000")
    entries = [("fixed-point", {}), ("fixed-point", {"slack": "paper"}), ("fastest-trigger", {}), ("pid-rate", {"interval_s": 1.0})]
    entries += [("static-interval", {"interval_s": x}) for x in statics]
    rows = []
    try:
        for policy, config in entries:
            batches, t0 = run_one(spark, policy, config, rate, phase_s, cost_per_row_s, warmup_s, log)
            if not batches:
                continue
            s = summarize(batches, t0, (t0 + int(phase_s * 1000), t0 + int(2 * phase_s * 1000)))
            name = policy if policy != "static-interval" else f"static {config['interval_s']:g}s"
            name += " paper" if config.get("slack") == "paper" else ""
            rows.append({"controller": name, **s})
    finally:
        if own:
            spark.stop()
    statics_rows = [r for r in rows if r["controller"].startswith("static")]
    best = min(statics_rows, key=lambda r: r["mean_latency_s"]) if statics_rows else None
    for r in rows:
        r["ratio"] = r["mean_latency_s"] / best["mean_latency_s"] if best else None
        r["best_static"] = r is best
    return {"rate": rate, "phase_s": phase_s, "cost_per_row_s": cost_per_row_s, "warmup_s": warmup_s,
            "max_queueing_s": MAX_QUEUEING_S, "rows": rows,
            "best_static": best["controller"] if best else None}


def format_spark_table(report: dict) -> str:
    lines = [f"{'controller':20} {'batches':>7} {'mean s':>8} {'p95 s':>8} {'unstable':>8} {'after step':>10} {'ratio':>6}"]
    for r in report["rows"]:
        name = r["controller"] + (" *" if r["best_static"] else "")
        ratio = "" if r["ratio"] is None else f"{r['ratio']:6.2f}"
        lines.append(f"{name:20} {r['batches']:7d} {r['mean_latency_s']:8.3f} {r['p95_latency_s']:8.3f} "
                     f"{r['unstable_fraction']:8.3f} {r['max_unstable_after_step']:10d} {ratio:>6}")
    lines.append("* = best static interval in hindsight (of those run); ratio = mean latency / best static's")
    return "\n".join(lines)
