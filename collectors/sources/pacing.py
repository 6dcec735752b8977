"""Time-gated batch boundaries for paced Python streaming sources (Das et al. §2.1, digest 002 §8.3).

No Spark import: the paced readers (``collectors.sources.paced``) call :class:`Gate` from
``latestOffset``, which Spark calls at every trigger (with the default trigger: every
``spark.sql.streaming.pollingDelay`` = 10 ms while idle, and right after each batch commits).

**Boundaries are fixed in arrival time**: batch i covers ``[B_{i-1}, B_i)`` with
``B_i = B_{i-1} + x_i``. A call at ``now ≥ B_i`` cuts batch i (one batch per call); a call before
that returns "no new batch" so Spark runs nothing. When the engine is late (the previous batch ran
past ``B_i``), the batch is cut late and ``queueing = now − B_i`` is its time waiting in the
source — the paper's queue. Intervals are in **seconds**; the offsets carry ``interval_ms`` and
``queueing_ms`` so the reporter can tell the control plane which interval each batch ran with.

**The interval** comes from a small JSON control file that :func:`write_control` writes
atomically (the ``batch_interval`` applier, ``collectors.batch_interval.BatchIntervalApplier``) and
the gate re-reads whenever its modification time changes: ``{"interval_s": x}`` with
``x = 0`` meaning *fastest* (cut at every call: Spark's default trigger), optionally
``"max_rows_per_second"`` (the pid-rate baseline's admission cap). Until the file holds a value the
gate does **slow start** (§3.3.4): 100 ms, doubled at every boundary until the first batch has
completed (the first call after a cut means the engine finished that batch), then held until the
first directive arrives.

**Backlog.** The paper's queue is unbounded: after a long stall (e.g. the first batch of a
session, which starts Spark's Python workers, can take tens of seconds) the gate keeps cutting
batches of the directive's length, each waiting ``queueing`` in the source, and catches up by only
``x − p`` per batch. With ``max_queueing_s`` set (source option ``maxQueueingSeconds``), a batch
whose boundary is more than that far behind is instead cut at ``now`` and absorbs the backlog in
one (larger) batch — digest §8.3's "absorb backlog" variant, a deviation from the paper, off by
default; nothing is dropped either way.
"""
from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from typing import Callable, Optional

from spark_governor.policies.batch_sizing import round_interval


def write_control(path: str, interval_s: float, max_rows_per_second: Optional[float] = None) -> dict:
    """Atomically write the gate's control file; returns what was written."""
    if interval_s < 0:
        raise ValueError(f"interval_s must be >= 0, got {interval_s}")
    body = {"interval_s": float(interval_s)}
    if max_rows_per_second is not None:
        if max_rows_per_second <= 0:
            raise ValueError(f"max_rows_per_second must be > 0, got {max_rows_per_second}")
        body["max_rows_per_second"] = float(max_rows_per_second)
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        json.dump(body, f)
    os.replace(tmp, path)
    return body


def read_control(path: Optional[str]) -> Optional[dict]:
    if not path:
        return None
    try:
        with open(path) as f:
            body = json.load(f)
    except (OSError, ValueError):
        return None
    if isinstance(body, (int, float)):
        body = {"interval_s": float(body)}
    if not isinstance(body, dict) or not isinstance(body.get("interval_s"), (int, float)) or body["interval_s"] < 0:
        return None
    return body


@dataclass(frozen=True)
class Cut:
    """One batch boundary: the batch covers arrival time [boundary − interval, boundary)."""

    boundary_s: float  # epoch seconds
    interval_s: float
    queueing_s: float  # call time − boundary (≥ 0)
    max_rows: Optional[float] = None  # admission cap for this batch (pid-rate), rows

    def offset_fields(self) -> dict:
        return {"t_ms": int(round(self.boundary_s * 1000)), "interval_ms": int(round(self.interval_s * 1000)),
                "queueing_ms": int(round(self.queueing_s * 1000))}


class Gate:
    """Decides at each ``latestOffset`` call whether a batch boundary has passed (module docstring)."""

    def __init__(self, control_path: Optional[str] = None, x_start_s: float = 0.1, growth: float = 2.0,
                 max_slow_start_s: float = 30.0, max_queueing_s: Optional[float] = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.control_path = control_path
        self.max_queueing_s = max_queueing_s
        self.clock = clock
        self.slow_start_s = x_start_s
        self.growth = growth
        self.max_slow_start_s = max_slow_start_s
        self.last_boundary_s: Optional[float] = None
        self.pending = False  # a batch was cut and the engine has not called back yet
        self.completed = 0  # batches the engine finished (as seen from the calls)
        self._control: Optional[dict] = None
        self._control_mtime: Optional[int] = None

    def start(self, t_s: Optional[float] = None) -> float:
        """Set the first boundary origin (the source's start)."""
        self.last_boundary_s = self.clock() if t_s is None else t_s
        return self.last_boundary_s

    def control(self) -> Optional[dict]:
        if not self.control_path:
            return None
        try:
            mtime = os.stat(self.control_path).st_mtime_ns
        except OSError:
            return self._control
        if mtime != self._control_mtime:
            body = read_control(self.control_path)
            if body is not None:
                self._control, self._control_mtime = body, mtime
        return self._control

    def interval_s(self) -> float:
        """The interval of the next batch: the directive's, else the slow-start value."""
        c = self.control()
        return float(c["interval_s"]) if c is not None else self.slow_start_s

    def poll(self) -> Optional[Cut]:
        """Called at every ``latestOffset``: a :class:`Cut` when a boundary has passed, else None."""
        now = self.clock()
        if self.last_boundary_s is None:
            self.start(now)
        if self.pending:
            self.pending = False
            self.completed += 1
        c = self.control()
        x = self.interval_s()
        if x == 0:  # fastest: everything up to now
            boundary, x = now, now - self.last_boundary_s
            if x <= 0:
                return None
        else:
            boundary = self.last_boundary_s + x
            if now < boundary:
                return None
            if self.max_queueing_s is not None and now - boundary > self.max_queueing_s:
                boundary, x = now, now - self.last_boundary_s  # absorb the backlog in one batch
        cap = None
        if c is not None and c.get("max_rows_per_second") is not None:
            cap = float(c["max_rows_per_second"]) * x
        cut = Cut(boundary, x, max(0.0, now - boundary), cap)
        self.last_boundary_s = boundary
        self.pending = True
        if c is None and self.completed == 0:  # slow start until the first batch completes
            self.slow_start_s = min(round_interval(self.slow_start_s * self.growth), self.max_slow_start_s)
        return cut
