"""Threshold scaling of executors: Spark Streaming's DStream rule, and a utilization variant.

``threshold`` re-implements the rule of Spark Streaming's dynamic allocation for DStreams
(``org.apache.spark.streaming.scheduler.ExecutorAllocationManager``), applied to Structured
Streaming micro-batches: every scaling interval (default 60 s),
``ratio = mean batch processing time / trigger interval``; ``ratio ≥ 0.9`` → add
``max(round(ratio), 1)`` executors; ``ratio ≤ 0.3`` → remove one; within min/max executors.

How it relates to Spark's built-in ``spark.dynamicAllocation`` (core): that one adds executors
when tasks have been *backlogged* for ``schedulerBacklogTimeout`` and removes executors *idle*
for ``executorIdleTimeout``. A micro-batch job is idle between triggers and backlogged only while
a batch runs, so it oscillates or never scales; it does not see that batches overrun their
trigger interval. This rule looks at exactly that.

Where Spark is silent for Structured Streaming: the trigger interval is not in the progress, so
it is configured (``trigger_interval_s``) or inferred as the median gap between consecutive
trigger starts; processing time is ``durationMs.triggerExecution``. The prediction assumes
processing time scales inversely with executors (ratio' = ratio · n / n').

**Between batches** (``in_flight``, on by default; ``policies.in_flight``): Spark's rule averages
the batches *completed* in a scaling interval, so it never scales while no batch completes — a
batch running far past its interval is invisible until it ends. Here, before the rule, the work
in flight is checked: when no batch has completed for a whole scaling interval because one is
still running (its age exceeds ``scaling_interval_s`` and ``scale_up_ratio`` × the trigger
interval: the query's own trigger as the reporter reads it, or ``trigger_interval_s``), its age is
a lower bound on its processing time, so the ratio is at least age / interval and the rule adds
``max(round(ratio), 1)`` executors at once; a backlog growing by ``backlog_growth_ratio`` seconds
of work per second adds ``max(round(1 + growth), 1)``. A batch that completes within the scaling
interval is left to the rule (a slow batch right after a scale-down, while an executor's state
moves, would otherwise flip the decision back at once). Still one decision per scaling interval;
never for an idle query.

``utilization-threshold`` scales on the highest template-vertex utilization (busy slot time /
(parallelism · window)): above ``high`` → grow so that it would fall to the middle of the band;
below ``low`` in each of the last ``consecutive`` statistics windows → remove one executor
(hysteresis: the band [low, high] is dead, and scale-down needs consecutive low windows).

Both keep a decision's current value, reason and direction in agreement: the new value is kept
within the config's bounds, and a rule whose bounded value does not move the knob its way ("add"
at the maximum, "remove" at or below the minimum) makes no decision. In local mode
(``JobView.local_slots``) they count task slots and say that the knob is not actuatable.
"""
from __future__ import annotations

import math
import statistics
from typing import Optional

from pydantic import Field, model_validator

from spark_governor.policies import in_flight
from spark_governor.policies.base import JobView, Policy, Proposal
from spark_governor.policies.safety import SafetyConfig, cooldown_s, within_bounds


def trigger_interval_s(view: JobView, configured: Optional[float]) -> Optional[float]:
    """The trigger interval: configured, else the median gap between trigger starts (s)."""
    if configured:
        return configured
    starts = sorted(b.trigger_ms for b in view.batches)
    gaps = [(b - a) / 1000.0 for a, b in zip(starts, starts[1:]) if b > a]
    return statistics.median(gaps) if gaps else None


def _bounded_proposal(view: JobView, cfg: SafetyConfig, current: int, wanted: int, rule: str, verb: str,
                      inputs: dict, prediction) -> list[Proposal]:
    """The proposal of a rule that wants to ``verb`` ("add" or "remove") executors: ``wanted`` kept
    within the config's bounds, and none at all when the bounds leave no move in the rule's direction
    (a decision's current value, reason and direction agree, and a decision changes something).
    ``prediction(new)`` gives the predicted quantities at the new value."""
    new = int(within_bounds(wanted, cfg))
    step = new - current
    if step == 0 or (step > 0) != (verb == "add"):
        return []
    reason = f"{rule}: {verb} {abs(step)} ({current} → {new} {view.executor_unit})"
    if new != wanted:
        reason += f" [bounded: {wanted} is outside [{_fmt(cfg.min_value)}, {_fmt(cfg.max_value)}]]"
    return [Proposal("executors", new, reason + view.local_mode_note(), inputs, prediction(new))]


