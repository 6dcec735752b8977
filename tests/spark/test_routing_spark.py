"""Routing tables on real Spark: a stateful running count per key whose hot keys change mid-run.

The routed query groups by (token, key) so each key's state lives on the partition its routing
table entry names (collectors.routing); Mixed re-plans after each batch. After re-routing, the
per-partition load is within θmax, every state row sits on its intended partition, moved keys'
state is on the new partition only, and every key's count equals a plain ``groupBy(key).count()``
over the same stream."""
from __future__ import annotations

import json
import os
import random

import numpy as np
import pytest

from spark_governor.collectors.routing import RoutedCount, spark_instances
from spark_governor.policies.partitioning.spark_hash import spark_hash, spark_partition

pytestmark = pytest.mark.spark

P, THETA = 4, 0.08


def phase_counts(hot):
    counts = {k: c for k, c in zip(hot, (300, 250, 200))}
    counts.update({f"c{i:02d}": 20 for i in range(60)})
    return counts


def add_batch_file(spark, tmp_path, flat, b, counts):
    """One parquet file = one micro-batch (maxFilesPerTrigger 1; the file source orders by mtime)."""
    rows = [k for k, c in counts.items() for _ in range(c)]
    random.Random(b).shuffle(rows)
    spark.createDataFrame([(k,) for k in rows], "key string").coalesce(1).write.parquet(str(tmp_path / f"p{b}"))
    f = flat / f"b{b:02d}.parquet"
    f.write_bytes(next((tmp_path / f"p{b}").glob("*.parquet")).read_bytes())
    os.utime(f, (1_700_000_000 + 10 * b,) * 2)


def run_to_end(spark, rc, flat, checkpoint):
    src = spark.readStream.schema("key string").option("maxFilesPerTrigger", 1).parquet(str(flat))
    q = rc.start(src, str(checkpoint))
    try:
        q.processAllAvailable()
    finally:
        q.stop()


def test_spark_hash_matches_spark(spark):
    rows = [(t, k) for t in (0, 1, 7, -3) for k in ("a", "h1", "c05", "héllo", "abcdefg")]
    df = spark.createDataFrame(rows, "t int, k string")
    from pyspark.sql import functions as F
    got = [r[0] for r in df.select(F.hash("t", "k")).collect()]
    assert got == [spark_hash(t, k) for t, k in rows]


def test_routed_count_under_drift_moves_state_and_matches_hash_run(spark, tmp_path):
    flat = tmp_path / "flat"
    flat.mkdir()
    phases = [phase_counts(["h1", "h2", "h3"])] * 3 + [phase_counts(["g1", "g2", "g3"])] * 3   # drift after batch 2
    for b, counts in enumerate(phases):
        add_batch_file(spark, tmp_path, flat, b, counts)
    rc = RoutedCount(spark, "key", P, tmp_path / "routing", planner="mixed",
                     planner_options={"theta_max": THETA, "table_max": 100})
    run_to_end(spark, rc, flat, tmp_path / "ckpt")

    plain = spark.readStream.schema("key string").option("maxFilesPerTrigger", 1).parquet(str(flat)) \
        .groupBy("key").count().writeStream.outputMode("complete").format("memory").queryName("plain_counts") \
        .option("checkpointLocation", str(tmp_path / "ckpt_plain")).start()
    try:
        plain.processAllAvailable()
    finally:
        plain.stop()
    expected = {r["key"]: int(r["count"]) for r in spark.sql("select * from plain_counts").collect()}

    h = rc.history
    for r in h:
        print(f"batch {r.batch_id}: version {r.version} loads {r.loads} max/mean {r.max_mean:.3f} "
              f"moved {r.moved} |A| {r.table_size} driver {r.driver_s:.2f}s")
    assert [r.batch_id for r in h] == list(range(6))
    # hash placement is skewed; after each (re-)routing the next batches are within θmax
    hash_loads = [np.bincount(spark_instances(sorted(c), P), weights=[c[k] for k in sorted(c)], minlength=P)
                  for c in (phases[0], phases[3])]
    assert all(l.max() / l.mean() > 1 + THETA for l in hash_loads)
    assert h[0].version == 0 and h[0].max_mean > 1 + THETA
    for b in (1, 2, 4, 5):
        assert h[b].max_mean <= 1 + THETA + 1e-9, (b, h[b].loads)
    assert h[4].version > h[3].version            # re-planned after the drift
    # state moved with the keys (counts at the end of the previous batch)
    assert h[1].moved and all(c > 0 for c in h[1].moved.values())
    assert {"g1", "g3"} & set(h[4].moved) and h[4].moved.get("g1", 300) == 300
    for k in set(h[1].moved) | set(h[4].moved):
        owner = rc.table.get(k, int(spark_instances([k], P)[0]))
        assert rc.state_partition(k) == owner, k
    assert rc.placement_errors == []
    # the checkpoint's state store itself: every non-zero count sits on its key's table partition,
    # and the restart path reloads exactly these counts
    state = rc.state_rows(str(tmp_path / "ckpt"))
    for token, key, count, partition in state:
        assert partition == spark_partition(P, token, key)
        if count:
            assert partition == rc.table.get(key, int(spark_instances([key], P)[0])), key
    assert {(t, k): c for t, k, c, _ in state} == {g: c for g, c in rc.latest.items()}
    # exactly the counts of the plain hash-partitioned run
    assert rc.counts() == expected
    assert sum(expected.values()) == sum(sum(c.values()) for c in phases)


