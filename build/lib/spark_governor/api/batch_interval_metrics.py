"""Prometheus gauges of the ``batch_interval`` knob (issue 5), per job, at scrape time.

* ``spark_governor_batch_interval_seconds{job, source}`` — the micro-batch interval in effect:
  ``source="directive"``: the interval the driver last *applied* (value of the newest
  ``batch_interval`` decision whose directive the driver acknowledged as applied; ``0`` = fastest /
  default trigger; for ``pid-rate`` its ``interval_s``); ``source="measured"``: the arrival-time
  span of the latest micro-batch as its paced source reports it (``durations_ms.batchInterval``),
  else the gap between its trigger and the previous one of the same run (a ``processingTime``
  trigger's interval, or the previous batch's duration when it overran);
* ``spark_governor_batch_rate_limit_rows_per_second`` — the applied pid-rate cap, when there is one;
* ``spark_governor_batch_processing_seconds`` — the latest micro-batch's processing time
  (``durationMs.triggerExecution``), the p of Algorithm 1;
* ``spark_governor_batch_queueing_seconds`` — its wait in the source past its boundary (paced
  sources only).
"""
from __future__ import annotations

from prometheus_client.core import GaugeMetricFamily
from sqlalchemy import select
from sqlalchemy.engine import Engine

from spark_governor.aggregators.models import batches, decisions, jobs

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
    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def describe(self):
        return []

    def collect(self):
        interval = GaugeMetricFamily(f"{PREFIX}_batch_interval_seconds", "Micro-batch interval in effect: applied "
                                     "directive (source=directive; 0: fastest) and latest batch (source=measured)",
                                     labels=["job", "source"])
        g = {name: GaugeMetricFamily(f"{PREFIX}_{name}", doc, labels=["job"]) for name, doc in (
            ("batch_rate_limit_rows_per_second", "Rate limit the driver applied (pid-rate policy)"),
            ("batch_processing_seconds", "Processing time (triggerExecution) of the latest micro-batch"),
            ("batch_queueing_seconds", "Wait in the source past its boundary of the latest micro-batch (paced)"),
        )}
        with self.engine.connect() as conn:
            names = dict(conn.execute(select(jobs.c.id, jobs.c.name)).all())
            applied = {}
            for r in conn.execute(select(decisions.c.job_id, decisions.c.new_value, decisions.c.directive_version)
                                  .where(decisions.c.knob == "batch_interval", decisions.c.status == "applied")
                                  .order_by(decisions.c.job_id, decisions.c.directive_version)):
                applied[r.job_id] = r.new_value
            for job_id, value in applied.items():
                value_s, cap = _interval_and_cap(value)
                if value_s is not None:
                    interval.add_metric([names[job_id], "directive"], value_s)
                if cap is not None:
                    g["batch_rate_limit_rows_per_second"].add_metric([names[job_id]], cap)
            for job_id, name in names.items():
                last = conn.execute(select(batches.c.run_id, batches.c.trigger_ms, batches.c.durations_ms)
                                    .where(batches.c.job_id == job_id)
                                    .order_by(batches.c.trigger_ms.desc()).limit(2)).all()
                if not last:
                    continue
                d = last[0].durations_ms or {}
                if "triggerExecution" in d:
                    g["batch_processing_seconds"].add_metric([name], d["triggerExecution"] / 1000.0)
                if "batchInterval" in d:
                    interval.add_metric([name, "measured"], d["batchInterval"] / 1000.0)
                elif len(last) == 2 and last[1].run_id == last[0].run_id:
                    interval.add_metric([name, "measured"], (last[0].trigger_ms - last[1].trigger_ms) / 1000.0)
                if "batchQueueing" in d:
                    g["batch_queueing_seconds"].add_metric([name], d["batchQueueing"] / 1000.0)
        yield interval
        yield from g.values()
