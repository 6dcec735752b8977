"""The foreachBatch helper on real Spark (local mode): results equal groupBy, placement equals the plan."""
import numpy as np
import pytest

from spark_governor.collectors.partition_plan import PlanRunner
from spark_governor.collectors.plan_placement import placement_for, realize, tag_blocks
from spark_governor.policies.partitioning.base import KeyCounts
from spark_governor.policies.partitioning.registry import get_partitioner

AGGS = {"n": ("count", None), "nv": ("count", "v"), "s": ("sum", "v"), "mn": ("min", "v"), "mx": ("max", "v"),
        "avg": ("mean", "d"), "sd": ("sum", "d")}


def expected(df):
    from pyspark.sql import functions as F

    return df.groupBy("k").agg(F.count(F.lit(1)).alias("n"), F.count("v").alias("nv"), F.sum("v").alias("s"),
                               F.min("v").alias("mn"), F.max("v").alias("mx"), F.avg("d").alias("avg"),
                               F.sum("d").alias("sd"))


def check_batch(out, df):
    from pyspark.sql import functions as F

    got = {r["k"]: r.asDict() for r in out.result.collect()}
    exp = {r["k"]: r.asDict() for r in expected(df).collect()}
    assert got.keys() == exp.keys()
    for k, e in exp.items():
        g = got[k]
        assert [g[c] for c in ("n", "nv", "s", "mn", "mx")] == [e[c] for c in ("n", "nv", "s", "mn", "mx")], k
        for c in ("avg", "sd"):
            assert (g[c] is None) == (e[c] is None) and (e[c] is None or g[c] == pytest.approx(e[c], rel=1e-12)), (k, c)
    observed = dict(out.blocks.groupBy(F.spark_partition_id().alias("p")).count().collect())
    assert [observed.get(b, 0) for b in range(out.plan.partitions)] == out.plan.block_loads().tolist()
    assert out.blocks.rdd.getNumPartitions() == out.plan.partitions


def skewed_rows(seed, n=4000, keys=200, z=1.6):
    rng = np.random.default_rng(seed)
    k = (rng.zipf(z, n) % keys).tolist()
    v = rng.integers(-100, 100, n).tolist()
    rows = []
    for i, (kk, vv) in enumerate(zip(k, v)):
        key = None if i % 997 == 5 else int(kk)  # a few null keys
        val = None if i % 101 == 7 else int(vv)  # and null values
        rows.append((key, val, None if val is None else val / 7.0))
    return rows


@pytest.mark.spark
def test_single_batch_prompt_and_hash(spark):
    df = spark.createDataFrame(skewed_rows(1), "k long, v long, d double").repartition(3)
    for name in ("prompt", "hash", "pk5"):
        runner = PlanRunner("k", AGGS, partitioner=name, partitions=4, reduce=3, source="batch")
        out = runner.apply(df, 0)
        try:
            check_batch(out, df)
            if name == "prompt":
                assert out.metrics.max_mean_load <= 1.01 and out.plan.split_keys()
        finally:
            out.close()


@pytest.mark.spark
def test_streaming_batches_with_plans_from_earlier_batches(spark, tmp_path):
    """Plan of batch n = Prompt on the counts of batch n−1 (sent as a directive), realized on batch n."""
    src = tmp_path / "in"
    src.mkdir()
    for i in range(4):
        spark.createDataFrame(skewed_rows(10 + i), "k long, v long, d double").repartition(2) \
            .write.parquet(str(src / f"b{i}"))
    stream = (spark.readStream.schema("k long, v long, d double").option("maxFilesPerTrigger", 2)
              .option("recursiveFileLookup", "true").parquet(str(src)))
    runner = PlanRunner("k", AGGS, partitioner="prompt", partitions=4, reduce=2, source="directive")
    seen, errors = [], []

    def run_batch(df, batch_id):
        try:
            out = runner.apply(df, batch_id)
            try:
                check_batch(out, df)
                seen.append((batch_id, out.source, out.metrics.max_mean_load))
                # the control plane's role: plan the next batch from this batch's statistics
                nxt = get_partitioner("prompt").plan(out.counts, 4 + (batch_id % 2), 2)
                assert runner.applier(nxt.to_dict())[0] == "applied"
            finally:
                out.close()
        except Exception as exc:  # surface assertion errors from the streaming thread
            errors.append(exc)

    q = stream.writeStream.foreachBatch(run_batch).trigger(availableNow=True) \
        .option("checkpointLocation", str(tmp_path / "ckpt")).start()
    q.awaitTermination(600)
    if errors:
        raise errors[0]
    assert len(seen) >= 3
    assert seen[0][1] == "batch" and all(s == "directive" for _, s, _ in seen[1:])
    assert runner.history[-1]["key_counts"] and runner.history[-1]["block_loads"]


