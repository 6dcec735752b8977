"""Counters of the scheduler's runs that could not happen: ``spark_governor_evaluations_skipped_total{reason}``
(policy evaluations, one per evaluation interval) and ``spark_governor_retention_runs_skipped_total{reason}``
(retention purges, one per retention interval).

A run is skipped when the database fails it (``api.scheduler``): ``reason="database_unavailable"`` for a
database that cannot be reached or dropped the connection (SQLAlchemy ``OperationalError``/``InterfaceError``,
or a ``DBAPIError`` that invalidated its connection), ``reason="database_error"`` for any other database error,
``reason="still_running"`` when the previous run had not finished when the next was due (APScheduler skips
it: a slow or unresponsive database, or more work than fits in an interval). Every series exists from the
start (at 0), so ``rate()`` and ``increase()`` see the first skip.

Counted in process memory, like ``spark_governor_reports_total``: under ``serve`` they are summed over the
gunicorn workers (``api.worker_metrics``; only the leader's scheduler runs, so only it counts), and each
replica counts only its own scheduler.
"""
from __future__ import annotations

from typing import Optional

from prometheus_client import CollectorRegistry, Counter

PREFIX = "spark_governor"
#: why a scheduled run was skipped
REASONS = ("database_unavailable", "database_error", "still_running")


class SchedulerMetrics:
    """The two skip counters, registered in ``registry`` (None: not registered; under ``serve``'s
    multiprocess mode they still reach ``/metrics`` through the workers' metric files)."""

    def __init__(self, registry: Optional[CollectorRegistry] = None) -> None:
        self.evaluations_skipped = Counter(
            f"{PREFIX}_evaluations_skipped",
            "Policy evaluation runs skipped (the database failed them, or the previous run was still going)",
            ["reason"], registry=registry)
        self.retention_skipped = Counter(
            f"{PREFIX}_retention_runs_skipped",
            "Retention purge runs skipped (the database failed them, or the previous run was still going)",
            ["reason"], registry=registry)
        for reason in REASONS:
            self.evaluations_skipped.labels(reason)
            self.retention_skipped.labels(reason)

    @property
    def counters(self) -> tuple[Counter, Counter]:
        """The in-process metrics, for ``api.worker_metrics.exposition_registry``."""
        return self.evaluations_skipped, self.retention_skipped
