"""Policies for the ``batch_interval`` knob: Das et al.'s fixed-point controller and its baselines.

Directive values (what the job's applier receives, ``collectors.batch_interval``):

* ``fixed-point`` / ``static-interval``: the next micro-batch interval in **seconds** (a float on
  the 100 ms grid);
* ``fastest-trigger``: ``0.0`` — no pacing: Spark's default trigger, the next batch starts as soon
  as the previous one finished;
* ``pid-rate``: ``{"interval_s": x, "max_rows_per_second": r}`` — a fixed interval plus the rate
  limit of Spark Streaming's back-pressure PID estimator (``max_rows_per_second`` absent until
  the estimator has seen two batches). The paced source admits at most ``r·x`` rows per batch;
  the rest waits in the source (lossless).

**Which (interval, processing time) pairs the controller sees.** For each completed batch in
``JobView.batches`` (ordered by batch id): processing time ``p`` = ``processing_s`` (Spark's
``triggerExecution``: the paced source answers ``latestOffset`` at once when its boundary has
passed, so no gate wait is in it); interval ``x`` = ``interval_s``, the arrival-time span the
paced source reports in its end offset, or — for other sources, paced by a ``processingTime``
trigger — the gap between this batch's trigger start and the previous one (the span of data the
batch read; after a supervised restart that gap includes the restart, so its cost is counted in
``x`` and in the latency this policy reports). Measured gaps are snapped to the controller's grid
(to the nearest step) so the equal-interval rule can apply to them; reported intervals are exact.

**Defaults.** ``fixed-point`` runs the noise-adaptive variant of ``policies.batch_sizing`` by
default (measured slack between ``rho`` = 0.7 and ``rho_max`` = 0.93, 20 ms grid, recovery with the
floor slack after an overrun, a noise margin on the Type-II test, a growth cap while batches
overrun); ``{"slack": "paper"}`` is the paper's literal rule (ρ = 0.7 fixed, 100 ms grid,
Algorithm 1). Why, with the numbers: the module docstring of ``policies.batch_sizing``.

**Decision timing.** Algorithm 1 is called at each batch boundary in the paper; here it runs at
every evaluation of the control plane on the last two batches completed by then, so the decision
changes only when a batch completed (the guard drops an unchanged value). Slow start happens in
the paced source itself (it doubles its interval from 100 ms until the first directive arrives),
because the control plane has no batch to look at before the first one completes.
"""
from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field, model_validator

from spark_governor.policies.base import BatchStats, JobView, Policy, Proposal
from spark_governor.policies.batch_sizing import (ADAPTIVE_GROWTH_CAP, ADAPTIVE_NOISE_WINDOW, ADAPTIVE_NOISE_Z,
                                                  ADAPTIVE_RHO_MAX, ADAPTIVE_TYPE2_MARGIN, DEFAULT_GRID_MS,
                                                  GRANULARITY_MS, FixedPointController, PidRateEstimator, R_REDUCE, RHO,
                                                  ROUNDING_MODES, round_interval)
from spark_governor.policies.safety import SafetyConfig

KNOB = "batch_interval"


def completed_points(batches: tuple[BatchStats, ...], snap: bool = True,
                     grid_ms: int = GRANULARITY_MS) -> list[tuple[float, float]]:
    """(interval s, processing s) of the completed batches, oldest first (module docstring);
    measured gaps are snapped to the ``grid_ms`` grid."""
    ordered = sorted(batches, key=lambda b: b.batch_id)
    points = []
    for prev, b in zip([None, *ordered], ordered):
        x = b.interval_s
        if x is None and prev is not None and prev.batch_id == b.batch_id - 1:
            gap = (b.trigger_ms - prev.trigger_ms) / 1000.0
            x = round_interval(gap, "nearest", grid_ms) if snap else gap
        if x is not None and x > 0 and b.processing_s > 0:
            points.append((x, b.processing_s))
    return points


class IntervalConfig(SafetyConfig):
    """Bounds of the interval (``min_value``/``max_value``, seconds); no cool-downs by default:
    the controller decides once per completed batch."""

    min_value: Optional[float] = Field(0.1, ge=0, description="Smallest interval (s); the grid's 100 ms at least")
    max_value: Optional[float] = Field(30.0, gt=0, description="Largest interval (s); the paper has none (digest §7.6)")
    cooldown_intervals_after_up: int = Field(0, ge=0, description="No decrease within this many evaluation intervals after an increase")
    cooldown_intervals_after_any: int = Field(0, ge=0, description="No change within this many evaluation intervals after any change")
    actuator: Literal["gate", "restart"] = Field(
        "gate", description="gate: a paced source applies the interval live; restart: the query is restarted "
                            "with a processingTime trigger (collectors.supervisor), so changes are spaced")
    restart_min_spacing_s: float = Field(30.0, ge=0, description="With actuator=restart: no new interval "
                                                                 "within this many seconds of the last decision")

    def spaced_out(self, view: JobView) -> bool:
        last = view.last_decision_ms.get(KNOB)
        return (self.actuator == "restart" and last is not None
                and view.now_ms - last < self.restart_min_spacing_s * 1000)


