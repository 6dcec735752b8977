"""Prometheus exposition of each job's cluster profile (``aggregators.cluster_profile``).

Read from the profile stored at the job's latest policy evaluation (``cluster_profiles``; jobs
without enabled policies have none); jobs silent longer than the metrics expiry are left out
(``api.job_metrics``). Label ``spark_job`` (the job's name) and, for the
provisioning delay, ``part``: ``register`` (directive sent → executor registered) or
``first_task`` (registered → first task finished on it). Seconds unless named a ratio/factor.
"""
from __future__ import annotations

import logging
import time

from prometheus_client.core import GaugeMetricFamily
from sqlalchemy.engine import Engine

from spark_governor.aggregators import cluster_profile
from spark_governor.api.job_metrics import DEFAULT_EXPIRY_S, exported_jobs

PREFIX = "spark_governor"


class ClusterProfileCollector:
    def __init__(self, engine: Engine, expiry_s: float = DEFAULT_EXPIRY_S) -> None:
        self.engine, self.expiry_s = engine, expiry_s

    def describe(self):
        return []

    def collect(self):
        provisioning = GaugeMetricFamily(
            f"{PREFIX}_provisioning_delay_seconds",
            "Median provisioning delay of executors added by scale-out decisions, per part "
            "(register: directive sent to executor registered; first_task: registered to first task finished)",
            labels=["spark_job", "part"])
        warmup = GaugeMetricFamily(f"{PREFIX}_executor_warmup_factor",
                                   "Median service time of a new executor's first tasks over the steady one "
                                   "of the same stage", labels=["spark_job"])
        work = GaugeMetricFamily(f"{PREFIX}_executor_warmup_work_factor",
                                 "Median time a new executor's slow first tasks (through its first task of the "
                                 "heaviest stage) held their slots over the time steady tasks of the same stages "
                                 "hold theirs for the same records",
                                 labels=["spark_job"])
        crowd = GaugeMetricFamily(f"{PREFIX}_executor_startup_contention_factor",
                                  "Time the working executors' tasks running while new executors start held their "
                                  "slots over the time steady tasks of the same stages hold theirs for the same "
                                  "records", labels=["spark_job"])
        warmup_s = GaugeMetricFamily(f"{PREFIX}_executor_warmup_seconds",
                                     "Median time from a new executor's first task to its last slow one",
                                     labels=["spark_job"])
        overhead = GaugeMetricFamily(f"{PREFIX}_driver_overhead_seconds",
                                     "Mean driver overhead per micro-batch: batch duration minus its tasks' span",
                                     labels=["spark_job"])
        error = GaugeMetricFamily(f"{PREFIX}_prediction_error_ratio",
                                  "Mean |predicted - measured| / measured mean record latency of the latest "
                                  "decisions that took effect", labels=["spark_job"])
        try:
            with self.engine.connect() as conn:
                exported = exported_jobs(conn, int(time.time() * 1000), self.expiry_s)
                profiles = [p for job_id, p in cluster_profile.stored_all(conn) if job_id in exported]
        except Exception:  # a broken profile table must never break /metrics
            logging.getLogger("spark_governor.metrics").exception("cluster profiles")
            profiles = []
        for p in profiles:
            for part in ("register", "first_task"):
                v = p.provisioning.get(f"{part}_s", {}).get("median")
                if v is not None:
                    provisioning.add_metric([p.job, part], v)
            if p.warmup.get("factor") is not None:
                warmup.add_metric([p.job], p.warmup["factor"])
            if p.warmup.get("work_factor") is not None:
                work.add_metric([p.job], p.warmup["work_factor"])
            if p.warmup.get("contention_factor") is not None:
                crowd.add_metric([p.job], p.warmup["contention_factor"])
            if p.warmup.get("duration_s") is not None:
                warmup_s.add_metric([p.job], p.warmup["duration_s"])
            if p.driver_overhead.get("mean_s") is not None:
                overhead.add_metric([p.job], p.driver_overhead["mean_s"])
            if p.prediction_error.get("mean_abs_rel") is not None:
                error.add_metric([p.job], p.prediction_error["mean_abs_rel"])
        yield from (provisioning, warmup, work, crowd, warmup_s, overhead, error)
