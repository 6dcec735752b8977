"""Retention: delete statistics older than a horizon, in small transactions.

Rows are deleted in chunks of ``chunk`` ids per transaction so that a large purge never holds
SQLite's write lock (or PostgreSQL row locks) long enough to stall ingest. Jobs, template and
runtime vertices and reporters (with their cumulative counters) are kept.
"""
from __future__ import annotations

import time

from sqlalchemy import delete, select
from sqlalchemy.engine import Engine

from spark_governor.aggregators.models import (batches, partition_stats, query_states, runtime_windows, stage_runs,
                                               task_spans, tasks, template_windows)

#: (table, timestamp column in epoch ms)
_AGED = ((tasks, tasks.c.finish_ms), (runtime_windows, runtime_windows.c.window_start_ms),
         (template_windows, template_windows.c.window_start_ms), (stage_runs, stage_runs.c.completion_ms),
         (batches, batches.c.trigger_ms), (partition_stats, partition_stats.c.received_ms),
         (query_states, query_states.c.observed_ms), (task_spans, task_spans.c.last_finish_ms))


def purge_older_than(engine: Engine, horizon_s: float, now_ms: int | None = None, chunk: int = 5000) -> dict[str, int]:
    """Delete rows older than ``horizon_s`` seconds; returns deleted row counts per table."""
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    cutoff = now_ms - int(horizon_s * 1000)
    deleted: dict[str, int] = {}
    for table, ts in _AGED:
        total = 0
        while True:
            with engine.begin() as conn:
                ids = [r[0] for r in conn.execute(select(table.c.id).where(ts < cutoff).limit(chunk))]
                if ids:
                    conn.execute(delete(table).where(table.c.id.in_(ids)))
            total += len(ids)
            if len(ids) < chunk:
                break
        deleted[table.name] = total
    return deleted
