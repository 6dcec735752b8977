"""The true latency of a micro-batch job per constraint span: the mean record latency of the rows
that *arrive* in each span (Lohrmann's thesis Eq. 4.1: D_t = the items entering S during the span),
computed exactly from the arrivals and the batches rather than estimated like the control plane
does (``aggregators.latency``). The ground truth of ``bench scaling`` (``bench.scaling_sim``) and of
its real-Spark run (``bench.scaling_real``).

Units: seconds; rows.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["SpanTruth", "span_truths"]


@dataclass(frozen=True)
class SpanTruth:
    """The true mean latency (s) of the rows that *entered* the job in one constraint span
    ``[start_s, start_s + span)`` (thesis Eq. 4.1: D_t = the items entering S during the span).
    ``pending_rows`` of them were not processed by the end of the run; their latency counts as its
    lower bound, end of run − arrival (so a run that falls behind at the end is not flattered)."""

    start_s: float
    rows: float
    latency_s: float
    pending_rows: float = 0.0


def span_truths(grid_s: np.ndarray, cum_rows: np.ndarray, starts_s, ends_s, span_s: float,
                end_s: float) -> list[SpanTruth]:
    """The true mean record latency per span of ``span_s`` seconds (aligned on t = 0) of the rows
    *arriving* in it (thesis Eq. 4.1), from the arrivals and the batches.

    ``cum_rows[i]``: rows arrived by ``grid_s[i]`` (an even grid); batch k holds the rows that arrived
    after the previous batch's start up to its own start ``starts_s[k]`` and finishes at ``ends_s[k]``
    (starts ascending). Rows are taken per grid cell at its midpoint τ: a cell belongs to the first
    batch starting at or after τ, and each of its rows has latency = that batch's end − τ (error ≤
    half a cell per row). Rows after the last start were not processed: their latency counts as its
    lower bound ``end_s − τ`` and they are reported as ``pending_rows``. Spans without arrivals are
    absent."""
    grid_s = np.asarray(grid_s, dtype=float)
    rows = np.diff(np.asarray(cum_rows, dtype=float))
    mid = (grid_s[:-1] + grid_s[1:]) / 2
    starts, ends = np.asarray(starts_s, dtype=float), np.asarray(ends_s, dtype=float)
    k = np.searchsorted(starts, mid, side="left")
    done = k < len(starts)
    leave = ends[np.minimum(k, len(starts) - 1)] if len(starts) else np.zeros_like(mid)
    lat = np.where(done, leave, end_s) - mid
    idx = np.floor(mid / span_s + 1e-9).astype(np.int64)
    n = int(idx.max()) + 1 if len(idx) else 0
    total = np.bincount(idx, weights=rows, minlength=n)
    weighted = np.bincount(idx, weights=rows * lat, minlength=n)
    pending = np.bincount(idx, weights=rows * ~done, minlength=n)
    return [SpanTruth(i * span_s, float(total[i]), float(weighted[i] / total[i]), float(pending[i]))
            for i in range(n) if total[i] > 0]


def schedule_rows(switches: list[tuple[float, float]], end_s: float, grid_s: float = 0.01) -> tuple[np.ndarray, np.ndarray]:
    """(grid s, rows arrived by each grid point) for a piecewise-constant rate: ``switches`` =
    [(t_s, rows/s), ...] ascending from t = 0."""
    grid = np.arange(0.0, end_s + grid_s / 2, grid_s)
    times = np.array([t for t, _ in switches])
    rates = np.array([r for _, r in switches])
    rate = rates[np.maximum(np.searchsorted(times, grid[:-1], side="right") - 1, 0)]
    return grid, np.concatenate([[0.0], np.cumsum(rate * np.diff(grid))])
