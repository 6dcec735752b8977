"""Dynamic batch sizing by fixed-point iteration (Das, Zhong, Stoica, Shenker, UCB/EECS-2014-133).

Pure code over plain numbers (no Spark, Flask or SQL). Units: intervals and processing times in
**seconds** (floats); the 100 ms grid is handled in integer milliseconds.

``next_interval`` is Algorithm 1 (§3.3.4) exactly, on the (interval, processing time) pairs of the
last two *completed* batches, in completion order:

* Type-II test (§3.3.3): with ``x_small``/``x_large`` the smaller/larger of the two intervals,
  ``p_large/x_large > p_small/x_small`` **and** ``p_last > ρ·x_last`` (condition (b) on the last
  batch only, as Algorithm 1; digest §7.15) → shrink to ``(1 − r)·x_small``;
* otherwise fixed-point iteration ``x_next = p_last / ρ`` (§3.3.2);
* equal intervals (the Type-II test is undefined) → fixed-point iteration (§3.3.4, "finer details");
* a single completed batch → fixed-point iteration on it (paper silent; digest §7.2).

``FixedPointController.decide`` adds what the paper describes around it:

* slow start (§3.3.4): until the first batch completes, double the interval at every boundary,
  starting from ``x_start_s`` = 100 ms (paper gives no numbers; digest §7.3: 100 ms, ×2);
* the 100 ms grid (§4): intervals are rounded **up** (``ceil``) by default, so rounding never eats
  into the ρ slack (paper silent on direction; digest §7.4 / oracle §6.6); ``nearest`` and ``none``
  are available for analysis. Equality of intervals is compared in integer milliseconds after
  rounding; unrounded intervals are compared exactly (Algorithm 1 literally);
* ``[min_interval_s, max_interval_s]`` bounds (paper has none; digest §7.6: default cap 30 s) and an
  ``overloaded`` flag when the interval sits at the cap while the last batch was unstable for
  ``overload_decisions`` decisions in a row (no Type-I intersection, §3.5). Load is never shed here.
* Noise and rate steps: no smoothing, no rate normalization (digest §7.8, faithful default); the
  false Type-II after a rate step (oracle §6.7) therefore happens exactly as in the paper.

**Extension, off by default: noise-adaptive slack** (``slack="adaptive"``; ours, not the paper's).
The slack ρ exists to absorb variation of the processing time (§3.3.1), and ρ = 0.7 pays for it
with a latency 1.21–1.70× the best static interval's even without noise (digest §5). The adaptive
mode sizes the slack from the variation actually seen: over the last ``noise_window`` completed
batches, the residual standard deviation of p around a least-squares line p ≈ α + β·x (a constant
when all x are equal), relative to the mean p — ``cv``; then ρ = clamp(1 / (1 + z·cv), ρ, ρ_max)
with z = ``noise_z`` (2: a processing time two standard deviations above the mean still fits in
the interval; 3 is more cautious and costs 2–10 % more latency in the benchmark). The
configured ρ is the floor (fewer than 4 batches, or high variation, gives exactly Algorithm 1 with
ρ), ρ_max = 0.9 the ceiling. Algorithm 1 itself is unchanged; only its ρ varies. Rate changes show
up as residual variation, so the slack widens when the rate moves and narrows when it is steady.

``PidRateEstimator`` is Spark Streaming's back-pressure ``PIDRateEstimator.compute`` (Spark ≥ 1.5,
defaults proportional 1.0, integral 0.2, derivative 0.0, min rate 100 rows/s), re-implemented: times
in **milliseconds** as in Spark, rates in rows per second.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Optional, Sequence

RHO = 0.7
R_REDUCE = 0.25
GRANULARITY_MS = 100
ROUNDING_MODES = ("ceil", "nearest", "none")

#: a completed batch for the controller: (interval_s, processing_s)
Point = tuple[float, float]


def noise_cv(points: Sequence[Point]) -> Optional[float]:
    """Relative residual standard deviation of processing time (dimensionless) over ``points``:
    residuals of p around a least-squares line p ≈ α + β·x (around the mean p when every x is
    equal), with n − 2 (n − 1) degrees of freedom, divided by the mean p. None with fewer than 4
    points (3 when every x is equal) or a non-positive mean."""
    import numpy as np

    x = np.array([pt[0] for pt in points], dtype=float)
    p = np.array([pt[1] for pt in points], dtype=float)
    constant = x.size > 0 and np.ptp(x) == 0
    dof = x.size - (1 if constant else 2)
    if dof < 2 or p.mean() <= 0:
        return None
    resid = p - p.mean()
    if not constant:  # least squares p ≈ α + β·x in closed form
        dx = x - x.mean()
        resid = resid - (dx @ resid) / (dx @ dx) * dx
    return float(np.sqrt((resid ** 2).sum() / dof) / p.mean())


def adaptive_rho(points: Sequence[Point], floor: float = RHO, ceiling: float = 0.9, z: float = 2.0) -> float:
    """ρ = clamp(1 / (1 + z·cv), floor, ceiling) with ``cv = noise_cv(points)`` (module docstring,
    our extension); ``floor`` when cv is undefined."""
    cv = noise_cv(points)
    if cv is None:
        return floor
    return min(ceiling, max(floor, 1.0 / (1.0 + z * cv)))


def round_interval(x_s: float, mode: str = "ceil", granularity_ms: int = GRANULARITY_MS) -> float:
    """``x_s`` on the grid (seconds). ``ceil``: ``ceil(x·1000/g − 1e-9)·g`` (the epsilon keeps
    0.7/0.7 = 1.0000000000000002 at 1.0, digest §6.6); ``nearest``: half up; ``none``: unchanged.
    Never below one grid step."""
    if mode == "none":
        return x_s
    steps = x_s * 1000.0 / granularity_ms
    if mode == "ceil":
        n = math.ceil(steps - 1e-9)
    elif mode == "nearest":
        n = math.floor(steps + 0.5)
    else:
        raise ValueError(f"rounding must be one of {ROUNDING_MODES}, got {mode!r}")
    return max(1, n) * granularity_ms / 1000.0


def next_interval(completed: Sequence[Point], rho: float = RHO, r: float = R_REDUCE) -> tuple[float, str]:
    """Algorithm 1 on the last two completed batches; returns (unrounded next interval s, branch).

    Branch names: ``fp1`` (one point), ``fp-equal`` (equal intervals), ``type2`` (shrink), ``fp``."""
    if not completed:
        raise ValueError("next_interval needs at least one completed batch")
    x_last, p_last = completed[-1]
    if len(completed) == 1:
        return p_last / rho, "fp1"
    x_prev, p_prev = completed[-2]
    if x_prev == x_last:
        return p_last / rho, "fp-equal"
    (x_s, p_s), (x_l, p_l) = sorted([(x_prev, p_prev), (x_last, p_last)])
    if p_l / x_l > p_s / x_s and p_last > rho * x_last:
        return (1 - r) * x_s, "type2"
    return p_last / rho, "fp"


@dataclass(frozen=True)
class Decision:
    interval_s: float  # the next interval, rounded and bounded (s)
    raw_s: float  # Algorithm 1's value before rounding and bounds (s)
    branch: str  # slow-start | fp1 | fp-equal | fp | type2
    overloaded: bool = False
    rho: float = RHO  # the slack factor this decision used


@dataclass
class FixedPointController:
    """Algorithm 1 plus slow start, the 100 ms grid and bounds (module docstring). The only state
    is the overload streak; everything else is a function of the completed batches."""

    rho: float = RHO
    r: float = R_REDUCE
    rounding: str = "ceil"
    granularity_ms: int = GRANULARITY_MS
    min_interval_s: float = 0.1
    max_interval_s: Optional[float] = 30.0
    x_start_s: float = 0.1
    slow_start_growth: float = 2.0
    overload_decisions: int = 3
    slack: str = "fixed"  # "fixed": ρ as configured (the paper); "adaptive": see module docstring
    rho_max: float = 0.9
    noise_z: float = 2.0
    noise_window: int = 10
    _overload_streak: int = field(default=0, repr=False)

    def __post_init__(self) -> None:
        if not 0 < self.rho <= 1:
            raise ValueError(f"rho must be in (0, 1], got {self.rho}")
        if not 0 < self.r < 1:
            raise ValueError(f"r must be in (0, 1), got {self.r}")
        if self.rounding not in ROUNDING_MODES:
            raise ValueError(f"rounding must be one of {ROUNDING_MODES}, got {self.rounding!r}")
        if self.min_interval_s <= 0 or (self.max_interval_s is not None and self.max_interval_s < self.min_interval_s):
            raise ValueError("need 0 < min_interval_s <= max_interval_s")
        if self.slow_start_growth <= 1:
            raise ValueError("slow_start_growth must be > 1")
        if self.slack not in ("fixed", "adaptive"):
            raise ValueError(f"slack must be 'fixed' or 'adaptive', got {self.slack!r}")
        if self.slack == "adaptive" and not (self.rho <= self.rho_max <= 1 and self.noise_z > 0
                                             and self.noise_window >= 4):
            raise ValueError("adaptive slack needs rho <= rho_max <= 1, noise_z > 0, noise_window >= 4")

    def bound(self, x_s: float) -> float:
        x = round_interval(x_s, self.rounding, self.granularity_ms)
        x = max(x, self.min_interval_s)
        return x if self.max_interval_s is None else min(x, self.max_interval_s)

    def first_interval(self) -> float:
        return self.bound(self.x_start_s)

    def slack_rho(self, points: Sequence[Point]) -> float:
        """The ρ of this decision: the configured one, or the adaptive one over the last
        ``noise_window`` points."""
        if self.slack == "fixed":
            return self.rho
        return adaptive_rho(points[-self.noise_window:], self.rho, self.rho_max, self.noise_z)

    def decide(self, completed: Sequence[Point], x_current_s: float) -> Decision:
        """The interval of the next batch, chosen at a batch boundary from the batches completed by
        then (``completed``, oldest first; only the last two matter unless the slack is adaptive)
        and the interval just used (``x_current_s``)."""
        points = [(x, p) for x, p in completed if x > 0 and p > 0]  # digest §7.10
        if not points:
            raw = self.slow_start_growth * x_current_s
            return Decision(self.bound(raw), raw, "slow-start", rho=self.rho)
        rho = self.slack_rho(points)
        raw, branch = next_interval(points, rho, self.r)
        x = self.bound(raw)
        x_last, p_last = points[-1]
        capped = self.max_interval_s is not None and x >= self.max_interval_s
        self._overload_streak = self._overload_streak + 1 if capped and p_last > rho * x_last else 0
        return Decision(x, raw, branch, self._overload_streak >= self.overload_decisions, rho)


@dataclass(frozen=True)
class PidState:
    latest_time_ms: int = -1
    latest_rate: float = -1.0
    latest_error: float = -1.0
    first_run: bool = True


@dataclass
class PidRateEstimator:
    """Spark's ``PIDRateEstimator`` (``org.apache.spark.streaming.scheduler.rate``), same formula.

    ``batch_interval_ms``: the (fixed) batch interval; ``compute`` is called once per completed
    batch with the batch time (ms), its rows, processing delay (ms) and scheduling delay (ms) and
    returns the new rate limit in rows/s, or None (first run, or nothing to learn from)."""

    batch_interval_ms: float
    proportional: float = 1.0
    integral: float = 0.2
    derivative: float = 0.0
    min_rate: float = 100.0
    state: PidState = field(default_factory=PidState)

    def __post_init__(self) -> None:
        if self.batch_interval_ms <= 0:
            raise ValueError("batch_interval_ms must be > 0")
        if self.proportional < 0 or self.integral < 0 or self.derivative < 0 or self.min_rate <= 0:
            raise ValueError("PID gains must be >= 0 and min_rate > 0")

    def compute(self, time_ms: int, num_elements: int, processing_delay_ms: float,
                scheduling_delay_ms: float) -> Optional[float]:
        s = self.state
        if not (time_ms > s.latest_time_ms and num_elements > 0 and processing_delay_ms > 0):
            return None
        delay_since_update_s = (time_ms - s.latest_time_ms) / 1000.0
        processing_rate = num_elements / processing_delay_ms * 1000.0
        error = s.latest_rate - processing_rate
        historical_error = scheduling_delay_ms * processing_rate / self.batch_interval_ms
        d_error = (error - s.latest_error) / delay_since_update_s
        new_rate = max(s.latest_rate - self.proportional * error - self.integral * historical_error
                       - self.derivative * d_error, self.min_rate)
        if s.first_run:
            self.state = PidState(time_ms, processing_rate, 0.0, False)
            return None
        self.state = replace(s, latest_time_ms=time_ms, latest_rate=new_rate, latest_error=error)
        return new_rate
