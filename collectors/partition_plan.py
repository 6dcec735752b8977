"""Applying a partition plan to a micro-batch inside ``foreachBatch`` (Prompt on Spark, digest 000 §9.2).

::

    runner = PlanRunner(key="word", aggs={"n": ("count", None), "total": ("sum", "v")},
                        partitioner="prompt", partitions=8)
    handle = attach(spark, job, endpoint, appliers={"partition_plan": runner.applier})
    runner.report = handle.reporter.offer_partition_stats   # or: runner.connect(handle)
    def run_batch(df, batch_id):
        out = runner.apply(df, batch_id)      # BatchPartitioning
        out.result.write...                   # the per-key aggregate of this batch
        out.close()
    query = stream.writeStream.foreachBatch(run_batch).start()

Per batch (``apply``):

1. **Statistics** (one Spark job over the persisted batch): rows per (input partition, key),
   i.e. the batch's exact key counts (the "post-sort" variant of Algorithm 1, digest §8.2) and
   the offsets that make key splitting exact. With ``counts="approximate"`` every input partition
   runs Algorithm 1 (``policies.partitioning.accumulator``) over its rows as one receiver would:
   the plan takes its key *order* from the CountTree counts (quasi-sorted, summed over partitions)
   and its fragment *sizes* from the exact counts (§8.2), and the job reports the tree counts
   (``exact: false``).
2. **Plan**: the plan the control plane sent for this job (knob ``partition_plan``, computed from
   earlier batches) *realized* on this batch's counts (``collectors.plan_placement.realize``); or,
   without a directive (or with ``source="batch"``), the runner's partitioner planned on this
   batch's exact counts on the driver.
3. **Map placement**: a partition-id column computed in a Python worker (``mapInArrow``,
   ``collectors.plan_placement.tag_blocks``: the j-th row of key k in input partition i has
   global ordinal offset(i, k) + j, which falls into exactly one of k's fragments) and
   ``DataFrame.repartitionById(P, id)`` (PySpark ≥ 4.1), so Map block b holds exactly the plan's
   tuples of block b.
4. ``map_fn`` (optional, the job's per-record Map work) runs on the blocks, then a **partial
   aggregate per block** (pyarrow ``group_by``) tagged with each key's Reduce bucket.
5. **Reduce**: ``repartitionById(R, bucket)`` and the final aggregate per bucket. Every key is in
   exactly one bucket, so the result equals ``df.groupBy(key).agg(...)`` for count (rows or
   non-null values), sum, min, max and mean (floating-point sums may differ in the last bits
   because the addition order differs).

Units: ``*_s`` are seconds of driver wall time. Keys are compared as ``CAST(key AS STRING)``
(null keys as ``"\\u2400"``, the symbol for NUL: a real NUL cannot travel, PostgreSQL refuses it in text and
the wire refuses it), the plan's key form (``policies.partitioning.base``).
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Optional

import numpy as np

from spark_governor.collectors.plan_placement import Placement, placement_for, realize, tag_blocks
from spark_governor.policies.partitioning.base import KeyCounts, PartitionPlan, PlanError
from spark_governor.policies.partitioning.metrics import PlanMetrics, plan_metrics
from spark_governor.policies.partitioning.registry import get_partitioner

AGG_FUNCTIONS = ("count", "sum", "min", "max", "mean")
NULL_KEY = "\u2400"
MAX_KEY_CHARS = 256  # policies.wire.PartitionStatsRecord.key_counts
_K, _BLOCK, _BUCKET, _ROWS = "__sg_key", "__sg_block", "__sg_bucket", "__sg_rows"


@dataclass(frozen=True)
class Agg:
    alias: str
    fn: str
    column: Optional[str]  # None: count(*)


def parse_aggs(aggs: Mapping[str, tuple[str, Optional[str]]]) -> list[Agg]:
    """``{alias: (function, column)}``; function in count/sum/min/max/mean, column None only for count."""
    out = []
    for alias, spec in aggs.items():
        try:
            fn, col = spec
        except (TypeError, ValueError):
            raise ValueError(f"aggs.{alias}: expected (function, column)") from None
        if fn not in AGG_FUNCTIONS:
            raise ValueError(f"aggs.{alias}: unknown function {fn!r}; one of {AGG_FUNCTIONS}")
        if col is None and fn != "count":
            raise ValueError(f"aggs.{alias}: {fn} needs a column")
        out.append(Agg(alias, fn, col))
    if not out:
        raise ValueError("aggs: at least one aggregate is needed")
    return out


@dataclass
class BatchPartitioning:
    """One batch: the result (persisted per-key aggregate) and how it was placed."""

    batch_id: Optional[int]
    result: Any                         # DataFrame: key + one column per aggregate alias
    blocks: Any                         # DataFrame of the Map blocks (for inspection; lazy)
    counts: KeyCounts                   # exact key counts of the batch
    plan: PartitionPlan                 # the plan realized on this batch
    metrics: PlanMetrics
    source: str                         # "directive" | "batch"
    stats_s: float                      # statistics pass
    planning_s: float                   # plan (or realization) on the driver
    total_s: float                      # the whole apply(), result materialized
    _inputs: list = field(default_factory=list, repr=False)
    approx_counts: Optional[np.ndarray] = None  # Algorithm 1's tree counts, aligned with counts.keys

    def close(self) -> None:
        """Unpersist the batch and the result."""
        for df in self._inputs:
            df.unpersist()
        self._inputs.clear()


class PlanRunner:
    """Applies the current plan to every micro-batch; ``applier`` takes ``partition_plan`` directives."""

    def __init__(self, key: str, aggs: Mapping[str, tuple[str, Optional[str]]], partitioner: str = "prompt",
                 partitions: int = 4, reduce: Optional[int] = None, options: Optional[dict] = None,
                 source: str = "directive", map_fn: Optional[Callable[[Any], Any]] = None,
                 report: Optional[Callable[[dict], None]] = None, counts: str = "exact", budget: int = 10) -> None:
        if source not in ("directive", "batch"):
            raise ValueError("source must be 'directive' or 'batch'")
        if counts not in ("exact", "approximate"):
            raise ValueError("counts must be 'exact' or 'approximate'")
        self.counts_mode, self.budget = counts, int(budget)
        self._recent: list[tuple[int, int, int]] = []  # (tuples, keys, input partitions) of recent batches
        self.key, self.aggs = key, parse_aggs(aggs)
        self.partitioner = get_partitioner(partitioner, **(options or {}))
        self.partitions, self.reduce = int(partitions), int(reduce or partitions)
        self.source, self.map_fn, self.report = source, map_fn, report
        self._directive: Optional[dict] = None
        self._lock = threading.Lock()
        self.history: list[dict] = []  # per batch: the record reported (for the job's inspection)

    def connect(self, attachment) -> "PlanRunner":
        """Report every batch's statistics through ``attachment`` (``collectors.attach``) and take
        ``partition_plan`` directives from it."""
        self.report = attachment.reporter.offer_partition_stats
        attachment.add_applier("partition_plan", self.applier)
        return self

    # -- the knob applier (reporter thread) --
    def applier(self, value: Any) -> tuple[str, Optional[str]]:
        """Accept a ``partition_plan`` directive: a plan dict (``PartitionPlan.to_dict`` form, the
        assignment possibly limited to the heavy keys) with ``partitions`` and ``reduce``. It takes
        effect from the next batch (Algorithm 4's Map/Reduce task counts included)."""
        try:
            if not isinstance(value, Mapping):
                raise PlanError("partition_plan: expected an object")
            P, R = int(value["partitions"]), int(value["reduce"])
            if P < 1 or R < 1:
                raise PlanError("partition_plan: partitions and reduce must be >= 1")
            for k, e in (value.get("assignment") or {}).items():
                if not e.get("blocks") or any(int(c) <= 0 for _, c in e["blocks"]):
                    raise PlanError(f"partition_plan.assignment.{k}: needs blocks with positive counts")
        except (KeyError, TypeError, ValueError) as exc:
            return "failed", str(exc)[:500]
        with self._lock:
            self._directive = dict(value)
            self.partitions, self.reduce = P, R
        return "applied", f"P={P} R={R}, {len(value.get('assignment') or {})} planned keys, from the next batch"

    def _plan(self, counts: KeyCounts) -> tuple[PartitionPlan, str]:
        with self._lock:
            directive = self._directive
            P, R = self.partitions, self.reduce
        if self.source == "directive" and directive is not None:
            return realize(directive, counts), "directive"
        return self.partitioner.plan(counts, P, R), "batch"

    def apply(self, df, batch_id: Optional[int] = None) -> BatchPartitioning:
        from pyspark import StorageLevel
        from pyspark.sql import functions as F

        t0 = time.perf_counter()
        keyed = df.withColumn(_K, F.coalesce(F.col(self.key).cast("string"), F.lit(NULL_KEY)))
        keyed = keyed.persist(StorageLevel.MEMORY_AND_DISK)
        approx = None
        if self.counts_mode == "exact":
            rows = keyed.groupBy(F.spark_partition_id().alias("pid"), F.col(_K)).count().collect()
            per_partition = [(int(r["pid"]), r[_K], int(r["count"])) for r in rows]
        else:
            rows = self._accumulate(keyed).collect()
            per_partition = [(int(r["pid"]), r[_K], int(r["count"])) for r in rows]
            approx = {}
            for r in rows:
                approx[r[_K]] = approx.get(r[_K], 0) + int(r["approx"])
        totals: dict[str, int] = {}
        for _, k, n in per_partition:
            totals[k] = totals.get(k, 0) + n
        keys = sorted(totals)
        exact = np.array([totals[k] for k in keys], dtype=np.int64)
        approx_counts = None
        order = None
        if approx is not None:
            approx_counts = np.array([approx[k] for k in keys], dtype=np.int64)
            order = np.lexsort((np.arange(len(keys)), -approx_counts))  # CountTree walk: approx DESC, key ASC
        counts = KeyCounts(tuple(keys), exact, order=order)
        self._recent = (self._recent + [(counts.total, counts.num_keys, len({p for p, _, _ in per_partition}))])[-3:]
        t1 = time.perf_counter()
        plan, source = self._plan(counts)
        placement = placement_for(plan, per_partition)
        t2 = time.perf_counter()
        blocks = self._place(keyed, placement, plan.partitions)
        if self.map_fn is not None:
            blocks = self.map_fn(blocks)
        result = self._reduce(blocks, placement, plan.reduce, blocks.schema)
        result = result.persist(StorageLevel.MEMORY_AND_DISK)
        result.count()
        t3 = time.perf_counter()
        out = BatchPartitioning(batch_id, result, blocks, counts, plan, plan_metrics(plan), source,
                                t1 - t0, t2 - t1, t3 - t0, [keyed, result], approx_counts)
        self._report(out)
        return out

    def _report(self, out: BatchPartitioning) -> None:
        record = partition_record(out)
        self.history.append(record)
        if self.report is not None:
            try:
                self.report(record)
            except Exception:  # reporting must never fail the batch
                pass

    def _accumulate(self, keyed):
        """Algorithm 1 in every input partition (each partition plays one receiver of the paper):
        rows in partition order, arrival time of row j of n = j/n of the batch interval [0, 1);
        N_est = tuples per input partition of the previous batch, K_avg = mean distinct keys of
        the last 3 batches (f = 1 on the first batch). Returns (pid, key, exact count, tree count)."""
        from pyspark.sql.types import LongType, StringType, StructField, StructType

        from spark_governor.policies.partitioning.accumulator import Accumulator

        budget = self.budget
        n_est = self._recent[-1][0] / max(1, self._recent[-1][2]) if self._recent else None
        k_avg = sum(k for _, k, _ in self._recent) / len(self._recent) if self._recent else None
        schema = StructType([StructField("pid", LongType(), False), StructField(_K, StringType(), False),
                             StructField("count", LongType(), False), StructField("approx", LongType(), False)])

        def run(batches):
            import pyarrow as pa
            from pyspark import TaskContext

            pid = TaskContext.get().partitionId()
            keys = [k for b in batches for k in b.column(_K).to_pylist()]
            if not keys:
                return
            acc = Accumulator(0.0, 1.0, budget=budget, n_est=n_est, k_avg=k_avg)
            n = len(keys)
            for j, k in enumerate(keys):
                acc.add(k, j / n)
            tree = dict((k, c) for c, k in acc.tree)
            ks = list(acc.table)
            yield pa.RecordBatch.from_arrays(
                [pa.array([pid] * len(ks), pa.int64()), pa.array(ks, pa.string()),
                 pa.array([acc.table[k].current for k in ks], pa.int64()), pa.array([tree[k] for k in ks], pa.int64())],
                names=schema.names)

        return keyed.select(_K).mapInArrow(run, schema)

    def _place(self, keyed, placement: Placement, partitions: int):
        from pyspark.sql.types import IntegerType, StructField, StructType

        schema = StructType(list(keyed.schema.fields) + [StructField(_BLOCK, IntegerType(), False)])

        def tag(batches):
            import pyarrow as pa
            from pyspark import TaskContext

            pid = TaskContext.get().partitionId()
            seen = np.zeros(len(placement.split_base), dtype=np.int64)
            for batch in batches:
                ks = np.array(batch.column(_K).to_pylist(), dtype=object)
                blocks = tag_blocks(ks, placement, pid, seen)
                yield pa.RecordBatch.from_arrays(batch.columns + [pa.array(blocks.astype(np.int32), pa.int32())],
                                                 names=batch.schema.names + [_BLOCK])

        return keyed.mapInArrow(tag, schema).repartitionById(partitions, _BLOCK)

    def _reduce(self, blocks, placement: Placement, reduce: int, input_schema):
        from pyspark.sql.types import (DoubleType, IntegerType, LongType, StringType, StructField, StructType)

        key_field = input_schema[self.key]
        value_cols = sorted({a.column for a in self.aggs if a.column is not None})
        numeric = {}
        partial_fields = [StructField(_K, StringType(), False), key_field, StructField(_BUCKET, IntegerType(), False),
                          StructField(_ROWS, LongType(), False)]
        for c in value_cols:
            t = input_schema[c].dataType
            sum_type = LongType() if t.typeName() in ("byte", "short", "integer", "long") else DoubleType()
            numeric[c] = sum_type
            partial_fields += [StructField(f"{c}__n", LongType(), False), StructField(f"{c}__s", sum_type, True),
                               StructField(f"{c}__mn", t, True), StructField(f"{c}__mx", t, True)]
        partial_schema = StructType(partial_fields)
        key_name = self.key

        def partial(batches):
            import pyarrow as pa

            table = pa.Table.from_batches(list(batches))
            if table.num_rows == 0:
                return
            specs = [(key_name, "first"), ([], "count_all")]
            for c in value_cols:
                specs += [(c, "count"), (c, "sum"), (c, "min"), (c, "max")]
            g = table.group_by(_K, use_threads=False).aggregate(specs)
            ks = np.array(g.column(_K).to_pylist(), dtype=object)
            idx = np.minimum(np.searchsorted(placement.keys, ks), len(placement.keys) - 1)
            arrays = [g.column(_K), g.column(f"{key_name}_first"),
                      pa.array(placement.bucket[idx].astype(np.int32), pa.int32()),
                      g.column("count_all").cast(pa.int64())]
            for c in value_cols:
                arrays += [g.column(f"{c}_count").cast(pa.int64()),
                           g.column(f"{c}_sum").cast(pa.int64() if isinstance(numeric[c], LongType) else pa.float64()),
                           g.column(f"{c}_min"), g.column(f"{c}_max")]
            yield from pa.Table.from_arrays(arrays, names=partial_schema.names).to_batches()

        final_fields = [key_field]
        for a in self.aggs:
            if a.fn == "count":
                final_fields.append(StructField(a.alias, LongType(), False))
            elif a.fn == "mean":
                final_fields.append(StructField(a.alias, DoubleType(), True))
            elif a.fn == "sum":
                final_fields.append(StructField(a.alias, numeric[a.column], True))
            else:
                final_fields.append(StructField(a.alias, input_schema[a.column].dataType, True))
        final_schema = StructType(final_fields)
        aggs = self.aggs

        def final(batches):
            import pyarrow as pa
            import pyarrow.compute as pc

            table = pa.Table.from_batches(list(batches))
            if table.num_rows == 0:
                return
            specs = [(key_name, "first"), (_ROWS, "sum")]
            for c in value_cols:
                specs += [(f"{c}__n", "sum"), (f"{c}__s", "sum"), (f"{c}__mn", "min"), (f"{c}__mx", "max")]
            g = table.group_by(_K, use_threads=False).aggregate(specs)
            cols = [g.column(f"{key_name}_first")]
            for a in aggs:
                if a.fn == "count":
                    cols.append((g.column(f"{_ROWS}_sum") if a.column is None else g.column(f"{a.column}__n_sum"))
                                .cast(pa.int64()))
                    continue
                n = g.column(f"{a.column}__n_sum")
                if a.fn == "sum":
                    cols.append(pc.if_else(pc.greater(n, 0), g.column(f"{a.column}__s_sum"), None))
                elif a.fn == "mean":
                    s = g.column(f"{a.column}__s_sum").cast(pa.float64())
                    cols.append(pc.if_else(pc.greater(n, 0), pc.divide(s, pc.max_element_wise(n, 1).cast(pa.float64())), None))
                elif a.fn == "min":
                    cols.append(g.column(f"{a.column}__mn_min"))
                else:
                    cols.append(g.column(f"{a.column}__mx_max"))
            yield from pa.Table.from_arrays(cols, names=final_schema.names).to_batches()

        partials = blocks.mapInArrow(partial, partial_schema)
        return partials.repartitionById(reduce, _BUCKET).mapInArrow(final, final_schema)


def partition_record(out: BatchPartitioning, top_keys: int = 1000) -> dict:
    """The batch's partition statistics in the wire form (``policies.wire.PartitionStatsRecord``):
    the ``top_keys`` most frequent keys (exact counts, or Algorithm 1's tree counts with
    ``exact: false`` when the runner accumulates), the rest summarised."""
    counts = out.counts
    order = counts.descending()
    fits = np.fromiter((len(counts.keys[i]) <= MAX_KEY_CHARS for i in order), dtype=bool, count=len(order))
    top = order[fits][:top_keys]  # keys longer than the wire allows are summarised with the rest
    rest = np.setdiff1d(order, top)
    m = out.metrics
    shown = counts.counts if out.approx_counts is None else out.approx_counts
    return {"batch_id": out.batch_id, "algorithm": out.plan.algorithm, "source": out.source,
            "partitions": out.plan.partitions, "reduce": out.plan.reduce,
            "tuples": counts.total, "keys": counts.num_keys, "exact": out.approx_counts is None,
            "key_counts": [[counts.keys[i], int(shown[i])] for i in top],
            "other_keys": int(len(rest)), "other_tuples": int(shown[rest].sum()) if len(rest) else 0,
            "block_loads": out.plan.block_loads().tolist(), "block_cardinalities": out.plan.block_cardinalities().tolist(),
            "bucket_loads": out.plan.bucket_loads().tolist(),
            "bsi": m.bsi, "bci": m.bci, "ksr": m.ksr, "mpi": m.mpi, "max_mean_load": m.max_mean_load,
            "bsi_buckets": m.bsi_buckets, "split_keys": m.split_keys,
            "stats_ms": round(out.stats_s * 1000, 3), "planning_ms": round(out.planning_s * 1000, 3),
            "processing_ms": round(out.total_s * 1000, 3)}
