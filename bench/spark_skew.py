"""``spark-governor bench spark-skew``: a real Spark streaming job under key skew, hash vs Prompt.

The job (local mode, ``cores`` task slots) reads micro-batches of Zipf(z)-keyed rows from
parquet files (one set of ``cores`` files per batch, the same data for every
partitioner) and, in ``foreachBatch``, runs ``collectors.partition_plan.PlanRunner``: statistics
pass, plan on the driver from the batch's exact counts, Map blocks placed with
``repartitionById``, per-record Map work, partial aggregation per block, Reduce by the plan's
buckets. The per-record work is a Python UDF that burns ``work_loops`` iterations of arithmetic
per record (``work="cpu"``) or waits ``work_us`` microseconds per record without using the CPU
(``work="wait"``, a latency-bound call such as a lookup; slept in pieces of at least 1 ms), so the
slowest Map block decides the batch time. Batch
processing time = wall seconds of the whole ``foreachBatch`` (statistics, planning, Map, Reduce,
result materialized). The median over batches (the first, warm-up batch excluded) is compared:
ratio = median(hash) / median(prompt). Goal: ≥ 1.5.

On a machine with C cores a CPU-bound Map stage cannot finish faster than total work / C, so
with P = C blocks hash's penalty is at most its max/mean block load (≈ 1.5 for z = 1.5 and P = 2);
larger gains need more cores or latency-bound per-record work (``work="wait"`` with more slots).
"""
from __future__ import annotations

import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Optional, Sequence

import numpy as np
from spark_governor.bench.output import save_figure

GOAL_RATIO = 1.5


