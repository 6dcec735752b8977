"""Prometheus exposition of micro-batch partitioning (Prompt, digest 000 §3).

Per job (label ``spark_job``; a partition plan is the job's, so no ``query`` label), from the latest
partitioned batch the job reported: the applied plan's
BSI (tuples), BCI (keys), KSR, MPI, max/mean Map-block load, BSI of the Reduce buckets, split
keys, Map blocks P and Reduce buckets R, tuples and distinct keys of the batch, the statistics /
planning / whole-batch times (seconds), and per block (labels ``spark_job``, ``block``) its tuples.
From the latest ``partition_plan`` decision (labels ``spark_job``, ``policy``): the predicted
max/mean load and MPI of the plan, and its planning time (seconds). Counter of partitioned
batches received per job (``..._partition_batches_total``). Jobs silent for more than the
metrics expiry are left out (``api.job_metrics``).
"""
from __future__ import annotations

import time

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from sqlalchemy import func, select
from sqlalchemy.engine import Engine

from spark_governor.aggregators.models import decisions, partition_stats
from spark_governor.api.job_metrics import DEFAULT_EXPIRY_S, exported_jobs

PREFIX = "spark_governor_partition"

_BATCH_GAUGES = (
    ("bsi", "bsi", "Block size imbalance of the applied plan: max - mean tuples per Map block (Eq. 2)"),
    ("bci", "bci", "Block cardinality imbalance: max - mean distinct keys per Map block (Eq. 4)"),
    ("ksr", "ksr", "Key split ratio: key fragments / distinct keys (Eq. 5)"),
    ("mpi", "mpi", "Micro-batch partitioning imbalance, p1=p2=p3=1/3 (Eq. 6)"),
    ("max_mean_load", "max_mean_load", "Max / mean tuples per Map block"),
    ("bucket_bsi", "bsi_buckets", "Reduce bucket size imbalance: max - mean tuples per bucket (Eq. 3)"),
    ("split_keys", "split_keys", "Keys split over more than one Map block"),
    ("blocks", "partitions", "Map blocks P of the latest batch"),
    ("buckets", "reduce", "Reduce buckets R of the latest batch"),
    ("tuples", "tuples", "Tuples in the latest partitioned batch"),
    ("keys", "keys", "Distinct keys in the latest partitioned batch"),
)
_TIMES = (("stats_seconds", "stats_ms", "Statistics pass of the latest batch (seconds)"),
          ("planning_seconds", "planning_ms", "Plan computation / realization on the driver (seconds)"),
          ("batch_seconds", "processing_ms", "Whole partitioned batch: statistics, plan, Map, Reduce (seconds)"))


class PartitionCollector:
    def __init__(self, engine: Engine, expiry_s: float = DEFAULT_EXPIRY_S) -> None:
        self.engine, self.expiry_s = engine, expiry_s

    def describe(self):
        return []

    def collect(self):
        gauges = {col: GaugeMetricFamily(f"{PREFIX}_{name}", doc, labels=["spark_job"]) for name, col, doc in _BATCH_GAUGES}
        times = {col: GaugeMetricFamily(f"{PREFIX}_{name}", doc, labels=["spark_job"]) for name, col, doc in _TIMES}
        block = GaugeMetricFamily(f"{PREFIX}_block_tuples", "Tuples per Map block of the latest batch",
                                  labels=["spark_job", "block"])
        total = CounterMetricFamily(f"{PREFIX}_batches", "Partitioned batches reported", labels=["spark_job"])
        predicted = GaugeMetricFamily(f"{PREFIX}_predicted_max_mean_load",
                                      "Predicted max/mean Map-block load of the latest plan decision",
                                      labels=["spark_job", "policy"])
        predicted_mpi = GaugeMetricFamily(f"{PREFIX}_predicted_mpi", "Predicted MPI of the latest plan decision",
                                          labels=["spark_job", "policy"])
        plan_time = GaugeMetricFamily(f"{PREFIX}_plan_compute_seconds",
                                      "Planning time of the latest plan decision on the control plane (seconds)",
                                      labels=["spark_job", "policy"])
        with self.engine.connect() as conn:
            names = exported_jobs(conn, int(time.time() * 1000), self.expiry_s)
            counts = conn.execute(select(partition_stats.c.job_id, func.count()).group_by(partition_stats.c.job_id)).all()
            for job_id, n in counts:
                if job_id in names:
                    total.add_metric([names[job_id]], n)
            last = (select(partition_stats.c.job_id, func.max(partition_stats.c.id).label("id"))
                    .group_by(partition_stats.c.job_id).subquery())
            cols = [c for c in partition_stats.c if c.name != "key_counts"]
            for r in conn.execute(select(*cols).join(last, partition_stats.c.id == last.c.id)).mappings():
                if r["job_id"] not in names:
                    continue
                job = names[r["job_id"]]
                for col, g in gauges.items():
                    if r[col] is not None:
                        g.add_metric([job], float(r[col]))
                for col, g in times.items():
                    if r[col] is not None:
                        g.add_metric([job], r[col] / 1000.0)
                for b, n in enumerate(r["block_loads"] or []):
                    block.add_metric([job, str(b)], float(n))
            latest = (select(decisions.c.job_id, func.max(decisions.c.id).label("id"))
                      .where(decisions.c.knob == "partition_plan").group_by(decisions.c.job_id).subquery())
            for d in conn.execute(select(decisions.c.job_id, decisions.c.policy, decisions.c.prediction,
                                         decisions.c.new_value).join(latest, decisions.c.id == latest.c.id)):
                if d.job_id not in names:
                    continue
                key = [names[d.job_id], d.policy]
                p = d.prediction or {}
                if isinstance(p.get("max_mean_load"), (int, float)):
                    predicted.add_metric(key, p["max_mean_load"])
                if isinstance(p.get("mpi"), (int, float)):
                    predicted_mpi.add_metric(key, p["mpi"])
                if isinstance((d.new_value or {}).get("planning_s"), (int, float)):
                    plan_time.add_metric(key, d.new_value["planning_s"])
        yield from gauges.values()
        yield from times.values()
        yield from (block, total, predicted, predicted_mpi, plan_time)
