"""Each job's series once across replicas (issue #42): ``/metrics`` of every ``serve`` replica is scraped, and the
job series are computed from the shared database, so every replica would export the same ones.

:class:`LeadingReplicaOnly` wraps the collectors of the job series and yields them only in the replica that leads
(``api.leader.leader_replica``: the one whose process runs the scheduler), or in every replica while none leads
(a lone process without an election, a takeover in progress: at most the followers' poll interval); each replica
exports ``spark_governor_replica_leading{replica}`` (1 in the leading one), and its own process metrics (reports
it took, ingest latency, evaluation runs) as before, so per-replica figures stay per replica and job figures
appear once. The leader is looked up at most once a second per process.
"""
from __future__ import annotations

import threading
import time
from typing import Iterable, Optional

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector
from sqlalchemy.engine import Engine

from spark_governor.api.leader import leader_replica, replica_id

PREFIX = "spark_governor"


class LeadingReplicaOnly(Collector):
    """``collectors``' series from the leading replica only (module docstring)."""

    def __init__(self, engine: Engine, collectors: Iterable[Collector], replica: Optional[str] = None,
                 ttl_s: float = 1.0) -> None:
        self.engine, self.collectors, self.ttl_s = engine, list(collectors), ttl_s
        self.replica = replica or replica_id()
        self._lock = threading.Lock()
        self._cached: tuple[float, Optional[str]] = (float("-inf"), None)

    def leader(self) -> Optional[str]:
        """The leading replica (None: none), looked up at most every ``ttl_s`` seconds."""
        with self._lock:
            at, who = self._cached
            if time.monotonic() - at < self.ttl_s:
                return who
        who = leader_replica(self.engine)
        with self._lock:
            self._cached = (time.monotonic(), who)
        return who

    def describe(self):
        return []

    def collect(self):
        who = self.leader()
        leading = GaugeMetricFamily(f"{PREFIX}_replica_leading",
                                    "1 in the replica that leads (runs the scheduler and exports the jobs' series), "
                                    "else 0", labels=["replica"])
        leading.add_metric([self.replica], 1.0 if who == self.replica else 0.0)
        yield leading
        if who is None or who == self.replica:
            for c in self.collectors:
                yield from c.collect()
