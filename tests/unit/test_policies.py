"""Pure policy logic: the threshold rules, the shared safety rules, the registry."""
import pytest

from spark_governor.policies.base import BatchStats, DirectiveState, JobView, StageStats
from spark_governor.policies.registry import InvalidConfig, PolicyNotFound, get_policy, load_policies, validate_config
from spark_governor.policies.safety import KnobHistory, SafetyConfig, guard, judge_effect, next_history
from spark_governor.policies.threshold import ThresholdConfig, ThresholdPolicy, UtilizationConfig, UtilizationThresholdPolicy

NOW = 1_800_000_000_000


def view(processing_s, interval_s=2.0, executors=4, n=10, **kw):
    batches = tuple(BatchStats(i, NOW - int((n - i) * interval_s * 1000), processing_s, 100, 50.0, 60.0)
                    for i in range(n))
    return JobView(job="j", now_ms=NOW, window_s=60, batches=batches, executors=executors, **kw)


@pytest.mark.parametrize("processing,expected", [
    (1.9, 4 + 1),    # ratio 0.95 -> add max(round(0.95), 1) = 1
    (5.0, 4 + 3),    # ratio 2.5 -> add math.round(2.5) = 3 (Scala rounds half up, Python's round would give 2)
    (7.0, 4 + 4),    # ratio 3.5 -> add 4
    (0.6, 4 - 1),    # ratio 0.3 -> remove one
    (1.0, None),     # ratio 0.5 -> nothing
])
def test_threshold_rule(processing, expected):
    proposals = ThresholdPolicy().evaluate(view(processing), ThresholdConfig(trigger_interval_s=2.0))
    if expected is None:
        assert proposals == []
    else:
        (p,) = proposals
        assert p.knob == "executors" and p.value == expected
        assert p.inputs["ratio"] == pytest.approx(processing / 2.0)
        assert p.prediction["ratio"] == pytest.approx(processing / 2.0 * 4 / expected)


def test_threshold_infers_the_trigger_interval_and_waits_a_scaling_interval():
    pol = ThresholdPolicy()
    (p,) = pol.evaluate(view(1.9, interval_s=2.0), ThresholdConfig())
    assert p.inputs["trigger_interval_s"] == pytest.approx(2.0)
    recent = view(1.9, last_decision_ms={"executors": NOW - 30_000})
    assert pol.evaluate(recent, ThresholdConfig()) == []
    assert pol.evaluate(view(1.9, last_decision_ms={"executors": NOW - 61_000}), ThresholdConfig())
    # the evaluation a scaling interval after a decision may act, 1 ms early on the scheduler's grid too
    # (run 47: 7.999 s after one held a scale-out for a whole 8 s interval); a quarter interval early not
    fast = ThresholdConfig(trigger_interval_s=2.0, scaling_interval_s=8)
    assert pol.evaluate(view(1.9, last_decision_ms={"executors": NOW - 7_999}), fast)
    assert pol.evaluate(view(1.9, last_decision_ms={"executors": NOW - 5_900}), fast) == []


def test_threshold_uses_the_applied_directive_as_current_value():
    v = view(1.9, executors=3, directives={"executors": DirectiveState("executors", 2, 6, 2, "applied")})
    (p,) = ThresholdPolicy().evaluate(v, ThresholdConfig(trigger_interval_s=2.0))
    assert p.value == 7


def test_threshold_needs_batches():
    assert ThresholdPolicy().evaluate(view(1.9, n=1), ThresholdConfig()) == []


def stage(u_windows):
    return StageStats("k", "s0", 10, 0.1, 0.2, u_windows[-1], 2, 100.0, tuple(u_windows))


def test_utilization_policy_band_and_hysteresis():
    pol, cfg = UtilizationThresholdPolicy(), UtilizationConfig(high=0.8, low=0.3, consecutive=2)
    up = JobView("j", NOW, 60, stages=(stage([0.5, 0.95]),), executors=2)
    (p,) = pol.evaluate(up, cfg)
    assert p.value == 4  # ceil(2 * 0.95 / 0.55)
    assert pol.evaluate(JobView("j", NOW, 60, stages=(stage([0.5, 0.5]),), executors=2), cfg) == []
    assert pol.evaluate(JobView("j", NOW, 60, stages=(stage([0.5, 0.2]),), executors=2), cfg) == []
    (down,) = pol.evaluate(JobView("j", NOW, 60, stages=(stage([0.2, 0.1]),), executors=2), cfg)
    assert down.value == 1


