"""Dynamic batch sizing by fixed-point iteration (Das, Zhong, Stoica, Shenker, UCB/EECS-2014-133).

Pure code over plain numbers (no Spark, Flask or SQL). Units: intervals and processing times in
**seconds** (floats); the grid (100 ms for the paper's rule, 20 ms for the default variant) is
handled in integer milliseconds.

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
* the grid (§4: 100 ms; 20 ms in the default variant, below): intervals are rounded **up** (``ceil``) by default, so rounding never eats
  into the ρ slack (paper silent on direction; digest §7.4 / oracle §6.6); ``nearest`` and ``none``
  are available for analysis. Equality of intervals is compared in integer milliseconds after
  rounding; unrounded intervals are compared exactly (Algorithm 1 literally);
* ``[min_interval_s, max_interval_s]`` bounds (paper has none; digest §7.6: default cap 30 s) and an
  ``overloaded`` flag when the interval sits at the cap while the last batch was unstable for
  ``overload_decisions`` decisions in a row (no Type-I intersection, §3.5). Load is never shed here.
* Noise and rate steps: no smoothing, no rate normalization (digest §7.8); with the paper's rule the
  false Type-II after a rate step (oracle §6.7) therefore happens exactly as in the paper.

**The default: the noise-adaptive variant** (``slack="adaptive"``; ours, not the paper's). The
paper's literal rule stays available as ``slack="paper"`` (alias ``"fixed"``: ρ as configured, the
100 ms grid, Algorithm 1 untouched); the digest's worked examples (oracle tests) select it
explicitly. Why the variant is the default: at ρ = 0.7 the paper's rule pays for its slack with a
mean latency 1.2–1.8× the best static interval chosen in hindsight on the bench's workloads at every
noise level (``bench batch-sizing``, seeds 0–29, noise 0–0.2), while the variant stays within
1.15× of it with at most 5 unstable batches after a 2× rate step. What the variant changes, each a
decision where the paper is silent:

* **Slack from the measured noise.** The slack ρ exists to absorb variation of the processing time
  (§3.3.1). Over the last ``noise_window`` (10) completed batches, ``cv`` = the residual standard
  deviation of p around a least-squares line p ≈ α + β·x (a constant when all x are equal),
  relative to the mean p (``noise_cv``); then ρ = clamp(1 / (1 + z·cv), ρ_floor, ρ_max) with
  z = ``noise_z`` = 1.25, ρ_floor = the configured ``rho`` (0.7) and ρ_max = 0.93. z = 1.25 and
  ρ_max = 0.93 were chosen on the bench (seeds 0–29, noise 0/0.05/0.1/0.2): z = 2 (the first
  version) or ρ_max = 0.9 cost up to 1.33× the best static interval at noise 0.2 (the queueing a
  10–20 % overrun causes is cheap next to a longer interval); z = 1 or ρ_max = 0.95 let more
  batches overrun after a rate step (6). Fewer than 4 batches: ρ_floor.
* **A 20 ms grid** (``granularity_ms``; the paper's 100 ms is Spark Streaming's block interval, §4,
  which a paced Structured Streaming source does not have). With ceil rounding every grid point in
  [x*, x* + g·ρ/(ρ − ω')) is a fixed point of the rounded map x ↦ ceil_g(ω(x)/ρ) (x* the exact
  fixed point, ω' the slope there), and an iteration that comes from above (after slow start's
  overshoot or a rate drop) stops at the top of that band: with g = 100 ms and ω' near ρ that is
  2–3 grid steps above x*, which alone cost 1.21–1.25× the best static interval on two bench
  workloads. g = 20 ms makes the band 5× narrower.
* **Recovery with the floor slack.** When the last completed batch overran its interval by more than
  the measured noise (p > (1 + cv)·x), or the last two both overran (p > x), the decision uses
  ρ_floor: at ρ near 0.93 the fixed-point error shrinks only by ω'/ρ per iteration and every
  iteration waits one batch for its measurement (the control lag), so after a 2× rate step a high ρ
  alone left up to 11 batches unstable; ρ_floor overshoots upward once and the slack then narrows
  again with the noise estimate.
* **A noise margin on the Type-II test**: the larger interval's p/x must exceed the smaller's by the
  factor (1 + ``type2_noise_margin``·cv) (3·cv), so that noise does not fake superlinearity (the
  false-Type-II cascade of oracle §6.3 happens once per few dozen batches at 10 % noise otherwise).
  With no noise (cv = 0) the test is the paper's.
* **A growth cap while overrunning** (``growth_cap``, 3): when the last completed batch overran its
  interval (p > x), the next interval is at most ``growth_cap`` × the median interval of the last
  ``noise_window`` batches (``capped_growth``). Under heavy noise (lognormal shape 0.3–0.4) neither
  two-point Type-II test can tell a noisy batch from superlinear growth, and on a superlinear
  workload one overrun's fixed-point step p/ρ ran away: 0.38 s → 2.16 s → 4.14 s, whose batch took
  17 s (``bench batch-sizing``, superlinear-constant, noise 0.4, seed 9: 9.4× the best static
  interval). A 3× cap leaves noise 0–0.2 unchanged to 0.01× on every workload and seed 0–29 and
  lets a real rate step through in one or two decisions; 2× cost 1.21× on linear-constant at noise
  0.2. 0: off.

Algorithm 1 itself (fixed-point step, shrink, equal-interval rule) is unchanged in the variant; only
its ρ, its grid and the Type-II threshold vary, and its result is capped while batches overrun.

``PidRateEstimator`` is Spark Streaming's back-pressure ``PIDRateEstimator.compute`` (Spark ≥ 1.5,
defaults proportional 1.0, integral 0.2, derivative 0.0, min rate 100 rows/s), re-implemented: times
in **milliseconds** as in Spark, rates in rows per second.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field, replace
from typing import Optional, Sequence

RHO = 0.7
R_REDUCE = 0.25
GRANULARITY_MS = 100
ROUNDING_MODES = ("ceil", "nearest", "none")
#: slack modes: "adaptive" (the default variant), "paper" (Algorithm 1 with the configured ρ) and
#: its alias "fixed"
SLACK_MODES = ("adaptive", "paper", "fixed")
#: the grid of each slack mode when ``granularity_ms`` is not given (module docstring)
DEFAULT_GRID_MS = {"adaptive": 20, "paper": GRANULARITY_MS, "fixed": GRANULARITY_MS}
ADAPTIVE_RHO_MAX = 0.93
ADAPTIVE_NOISE_Z = 1.25
ADAPTIVE_NOISE_WINDOW = 10
ADAPTIVE_TYPE2_MARGIN = 3.0
ADAPTIVE_GROWTH_CAP = 3.0

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


def adaptive_rho(points: Sequence[Point], floor: float = RHO, ceiling: float = ADAPTIVE_RHO_MAX,
                 z: float = ADAPTIVE_NOISE_Z) -> float:
    """ρ = clamp(1 / (1 + z·cv), floor, ceiling) with ``cv = noise_cv(points)`` (module docstring,
    our extension); ``floor`` when cv is undefined."""
    cv = noise_cv(points)
    if cv is None:
        return floor
    return min(ceiling, max(floor, 1.0 / (1.0 + z * cv)))


def capped_growth(raw_s: float, points: Sequence[Point], cap: float) -> Optional[float]:
    """The growth cap of the adaptive variant (module docstring): when the last of ``points`` (interval
    s, processing s) overran its interval and ``raw_s`` exceeds ``cap`` × the median interval of
    ``points``, that bound (seconds); otherwise None (no cap, or ``cap`` 0)."""
    if cap <= 0 or not points:
        return None
    x_last, p_last = points[-1]
    if p_last <= x_last:
        return None
    limit = cap * statistics.median(x for x, _ in points)
    return limit if raw_s > limit else None


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


def next_interval(completed: Sequence[Point], rho: float = RHO, r: float = R_REDUCE,
                  type2_margin: float = 0.0) -> tuple[float, str]:
    """Algorithm 1 on the last two completed batches; returns (unrounded next interval s, branch).

    Branch names: ``fp1`` (one point), ``fp-equal`` (equal intervals), ``type2`` (shrink), ``fp``.
    ``type2_margin`` > 0 (the adaptive variant's noise margin, module docstring) requires
    ``p_large/x_large > (1 + type2_margin)·p_small/x_small``; 0 is the paper's test."""
    if not completed:
        raise ValueError("next_interval needs at least one completed batch")
    x_last, p_last = completed[-1]
    if len(completed) == 1:
        return p_last / rho, "fp1"
    x_prev, p_prev = completed[-2]
    # equal to floating-point noise counts as equal: at the fixed point (p = ρ·x) two intervals a few ulps
    # apart made the Type-II test a coin flip and shrank a settled interval by r (hypothesis found it:
    # a = 0.375, b = 0.359375, rounding none)
    if math.isclose(x_prev, x_last, rel_tol=1e-9, abs_tol=1e-12):
        return p_last / rho, "fp-equal"
    (x_s, p_s), (x_l, p_l) = sorted([(x_prev, p_prev), (x_last, p_last)])
    if p_l / x_l > (1 + type2_margin) * p_s / x_s and p_last > rho * x_last:
        return (1 - r) * x_s, "type2"
    return p_last / rho, "fp"


@dataclass(frozen=True)
class Decision:
    interval_s: float  # the next interval, rounded and bounded (s)
    raw_s: float  # Algorithm 1's value before rounding and bounds (s)
    branch: str  # slow-start | fp1 | fp-equal | fp | type2; "-capped" appended when growth_cap bound it
    overloaded: bool = False
    rho: float = RHO  # the slack factor this decision used
    recovering: bool = False  # adaptive variant: the floor ρ after an overrun (module docstring)
    cv: Optional[float] = None  # adaptive variant: the measured noise (None: too few batches)


@dataclass
class FixedPointController:
    """Algorithm 1 plus slow start, the grid and bounds (module docstring); by default the
    noise-adaptive variant, ``slack="paper"`` for the paper's literal rule. The only state is the
    overload streak; everything else is a function of the completed batches.

    ``granularity_ms`` None: 20 ms for the adaptive variant, 100 ms for the paper's rule."""

    rho: float = RHO
    r: float = R_REDUCE
    rounding: str = "ceil"
    granularity_ms: Optional[int] = None
    min_interval_s: float = 0.1
    max_interval_s: Optional[float] = 30.0
    x_start_s: float = 0.1
    slow_start_growth: float = 2.0
    overload_decisions: int = 3
    slack: str = "adaptive"  # "adaptive" (default) | "paper" (alias "fixed"): module docstring
    rho_max: float = ADAPTIVE_RHO_MAX
    noise_z: float = ADAPTIVE_NOISE_Z
    noise_window: int = ADAPTIVE_NOISE_WINDOW
    type2_noise_margin: float = ADAPTIVE_TYPE2_MARGIN
    recovery: bool = True
    growth_cap: float = ADAPTIVE_GROWTH_CAP
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
        if self.slack not in SLACK_MODES:
            raise ValueError(f"slack must be one of {SLACK_MODES}, got {self.slack!r}")
        if self.granularity_ms is None:
            self.granularity_ms = DEFAULT_GRID_MS[self.slack]
        if self.granularity_ms < 1:
            raise ValueError("granularity_ms must be >= 1")
        if self.adaptive and not (self.rho <= self.rho_max <= 1 and self.noise_z > 0
                                  and self.noise_window >= 4 and self.type2_noise_margin >= 0
                                  and (self.growth_cap == 0 or self.growth_cap >= 1)):
            raise ValueError("adaptive slack needs rho <= rho_max <= 1, noise_z > 0, noise_window >= 4, "
                             "type2_noise_margin >= 0, growth_cap 0 or >= 1")

    @property
    def adaptive(self) -> bool:
        return self.slack == "adaptive"

    def bound(self, x_s: float) -> float:
        x = round_interval(x_s, self.rounding, self.granularity_ms)
        x = max(x, self.min_interval_s)
        return x if self.max_interval_s is None else min(x, self.max_interval_s)

    def first_interval(self) -> float:
        return self.bound(self.x_start_s)

    @property
    def history(self) -> int:
        """How many completed batches a decision looks at (2 for the paper's rule)."""
        return max(2, self.noise_window) if self.adaptive else 2

    def slack_rho(self, points: Sequence[Point]) -> float:
        """The ρ of this decision: the configured one (paper), or the adaptive one over the last
        ``noise_window`` points (before the recovery rule)."""
        if not self.adaptive:
            return self.rho
        return adaptive_rho(points[-self.noise_window:], self.rho, self.rho_max, self.noise_z)

    def recovering(self, points: Sequence[Point], cv: Optional[float]) -> bool:
        """The adaptive variant's recovery rule (module docstring): the last batch overran its
        interval by more than the noise, or the last two both overran it."""
        if not (self.adaptive and self.recovery):
            return False
        x_last, p_last = points[-1]
        if p_last > (1.0 + (cv or 0.0)) * x_last:
            return True
        return len(points) >= 2 and all(p > x for x, p in points[-2:])

    def decide(self, completed: Sequence[Point], x_current_s: float) -> Decision:
        """The interval of the next batch, chosen at a batch boundary from the batches completed by
        then (``completed``, oldest first; only the last two matter for the paper's rule, the last
        ``noise_window`` for the adaptive one) and the interval just used (``x_current_s``)."""
        points = [(x, p) for x, p in completed if x > 0 and p > 0]  # digest §7.10
        if not points:
            raw = self.slow_start_growth * x_current_s
            return Decision(self.bound(raw), raw, "slow-start", rho=self.rho)
        cv, recovering, margin = None, False, 0.0
        if self.adaptive:
            cv = noise_cv(points[-self.noise_window:])
            recovering = self.recovering(points, cv)
            rho = self.rho if recovering else self.slack_rho(points)
            margin = self.type2_noise_margin * (cv or 0.0)
        else:
            rho = self.rho
        raw, branch = next_interval(points, rho, self.r, margin)
        if self.adaptive:
            limit = capped_growth(raw, points[-self.noise_window:], self.growth_cap)
            if limit is not None:
                raw, branch = limit, branch + "-capped"
        x = self.bound(raw)
        x_last, p_last = points[-1]
        capped = self.max_interval_s is not None and x >= self.max_interval_s
        self._overload_streak = self._overload_streak + 1 if capped and p_last > rho * x_last else 0
        return Decision(x, raw, branch, self._overload_streak >= self.overload_decisions, rho, recovering, cv)


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