def test_realize_scales_planned_fragments_and_hashes_new_keys():
    plan = get_partitioner("prompt").plan(KeyCounts.from_mapping(dict(A=22, B=19, C=13, D=10, E=9, F=8, G=7, H=5, I=4, J=3)), 4)
    batch = KeyCounts.from_mapping(dict(A=44, C=13, Z=5))
    r = realize(plan.to_dict(), batch)
    assert r.blocks_of("A") == [(0, 30), (3, 14)]  # 15:7 scaled to 44
    assert r.blocks_of("C") == [(2, 13)]
    assert len(r.blocks_of("Z")) == 1 and r.total == 62


def test_tag_blocks_is_exact_across_partitions_and_arrow_batches():
    batch = KeyCounts.from_mapping(dict(A=22, B=19, C=13, D=10, E=9, F=8, G=7, H=5, I=4, J=3))
    plan = get_partitioner("prompt").plan(batch, 4)
    rows = np.repeat(np.array(batch.keys, dtype=object), batch.counts)
    np.random.default_rng(0).shuffle(rows)
    parts = np.array_split(rows, 3)
    per_partition = [(pid, k, int((p == k).sum())) for pid, p in enumerate(parts) for k in batch.keys if (p == k).any()]
    placement = placement_for(plan, per_partition)
    loads = np.zeros(4, dtype=np.int64)
    for pid, p in enumerate(parts):
        seen = np.zeros(len(placement.split_base), dtype=np.int64)
        for chunk in np.array_split(p, 4):  # several Arrow batches per partition
            np.add.at(loads, tag_blocks(chunk, placement, pid, seen), 1)
    assert loads.tolist() == plan.block_loads().tolist()


def test_applier_refuses_bad_directives():
    runner = PlanRunner("k", {"n": ("count", None)})
    assert runner.applier("x")[0] == "failed"
    assert runner.applier({"partitions": 0, "reduce": 1})[0] == "failed"
    assert runner.applier({"partitions": 2, "reduce": 1, "assignment": {"a": {"blocks": [[0, 0]], "bucket": 0}}})[0] == "failed"
    assert runner.applier({"partitions": 3, "reduce": 2})[0] == "applied" and runner.partitions == 3
    with pytest.raises(ValueError, match="aggs.x"):
        PlanRunner("k", {"x": ("median", "v")})


@pytest.mark.spark
def test_job_reports_statistics_and_applies_the_control_planes_plans(spark, start_plane, tmp_path):
    """Real Spark job + real control plane: statistics reach the plane, the prompt policy plans from
    them, the job applies the plan to later batches; results still equal groupBy."""
    import threading
    import time

    import requests

    from spark_governor.collectors.attach import attach

    token = "plan-token-123"
    plane = start_plane(token, window_ms=1000, evaluation_interval_s=0.5)
    r = requests.put(f"{plane.url}/api/v1/jobs/plan-job/policies/prompt?register=true", timeout=10,
                     headers={"Authorization": f"Bearer {token}"},
                     json={"mode": "act", "config": {"trigger_interval_s": 30.0, "partitions": 3, "reduce": 2}})
    assert r.status_code == 200, r.text
    src = tmp_path / "in"
    src.mkdir()
    for i in range(4):
        spark.createDataFrame(skewed_rows(20 + i, n=3000), "k long, v long, d double").coalesce(1) \
            .write.parquet(str(src / f"b{i}"))
    handle = attach(spark, "plan-job", plane.url, flush_interval_s=0.2, heartbeat_s=0.5)
    runner = PlanRunner("k", AGGS, partitioner="prompt", partitions=3, reduce=2).connect(handle)
    seen, errors = [], []
    got_plan = threading.Event()

    def run_batch(df, batch_id):
        try:
            out = runner.apply(df, batch_id)
            try:
                check_batch(out, df)
                seen.append((batch_id, out.source, out.plan.partitions))
            finally:
                out.close()
            if batch_id == 0:  # let the plane plan from batch 0 before batch 1 starts
                deadline = time.time() + 60
                while runner._directive is None and time.time() < deadline:
                    time.sleep(0.2)
        except Exception as exc:
            errors.append(exc)

    stream = (spark.readStream.schema("k long, v long, d double").option("maxFilesPerTrigger", 1)
              .option("recursiveFileLookup", "true").parquet(str(src)))
    try:
        q = stream.writeStream.foreachBatch(run_batch).trigger(availableNow=True) \
            .option("checkpointLocation", str(tmp_path / "ckpt")).start()
        q.awaitTermination(600)
    finally:
        handle.detach()
    if errors:
        raise errors[0]
    assert [s for _, s, _ in seen] == ["batch"] + ["directive"] * (len(seen) - 1) and len(seen) == 4
    body = requests.get(f"{plane.url}/api/v1/jobs/plan-job/partitioning?limit=10", timeout=10).json()
    assert len(body["batches"]) == 4 and body["plan"]["policy"] == "prompt"
    assert body["batches"][-1]["source"] == "directive" and body["batches"][-1]["max_mean_load"] < 1.2
    metrics = requests.get(f"{plane.url}/metrics", timeout=10).text
    assert 'spark_governor_partition_batches_total{spark_job="plan-job"} 4.0' in metrics


