"""Routing tables on a real stateful streaming aggregation (Fang et al.; digest 003 §9).

Spark places a stateful operator's state by ``pmod(hash(grouping key), P)`` with P =
``spark.sql.shuffle.partitions`` (frozen by the checkpoint). So the query groups by
``(token, key)``: a key outside the routing table has token 0 and lives where Spark's own hash
puts ``(0, key)`` — the hash fallback h(k) — and a key with a table entry k → d gets the smallest
int token t with ``pmod(hash(t, key), P) == d`` (computed on the driver with
:mod:`policies.partitioning.spark_hash`, which a test checks against Spark). The aggregate is a
running ``sum`` of a weight column (1 per record), i.e. a count per key.

Versions (digest §9.3 R2): the driver writes the table as version files in ``state_dir`` and
switches ``current.json`` only inside ``foreachBatch`` of batch b (synchronous), so every task of
batch b+1 reads the same version; each version records the batch it takes effect from, and
:meth:`RoutedCount.restore` points ``current.json`` back at the version of the first uncommitted
batch when a query restarts from its checkpoint, so a replayed batch uses the same table.

Moving a key moves its state, in the batch that switches the table: the routing step of that
batch (input partition 0) also emits two weight rows per moved key, ``(t_new, key, +c)`` and
``(t_old, key, −c)``, where c is the key's running count at the end of the previous batch (the
driver saw it in the previous update). The state store commits them atomically with the batch,
so after it the old partition holds 0 for the key and the new one holds the full count (a
replay re-emits them against the restored state). This is a one-batch variant of the digest's
two-batch handoff (§9.4): no buffering is needed because the rows of the moved key and its
state arrive at the new owner in the same batch. Every key's running count (summed over its
groups) is exactly the count without re-routing.

Who decides the table: ``applier`` takes ``partition_plan`` directives from the control plane
(the ``mixed-routing`` policy: ``{"algorithm": "mixed-routing", "partitions": P, "table": {key:
instance}}``), installed at the next batch boundary; ``report`` (e.g. the reporter's
``offer_partition_stats``) receives each batch's per-key counts and per-partition loads for that
policy. With ``planner`` set (and no directive pending) the driver itself plans after every batch
with the named routing-table partitioner (``mixed`` by default) on that batch's per-key counts,
one state row per key as S(k); ``planner=None`` leaves the table to the control plane.

Units: loads and counts are records; ``*_s`` are driver wall seconds.
"""
from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Optional

import numpy as np

from spark_governor.policies.partitioning.registry import get_partitioner
from spark_governor.policies.partitioning.spark_hash import spark_partition, token_for

TOKEN, WEIGHT, COUNT = "__sg_token", "__sg_w", "count"


def spark_instances(keys, partitions: int) -> np.ndarray:
    """h(k) of the routed job: the partition of the group (0, key)."""
    return np.array([spark_partition(partitions, 0, k) for k in keys], dtype=np.int64)


def tokens_for(table: Mapping[str, int], partitions: int) -> dict[str, int]:
    """Token per table key (keys whose instance is their hash instance need none)."""
    out = {}
    for k, d in table.items():
        if spark_partition(partitions, 0, k) != d:
            out[k] = token_for(k, int(d), partitions, start=1)
    return out


class VersionStore:
    """Table versions as files: ``v<N>.json`` and the pointer ``current.json`` (atomic replace)."""

    def __init__(self, directory: str | Path):
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)

    @property
    def current_path(self) -> Path:
        return self.dir / "current.json"

    def write(self, doc: dict) -> None:
        body = json.dumps(doc)
        for name in (f"v{doc['version']}.json", "current.json"):
            tmp = self.dir / (name + ".tmp")
            tmp.write_text(body)
            os.replace(tmp, self.dir / name)

    def read(self, version: Optional[int] = None) -> dict:
        path = self.current_path if version is None else self.dir / f"v{version}.json"
        return json.loads(path.read_text())

    def versions(self) -> list[dict]:
        return sorted((json.loads(p.read_text()) for p in self.dir.glob("v*.json")), key=lambda d: d["version"])