def test_mixed_routing_policy_drives_the_job_through_the_applier(spark, tmp_path):
    """planner=None: after each batch the job's partition record (validated as the wire's
    PartitionStatsRecord) goes into a JobView, the ``mixed-routing`` policy proposes a table and
    the job's applier installs it for the next batch."""
    from spark_governor.policies.base import DirectiveState, JobView, PartitionBatchStats
    from spark_governor.policies.registry import get_policy, validate_config
    from spark_governor.policies.wire import PartitionStatsRecord

    counts = phase_counts(["h1", "h2", "h3"])
    flat = tmp_path / "in"
    flat.mkdir()
    for b in range(3):
        add_batch_file(spark, tmp_path, flat, b, counts)

    policy = get_policy("mixed-routing")
    cfg = validate_config(policy, {"theta_max": THETA, "state_unit": "rows"})
    stats, directive, decisions = [], {}, []

    def on_batch(record):
        wire = PartitionStatsRecord.model_validate_json(json.dumps(record.partition_record()))
        stats.append(PartitionBatchStats(batch_id=wire.batch_id, received_ms=wire.batch_id, algorithm=wire.algorithm,
                                         partitions=wire.partitions, reduce=wire.reduce, tuples=wire.tuples,
                                         keys=wire.keys, key_counts=tuple(map(tuple, wire.key_counts)),
                                         other_keys=wire.other_keys, other_tuples=wire.other_tuples,
                                         block_loads=tuple(wire.block_loads), max_mean_load=wire.max_mean_load))
        d = {"partition_plan": DirectiveState("partition_plan", 1, directive["v"], 1, "applied")} if directive else {}
        props = policy().evaluate(JobView("j", 0, 60, partition_stats=tuple(stats), directives=d), cfg)
        for p in props:
            directive["v"] = p.value
            decisions.append(rc.applier(p.value))

    rc = RoutedCount(spark, "key", P, tmp_path / "routing", planner=None, on_batch=on_batch)
    run_to_end(spark, rc, flat, tmp_path / "ckpt")
    h = rc.history
    assert len(h) == 3 and decisions and decisions[0][0] == "applied"
    assert h[0].max_mean > 1 + THETA and h[1].moved
    assert h[1].max_mean <= 1 + THETA + 1e-9 and h[2].max_mean <= 1 + THETA + 1e-9
    assert rc.placement_errors == []
    assert rc.counts() == {k: 3 * c for k, c in counts.items()}
    assert rc.applier({"table": {"h1": 9}})[0] == "failed"


