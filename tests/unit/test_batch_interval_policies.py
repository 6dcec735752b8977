"""The batch_interval policies on plain JobViews: Algorithm 1 on the last two completed batches."""
import pytest

from spark_governor.policies.base import BatchStats, DirectiveState, JobView
from spark_governor.policies.batch_interval import (FastestTriggerPolicy, FixedPointPolicy, PidRatePolicy, StaticIntervalPolicy,
                                     completed_points)
from spark_governor.policies.registry import InvalidConfig, get_policy, validate_config

NOW = 1_700_000_000_000


def batch(i, x, p, rows=1000, trigger_ms=None, q=None):
    return BatchStats(i, trigger_ms if trigger_ms is not None else NOW - 60_000 + i * 1000, p, rows, None, None,
                      interval_s=x, queueing_s=q)


def view(batches, current=None, last_decision_ms=None):
    dirs = {} if current is None else {"batch_interval": DirectiveState("batch_interval", 3, current, 3, "applied")}
    return JobView("j", NOW, 10.0, batches=tuple(batches), directives=dirs,
                   last_decision_ms=last_decision_ms or {})


def decide(batches, current=None, **cfg):
    p = FixedPointPolicy()
    return p.evaluate(view(batches, current), validate_config(FixedPointPolicy, cfg))


def test_registered_under_their_names():
    for name, cls in [("fixed-point", FixedPointPolicy), ("static-interval", StaticIntervalPolicy),
                      ("fastest-trigger", FastestTriggerPolicy), ("pid-rate", PidRatePolicy)]:
        assert get_policy(name) is cls and cls.knobs == ("batch_interval",)


def test_fixed_point_paper_rule_uses_last_two_completed_batches():
    # superlinear S2 on the 100 ms grid: (1.1, 0.805) then (1.2, 0.92) -> Type-II -> ceil(0.825) = 0.9
    [p] = decide([batch(1, 0.5, 0.3), batch(2, 1.1, 0.805), batch(3, 1.2, 0.92)], current=1.2, slack="paper")
    assert p.value == 0.9 and p.inputs["branch"] == "type2" and p.inputs["x_prev_s"] == 1.1
    assert p.inputs["slack"] == "paper" and "cv" not in p.inputs
    # linear: FP on the last batch, rounded up
    [p] = decide([batch(1, 0.5, 0.494286), batch(2, 0.6, 0.54)], current=0.6, slack="paper")
    assert p.value == 0.8 and p.inputs["branch"] == "fp"
    [p] = decide([batch(1, 1.0, 0.3), batch(2, 1.0, 0.9)], current=1.0, slack="fixed")  # alias
    assert p.inputs["branch"] == "fp-equal" and p.value == 1.3 and p.inputs["slack"] == "paper"
    assert decide([]) == []


def test_fixed_point_default_is_the_adaptive_variant():
    cfg = validate_config(FixedPointPolicy, {})
    assert cfg.slack == "adaptive" and cfg.grid == 20 and validate_config(FixedPointPolicy, {"slack": "paper"}).grid == 100
    # fewer than 4 batches: no noise estimate, the floor ρ = 0.7; the 20 ms grid: ceil(0.54 / 0.7) = 0.78
    [p] = decide([batch(1, 0.5, 0.494286), batch(2, 0.6, 0.54)], current=0.6)
    assert p.value == 0.78 and p.inputs["rho"] == 0.7 and p.inputs["cv"] is None and p.inputs["slack"] == "adaptive"
    # steady and noise-free: ρ_max = 0.93, ceil(0.5 / 0.93 = 0.5376) = 0.54
    [p] = decide([batch(i, 0.6, 0.5) for i in range(1, 8)], current=0.6)
    assert p.value == 0.54 and p.inputs["rho"] == 0.93 and p.inputs["recovering"] is False
    # an overrun beyond the noise: recovery with the floor ρ
    [p] = decide([batch(i, 0.6, 0.5) for i in range(1, 7)] + [batch(7, 0.6, 0.8)], current=0.6)
    assert p.inputs["recovering"] and p.inputs["rho"] == 0.7 and p.value == 1.16 and "recovering" in p.reason


def test_interval_from_trigger_gaps_when_not_reported():
    bs = [BatchStats(i, NOW - 10_000 + t, 0.5, 100, None, None) for i, t in [(4, 0), (5, 1003), (6, 2998)]]
    assert completed_points(tuple(bs)) == [(1.0, 0.5), (2.0, 0.5)]
    assert completed_points(tuple(bs), snap=False)[1] == (1.995, 0.5)


def test_restart_actuator_spaces_decisions():
    bs = [batch(1, 1.0, 0.9), batch(2, 1.0, 0.95)]
    cfg = validate_config(FixedPointPolicy, {"actuator": "restart", "restart_min_spacing_s": 30, "slack": "paper"})
    assert FixedPointPolicy().evaluate(view(bs, 1.0, {"batch_interval": NOW - 10_000}), cfg) == []
    assert FixedPointPolicy().evaluate(view(bs, 1.0, {"batch_interval": NOW - 40_000}), cfg)[0].value == 1.4


def test_overload_is_reported_at_the_cap():
    bs = [batch(i, 5.0, 4.5) for i in range(1, 5)]
    [p] = decide(bs, current=5.0, max_value=5.0, slack="paper")
    assert p.value == 5.0 and p.inputs["overloaded"] and "overloaded" in p.reason
    bs = [batch(i, 5.0, 5.5) for i in range(1, 5)]  # the adaptive variant: p > x at the cap
    [p] = decide(bs, current=5.0, max_value=5.0)
    assert p.value == 5.0 and p.inputs["overloaded"]


def test_bad_configs_name_the_field():
    with pytest.raises(InvalidConfig, match="rho"):
        validate_config(FixedPointPolicy, {"rho": 1.5})
    with pytest.raises(InvalidConfig, match="interval_s"):
        validate_config(StaticIntervalPolicy, {})
    with pytest.raises(InvalidConfig, match="rounding"):
        validate_config(FixedPointPolicy, {"rounding": "up"})
    with pytest.raises(InvalidConfig, match="slack"):
        validate_config(FixedPointPolicy, {"slack": "exact"})
    with pytest.raises(InvalidConfig, match="grid_ms"):
        validate_config(FixedPointPolicy, {"grid_ms": 0})


def test_baselines():
    v = view([batch(1, 1.0, 0.5)])
    assert StaticIntervalPolicy().evaluate(v, validate_config(StaticIntervalPolicy, {"interval_s": 2}))[0].value == 2.0
    assert FastestTriggerPolicy().evaluate(v, validate_config(FastestTriggerPolicy, {}))[0].value == 0.0
    # digest §6.9: the PID replay over three batches gives 8362.67 rows/s
    bs = [BatchStats(i, t, pd / 1000, n, None, None, queueing_s=sd / 1000)
          for i, (t, n, pd, sd) in enumerate([(1000, 5000, 500, 0), (2000, 8000, 1000, 200), (3000, 7680, 900, 100)])]
    [p] = PidRatePolicy().evaluate(view(bs), validate_config(PidRatePolicy, {"interval_s": 1.0}))
    assert p.value == {"interval_s": 1.0, "max_rows_per_second": 8362.7}
    [p] = PidRatePolicy().evaluate(view(bs[:1]), validate_config(PidRatePolicy, {}))
    assert p.value == {"interval_s": 1.0}