def write_batches(root: Path, batches: int, rows: int, z: float, keys: int, seed: int, files_per_batch: int) -> None:
    """``files_per_batch`` parquet files per batch (one input partition each), modification times
    increasing batch by batch, so ``maxFilesPerTrigger=files_per_batch`` reads exactly one batch."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(seed)
    p = np.arange(1, keys + 1, dtype=float) ** -z
    p /= p.sum()
    names = np.array([f"k{i + 1}" for i in range(keys)], dtype=object)
    stamp = time.time() - 10 * batches * files_per_batch
    for b in range(batches):
        k = rng.choice(keys, size=rows, p=p)
        v = rng.integers(0, 1000, rows)
        for i, part in enumerate(np.array_split(np.arange(rows), files_per_batch)):
            path = root / f"b{b:04d}-{i:03d}.parquet"
            pq.write_table(pa.table({"key": names[k[part]].tolist(), "value": v[part].astype(np.int64)}), str(path))
            stamp += 1
            os.utime(path, (stamp, stamp))


def per_record_work(work: str, work_loops: int, work_us: float):
    from pyspark.sql.functions import udf
    from pyspark.sql.types import LongType

    if work == "cpu":
        def f(v):
            x = v
            for i in range(work_loops):
                x = (x * 31 + i) % 1000003
            return x
    else:
        owed = [0.0]  # per Python worker: waiting owed, slept in ≥ 1 ms pieces (sleep granularity)

        def f(v):
            owed[0] += work_us / 1e6
            if owed[0] >= 1e-3:
                time.sleep(owed[0])
                owed[0] = 0.0
            return v
    return udf(f, LongType())


def run_one(spark, src: Path, algorithm: str, files_per_batch: int, partitions: int, work: str, work_loops: int,
            work_us: float, checkpoint: Path) -> list[dict]:
    from pyspark.sql import functions as F

    from spark_governor.collectors.partition_plan import PlanRunner

    fn = per_record_work(work, work_loops, work_us)
    runner = PlanRunner("key", {"n": ("count", None), "w": ("sum", "w")}, partitioner=algorithm,
                        partitions=partitions, source="batch", map_fn=lambda df: df.withColumn("w", fn(F.col("value"))))
    rows: list[dict] = []
    errors: list[BaseException] = []

    def run_batch(df, batch_id):
        try:
            t0 = time.perf_counter()
            out = runner.apply(df, batch_id)
            total = time.perf_counter() - t0
            out.close()
            rows.append({"batch_id": batch_id, "processing_s": total, "stats_s": out.stats_s,
                         "planning_s": out.planning_s, "max_mean_load": out.metrics.max_mean_load,
                         "block_loads": out.plan.block_loads().tolist(), "tuples": out.counts.total})
        except BaseException as exc:  # surfaced after the query ends
            errors.append(exc)

    stream = (spark.readStream.schema("key string, value long").option("maxFilesPerTrigger", files_per_batch)
              .parquet(str(src)))
    q = (stream.writeStream.foreachBatch(run_batch).trigger(availableNow=True)
         .option("checkpointLocation", str(checkpoint)).start())
    q.awaitTermination()
    if errors:
        raise errors[0]
    return rows


def run_spark_skew_bench(batches: int = 6, rows: int = 200_000, z: float = 1.5, keys: int = 10_000,
                         cores: Optional[int] = None, partitions: Optional[int] = None, work: str = "cpu",
                         work_loops: int = 300, work_us: float = 20.0, algorithms: Sequence[str] = ("hash", "prompt"),
                         seed: int = 0, spark=None) -> dict:
    from spark_governor.collectors.demo_job import build_session

    cores = cores or os.cpu_count() or 2
    partitions = partitions or cores
    own = spark is None
    if own:
        spark = build_session(f"local[{cores}]", shuffle_partitions=partitions, app_name="spark-governor-bench-skew")
    tmp = Path(tempfile.mkdtemp(prefix="sg-skew-"))
    try:
        src = tmp / "in"
        src.mkdir()
        write_batches(src, batches, rows, z, keys, seed, cores)
        results = {}
        for algo in algorithms:
            results[algo] = run_one(spark, src, algo, cores, partitions, work, work_loops, work_us, tmp / f"ckpt-{algo}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        if own:
            spark.stop()
    medians = {a: statistics.median(r["processing_s"] for r in rs[1:] or rs) for a, rs in results.items()}
    ratio = medians["hash"] / medians["prompt"] if "hash" in medians and "prompt" in medians else None
    return {"config": {"batches": batches, "rows": rows, "z": z, "keys": keys, "cores": cores, "partitions": partitions,
                       "work": work, "work_loops": work_loops, "work_us": work_us, "seed": seed,
                       "algorithms": list(algorithms)},
            "batches": results, "median_processing_s": medians, "ratio_hash_over_prompt": ratio,
            "goal_ratio": GOAL_RATIO, "goal_met": ratio is not None and ratio >= GOAL_RATIO}


def format_report(report: dict) -> str:
    c = report["config"]
    lines = [f"spark-skew: z={c['z']} keys={c['keys']} rows/batch={c['rows']} cores={c['cores']} P={c['partitions']} "
             f"work={c['work']}"]
    for algo, rows in report["batches"].items():
        lines.append(f"{algo:>8}: median {report['median_processing_s'][algo]:.3f} s; per batch "
                     + ", ".join(f"{r['processing_s']:.2f}" for r in rows)
                     + f"; max/mean block load {statistics.median(r['max_mean_load'] for r in rows):.3f}")
    if report["ratio_hash_over_prompt"] is not None:
        lines.append(f"ratio hash/prompt = {report['ratio_hash_over_prompt']:.2f}x (goal ≥ {GOAL_RATIO}: "
                     f"{'met' if report['goal_met'] else 'NOT met'})")
    return "\n".join(lines)


def plot_report(report: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for algo, rows in report["batches"].items():
        ax.plot([r["batch_id"] for r in rows], [r["processing_s"] for r in rows], marker="o", label=algo)
    ax.set_xlabel("micro-batch"); ax.set_ylabel("processing time (s)"); ax.legend()
    ax.set_title(f"z={report['config']['z']}, P={report['config']['partitions']}: "
                 f"hash/prompt = {report['ratio_hash_over_prompt'] or float('nan'):.2f}x")
    fig.tight_layout()
    save_figure(fig, path)

