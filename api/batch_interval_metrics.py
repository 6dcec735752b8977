"""Prometheus gauges of the ``batch_interval`` knob (issue 5) at scrape time, per job (label
``spark_job``) and, for what a streaming query measures, per query (label ``query``,
``api.job_metrics.query_label``).

* ``spark_governor_batch_interval_seconds{spark_job, source[, query]}`` — the micro-batch interval in
  effect (seconds): ``source="directive"`` (no ``query`` label: a directive is the job's): the interval
  the driver last *applied* (value of the newest ``batch_interval`` decision whose directive the
  driver acknowledged as applied; ``0`` = fastest / default trigger; for ``pid-rate`` its
  ``interval_s``); ``source="measured"`` (per ``query``): the arrival-time span of the query's latest
  micro-batch as its paced source reports it (``durations_ms.batchInterval``), else the gap between
  its trigger and the previous one of the same run (a ``processingTime`` trigger's interval, or the
  previous batch's duration when it overran);
* ``spark_governor_batch_rate_limit_rows_per_second{spark_job}`` — the applied pid-rate cap, when there
  is one;
* ``spark_governor_batch_processing_seconds{spark_job, query}`` — the query's latest micro-batch's
  processing time (``durationMs.triggerExecution``), the p of Das et al.'s Algorithm 1;
* ``spark_governor_batch_queueing_seconds{spark_job, query}`` — its wait in the source past its boundary
  (paced sources only).

Jobs silent for more than the metrics expiry are left out, and so are queries neither a batch nor a
state of which arrived within it (``api.job_metrics.query_current``).
"""
from __future__ import annotations

import time

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.samples import Sample
from sqlalchemy import select
from sqlalchemy.engine import Engine

from spark_governor.aggregators.models import batches, decisions
from spark_governor.api.job_metrics import DEFAULT_EXPIRY_S, exported_jobs, query_current, query_label

PREFIX = "spark_governor"


def _interval_and_cap(value):
    if isinstance(value, bool):
        return None, None
    if isinstance(value, (int, float)):
        return float(value), None
    if isinstance(value, dict) and isinstance(value.get("interval_s"), (int, float)):
        cap = value.get("max_rows_per_second")
        return float(value["interval_s"]), float(cap) if isinstance(cap, (int, float)) else None
    return None, None


class BatchIntervalCollector:
    def __init__(self, engine: Engine, expiry_s: float = DEFAULT_EXPIRY_S) -> None:
        self.engine, self.expiry_s = engine, expiry_s

    def describe(self):
        return []

    def collect(self):
        interval = GaugeMetricFamily(f"{PREFIX}_batch_interval_seconds", "Micro-batch interval in effect: applied "
                                     "directive (source=directive; 0: fastest) and latest batch (source=measured)",
                                     labels=["spark_job", "source", "query"])
        rate_limit = GaugeMetricFamily(f"{PREFIX}_batch_rate_limit_rows_per_second",
                                       "Rate limit the driver applied (pid-rate policy)", labels=["spark_job"])
        g = {name: GaugeMetricFamily(f"{PREFIX}_{name}", doc, labels=["spark_job", "query"]) for name, doc in (
            ("batch_processing_seconds", "Processing time (triggerExecution) of the query's latest micro-batch"),
            ("batch_queueing_seconds", "Wait in the source past its boundary of the query's latest micro-batch "
                                       "(paced)"),
        )}
        now_ms = int(time.time() * 1000)
        with self.engine.connect() as conn:
            names = exported_jobs(conn, now_ms, self.expiry_s)
            applied = {}
            for r in conn.execute(select(decisions.c.job_id, decisions.c.new_value, decisions.c.directive_version)
                                  .where(decisions.c.knob == "batch_interval", decisions.c.status == "applied")
                                  .order_by(decisions.c.job_id, decisions.c.directive_version)):
                applied[r.job_id] = r.new_value
            for job_id, value in applied.items():
                if job_id not in names:
                    continue
                value_s, cap = _interval_and_cap(value)
                if value_s is not None:  # the job's directive: no query label
                    interval.samples.append(Sample(interval.name, {"spark_job": names[job_id], "source": "directive"},
                                                   value_s))
                if cap is not None:
                    rate_limit.add_metric([names[job_id]], cap)
            for job_id, name in names.items():
                current = query_current(conn, job_id, now_ms, self.expiry_s)
                for qid in sorted(conn.execute(select(batches.c.query_id)
                                               .where(batches.c.job_id == job_id).distinct()).scalars()):
                    last = conn.execute(select(batches.c.run_id, batches.c.name, batches.c.trigger_ms,
                                               batches.c.batch_duration_ms, batches.c.durations_ms)
                                        .where(batches.c.job_id == job_id, batches.c.query_id == qid)
                                        .order_by(batches.c.trigger_ms.desc()).limit(2)).all()
                    if not current(qid, last[0].trigger_ms + last[0].batch_duration_ms):
                        continue  # a query that stopped while the job goes on
                    query = query_label(qid, last[0].name or (last[1].name if len(last) == 2 else None))
                    d = last[0].durations_ms or {}
                    if "triggerExecution" in d:
                        g["batch_processing_seconds"].add_metric([name, query], d["triggerExecution"] / 1000.0)
                    if "batchInterval" in d:
                        interval.add_metric([name, "measured", query], d["batchInterval"] / 1000.0)
                    elif len(last) == 2 and last[1].run_id == last[0].run_id:
                        interval.add_metric([name, "measured", query],
                                            (last[0].trigger_ms - last[1].trigger_ms) / 1000.0)
                    if "batchQueueing" in d:
                        g["batch_queueing_seconds"].add_metric([name, query], d["batchQueueing"] / 1000.0)
        yield interval
        yield rate_limit
        yield from g.values()