def _fmt(bound) -> str:
    return "-" if bound is None else f"{bound:g}"


class ThresholdConfig(SafetyConfig):
    scaling_interval_s: float = Field(60.0, gt=0, description="Window of batches the ratio is computed over")
    scale_up_ratio: float = Field(0.9, gt=0, description="Add executors when processing/interval ≥ this")
    scale_down_ratio: float = Field(0.3, ge=0, description="Remove one executor when processing/interval ≤ this")
    trigger_interval_s: Optional[float] = Field(None, gt=0, description="Trigger interval; inferred when unset")
    min_batches: int = Field(1, ge=1, description="Completed batches needed to decide")
    in_flight: bool = Field(True, description="Scale out at once on a batch running past scale_up_ratio × the "
                                              "trigger interval (or a latency bound), or a growing backlog, "
                                              "without waiting for it to complete")
    backlog_growth_ratio: float = Field(0.05, gt=0, description="A backlog growing by this many seconds of work "
                                                                "per second is scaled out (with in_flight)")
    backlog_projected: bool = Field(False, description="A growing backlog is scaled out only when, projected over "
                                                       "the provisioning delay and a batch period, it would carry "
                                                       "the batch time past scale_up_ratio × the trigger interval "
                                                       "(policies.in_flight); false (default): any growth of "
                                                       "backlog_growth_ratio, which kept more spans of a 4x step in "
                                                       "the calibrated simulator (Kingman's default is true)")

    @model_validator(mode="after")
    def _ordered(self):
        if self.scale_down_ratio >= self.scale_up_ratio:
            raise ValueError("scale_down_ratio must be below scale_up_ratio")
        return self


class ThresholdPolicy(Policy):
    name = "threshold"
    knobs = ("executors",)
    Config = ThresholdConfig
    description = "Spark Streaming's dynamic-allocation rule on batch processing time / trigger interval"

    def _ratio(self, view: JobView, cfg: ThresholdConfig) -> tuple[Optional[float], dict]:
        # batches *completed* in the last scaling interval and after the last decision (Spark
        # averages the batches completed since its previous scaling evaluation); when a batch
        # overran the whole interval, the latest one completed after the last decision
        last = view.last_decision_ms.get("executors", 0)
        since = max(view.now_ms - int(cfg.scaling_interval_s * 1000), last)
        done = [b for b in view.batches if b.trigger_ms + b.processing_s * 1000 <= view.now_ms]
        recent = [b for b in done if b.trigger_ms + b.processing_s * 1000 > since]
        if not recent and done and done[-1].trigger_ms + done[-1].processing_s * 1000 > last:
            recent = done[-1:]
        interval = trigger_interval_s(view, cfg.trigger_interval_s)
        if len(recent) < cfg.min_batches or not interval:
            return None, {"batches": len(recent), "trigger_interval_s": interval}
        mean_processing = statistics.fmean(b.processing_s for b in recent)
        return mean_processing / interval, {"batches": len(recent), "trigger_interval_s": interval,
                                            "mean_processing_s": mean_processing}

    def evaluate(self, view: JobView, config: ThresholdConfig) -> list[Proposal]:
        last = view.last_decision_ms.get("executors")
        if last is not None and view.now_ms - last < cooldown_s(1, config.scaling_interval_s) * 1000:
            # one decision per scaling interval, as Spark's ExecutorAllocationManager on its timer; the
            # evaluation one interval after a decision may act whatever its jitter (7.999 s after one
            # held a scale-out for a whole interval on the real cluster, run 47)
            return []
        current = view.current("executors")
        if current is None:
            return []
        if config.in_flight:
            up = self._in_flight(view, config, current)
            if up is not None:
                return up
        ratio, inputs = self._ratio(view, config)
        if ratio is None:
            return []
        inputs.update(ratio=ratio, executors=current, unit=view.executor_unit)
        if ratio >= config.scale_up_ratio:
            wanted = current + max(math.floor(ratio + 0.5), 1)  # Scala's math.round: half up
            rule, verb = f"ratio {ratio:.2f} ≥ {config.scale_up_ratio:g}", "add"
        elif ratio <= config.scale_down_ratio:
            wanted = current - 1
            rule, verb = f"ratio {ratio:.2f} ≤ {config.scale_down_ratio:g}", "remove"
        else:
            return []
        return _bounded_proposal(view, config, current, wanted, rule, verb, inputs,
                                 lambda new: {"ratio": ratio * current / max(new, 1)})

    def _in_flight(self, view: JobView, cfg: ThresholdConfig, current: int) -> Optional[list[Proposal]]:
        """The rule on the work in flight (module docstring); None when nothing presses, else the
        proposals (none when the bounds leave no room to add)."""
        interval = in_flight.trigger_s(view, cfg.trigger_interval_s)
        # no latency bound: Spark's rule knows the trigger interval only; no batch completed for a
        # scaling interval (and past the ratio's threshold) is the evidence it waits for in vain
        batch_bound = in_flight.batch_bound_s(interval, cfg.scale_up_ratio)
        p = in_flight.pressure(view, None, cfg.backlog_growth_ratio,
                               batch_bound=max(batch_bound, cfg.scaling_interval_s) if batch_bound else None,
                               horizon_s=(in_flight.measured_horizon_s(view, interval)
                                          if cfg.backlog_projected else None),
                               growth_batch_bound=batch_bound)
        if p is None:
            return None
        run, since = view.live.running_batch_age_s, p.inputs["since_decision_s"]
        if p.kind == "in-flight" and interval and run is not None:
            # the running batch's age (judged from the last decision on) bounds its time from below
            ratio = max((run if since is None else min(run, since)) / interval, cfg.scale_up_ratio)
        else:
            ratio = p.factor  # load / capacity: 1 + backlog growth, or age / latency bound
        wanted = current + max(math.floor(ratio + 0.5), 1)
        inputs = {**p.inputs, "ratio": ratio, "executors": current, "unit": view.executor_unit,
                  "trigger_interval_s": interval, "batches": 0}
        # at the maximum: no decision, and none from the completed batches either (never a scale-down now)
        return _bounded_proposal(view, cfg, current, wanted, f"{p.reason}: ratio ≥ {ratio:.2f}", "add", inputs,
                                 lambda new: {"ratio": ratio * current / max(new, 1)})

    def observe(self, view: JobView, knob: str, config) -> dict:
        # judged over the batches since the change only (the effectiveness window)
        since = view.now_ms - int(view.window_s * 1000)
        recent = [b for b in view.batches if b.trigger_ms + b.processing_s * 1000 > since]
        interval = trigger_interval_s(view, config.trigger_interval_s)
        ratio = statistics.fmean(b.processing_s for b in recent) / interval if recent and interval else None
        return {} if ratio is None else {"ratio": ratio}


