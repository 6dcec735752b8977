"""APScheduler jobs that run inside ``spark-governor serve`` (retention now; policies later)."""
from __future__ import annotations

import logging

from apscheduler.schedulers.background import BackgroundScheduler
from sqlalchemy.engine import Engine

from aggregators.retention import purge_older_than

log = logging.getLogger("spark_governor.scheduler")


def build_scheduler(engine: Engine, retention_s: float, retention_interval_s: float = 60.0) -> BackgroundScheduler:
    """A background scheduler that purges statistics older than ``retention_s`` seconds."""
    scheduler = BackgroundScheduler(daemon=True)

    def retention() -> None:
        deleted = purge_older_than(engine, retention_s)
        if any(deleted.values()):
            log.info("retention: deleted %s", deleted)

    scheduler.add_job(retention, "interval", seconds=retention_interval_s, id="retention",
                      max_instances=1, coalesce=True)
    return scheduler
