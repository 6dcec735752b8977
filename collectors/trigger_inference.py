"""The processing-time trigger interval a streaming query ran with, read back from when its triggers started
(issue #43).

Spark's event log does not record a query's trigger: ``QueryStartedEvent`` and the progress events carry no
interval. But a ``ProcessingTime(T)`` trigger that waits starts at a multiple of ``T`` since the epoch (Spark's
``ProcessingTimeExecutor.nextBatchTime``: ``now / T · T + T``), and both the progress event's ``timestamp`` and a
``QueryIdleEvent``'s (a trigger that found no new data) are that start. So the idle events' timestamps and the batch
starts that followed a wait — more than :data:`WAITED_MS` after the previous batch's trigger execution ended — are
multiples of ``T`` to a few ms (measured: 0–2 ms late, 2026-12-07), while a batch that ran into the next starts at
once, anywhere (measured: up to 42 ms after the previous one ended, on a loaded machine). ``T`` is the longest
interval (a multiple of :data:`RESOLUTION_MS`, at least :data:`SHORTEST_MS`, at most the shortest gap between two
such starts) that at least :data:`ALIGNED_SHARE` of them align to, within :data:`TOLERANCE_MS` (a start that waited
by chance after an overrun aligns with ``T`` only by chance, and with a fraction of ``T`` more often: the longest,
not the one aligning the most; ``2T`` takes about half of them). A query whose
triggers never waited (the default trigger, or a run overloaded throughout) or waited fewer than :data:`MIN_WAITS`
times gives None. With few waited starts the interval read may be a multiple of ``T`` (two starts 2T apart fit 2T
as well as T): an upper bound, never a fraction.

:class:`TriggerInference` keeps one query's waited starts as a replay reads them (the latest :data:`KEPT`). The
replay's implied latency bound (``api.replay``): ``2 · T``, a record waiting at most one interval for its batch and
the batch finishing within the next — our reading, not a paper's; ``--bound-ms`` overrides it. Units: ms.
"""
from __future__ import annotations

from typing import Iterable, Optional

import numpy as np

#: a start "followed a wait" when it came more than this after the previous trigger execution ended (ms)
WAITED_MS = 50
#: intervals are read to this resolution (ms), the shortest one :data:`SHORTEST_MS` ...
RESOLUTION_MS = 50
SHORTEST_MS = 100
#: ... from starts at most this late on a multiple of the interval (ms)
TOLERANCE_MS = 20
#: the least share of the waited starts the interval must align
ALIGNED_SHARE = 0.8
#: the fewest waited starts an interval is read from
MIN_WAITS = 2
#: the waited starts a :class:`TriggerInference` keeps (the latest)
KEPT = 200


def interval_from_starts(starts: Iterable[int]) -> Optional[int]:
    """Trigger starts that followed a wait (epoch ms, in order) → the interval ``T`` (ms) or None (module
    docstring)."""
    arr = np.array(list(starts), dtype=np.int64)
    if arr.size < MIN_WAITS:
        return None
    gaps = np.diff(arr)  # between waited starts: multiples of T
    if not (gaps > 0).any():
        return None
    longest = int(gaps[gaps > 0].min()) + TOLERANCE_MS
    candidates = np.arange(SHORTEST_MS, longest + 1, RESOLUTION_MS, dtype=np.int64)
    if candidates.size == 0:
        return None
    share = ((arr[None, :] % candidates[:, None]) <= TOLERANCE_MS).mean(axis=1)
    if share.max() < ALIGNED_SHARE:
        return None
    # the longest that aligns enough of them: a fraction T/k aligns every start T does, and an overrun's start that
    # ran just past WAITED_MS after its predecessor by chance too (a static run's first batches: 1.6 s read for 8 s)
    return int(candidates[share >= ALIGNED_SHARE][-1])


def trigger_interval_ms(runs: Iterable[tuple[int, float]]) -> Optional[int]:
    """``runs``: one query's batches as ``(trigger start, trigger execution)`` (epoch ms, ms) in start order → the
    interval ``T`` (ms), or None (module docstring)."""
    runs = list(runs)
    return interval_from_starts(t1 for (t0, d0), (t1, _d1) in zip(runs, runs[1:]) if t1 - (t0 + d0) > WAITED_MS)


class TriggerInference:
    """One query's trigger interval as its batches and idle triggers are read, in log order."""

    def __init__(self) -> None:
        self.starts: list[int] = []  # waited starts, the latest KEPT
        self._end: Optional[int] = None  # the previous batch's end (start + trigger execution)
        self.interval_ms: Optional[int] = None

    def _add(self, start: int) -> None:
        self.starts.append(start)
        del self.starts[:-KEPT]
        self.interval_ms = interval_from_starts(self.starts)

    def batch(self, start_ms: int, execution_ms: float) -> None:
        """A completed batch: its trigger start (epoch ms) and trigger execution (ms)."""
        if self._end is not None and start_ms - self._end > WAITED_MS:
            self._add(start_ms)
        self._end = int(start_ms + execution_ms)

    def idle(self, start_ms: int) -> None:
        """A trigger that found no new data (``QueryIdleEvent``), started at ``start_ms`` (epoch ms)."""
        if self._end is None or start_ms - self._end > WAITED_MS:
            self._add(start_ms)
        self._end = start_ms  # an idle trigger ends at once
