"""The processing-time trigger interval a streaming query ran with, read back from its batches (issue #43).

Spark's event log does not record a query's trigger: ``QueryStartedEvent`` and the progress events carry no
interval. But a ``ProcessingTime(T)`` trigger that waits starts the next batch at a multiple of ``T`` since the
epoch (Spark's ``ProcessingTimeExecutor.nextBatchTime``: ``now / T · T + T``), and the progress event's ``timestamp``
is that start. So the starts that followed a wait — more than :data:`WAITED_MS` after the previous batch's trigger
execution ended — are multiples of ``T`` to a few ms (measured: 0–2 ms late, 2026-12-07), while a batch that ran
into the next starts at once, anywhere (measured: up to 42 ms after the previous one ended, on a loaded machine). ``T`` is the longest interval (a multiple of :data:`RESOLUTION_MS`, at most
the shortest gap between two such starts) that at least :data:`ALIGNED_SHARE` of the waited starts align to, within
:data:`TOLERANCE_MS`. A query that never waited (the default trigger, or a run overloaded throughout) or waited fewer
than :data:`MIN_WAITS` times gives None. With few waited starts the interval read may be a multiple of ``T``
(two starts 2T apart fit 2T as well as T): an upper bound, never a fraction.

The replay's implied latency bound (``api.replay``): ``2 · T``, a record waiting at most one interval for its batch
and the batch finishing within the next — our reading, not a paper's; ``--bound-ms`` overrides it. Units: ms.
"""
from __future__ import annotations

from collections import defaultdict
from typing import Iterable, Optional

import numpy as np
from sqlalchemy import select
from sqlalchemy.engine import Connection

from spark_governor.aggregators.models import batches

#: a start "followed a wait" when it came more than this after the previous trigger execution ended (ms)
WAITED_MS = 50
#: intervals are read to this resolution (ms), the shortest one :data:`SHORTEST_MS` ...
RESOLUTION_MS = 50
SHORTEST_MS = 100
#: ... from starts at most this late on a multiple of the interval (ms)
TOLERANCE_MS = 20
#: the share of the waited starts that must align
ALIGNED_SHARE = 0.8
#: the fewest waited starts an interval is read from
MIN_WAITS = 2


def trigger_interval_ms(runs: Iterable[tuple[int, float]]) -> Optional[int]:
    """``runs``: one query's batches as ``(trigger start, trigger execution)`` (epoch ms, ms) in start order → the
    interval ``T`` (ms), or None (module docstring)."""
    runs = list(runs)
    waited = [t1 for (t0, d0), (t1, _d1) in zip(runs, runs[1:]) if t1 - (t0 + d0) > WAITED_MS]
    if len(waited) < MIN_WAITS:
        return None
    starts = np.array(waited, dtype=np.int64)
    gaps = np.diff(starts)  # between waited starts: multiples of T
    if not (gaps > 0).any():
        return None
    longest = int(gaps[gaps > 0].min()) + TOLERANCE_MS
    candidates = np.arange(SHORTEST_MS, longest + 1, RESOLUTION_MS, dtype=np.int64)
    if candidates.size == 0:
        return None
    aligned = ((starts[None, :] % candidates[:, None]) <= TOLERANCE_MS).mean(axis=1) >= ALIGNED_SHARE
    found = candidates[aligned]
    return int(found[-1]) if found.size else None


def job_trigger_interval_ms(conn: Connection, job_id: int, run_id: Optional[str] = None) -> Optional[int]:
    """The longest trigger interval over the job's queries (of one run when given), from the
    stored batches; None when no query shows one. ``run_id``: ``job_runs.run_id``."""
    q = select(batches.c.query_id, batches.c.trigger_ms, batches.c.durations_ms, batches.c.batch_duration_ms).where(
        batches.c.job_id == job_id, *([] if run_id is None else [batches.c.job_run_id == run_id]))
    per_query: dict[str, list] = defaultdict(list)
    for r in conn.execute(q.order_by(batches.c.trigger_ms)):
        per_query[r.query_id].append((r.trigger_ms, (r.durations_ms or {}).get("triggerExecution",
                                                                                r.batch_duration_ms)))
    found = [t for t in (trigger_interval_ms(v) for v in per_query.values()) if t is not None]
    return max(found) if found else None