class UtilizationConfig(SafetyConfig):
    high: float = Field(0.8, gt=0, description="Scale up when the busiest stage's utilization exceeds this")
    low: float = Field(0.3, ge=0, description="Scale down when it stays below this")
    consecutive: int = Field(2, ge=1, description="Statistics windows in a row below low needed to scale down")

    @model_validator(mode="after")
    def _band(self):
        if self.low >= self.high:
            raise ValueError("low must be below high")
        return self


class UtilizationThresholdPolicy(Policy):
    name = "utilization-threshold"
    knobs = ("executors",)
    Config = UtilizationConfig
    description = "Scale executors on the busiest stage's utilization with a dead band and hysteresis"

    @staticmethod
    def _busiest(view: JobView) -> Optional[float]:
        values = [s.utilization for s in view.stages if s.utilization is not None]
        return max(values) if values else None

    @staticmethod
    def _low_streak(view: JobView, low: float) -> int:
        """Windows in a row (newest backwards) in which every stage was below ``low``."""
        windows = [s.utilization_windows for s in view.stages if s.utilization_windows]
        if not windows:
            return 0
        streak = 0
        for k in range(1, min(len(w) for w in windows) + 1):
            if all(w[-k] < low for w in windows):
                streak += 1
            else:
                break
        return streak

    def evaluate(self, view: JobView, config: UtilizationConfig) -> list[Proposal]:
        current = view.current("executors")
        u = self._busiest(view)
        if u is None or current is None:
            return []
        inputs = {"utilization": u, "executors": current, "unit": view.executor_unit}
        if u > config.high:
            target = (config.high + config.low) / 2
            wanted = max(current + 1, math.ceil(current * u / target))
            return _bounded_proposal(view, config, current, wanted, f"utilization {u:.2f} > {config.high:g}", "add",
                                     inputs, lambda new: {"utilization": u * current / new})
        streak = self._low_streak(view, config.low)
        if streak >= config.consecutive and current > 1:
            return _bounded_proposal(view, config, current, current - 1,
                                     f"utilization below {config.low:g} in {streak} windows", "remove", inputs,
                                     lambda new: {"utilization": u * current / new})
        return []

    def observe(self, view: JobView, knob: str, config) -> dict:
        u = self._busiest(view)
        return {} if u is None else {"utilization": u}
