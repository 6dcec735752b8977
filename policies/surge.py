"""When a probed arrival rate has surged enough to evaluate a job out of its interval (issue #14).

Pure: the control plane's ``api.surge_watch`` and the simulator (``bench.scaling_sim``) keep one
:class:`SurgeBaselines` each. Per job, the baseline is the rate (rows per second) at the job's
previous surge evaluation, lowered whenever the rate falls below it; a rate above
``(1 + ratio) ×`` the baseline is a surge once it has settled (:meth:`SurgeBaselines.surged`), at most
one per ``min_gap_s`` per job.
"""
from __future__ import annotations

from typing import Hashable

#: how often the control plane looks for surges (s)
SURGE_CHECK_S = 1.0


class SurgeBaselines:
    def __init__(self, ratio: float, min_gap_s: float = 2.0) -> None:
        if not ratio > 0:
            raise ValueError(f"surge_ratio: expected a share > 0 (got {ratio})")
        if min_gap_s < 0:
            raise ValueError(f"min_gap_s: expected seconds >= 0 (got {min_gap_s})")
        self.ratio, self.min_gap_s = ratio, min_gap_s
        self.baseline: dict[Hashable, float] = {}
        self.last_ms: dict[Hashable, int] = {}
        self.previous: dict[Hashable, float] = {}  # the rate at the previous look

    def surged(self, job: Hashable, rate: float, now_ms: int) -> bool:
        """Whether ``rate`` (rows/s, at ``now_ms``) is a surge of ``job``; a surge becomes the baseline.

        A surge must also have *settled*: the previous look's rate within ``ratio`` below this one. The
        first look after a step sees the part of the probe's window before the step too (a 4× step read
        as 2.5×), and a scale-out sized for that blocks the right one for a cool-down interval (run 16 on
        the standalone cluster: 1 → 2 executors 1 s after the step, 2 → 4 only 13 s later)."""
        base, prev = self.baseline.get(job), self.previous.get(job)
        self.previous[job] = rate
        if base is None or rate < base:
            self.baseline[job] = rate
            return False
        last = self.last_ms.get(job)
        if (rate > base * (1.0 + self.ratio) and prev is not None and rate <= prev * (1.0 + self.ratio)
                and (last is None or now_ms - last >= self.min_gap_s * 1000)):
            self.baseline[job], self.last_ms[job] = rate, now_ms
            return True
        return False

    def forget(self, keep) -> None:
        """Drop the jobs not in ``keep`` (no longer governed or probed)."""
        for job in set(self.baseline) - set(keep):
            del self.baseline[job]
            self.last_ms.pop(job, None)
            self.previous.pop(job, None)
