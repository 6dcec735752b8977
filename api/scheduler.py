"""APScheduler jobs that run inside ``spark-governor serve``: retention and policy evaluation.

With a ``leader`` (``api.leader.Leader``) every job first checks that this process leads, so across
workers and replicas each evaluation and each retention pass runs exactly once.
"""
from __future__ import annotations

import logging

from apscheduler.schedulers.background import BackgroundScheduler
from sqlalchemy.engine import Engine

from spark_governor.aggregators.retention import purge_older_than

log = logging.getLogger("spark_governor.scheduler")


def build_scheduler(engine: Engine, retention_s: float, retention_interval_s: float = 60.0,
                    governor=None, leader=None) -> BackgroundScheduler:
    """A background scheduler that purges statistics older than ``retention_s`` seconds and, with
    a ``governor``, evaluates every job's enabled policies each evaluation interval. With a
    ``leader``, only while ``leader.check()`` says this process leads."""
    scheduler = BackgroundScheduler(daemon=True)

    def leading() -> bool:
        return leader is None or leader.check()

    if governor is not None:
        def evaluate() -> None:
            if leading():
                governor.evaluate_all()

        scheduler.add_job(evaluate, "interval", seconds=governor.evaluation_interval_s,
                          id="policies", max_instances=1, coalesce=True)

    def retention() -> None:
        if not leading():
            return
        deleted = purge_older_than(engine, retention_s)
        if any(deleted.values()):
            log.info("retention: deleted %s", deleted)

    scheduler.add_job(retention, "interval", seconds=retention_interval_s, id="retention",
                      max_instances=1, coalesce=True)
    return scheduler
