"""``spark_governor_health{spark_job, state}``: the health verdict of each job on ``/metrics``.

One series per state of ``aggregators.health.STATES`` and job: 1 for the job's current verdict, 0 for
the others (so a Grafana state panel or an alert reads ``spark_governor_health{state="no-progress"} == 1``).
Verdicts are computed over the last ``window_s`` seconds (default 60) for every exported job, also a
stopped one (its verdict then tells how it ended, e.g. ``unhealthy`` for a terminated query, and turns
``unknown`` once its data is older than the window; ``spark_governor_job_up`` says it stopped).
Each verdict is kept for ``ttl_s`` seconds (default 10, the default evaluation interval) per process,
so frequent scrapes do not rebuild every job's view; expired jobs are left out (``api.job_metrics``).
"""
from __future__ import annotations

import logging
import time

from prometheus_client.core import GaugeMetricFamily
from sqlalchemy.engine import Engine

from spark_governor.aggregators.health import STATES, Verdict, job_health
from spark_governor.api.job_metrics import DEFAULT_EXPIRY_S, exported_jobs

PREFIX = "spark_governor"
log = logging.getLogger("spark_governor.metrics")


class HealthCollector:
    """The verdict of every exported job (see the module docstring)."""

    def __init__(self, engine: Engine, window_ms: int, expiry_s: float = DEFAULT_EXPIRY_S, window_s: float = 60.0,
                 ttl_s: float = 10.0) -> None:
        self.engine, self.window_ms, self.expiry_s = engine, window_ms, expiry_s
        self.window_s, self.ttl_s = window_s, ttl_s
        self._cache: dict[str, tuple[float, Verdict]] = {}

    def describe(self):
        return []

    def _verdict(self, conn, name: str, now: float) -> Verdict:
        hit = self._cache.get(name)
        if hit is None or now - hit[0] >= self.ttl_s:
            hit = (now, job_health(conn, name, self.window_s, self.window_ms, int(now * 1000)))
            self._cache[name] = hit
        return hit[1]

    def collect(self):
        g = GaugeMetricFamily(f"{PREFIX}_health", "1 for the job's health verdict (label state), 0 for the other states",
                              labels=["spark_job", "state"])
        now = time.time()
        now_ms = int(now * 1000)
        seen = set()
        with self.engine.connect() as conn:
            for job_id, name in exported_jobs(conn, now_ms, self.expiry_s).items():
                seen.add(name)
                try:
                    state = self._verdict(conn, name, now).state
                except Exception:  # one job's bad data never breaks /metrics for the others
                    log.exception("health verdict of job %s failed", name)
                    continue
                for s in STATES:
                    g.add_metric([name, s], 1.0 if s == state else 0.0)
        for name in set(self._cache) - seen:
            del self._cache[name]
        yield g