class FixedPointConfig(IntervalConfig):
    slack: Literal["adaptive", "paper", "fixed"] = Field(
        "adaptive", description="adaptive (default; our variant, policies.batch_sizing): ρ = clamp(1/(1 + "
                                "noise_z·cv), rho, rho_max) from the processing-time variation of the last "
                                "noise_window batches, 20 ms grid, floor ρ after an overrun, noise margin on the "
                                "Type-II test; paper (alias fixed): Algorithm 1 with ρ = rho on the 100 ms grid")
    rho: float = Field(RHO, gt=0, le=1, description="Slack factor ρ: target p = ρ·x (§3.3.1); with slack=adaptive "
                                                    "the smallest ρ (used while recovering from an overrun)")
    r: float = Field(R_REDUCE, gt=0, lt=1, description="Type-II reduction factor r (§3.3.3)")
    rounding: Literal["ceil", "nearest", "none"] = Field("ceil", description=f"The grid: one of {ROUNDING_MODES}")
    grid_ms: Optional[int] = Field(None, ge=1, le=1000, description="Interval grid (ms); default 20 with "
                                                                    "slack=adaptive, 100 (the paper's, §4) with paper")
    overload_decisions: int = Field(3, ge=1, description="Batches in a row at max_value with p > ρ·x before "
                                                         "the job is reported overloaded (no Type-I, §3.5)")
    rho_max: float = Field(ADAPTIVE_RHO_MAX, gt=0, le=1, description="With slack=adaptive: the largest ρ")
    noise_z: float = Field(ADAPTIVE_NOISE_Z, gt=0, description="With slack=adaptive: headroom in standard "
                                                               "deviations of p")
    noise_window: int = Field(ADAPTIVE_NOISE_WINDOW, ge=4, le=500, description="With slack=adaptive: batches the "
                                                                               "variation is measured over")
    type2_noise_margin: float = Field(ADAPTIVE_TYPE2_MARGIN, ge=0, description="With slack=adaptive: the Type-II "
                                      "test needs p/x of the larger interval above (1 + margin·cv)× the smaller's")
    recovery: bool = Field(True, description="With slack=adaptive: use rho (the floor) after an overrun beyond "
                                             "the noise or two overruns in a row")
    growth_cap: float = Field(ADAPTIVE_GROWTH_CAP, ge=0, description="With slack=adaptive: after an overrun the next "
                              "interval is at most this many times the median interval of the last noise_window "
                              "batches (a noisy superlinear job does not run away); 0: off, else at least 1")

    @model_validator(mode="after")
    def _bounds(self):
        if self.min_value is not None and self.max_value is not None and self.min_value > self.max_value:
            raise ValueError("min_value must not exceed max_value")
        if self.slack == "adaptive" and self.rho_max < self.rho:
            raise ValueError("rho_max must not be below rho")
        if 0 < self.growth_cap < 1:
            raise ValueError("growth_cap must be 0 (off) or at least 1")
        return self

    @property
    def grid(self) -> int:
        return self.grid_ms or DEFAULT_GRID_MS[self.slack]

    def controller(self) -> FixedPointController:
        return FixedPointController(rho=self.rho, r=self.r, rounding=self.rounding, granularity_ms=self.grid,
                                    min_interval_s=max(self.min_value or 0.1, 0.1), max_interval_s=self.max_value,
                                    overload_decisions=self.overload_decisions, slack=self.slack,
                                    rho_max=self.rho_max, noise_z=self.noise_z, noise_window=self.noise_window,
                                    type2_noise_margin=self.type2_noise_margin, recovery=self.recovery,
                                    growth_cap=self.growth_cap)


