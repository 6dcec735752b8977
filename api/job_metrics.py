"""Prometheus identity and liveness of a Spark job: which jobs ``/metrics`` exports, and whether each is up.

Identity. Every series of a job carries the label ``spark_job`` (the name given to
``attach(spark, job=...)``), never ``job``: ``job`` is the scrape job's label in Prometheus, which
replaces an exported ``job`` (renaming it ``exported_job``) unless the scrape config sets
``honor_labels: true``. Series of one streaming query of the job also carry ``query``
(:func:`query_label`).

Liveness (``aggregators.job_state``), per job that ever reported:

* ``spark_governor_job_up{spark_job}`` — 1 while the job is ``active``, 0 when ``stopped`` (no report
  for ``stopped_after_s``, default 30 s, or every streaming query of its latest run terminated) and
  for a pre-registered job that never reported;
* ``spark_governor_job_last_report_age_seconds{spark_job}`` — seconds since the control plane received
  the job's latest report (control-plane clock);
* ``spark_governor_job_unfinished_queries{spark_job}`` — streaming queries whose latest reported state is
  not ``terminated``: with the report age, a job that went silent without stopping its queries (a dead
  driver) tells from one that finished (alert ``SparkGovernorJobStoppedReporting``).

Expiry. A job silent for longer than ``expiry_s`` (``serve --metrics-expiry``, seconds, default
600; 0 = never) is *expired*: none of its series are exported any more — gauges and counters —
so a stopped job no longer shows its last values; its history stays in SQL (and in the API).
``job_up`` (0), the report age and the unfinished queries outlive the expiry: they are exported until the job has been
silent for ``max(expiry_s, UP_HORIZON_S)`` (a day by default), so an alert on ``job_up == 0`` or on
the age sees a dead job for a day and then the job leaves Prometheus. With ``expiry_s = 0``
nothing expires. A pre-registered job that never reported does not expire (it was configured on
purpose and exports only its configuration's series).
"""
from __future__ import annotations

import time
from typing import Callable, Optional

from prometheus_client.core import GaugeMetricFamily
from sqlalchemy import func, select
from sqlalchemy.engine import Connection, Engine

from spark_governor.aggregators.job_state import STOPPED_AFTER_S, job_state, unfinished_queries
from spark_governor.aggregators.models import jobs, query_states

PREFIX = "spark_governor"
#: a job silent for this long (s) stops being exported (``serve --metrics-expiry``)
DEFAULT_EXPIRY_S = 600.0
#: ``job_up`` / the report age stay exported this long (s) after the last report, at least the expiry
UP_HORIZON_S = 86_400.0


def _silent_s(last_report_ms: Optional[int], now_ms: int) -> Optional[float]:
    return None if last_report_ms is None else max(0.0, (now_ms - last_report_ms) / 1000.0)


def fresh_ms(last_report_ms: Optional[int], attachment: Optional[dict]) -> Optional[int]:
    """When the control plane last received the job's data: its latest report, or for a job imported from
    an event log (``spark-governor replay``; its reports carry the log's clock) the import's time."""
    imported = (attachment or {}).get("imported_ms") if isinstance(attachment, dict) else None
    if isinstance(imported, int) and (last_report_ms is None or imported > last_report_ms):
        return imported
    return last_report_ms


def exported_jobs(conn: Connection, now_ms: int, expiry_s: float = DEFAULT_EXPIRY_S) -> dict[int, str]:
    """``{job id: name}`` of the jobs whose series ``/metrics`` exports at ``now_ms``: every job except
    those silent for more than ``expiry_s`` seconds (``expiry_s <= 0``: every job); a replayed job counts
    from its import (:func:`fresh_ms`), so its what-if decisions show on the dashboards."""
    out = {}
    for r in conn.execute(select(jobs.c.id, jobs.c.name, jobs.c.last_report_ms, jobs.c.attachment)):
        silent = _silent_s(fresh_ms(r.last_report_ms, r.attachment), now_ms)
        if expiry_s <= 0 or silent is None or silent <= expiry_s:
            out[r.id] = r.name
    return out


def query_current(conn: Connection, job_id: int, now_ms: int, expiry_s: float) -> Callable[[str, int], bool]:
    """A test ``(query id, end of its latest micro-batch in ms) -> bool``: whether a query's series are
    exported — its latest batch ended, or the control plane received a state of it, within ``expiry_s``
    seconds (``expiry_s <= 0``: always). A running query sends its state every second, so a slow trigger
    does not expire it; a query that stopped while its job goes on does."""
    if expiry_s <= 0:
        return lambda query_id, ended_ms: True
    since_ms = now_ms - expiry_s * 1000
    seen = dict(conn.execute(select(query_states.c.query_id, func.max(query_states.c.received_ms))
                             .where(query_states.c.job_id == job_id).group_by(query_states.c.query_id)).all())
    return lambda query_id, ended_ms: max(ended_ms, seen.get(query_id) or 0) >= since_ms


def query_label(query_id: str, name: Optional[str]) -> str:
    """The ``query`` label of a streaming query: its name (``writeStream.queryName``) when it has one,
    else its id (Spark's ``StreamingQuery.id``, stable across restarts from the same checkpoint)."""
    return name or query_id


class JobCollector:
    """``spark_governor_job_up`` and ``spark_governor_job_last_report_age_seconds`` per job (see the module
    docstring for how long they are exported)."""

    def __init__(self, engine: Engine, expiry_s: float = DEFAULT_EXPIRY_S, stopped_after_s: float = STOPPED_AFTER_S,
                 up_horizon_s: float = UP_HORIZON_S) -> None:
        self.engine, self.expiry_s, self.stopped_after_s = engine, expiry_s, stopped_after_s
        self.up_horizon_s = up_horizon_s

    def describe(self):
        return []

    def collect(self):
        up = GaugeMetricFamily(f"{PREFIX}_job_up", "1 while the job is active, 0 when it stopped or never reported",
                               labels=["spark_job"])
        age = GaugeMetricFamily(f"{PREFIX}_job_last_report_age_seconds",
                                "Seconds since the job's latest report (control-plane clock)", labels=["spark_job"])
        unfinished = GaugeMetricFamily(f"{PREFIX}_job_unfinished_queries",
                                       "Streaming queries whose latest reported state is not terminated",
                                       labels=["spark_job"])
        horizon_s = max(self.expiry_s, self.up_horizon_s)
        now_ms = int(time.time() * 1000)
        with self.engine.connect() as conn:
            for j in conn.execute(select(jobs)).all():
                silent = _silent_s(j.last_report_ms, now_ms)
                if self.expiry_s > 0 and silent is not None and silent > horizon_s:
                    continue
                state = job_state(conn, j, now_ms, self.stopped_after_s)
                up.add_metric([j.name], 1.0 if state.active else 0.0)
                if silent is not None:
                    age.add_metric([j.name], silent)
                    unfinished.add_metric([j.name], unfinished_queries(conn, j.id))
        yield up
        yield age
        yield unfinished
