"""APScheduler jobs that run inside ``spark-governor serve``: retention, policy evaluation and the SLO's span
counts (``aggregators.slo_spans``).

With a ``leader`` (``api.leader.Leader``) every job first checks that this process leads, so across
workers and replicas each evaluation and each retention pass runs exactly once.

A database that fails a run (down, restarting, unreachable) never stops the scheduler: the run is
skipped, counted on ``/metrics`` (``api.scheduler_metrics``) and logged in one line when a series of
skips starts and in one line when the task runs again; the next interval tries again, on fresh
connections (the engine pings pooled ones), so the scheduler recovers without a restart. A run that
is still going when the next one is due (a slow or unresponsive database, or more work than fits
in an interval) makes APScheduler skip the next one; that is counted too (``still_running``). On
PostgreSQL the leader's advisory lock dies with the database session, so during an outage no process
can verify that it leads: the process that led at its previous run counts the skips (followers count
nothing), so each skipped run is counted once across workers.
"""
from __future__ import annotations

import logging
import time
from typing import Callable, Optional

from apscheduler.events import EVENT_JOB_MAX_INSTANCES
from apscheduler.schedulers.background import BackgroundScheduler
from prometheus_client import Counter
from sqlalchemy import text
from sqlalchemy.engine import Engine
from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError

from spark_governor.aggregators import slo_spans
from spark_governor.aggregators.retention import purge_older_than
from spark_governor.api.scheduler_metrics import SchedulerMetrics
from spark_governor.api.surge_watch import SurgeWatch
from spark_governor.policies.surge import SURGE_CHECK_S

log = logging.getLogger("spark_governor.scheduler")


def skip_reason(exc: DBAPIError) -> str:
    """``database_unavailable`` for a database that cannot be reached or dropped the connection, else
    ``database_error`` (``api.scheduler_metrics.REASONS``)."""
    if isinstance(exc, (OperationalError, InterfaceError)) or exc.connection_invalidated:
        return "database_unavailable"
    return "database_error"


class _Skips:
    """The skipped runs of one scheduled task: counted per run, logged once per series of skips."""

    def __init__(self, what: str, counter: Counter) -> None:
        self.what, self.counter, self.streak = what, counter, 0

    def skipped(self, exc: DBAPIError) -> None:
        reason = skip_reason(exc)
        self.counter.labels(reason).inc()
        self.streak += 1
        if self.streak == 1:  # the error's text may name hosts: the class is enough here
            log.warning("%s skipped: %s (%s); further skips are only counted until it runs again",
                        self.what, reason.replace("_", " "), exc.__class__.__name__)

    def ran(self) -> None:
        if self.streak:
            log.info("%s runs again after %d skipped run(s)", self.what, self.streak)
            self.streak = 0

    def run(self, leading: Callable[[], bool], work: Callable[[], None]) -> None:
        """``work()`` if ``leading()``; a database error in either skips this run."""
        try:
            if leading():
                work()
        except DBAPIError as exc:
            self.skipped(exc)
            return
        self.ran()


def build_scheduler(engine: Engine, retention_s: float, retention_interval_s: float = 60.0,
                    governor=None, leader=None, metrics: Optional[SchedulerMetrics] = None) -> BackgroundScheduler:
    """A background scheduler that purges statistics older than ``retention_s`` seconds every
    ``retention_interval_s`` seconds and, with a ``governor``, evaluates every job's enabled policies
    each evaluation interval (seconds), and a job at once when its probed arrival rate surges
    (``api.surge_watch``, with the governor's ``surge_ratio``). With a ``leader``, only while ``leader.check()`` says this
    process leads. Runs the database fails are counted in ``metrics`` (a new, unregistered
    :class:`~spark_governor.api.scheduler_metrics.SchedulerMetrics` when None)."""
    metrics = metrics if metrics is not None else SchedulerMetrics()
    scheduler = BackgroundScheduler(daemon=True)
    state = {"led": leader is None}  # whether this process led at its latest run

    def leading() -> bool:
        """Whether this process runs the task now. A process that led and cannot verify its lock because
        the database fails raises that database error, so its run counts as skipped."""
        if leader is None:
            return True
        if leader.check():
            state["led"] = True
            return True
        if state["led"]:
            with engine.connect() as conn:  # raises while the database is down
                conn.execute(text("SELECT 1"))
            state["led"] = False  # the database answers: another process leads now
        return False

    if governor is not None:
        evaluations = _Skips("policy evaluation", metrics.evaluations_skipped)

        def evaluate_timed() -> None:
            started = time.perf_counter()
            governor.evaluate_all()
            metrics.evaluation_runs.observe(time.perf_counter() - started)

        def evaluate() -> None:
            evaluations.run(leading, evaluate_timed)

        scheduler.add_job(evaluate, "interval", seconds=governor.evaluation_interval_s,
                          id="policies", max_instances=1, coalesce=True)
        if governor.surge_ratio:  # a probed rate step evaluates its job at once (api.surge_watch)
            watch = SurgeWatch(engine, governor, governor.surge_ratio)

            def surge() -> None:
                try:
                    if leading():
                        metrics.surge_evaluations.inc(len(watch.check()))
                except DBAPIError:
                    pass  # a database outage is counted (and logged) by the evaluation runs

            scheduler.add_job(surge, "interval", seconds=SURGE_CHECK_S, id="surges", max_instances=1, coalesce=True)

    window_ms = getattr(governor, "window_ms", 5000)

    def judge_spans() -> None:  # the SLO counters (aggregators.slo_spans)
        try:
            if leading():
                slo_spans.judge(engine, int(time.time() * 1000), window_ms)
        except DBAPIError:
            pass  # a database outage is counted (and logged) by the evaluation and retention runs

    scheduler.add_job(judge_spans, "interval", seconds=slo_spans.PASS_S, id="slo", max_instances=1, coalesce=True)

    purges = _Skips("retention", metrics.retention_skipped)

    def purge() -> None:
        deleted = purge_older_than(engine, retention_s)
        if any(deleted.values()):
            log.info("retention: deleted %s", deleted)

    def retention() -> None:
        purges.run(leading, purge)

    scheduler.add_job(retention, "interval", seconds=retention_interval_s, id="retention",
                      max_instances=1, coalesce=True)

    def overran(event) -> None:  # APScheduler skipped a run: the previous one is still going
        counter = {"policies": metrics.evaluations_skipped, "retention": metrics.retention_skipped}.get(event.job_id)
        if counter is not None:
            counter.labels("still_running").inc(len(event.scheduled_run_times) or 1)

    scheduler.add_listener(overran, EVENT_JOB_MAX_INSTANCES)
    return scheduler
