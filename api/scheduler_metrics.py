"""The scheduler's runs: ``spark_governor_evaluation_run_seconds`` (how long one policy evaluation run over every
job took, in seconds: a run longer than the evaluation interval makes APScheduler skip the next one), and
counters of the runs that could not happen: ``spark_governor_evaluations_skipped_total{reason}`` (policy
evaluations, one per evaluation interval) and ``spark_governor_retention_runs_skipped_total{reason}``
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

from prometheus_client import CollectorRegistry, Counter, Histogram

PREFIX = "spark_governor"
#: buckets of an evaluation run's duration (seconds); the default evaluation interval is 10 s
RUN_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
#: why a scheduled run was skipped
REASONS = ("database_unavailable", "database_error", "still_running")


class SchedulerMetrics:
    """The evaluation run durations and the two skip counters, registered in ``registry`` (None: not registered; under ``serve``'s
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
        self.evaluation_runs = Histogram(
            f"{PREFIX}_evaluation_run_seconds",
            "Duration of one policy evaluation run over every job (seconds)", buckets=RUN_BUCKETS, registry=registry)
        self.surge_evaluations = Counter(
            f"{PREFIX}_surge_evaluations",
            "Job evaluations out of the interval: a probed arrival rate rose past its baseline (api.surge_watch)",
            registry=registry)
        for reason in REASONS:
            self.evaluations_skipped.labels(reason)
            self.retention_skipped.labels(reason)

    @property
    def process_metrics(self) -> tuple:
        """The in-process metrics, for ``api.worker_metrics.exposition_registry``."""
        return self.evaluation_runs, self.evaluations_skipped, self.retention_skipped, self.surge_evaluations
