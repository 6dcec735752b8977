"""Rows a streaming source offers *now*, read by the reporter between micro-batches.

A source's offsets reach the driver only with the progress of a **completed** micro-batch, so the
reporter's live arrival rate (``collectors.query_state``) extrapolates the rate of before until the
first batch at a new rate completes — on the standalone cluster 13.6 s after a 4× step, most of a
14 s bound (issue #14, run 13 of docs/benchmarks.md). A probe reads the source's producer side
outside Spark's triggers, at every query-state snapshot (at least once a second), so a rate step is
seen within a snapshot or two: what Flink's autoscaler reads as a source's ``pendingRecords``.

A probe is a monotone **row counter** with any origin: :meth:`SourceProbe.rows` returns the rows the
source has offered up to ``now`` (Kafka: the sum of the partitions' end offsets; the project's
sources: the integral of their rate). The query tracker keeps its samples and turns them into

* the arrival rate: counter difference over the last ``QueryTracker.probe_rate_s`` seconds (rows
  per second, what the source offered, not what was processed);
* the rows available now: the latest completed batch's offset plus the counter's growth since that
  offset was read.

Probes are given to ``attach(spark, job, source_probes=[...])`` (or ``Reporter(source_probes=...)``)
and run in the reporter's thread: they must be quick and must not raise (an exception or a ``None``
counts as "unknown now": the record falls back to the offsets). No Spark import.
"""
from __future__ import annotations

import time
from typing import Optional

from spark_governor.collectors.sources.rate_file import ArrivalCurve, read_rate


class SourceProbe:
    """A source's row counter outside Spark (subclass and implement :meth:`rows`).

    ``query``: the streaming query's name this probe applies to (None: any query); ``source``: a
    substring of the source's ``description`` in the progress (None: any source). A query's source
    takes the first probe that matches it."""

    def __init__(self, query: Optional[str] = None, source: Optional[str] = None) -> None:
        self.query, self.source = query, source

    def matches(self, query_name: Optional[str], description: Optional[str]) -> bool:
        if self.query is not None and self.query != query_name:
            return False
        return self.source is None or (description is not None and self.source in description)

    def rows(self, now_s: float) -> Optional[float]:
        """Rows offered by ``now_s`` (epoch seconds), any origin, never decreasing; None: unknown."""
        raise NotImplementedError


class RateFileProbe(SourceProbe):
    """The project's ``zipf``/``zipf-paced`` sources with the option ``rateFile``: rows arrive at the
    rate the file holds (rows per second, re-read at every call; ``rows_per_second`` when the file
    is missing or unreadable, as the sources do). Integrated as the sources integrate it
    (``collectors.sources.rate_file``): a new rate counts from when the file was written, clamped into
    the interval since the previous call, so the probe and the source count the same rows."""

    def __init__(self, path: str, rows_per_second: float = 0.0, query: Optional[str] = None,
                 source: Optional[str] = None) -> None:
        super().__init__(query, source)
        self.path, self.default = path, float(rows_per_second)
        self._curve: Optional[ArrivalCurve] = None
        self._rows = 0.0

    def rate(self) -> float:
        """The rate the file holds now (rows per second, ≥ 0)."""
        return read_rate(self.path, self.default)[0]

    def rows(self, now_s: Optional[float] = None) -> Optional[float]:
        now_s = time.time() if now_s is None else now_s
        rate, written = read_rate(self.path, self.default)
        if self._curve is None:
            self._curve = ArrivalCurve(now_s, 0.0, rate)
        self._curve.update(now_s, rate, written)
        self._rows = max(self._rows, self._curve.rows_at(now_s))
        return self._rows
