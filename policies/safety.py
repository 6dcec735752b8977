"""Safety rules shared by every policy: bounds, step limit, cool-down, effectiveness holds.

Pure functions over plain data. The cool-down default follows Lohrmann's elastic scaling
(thesis §4.6.4, digest 004 §5.5): no scale-down within 3 evaluation intervals after a scale-up.
The one-interval cool-down after any change does not hold a scale-up right after a scale-down
(``cooldown_up_after_down``, off by default; issue #14): holding it risks the latency bound for
no saving, as the Flink autoscaler delays only scale-downs (``scale-down.interval``). On the
standalone cluster a scale-down 2 s before a 4x rate step held the step's scale-out for 8 s
(docs/benchmarks.md, run 17).
A cool-down of n intervals ends at the n-th scheduled evaluation after the change, whatever the
scheduler's jitter: a change counts as n intervals old from a quarter interval (at most 1 s) before
(:func:`cooldown_s`; not in the thesis; issue #14). Measured on the boundary itself, whether the
next evaluation could act was decided by milliseconds: on the real cluster (run 43) a scale-out
8.007 s after the last one went through and another 7.999 s after one was held for a whole
interval, while the simulator, evaluating on the exact grid, let both through.
The effectiveness check follows the Flink autoscaler's idea: N evaluation intervals after an
applied change, the observed effect is compared with the predicted one; after K ineffective
scale-ups in a row, further scale-ups of that knob are held until an effective one or an operator
clears the hold.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Optional

from pydantic import Field

from spark_governor.policies.base import PolicyConfig, schedule_slack_s


class SafetyConfig(PolicyConfig):
    """Safety settings every policy config includes (numeric knobs only for bounds and steps)."""

    min_value: Optional[float] = Field(1, description="Lower bound of the knob's value")
    max_value: Optional[float] = Field(None, description="Upper bound of the knob's value")
    max_step: Optional[float] = Field(None, gt=0, description="Largest change per decision")
    cooldown_intervals_after_up: int = Field(3, ge=0, description="No scale-down within this many evaluation intervals after a scale-up")
    cooldown_intervals_after_any: int = Field(1, ge=0, description="No change within this many evaluation intervals "
                                                                  "after any change (a scale-up right after a "
                                                                  "scale-down only with cooldown_up_after_down)")
    cooldown_up_after_down: bool = Field(False, description="Whether cooldown_intervals_after_any also holds a scale-up "
                                                            "right after a scale-down (false: a scale-up is never held "
                                                            "for a scale-down's sake)")
    effectiveness_intervals: int = Field(3, ge=1, description="Evaluation intervals after an applied change before its effect is judged")
    effective_fraction: float = Field(0.1, ge=0, le=1, description="A change is effective when at least this fraction of the predicted improvement is observed")
    max_ineffective_scale_ups: int = Field(3, ge=1, description="Scale-ups are held after this many ineffective ones in a row")
    rollback: bool = Field(True, description="Roll back an applied change that made the job measurably worse "
                                             "(policies.verification); false: only report it as harmful")
    rollback_cooloff_s: float = Field(600.0, ge=0, description="After a rollback, the same change (knob and value) "
                                                                "is refused for this many seconds")


@dataclass(frozen=True)
class KnobHistory:
    """What the framework remembers per (job, knob)."""

    last_change_ms: Optional[int] = None
    last_direction: int = 0  # +1 up, -1 down
    consecutive_ineffective_ups: int = 0
    held: bool = False


@dataclass(frozen=True)
class Guarded:
    value: Any  # the value to issue, or None when nothing is to be done
    note: Optional[str] = None  # why the proposal was changed or refused


def within_bounds(value: float, cfg: SafetyConfig) -> float:
    """``value`` clamped to [``min_value``, ``max_value``] (either may be unset)."""
    if cfg.min_value is not None and value < cfg.min_value:
        value = cfg.min_value
    if cfg.max_value is not None and value > cfg.max_value:
        value = cfg.max_value
    return value


def cooldown_s(intervals: float, interval_s: float) -> float:
    """Seconds after a change before a cool-down of ``intervals`` periods of ``interval_s`` seconds is
    over: the ``intervals``-th scheduled evaluation, less its jitter's slack
    (:func:`~spark_governor.policies.base.schedule_slack_s`); 0 for 0. An evaluation between ticks (a
    surge) within that slack of the end may act too."""
    if intervals <= 0:
        return 0.0
    return max(0.0, intervals * interval_s - schedule_slack_s(interval_s))


def guard(proposed: Any, current: Any, cfg: SafetyConfig, history: KnobHistory, now_ms: int,
          interval_s: float) -> Guarded:
    """Apply bounds, step limit, cool-downs and holds to a numeric proposal.

    A decision moves the knob the way the policy asked or not at all: when the bounds would turn a
    proposal into no change or into a move the other way (a scale-down of a knob already below its
    minimum "raised to min"), nothing is done."""
    if not isinstance(proposed, (int, float)) or not isinstance(current, (int, float)):
        return Guarded(proposed if proposed != current else None)
    if proposed == current:
        return Guarded(None, "no change")
    value = proposed
    notes = []
    if cfg.max_step is not None and abs(value - current) > cfg.max_step:
        value = current + math.copysign(cfg.max_step, value - current)
        notes.append(f"step limited to {cfg.max_step:g}")
    if cfg.min_value is not None and value < cfg.min_value:
        value = cfg.min_value
        notes.append(f"raised to min {cfg.min_value:g}")
    if cfg.max_value is not None and value > cfg.max_value:
        value = cfg.max_value
        notes.append(f"lowered to max {cfg.max_value:g}")
    if isinstance(current, int) and isinstance(proposed, int):
        value = int(value)
    if value == current:
        return Guarded(None, "; ".join(notes) or "no change")
    direction = 1 if value > current else -1
    if direction != (1 if proposed > current else -1):
        return Guarded(None, f"bounds reverse the proposal ({current:g} → {proposed:g}: {'; '.join(notes)})")
    since_s = None if history.last_change_ms is None else (now_ms - history.last_change_ms) / 1000.0
    reversal_up = direction > 0 and history.last_direction < 0 and not cfg.cooldown_up_after_down
    if since_s is not None and since_s < cooldown_s(cfg.cooldown_intervals_after_any, interval_s) and not reversal_up:
        return Guarded(None, f"cool-down: last change {since_s:.0f} s ago")
    if (direction < 0 and history.last_direction > 0 and since_s is not None
            and since_s < cooldown_s(cfg.cooldown_intervals_after_up, interval_s)):
        return Guarded(None, f"cool-down: no scale-down within {cfg.cooldown_intervals_after_up} intervals of a scale-up")
    if direction > 0 and history.held:
        return Guarded(None, f"held: {history.consecutive_ineffective_ups} ineffective scale-ups in a row")
    return Guarded(value, "; ".join(notes) or None)


def judge_effect(inputs: dict, prediction: dict, observed: dict, effective_fraction: float) -> Optional[bool]:
    """Was a change effective? For each predicted quantity present before (``inputs``) and after
    (``observed``): effective when the observed change is at least ``effective_fraction`` of the
    predicted change, in the predicted direction. None when nothing is comparable."""
    verdicts = []
    for name, predicted in prediction.items():
        before, after = inputs.get(name), observed.get(name)
        if not all(isinstance(x, (int, float)) for x in (predicted, before, after)):
            continue
        expected = predicted - before
        if expected == 0:
            continue
        verdicts.append((after - before) / expected >= effective_fraction)
    return all(verdicts) if verdicts else None


def next_history(history: KnobHistory, *, changed_ms: Optional[int] = None, direction: int = 0,
                 effective: Optional[bool] = None, cfg: Optional[SafetyConfig] = None) -> KnobHistory:
    """History after a change was issued (``changed_ms``) or a scale-up was judged (``effective``)."""
    h = history
    if changed_ms is not None:
        h = KnobHistory(changed_ms, direction, h.consecutive_ineffective_ups, h.held)
    if effective is not None:
        count = 0 if effective else h.consecutive_ineffective_ups + 1
        limit = cfg.max_ineffective_scale_ups if cfg else 3
        h = KnobHistory(h.last_change_ms, h.last_direction, count, count >= limit)
    return h