def route_rows(state_dir: str, key: str):
    """The ``mapInPandas`` function: (token, key, weight) per record from the current version,
    plus the version's migration rows in input partition 0."""
    current = str(Path(state_dir) / "current.json")

    def route(batches):
        import pandas as pd
        from pyspark import TaskContext

        with open(current) as fh:
            doc = json.load(fh)
        tokens = doc["tokens"]
        for pdf in batches:
            keys = pdf[key]
            tok = keys.map(tokens).fillna(0).astype("int32") if tokens else pd.Series(0, index=pdf.index, dtype="int32")
            yield pd.DataFrame({TOKEN: tok, key: keys, WEIGHT: pd.Series(1, index=pdf.index, dtype="int64")})
        ctx = TaskContext.get()
        if doc["migrations"] and (ctx is None or ctx.partitionId() == 0):
            rows = [(int(t_new), k, int(c)) for k, t_old, t_new, c in doc["migrations"]] + \
                   [(int(t_old), k, -int(c)) for k, t_old, t_new, c in doc["migrations"]]
            yield pd.DataFrame({TOKEN: pd.Series([r[0] for r in rows], dtype="int32"), key: [r[1] for r in rows],
                                WEIGHT: pd.Series([r[2] for r in rows], dtype="int64")})

    return route


@dataclass
class BatchRouting:
    """What one micro-batch did: table version in force, records per state partition (``loads``),
    keys moved into this batch (with the state rows moved), driver seconds."""

    batch_id: int
    version: int
    loads: list
    max_mean: float
    moved: dict = field(default_factory=dict)
    table_size: int = 0
    plan_status: Optional[str] = None
    driver_s: float = 0.0
    key_counts: dict = field(default_factory=dict)   # records per key in this batch

    def partition_record(self, top_keys: int = 1000) -> dict:
        """The batch in the wire form (``policies.wire.PartitionStatsRecord``) for the reporter
        (``Reporter.offer_partition_stats``): the ``top_keys`` most frequent keys, the rest summarised."""
        ranked = sorted(self.key_counts.items(), key=lambda kv: (-kv[1], kv[0]))
        top, rest = ranked[:top_keys], ranked[top_keys:]
        P = len(self.loads)
        return {"batch_id": self.batch_id, "algorithm": "mixed-routing", "source": "routing-table",
                "partitions": P, "reduce": P, "tuples": int(sum(self.loads)), "keys": len(ranked), "exact": True,
                "key_counts": [[k, int(c)] for k, c in top], "other_keys": len(rest),
                "other_tuples": int(sum(c for _, c in rest)), "block_loads": [int(x) for x in self.loads],
                "max_mean_load": self.max_mean, "processing_ms": round(self.driver_s * 1000, 3)}