@pytest.mark.spark
def test_bench_spark_skew_tiny(spark):
    from spark_governor.bench.spark_skew import format_report, run_spark_skew_bench

    report = run_spark_skew_bench(batches=2, rows=3000, z=1.5, keys=100, cores=2, work_loops=5, spark=spark)
    assert set(report["batches"]) == {"hash", "prompt"}
    for algo, rows in report["batches"].items():
        assert len(rows) == 2 and all(r["tuples"] == 3000 for r in rows)
    assert all(r["max_mean_load"] <= 1.01 for r in report["batches"]["prompt"])
    assert all(r["max_mean_load"] > 1.2 for r in report["batches"]["hash"])  # z = 1.5: the top key alone is ~40 %
    assert report["ratio_hash_over_prompt"] > 0 and "ratio hash/prompt" in format_report(report)


def test_partition_record_fits_the_wire():
    from spark_governor.collectors.partition_plan import BatchPartitioning, partition_record
    from spark_governor.policies.partitioning.metrics import plan_metrics
    from spark_governor.policies.wire import PartitionStatsRecord

    batch = KeyCounts.from_mapping({"x" * 300: 50, "a": 30, "b": 20})
    plan = get_partitioner("prompt").plan(batch, 2)
    rec = partition_record(BatchPartitioning(3, None, None, batch, plan, plan_metrics(plan), "batch", 0.1, 0.01, 0.5),
                           top_keys=1)
    assert rec["key_counts"] == [["a", 30]] and (rec["other_keys"], rec["other_tuples"]) == (2, 70)
    import json

    PartitionStatsRecord.model_validate_json(json.dumps(rec))  # as the reporter sends it


@pytest.mark.spark
def test_algorithm1_counts_in_the_job(spark):
    """counts="approximate": Algorithm 1 per input partition orders the keys; placement and results stay exact."""
    df = spark.createDataFrame(skewed_rows(5, n=6000), "k long, v long, d double").repartition(3)
    runner = PlanRunner("k", AGGS, partitioner="prompt", partitions=4, reduce=2, source="batch",
                        counts="approximate", budget=3)
    for batch_id in range(2):  # the second batch has N_est and K_avg from the first
        out = runner.apply(df, batch_id)
        try:
            check_batch(out, df)
            exact = dict(zip(out.counts.keys, out.counts.counts.tolist()))
            approx = dict(zip(out.counts.keys, out.approx_counts.tolist()))
            assert all(1 <= approx[k] <= exact[k] for k in exact) and any(approx[k] < exact[k] for k in exact)
            order = [out.counts.keys[i] for i in out.counts.descending()]
            assert [approx[k] for k in order] == sorted(approx.values(), reverse=True)  # the CountTree walk
            rec = runner.history[-1]
            assert rec["exact"] is False and rec["key_counts"][0] == [order[0], approx[order[0]]]
        finally:
            out.close()
