"""Prometheus exposition of latency constraints and of the models' prediction error.

Per constraint (labels ``spark_job``, ``constraint``): the latest complete span's measured mean
record latency, its bound, the attainment over the last 12 spans (spans without a completed
micro-batch count as violated when work in flight was already older than the bound, see
``aggregators.constraints``), the model prediction in force and whether the latest model found
the bound feasible; the SLO: spans judged good and bad so far (``spark_governor_constraint_spans_total{result}``,
counters from SQL, so every worker and replica exports the same totals: ``aggregators.slo_spans``) and the
objective. Per policy (labels ``spark_job``, ``policy``,
``quantity``): the relative prediction error of the latest judged decision,
(observed − predicted) / predicted, for each quantity it predicted (``latency_s``, ``utilization``).
Jobs silent for more than the metrics expiry are left out (``api.job_metrics``).
"""
from __future__ import annotations

import logging

import time

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from sqlalchemy import func, select
from sqlalchemy.engine import Engine

from spark_governor.aggregators import constraints
from spark_governor.aggregators.models import decisions, latency_constraints
from spark_governor.api.job_metrics import DEFAULT_EXPIRY_S, exported_jobs

PREFIX = "spark_governor"
SPANS = 12


class ConstraintCollector:
    def __init__(self, engine: Engine, window_ms: int = 5000, expiry_s: float = DEFAULT_EXPIRY_S) -> None:
        self.engine, self.window_ms, self.expiry_s = engine, window_ms, expiry_s

    def describe(self):
        return []

    def collect(self):
        labels = ["spark_job", "constraint"]
        latency = GaugeMetricFamily(f"{PREFIX}_constraint_latency_seconds",
                                    "Mean record latency of the latest complete span", labels=labels)
        bound = GaugeMetricFamily(f"{PREFIX}_constraint_bound_seconds", "Bound on the mean record latency",
                                  labels=labels)
        attainment = GaugeMetricFamily(f"{PREFIX}_constraint_attainment_ratio",
                                       f"Fraction of the last {SPANS} spans within the bound (spans whose work in flight "
                                       "exceeded the bound count as violated)", labels=labels)
        predicted = GaugeMetricFamily(f"{PREFIX}_constraint_predicted_latency_seconds",
                                      "Model prediction of the mean record latency in force", labels=labels)
        feasible = GaugeMetricFamily(f"{PREFIX}_constraint_feasible",
                                     "1 when the latest model found the bound feasible, 0 when not", labels=labels)
        spans = CounterMetricFamily(f"{PREFIX}_constraint_spans",
                                    "Averaging spans judged (result: good within the bound, bad over it; each counted "
                                    "once, aggregators.slo_spans)", labels=["spark_job", "constraint", "result"])
        objective = GaugeMetricFamily(f"{PREFIX}_constraint_objective_ratio",
                                      "The SLO: the share of spans that must be within the bound", labels=labels)
        error = GaugeMetricFamily(f"{PREFIX}_model_prediction_error_ratio",
                                  "(observed - predicted) / predicted of the latest judged decision",
                                  labels=["spark_job", "policy", "quantity"])
        now_ms = int(time.time() * 1000)
        with self.engine.connect() as conn:
            names = exported_jobs(conn, now_ms, self.expiry_s)
            for c in conn.execute(select(latency_constraints)).all():
                if c.job_id not in names:
                    continue
                job = names[c.job_id]
                key = [job, c.name]
                spans.add_metric(key + ["good"], c.spans_good)
                spans.add_metric(key + ["bad"], c.spans_bad)
                objective.add_metric(key, c.objective)
                try:
                    m = constraints.measure(conn, job, c.job_id, c, now_ms, SPANS, self.window_ms)
                except Exception:  # one bad constraint must never break /metrics for the other jobs
                    logging.getLogger("spark_governor.metrics").exception("constraint %s of %s", c.name, job)
                    continue
                bound.add_metric(key, c.bound_ms / 1000.0)
                if m["latest"] is not None:
                    latency.add_metric(key, m["latest"]["latency_ms"] / 1000.0)
                    if m["latest"]["predicted_latency_ms"] is not None:
                        predicted.add_metric(key, m["latest"]["predicted_latency_ms"] / 1000.0)
                if m["attainment"] is not None:
                    attainment.add_metric(key, m["attainment"])
                if m["feasible"] is not None:
                    feasible.add_metric(key, 1.0 if m["feasible"] else 0.0)
            latest = (select(decisions.c.job_id, decisions.c.policy, func.max(decisions.c.outcome_ms).label("t"))
                      .where(decisions.c.outcome_ms.is_not(None)).group_by(decisions.c.job_id, decisions.c.policy)
                      .subquery())
            for d in conn.execute(select(decisions.c.job_id, decisions.c.policy, decisions.c.outcome).join(
                    latest, (decisions.c.job_id == latest.c.job_id) & (decisions.c.policy == latest.c.policy)
                    & (decisions.c.outcome_ms == latest.c.t))):
                if d.job_id not in names:
                    continue
                observed = (d.outcome or {}).get("observed") or {}
                for quantity, p in ((d.outcome or {}).get("predicted") or {}).items():
                    o = observed.get(quantity)
                    if isinstance(p, (int, float)) and isinstance(o, (int, float)) and p:
                        error.add_metric([names[d.job_id], d.policy, quantity], (o - p) / p)
        yield from (latency, bound, attainment, predicted, feasible, spans, objective, error)