def test_guard_bounds_step_and_cooldowns():
    cfg = SafetyConfig(min_value=1, max_value=10, max_step=3)
    fresh = KnobHistory()
    assert guard(20, 4, cfg, fresh, NOW, 10).value == 7          # step limited
    assert guard(0, 2, cfg, fresh, NOW, 10).value == 1           # raised to min
    assert guard(12, 9, cfg, fresh, NOW, 10).value == 10         # lowered to max
    assert guard(4, 4, cfg, fresh, NOW, 10).value is None
    after_up = KnobHistory(last_change_ms=NOW - 25_000, last_direction=1)
    refused = guard(3, 4, cfg, after_up, NOW, 10)
    assert refused.value is None and "cool-down" in refused.note   # < 3 intervals after a scale-up
    assert guard(3, 4, cfg, KnobHistory(NOW - 31_000, 1), NOW, 10).value == 3
    assert guard(5, 4, cfg, KnobHistory(NOW - 5_000, 1), NOW, 10).value is None  # within one interval of any change
    assert guard(3, 4, cfg, KnobHistory(NOW - 5_000, -1), NOW, 10).value is None  # a scale-down after a scale-down
    after_down = KnobHistory(NOW - 2_000, -1)
    assert guard(6, 4, cfg, after_down, NOW, 10).value == 6  # a scale-up is never held for a scale-down's sake
    old_rule = SafetyConfig(min_value=1, max_value=10, max_step=3, cooldown_up_after_down=True)
    assert "cool-down" in guard(6, 4, old_rule, after_down, NOW, 10).note
    held = KnobHistory(NOW - 100_000, 1, 3, True)
    # the n-th evaluation after a change may act whatever the scheduler's jitter (issue #14): 1 ms early
    # on the grid no longer holds it for a whole interval; a quarter interval early still does not count
    assert guard(5, 4, cfg, KnobHistory(NOW - 9_999, 1), NOW, 10).value == 5
    assert guard(5, 4, cfg, KnobHistory(NOW - 7_499, 1), NOW, 10).value is None
    assert guard(3, 4, cfg, KnobHistory(NOW - 29_999, 1), NOW, 10).value == 3
    assert guard(3, 4, cfg, KnobHistory(NOW - 27_499, 1), NOW, 10).value is None
    assert guard(5, 4, cfg, held, NOW, 10).note.startswith("held")
    assert guard(3, 4, cfg, held, NOW, 10).value == 3            # scale-down still allowed


def test_a_window_over_batches_starts_a_jitter_slack_early():
    """``JobView.since_ms``: a quarter of the span earlier, at most 1 s (``policies.base.schedule_slack_s``)."""
    v = JobView(job="j", now_ms=NOW, window_s=24)
    assert v.since_ms(24) == NOW - 25_000
    assert v.since_ms(2) == NOW - 2_500
    assert v.since_ms(0) == NOW


def test_effectiveness_and_holds():
    assert judge_effect({"ratio": 1.2}, {"ratio": 0.6}, {"ratio": 0.7}, 0.1) is True
    assert judge_effect({"ratio": 1.2}, {"ratio": 0.6}, {"ratio": 1.19}, 0.1) is False
    assert judge_effect({"ratio": 1.2}, {"ratio": 0.6}, {}, 0.1) is None
    cfg = SafetyConfig(max_ineffective_scale_ups=2)
    h = next_history(KnobHistory(), effective=False, cfg=cfg)
    assert (h.consecutive_ineffective_ups, h.held) == (1, False)
    h = next_history(h, effective=False, cfg=cfg)
    assert h.held
    assert next_history(h, effective=True, cfg=cfg) == KnobHistory(None, 0, 0, False)


def test_registry_lists_builtin_policies_and_validates_config():
    found, errors = load_policies()
    assert {"threshold", "utilization-threshold"} <= set(found)
    cls = get_policy("threshold")
    assert validate_config(cls, {"scale_up_ratio": 0.8}).scale_up_ratio == 0.8
    with pytest.raises(InvalidConfig, match="config.scale_up_ratio"):
        validate_config(cls, {"scale_up_ratio": -1})
    with pytest.raises(InvalidConfig, match="config.bogus"):
        validate_config(cls, {"bogus": 1})
    with pytest.raises(InvalidConfig, match="scale_down_ratio must be below"):
        validate_config(cls, {"scale_up_ratio": 0.3, "scale_down_ratio": 0.5})
    with pytest.raises(PolicyNotFound, match="available"):
        get_policy("nope")


def test_threshold_window_forgets_old_load_and_sees_long_overruns():
    high = [BatchStats(i, NOW - 120_000 + i * 2000, 3.0, 100, None, None) for i in range(10)]
    low = [BatchStats(100 + i, NOW - 7_000 + i * 2000, 0.2, 10, None, None) for i in range(3)]
    v = JobView("j", NOW, 60, batches=tuple(high + low), executors=4,
                last_decision_ms={"executors": NOW - 100_000})
    (p,) = ThresholdPolicy().evaluate(v, ThresholdConfig(trigger_interval_s=2.0, scaling_interval_s=8))
    assert p.value == 3 and p.inputs["ratio"] == pytest.approx(0.1)
    # one batch that ran for 90 s and just completed: seen although it started long ago
    overrun = (BatchStats(7, NOW - 91_000, 90.0, 10**6, None, None),)
    v = JobView("j", NOW, 60, batches=overrun, executors=1, last_decision_ms={"executors": NOW - 95_000})
    (p,) = ThresholdPolicy().evaluate(v, ThresholdConfig(trigger_interval_s=2.0, scaling_interval_s=8))
    assert p.value == 1 + 45