class FixedPointPolicy(Policy):
    name = "fixed-point"
    knobs = (KNOB,)
    Config = FixedPointConfig
    description = ("Das et al. dynamic batch sizing: fixed-point iteration x = p/ρ with the Type-II shrink "
                   "(Algorithm 1); by default with a slack measured from the noise (slack=paper: the literal rule)")

    def evaluate(self, view: JobView, config: FixedPointConfig) -> list[Proposal]:
        points = completed_points(view.batches, snap=config.rounding != "none", grid_ms=config.grid)
        if not points or config.spaced_out(view):
            return []
        ctl = config.controller()
        current = view.current(KNOB)
        x_now = current if isinstance(current, (int, float)) and current > 0 else points[-1][0]
        d = ctl.decide(points[-ctl.history:], x_now)
        x_last, p_last = points[-1]
        tail = points[-config.overload_decisions:]
        overloaded = (len(tail) == config.overload_decisions and config.max_value is not None
                      and all(x >= config.max_value and p > d.rho * x for x, p in tail))
        last = max(view.batches, key=lambda b: b.batch_id)
        inputs = {"batch_id": last.batch_id,  # the completed batch the decision was made on
                  "x_last_s": x_last, "p_last_s": p_last, "branch": d.branch, "raw_s": d.raw_s, "rho": d.rho,
                  "latency_s": x_last + (last.queueing_s or 0.0) + p_last, "overloaded": overloaded,
                  "slack": "paper" if config.slack == "fixed" else config.slack}
        if config.slack == "adaptive":
            inputs.update(cv=d.cv, recovering=d.recovering)
        if len(points) > 1:
            inputs.update(x_prev_s=points[-2][0], p_prev_s=points[-2][1])
        reason = f"{d.branch}: x={x_last:g}s p={p_last:.3f}s -> {d.interval_s:g}s"
        if config.slack == "adaptive":
            reason += f" (adaptive rho={d.rho:.3f}" + (", recovering" if d.recovering else "") + ")"
        if overloaded:
            reason += " (overloaded: no interval up to max_value is stable)"
        return [Proposal(KNOB, d.interval_s, reason, inputs)]


class StaticIntervalConfig(IntervalConfig):
    interval_s: float = Field(..., gt=0, description="The fixed micro-batch interval (s)")


class StaticIntervalPolicy(Policy):
    name = "static-interval"
    knobs = (KNOB,)
    Config = StaticIntervalConfig
    description = "Baseline: one fixed micro-batch interval"

    def evaluate(self, view: JobView, config: StaticIntervalConfig) -> list[Proposal]:
        return [Proposal(KNOB, float(config.interval_s), f"static interval {config.interval_s:g}s")]


class FastestConfig(IntervalConfig):
    min_value: Optional[float] = Field(None, description="Unused: the value is always 0 (no pacing)")


class FastestTriggerPolicy(Policy):
    name = "fastest-trigger"
    knobs = (KNOB,)
    Config = FastestConfig
    description = "Baseline: Spark's default trigger, each batch as soon as the previous one finished (value 0)"

    def evaluate(self, view: JobView, config: FastestConfig) -> list[Proposal]:
        return [Proposal(KNOB, 0.0, "as fast as possible (default trigger)")]


class PidRateConfig(IntervalConfig):
    min_value: Optional[float] = Field(None, description="Unused: the value is a dict")
    interval_s: float = Field(1.0, gt=0, description="The fixed batch interval the PID estimator assumes (s)")
    proportional: float = Field(1.0, ge=0, description="spark.streaming.backpressure.pid.proportional")
    integral: float = Field(0.2, ge=0, description="spark.streaming.backpressure.pid.integral")
    derivative: float = Field(0.0, ge=0, description="spark.streaming.backpressure.pid.derived")
    min_rate: float = Field(100.0, gt=0, description="spark.streaming.backpressure.pid.minRate (rows/s)")


class PidRatePolicy(Policy):
    name = "pid-rate"
    knobs = (KNOB,)
    Config = PidRateConfig
    description = "Baseline: Spark Streaming back-pressure PID rate estimator as a rate limit at a fixed interval"

    def evaluate(self, view: JobView, config: PidRateConfig) -> list[Proposal]:
        """Replays the estimator over the batches in the view (at most the latest 500 of the last
        hour, oldest first), as Spark calls it once per completed batch; the scheduling delay is the
        paced source's queueing (0 when unknown)."""
        pid = PidRateEstimator(config.interval_s * 1000.0, config.proportional, config.integral,
                               config.derivative, config.min_rate)
        rate = None
        for b in sorted(view.batches, key=lambda b: b.batch_id):
            new = pid.compute(b.trigger_ms, b.num_input_rows, b.processing_s * 1000.0, (b.queueing_s or 0.0) * 1000.0)
            if new is not None:
                rate = new
        value = {"interval_s": float(config.interval_s)}
        if rate is not None:
            value["max_rows_per_second"] = round(rate, 1)
        return [Proposal(KNOB, value, f"PID rate limit {value.get('max_rows_per_second', 'none')} rows/s "
                                      f"at {config.interval_s:g}s", {"batches": len(view.batches)})]