def test_restart_from_checkpoint_keeps_table_and_counts(spark, tmp_path):
    """Stop after the first phase, restart a new driver-side RoutedCount on the same checkpoint:
    it restores the pinned table version and the running counts from the state store, so the
    re-routing after the drift still moves the right state and every count stays exact."""
    flat = tmp_path / "in"
    flat.mkdir()
    phases = [phase_counts(["h1", "h2", "h3"])] * 2 + [phase_counts(["g1", "g2", "g3"])] * 2

    opts = {"theta_max": THETA, "table_max": 100}
    for b in (0, 1):
        add_batch_file(spark, tmp_path, flat, b, phases[b])
    first = RoutedCount(spark, "key", P, tmp_path / "routing", planner="mixed", planner_options=opts)
    run_to_end(spark, first, flat, tmp_path / "ckpt")
    for b in (2, 3):
        add_batch_file(spark, tmp_path, flat, b, phases[b])
    second = RoutedCount(spark, "key", P, tmp_path / "routing", planner="mixed", planner_options=opts)
    run_to_end(spark, second, flat, tmp_path / "ckpt")
    assert second.history[0].batch_id == 2 and second.history[0].version == first.version
    assert second.history[1].moved and second.history[1].max_mean <= 1 + THETA + 1e-9
    assert second.placement_errors == []
    expected: dict = {}
    for c in phases:
        for k, n in c.items():
            expected[k] = expected.get(k, 0) + n
    assert second.counts() == expected


class CrashOnce(RoutedCount):
    """A driver that dies once, inside ``foreachBatch`` of batch ``crash_at``, after it already
    wrote the next table version (the worst moment: batch ``crash_at`` is not committed, a newer
    version is current)."""

    crash_at = None

    def process_batch(self, df, batch_id):
        super().process_batch(df, batch_id)
        if batch_id == self.crash_at:
            self.crash_at = None
            raise RuntimeError("injected crash after the next table version was written")


def test_crash_mid_batch_replays_with_the_pinned_table_and_moves_state_once(spark, tmp_path):
    """The batch that switches the table (and moves state) fails after the driver wrote the next
    version; the restarted query replays it with the same version (same tokens, same state moves
    against the restored state), and every count stays exact — nothing moved twice or lost."""
    flat = tmp_path / "in"
    flat.mkdir()
    phases = [phase_counts(["h1", "h2", "h3"])] * 3
    for b, counts in enumerate(phases):
        add_batch_file(spark, tmp_path, flat, b, counts)
    opts = {"theta_max": THETA, "table_max": 100}
    first = CrashOnce(spark, "key", P, tmp_path / "routing", planner="mixed", planner_options=opts)
    first.crash_at = 1  # batch 0 hashed -> v1 (with moves) in force from batch 1; batch 1 writes v2
    with pytest.raises(Exception, match="injected crash"):
        run_to_end(spark, first, flat, tmp_path / "ckpt")
    failed = next(r for r in first.history if r.batch_id == 1)
    assert failed.moved, "the crashed batch is the one that moves state"
    assert first.store.read()["effective_from_batch"] == 2  # the newer version was already current

    second = RoutedCount(spark, "key", P, tmp_path / "routing", planner="mixed", planner_options=opts)
    run_to_end(spark, second, flat, tmp_path / "ckpt")
    replayed = second.history[0]
    assert replayed.batch_id == 1 and replayed.version == failed.version and replayed.moved == failed.moved
    assert replayed.loads == failed.loads and replayed.max_mean <= 1 + THETA + 1e-9
    assert second.placement_errors == [] and [r.batch_id for r in second.history] == [1, 2]
    expected: dict = {}
    for c in phases:
        for k, n in c.items():
            expected[k] = expected.get(k, 0) + n
    assert second.counts() == expected
    # the state store agrees: each moved key's state only on its new partition, with the full count
    rows = second.state_rows(str(tmp_path / "ckpt"))
    for key in failed.moved:
        live = [(t, pid, c) for t, k, c, pid in rows if k == key and c]
        assert len(live) == 1 and live[0][2] == expected[key]
        assert live[0][1] == second.table.get(key, spark_partition(P, 0, key))