class RoutedCount:
    """A running count per ``key`` whose state partition follows a routing table.

    ::

        rc = RoutedCount(spark, key="word", partitions=4, state_dir="/tmp/rt")
        query = rc.start(stream_df, checkpoint="/tmp/ckpt")     # or rc.aggregated(stream_df) + your sink
        ... rc.counts() -> {key: running count}
    """

    def __init__(self, spark, key: str, partitions: int, state_dir: str | Path, planner: Optional[str] = "mixed",
                 planner_options: Optional[dict] = None, on_batch: Optional[Callable[[BatchRouting], None]] = None,
                 report: Optional[Callable[[dict], None]] = None):
        self.spark, self.key, self.partitions = spark, key, int(partitions)
        self.store = VersionStore(state_dir)
        self.planner = None
        if planner:
            self.planner = get_partitioner(planner, **(planner_options or {}))
            self.planner.use_hash(spark_instances)
        self.on_batch, self.report = on_batch, report
        self.table: dict[str, int] = {}
        self.tokens: dict[str, int] = {}
        self.latest: dict[tuple[int, str], int] = {}   # (token, key) -> running count in the state store
        self.history: list[BatchRouting] = []
        self.placement_errors: list[tuple] = []
        self._pending: Optional[dict] = None
        self._lock = threading.Lock()
        self.version = 0
        if not self.store.current_path.exists():
            self.store.write({"version": 0, "effective_from_batch": 0, "table": {}, "tokens": {}, "migrations": []})
        else:
            doc = self.store.read()
            self.version, self.table, self.tokens = doc["version"], doc["table"], doc["tokens"]

    # -- the query --
    def aggregated(self, stream_df):
        """The stateful aggregate: (token, key, count) grouped by (token, key), update mode."""
        from pyspark.sql import functions as F
        from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType

        keyed = stream_df.select(F.col(self.key).cast("string").alias(self.key))
        schema = StructType([StructField(TOKEN, IntegerType(), False), StructField(self.key, StringType(), True),
                             StructField(WEIGHT, LongType(), False)])
        routed = keyed.mapInPandas(route_rows(str(self.store.dir), self.key), schema)
        return routed.groupBy(TOKEN, self.key).agg(F.sum(WEIGHT).alias(COUNT))

    def start(self, stream_df, checkpoint: str, trigger: Optional[dict] = None, query_name: Optional[str] = None):
        self.restore(checkpoint)
        writer = self.aggregated(stream_df).writeStream.outputMode("update").foreachBatch(self.process_batch) \
            .option("checkpointLocation", checkpoint)
        if trigger:
            writer = writer.trigger(**trigger)
        if query_name:
            writer = writer.queryName(query_name)
        return writer.start()

    def restore(self, checkpoint: str, read_state: bool = True) -> None:
        """Point ``current.json`` at the version in force for the first uncommitted batch and
        (``read_state``) reload the running count of every group from the checkpoint's state
        store (Spark's ``statestore`` data source), which later state moves need."""
        commits = Path(checkpoint) / "commits"
        if not commits.is_dir():
            return
        done = [int(p.name) for p in commits.iterdir() if p.name.isdigit()]
        if not done:
            return
        nxt = max(done) + 1
        versions = [v for v in self.store.versions() if v["effective_from_batch"] <= nxt]
        if versions:
            doc = versions[-1]
            self.store.write(doc)
            self.version, self.table, self.tokens = doc["version"], doc["table"], doc["tokens"]
        if read_state and self.spark is not None:
            self.latest = {(t, k): c for t, k, c, _ in self.state_rows(checkpoint)}

    def state_rows(self, checkpoint: str) -> list[tuple[int, str, int, int]]:
        """(token, key, running count, state-store partition) of every group in the checkpoint's
        state as of the last committed batch (read with Spark's ``statestore`` data source)."""
        df = self.spark.read.format("statestore").load(checkpoint)
        out = []
        for r in df.collect():
            value = r["value"]
            out.append((int(r["key"][TOKEN]), r["key"][self.key], int(value[0]) if value[0] is not None else 0,
                        int(r["partition_id"])))
        return out

    # -- the knob applier (reporter thread) --
    def applier(self, value: Any) -> tuple[str, Optional[str]]:
        """Accept a ``partition_plan`` directive with a routing ``table``; installed after the
        current batch (so the next batch uses it, with its state moves)."""
        try:
            if not isinstance(value, Mapping) or not isinstance(value.get("table"), Mapping):
                raise ValueError("partition_plan: expected an object with a 'table' object")
            P = int(value.get("partitions", self.partitions))
            if P != self.partitions:
                raise ValueError(f"partition_plan.partitions: {P} != the query's {self.partitions} state partitions")
            table = {str(k): int(d) for k, d in value["table"].items()}
            bad = [k for k, d in table.items() if not 0 <= d < P]
            if bad:
                raise ValueError(f"partition_plan.table.{bad[0]}: instance {table[bad[0]]} outside 0..{P - 1}")
        except (TypeError, ValueError) as exc:
            return "failed", str(exc)[:500]
        with self._lock:
            self._pending = table
        return "applied", f"{len(table)} table entries, from the next batch"

    # -- per batch (driver, inside foreachBatch) --
    def process_batch(self, df, batch_id: int) -> None:
        from pyspark.sql import functions as F

        t0 = time.perf_counter()
        rows = df.withColumn("__pid", F.spark_partition_id()).collect()
        deltas: dict[str, int] = {}
        for r in rows:
            group = (int(r[TOKEN]), r[self.key])
            value = int(r[COUNT])
            deltas[group[1]] = deltas.get(group[1], 0) + value - self.latest.get(group, 0)
            self.latest[group] = value
            if spark_partition(self.partitions, *group) != int(r["__pid"]):
                self.placement_errors.append((batch_id, group, int(r["__pid"])))
        deltas = {k: d for k, d in deltas.items() if d}
        owner = {k: self.table.get(k, int(spark_partition(self.partitions, 0, k))) for k in deltas}
        loads = np.zeros(self.partitions, dtype=np.int64)
        for k, d in deltas.items():
            loads[owner[k]] += d
        mean = loads.mean() if loads.sum() else 0
        moved_now = {k: c for k, _, _, c in self.store.read(self.version)["migrations"]}
        record = BatchRouting(batch_id, self.version, loads.tolist(), float(loads.max() / mean) if mean else 1.0,
                              moved_now, len(self.table), key_counts=dict(deltas))
        record.driver_s = time.perf_counter() - t0
        self.history.append(record)
        if self.report is not None:                 # statistics out before the next table is chosen,
            try:                                    # so a directive arriving now applies to the next batch
                self.report(record.partition_record())
            except Exception:  # reporting must never fail the batch
                pass
        if self.on_batch is not None:
            self.on_batch(record)
        new_table = self._next_table(deltas, record)
        if new_table is not None and new_table != self.table:
            self._install(new_table, batch_id + 1)
        elif self.store.read(self.version)["migrations"]:
            self._install(self.table, batch_id + 1)          # the moves happened once, in this batch
        record.driver_s = time.perf_counter() - t0

    def _next_table(self, deltas: Mapping[str, int], record: BatchRouting) -> Optional[dict]:
        with self._lock:
            pending, self._pending = self._pending, None
        if pending is not None:
            return pending
        if self.planner is None or not deltas:
            return None
        self.planner.table = dict(self.table)
        state = {k: 1.0 for _, k in self.latest}          # one state row per key with state
        plan = self.planner.replan(dict(deltas), self.partitions, state=state)
        record.plan_status = plan.status
        return dict(self.planner.table)

    def _install(self, table: dict, effective_from: int) -> None:
        """Write the next version: tokens of the new table and the state moves (emitted by the
        routing step of the one batch that switches to it; the driver then writes a follow-up
        version of the same table without moves)."""
        tokens = tokens_for(table, self.partitions)
        migrations = []
        keys = {k for _, k in self.latest}
        for k in sorted(keys):
            t_old, t_new = self.tokens.get(k, 0), tokens.get(k, 0)
            if t_old != t_new:
                c = self.latest.get((t_old, k), 0)
                if c:
                    migrations.append([k, t_old, t_new, c])
        self.version += 1
        self.store.write({"version": self.version, "effective_from_batch": effective_from, "table": table,
                          "tokens": tokens, "migrations": migrations})
        self.table, self.tokens = table, tokens

    def counts(self) -> dict[str, int]:
        """Running count per key (summed over its groups; all but one are 0 after a move)."""
        out: dict[str, int] = {}
        for (_, k), v in self.latest.items():
            out[k] = out.get(k, 0) + v
        return {k: v for k, v in out.items() if v}

    def state_partition(self, key: str) -> Optional[int]:
        """The partition holding ``key``'s non-zero state (None if none or split)."""
        groups = [(t, v) for (t, k), v in self.latest.items() if k == key and v]
        if len(groups) != 1:
            return None
        return spark_partition(self.partitions, groups[0][0], key)
