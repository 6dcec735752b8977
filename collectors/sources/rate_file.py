"""A rate file: the rows per second a test, a demo or a benchmark changes while a query runs, and the
arrivals it implies.

The project's sources (``zipf``, ``zipf-paced``) and the reporter's ``RateFileProbe`` re-read the file
at every call. A new rate takes effect when the file was written (its modification time, clamped into
the interval since the previous call), not at the call that reads it: between two calls the old rate
applies up to the write and the new one after it, so the rows offered follow the schedule of writes.

Before 2026-11-27 the ``zipf`` source applied a new rate since its *previous* call. With a
processing-time trigger the source is called once per trigger, so the first micro-batch after a step
held a whole trigger interval at the new rate: the job met the step up to one trigger earlier than the
benchmark's arrival schedule said, by an amount set by the trigger's phase against the write (``bench
scaling-real`` runs up to 33: 0.3 s for one policy's run, 6.8–7.9 s for the others' on the same
profile). Units: seconds (epoch), rows, rows per second.
"""
from __future__ import annotations

import os
from typing import Optional


def read_rate(path: Optional[str], default: float) -> tuple[float, Optional[float]]:
    """(rows per second the file holds, ≥ 0; when it was written, epoch s) — (``default``, None) when
    there is no file or it does not hold a number."""
    if path:
        try:
            with open(path) as f:
                rate = max(0.0, float(f.read().strip()))
                return rate, os.fstat(f.fileno()).st_mtime
        except (OSError, ValueError):
            pass
    return default, None


class ArrivalCurve:
    """Cumulative rows arrived by time t (epoch s) for a rate re-read at every call: piecewise linear,
    with a breakpoint where each new rate took effect."""

    def __init__(self, t0_s: float, rows0: float, rate: float) -> None:
        self.points = [(t0_s, float(rows0), rate)]
        self.called_s = t0_s  # the latest call's time

    @property
    def rate(self) -> float:
        """The rate in effect since the latest breakpoint (rows per second)."""
        return self.points[-1][2]

    def update(self, now_s: float, rate: float, changed_s: Optional[float] = None) -> None:
        """A call at ``now_s`` read ``rate``, written at ``changed_s`` (None: unknown, taken as ``now_s``).
        A new rate takes effect at ``changed_s`` clamped into [the previous call, ``now_s``] (the
        previous call still read the old rate); a call with the clock behind the previous one changes
        nothing."""
        if now_s < self.called_s:
            return
        prev, self.called_s = self.called_s, now_s
        t, rows, old = self.points[-1]
        if rate == old:
            return
        at = now_s if changed_s is None else min(max(changed_s, prev), now_s)
        self.points.append((at, rows + old * (at - t), rate))
        del self.points[:-64]  # boundaries are never older than the last few rate changes

    def rows_at(self, t_s: float) -> float:
        for t, rows, rate in reversed(self.points):
            if t <= t_s:
                return rows + rate * (t_s - t)
        return self.points[0][1]
