"""The utilization-target (DS2 / Flink autoscaler) executor policy on hand-built job views."""
import math

import pytest
from pydantic import ValidationError

from spark_governor.policies.base import BatchStats, DirectiveState, JobView, StageStats
from spark_governor.policies.registry import get_policy
from spark_governor.policies.utilization_target import UtilizationTargetConfig, UtilizationTargetPolicy, arrival_rate

NOW = 1_000_000_000
CFG = UtilizationTargetConfig()


def stage(utilization=0.5, parallelism=4, records=4000.0, key="s0", windows=3, max_tasks=200):
    """A stage that processed ``records`` rows/s busy ``utilization`` of ``parallelism`` slots: its true
    processing rate is records / (utilization · parallelism) rows per busy slot-second."""
    return StageStats(key=key, name=key, tasks=100, service_mean_s=0.1, latency_mean_s=0.5,
                      utilization=utilization, parallelism=parallelism, records_in_per_second=records,
                      utilization_windows=(utilization,) * windows, max_tasks=max_tasks, span_s=5.0 * windows)


def batches(rate, n=6, gap_s=4.0):
    """Batches triggered every ``gap_s`` over the last n·gap_s seconds, each holding rate·gap rows."""
    return tuple(BatchStats(i, NOW - int((n - i) * gap_s * 1000), 1.0, int(rate * gap_s), rate, None)
                 for i in range(n))


def view(stages, rate=None, executors=4, slots=None, **kw):
    return JobView(job="j", now_ms=NOW, window_s=30.0, stages=tuple(stages),
                   batches=batches(rate) if rate is not None else (), executors=executors,
                   slots=slots if slots is not None else executors, **kw)


def test_registered_under_its_entry_point_with_flink_defaults():
    assert get_policy("utilization-target") is UtilizationTargetPolicy
    assert (CFG.target_utilization, CFG.lower, CFG.upper) == (0.7, pytest.approx(0.4), pytest.approx(1.0))
    explicit = UtilizationTargetConfig(utilization_min=0.2, utilization_max=0.9)
    assert (explicit.lower, explicit.upper) == (0.2, 0.9)
    with pytest.raises(ValidationError):
        UtilizationTargetConfig(target_utilization=0.7, utilization_max=0.6)


def test_scale_up_to_the_target_utilization_of_the_true_processing_rate():
    # true rate: 4000 rows/s at 0.5 busy on 4 slots = 2000 rows per busy slot-second; the source now
    # sends 9000 rows/s: load 9000 / (2000·4) = 1.125 > 1.0 → ⌈9000 / (2000·0.7)⌉ = ⌈6.43⌉ = 7
    (p,) = UtilizationTargetPolicy().evaluate(view([stage()], rate=9000), CFG)
    assert p.knob == "executors" and p.value == 7
    assert p.inputs["utilization"] == pytest.approx(1.125)
    assert p.inputs["target_rate"] == pytest.approx(9000)
    assert p.inputs["stages"]["s0"]["tpr_per_slot"] == pytest.approx(2000)
    assert p.prediction["utilization"] == pytest.approx(9000 / (2000 * 7))
    assert "1.12 > max 1" in p.reason


def test_scale_down_straight_to_the_target():
    # 2400 rows/s on 8 slots of 2000 rows per busy slot-second: load 0.15 < 0.4 → ⌈2400/1400⌉ = 2
    s = stage(utilization=2400 / (2000 * 8), parallelism=8, records=2400.0)
    (p,) = UtilizationTargetPolicy().evaluate(view([s], rate=2400, executors=8), CFG)
    assert p.value == 2
    assert p.inputs["utilization"] == pytest.approx(0.15)
    assert p.prediction["utilization"] == pytest.approx(2400 / 4000)


@pytest.mark.parametrize("rate", [3200.0, 5600.0, 8000.0])  # loads 0.4, 0.7 and 1.0: all inside the band
def test_no_action_within_the_band(rate):
    assert UtilizationTargetPolicy().evaluate(view([stage()], rate=rate), CFG) == []


def test_band_edges_are_exclusive_and_configurable():
    pol = UtilizationTargetPolicy()
    (p,) = pol.evaluate(view([stage()], rate=8001), CFG)  # load just above 1.0
    assert p.value == math.ceil(8001 / 1400)
    narrow = UtilizationTargetConfig(utilization_max=0.8)
    (p,) = pol.evaluate(view([stage()], rate=6800), narrow)  # load 0.85 > 0.8 → ⌈6800/1400⌉ = 5
    assert p.value == 5


def test_slots_per_executor_inferred_from_the_view():
    # 2 executors of 4 slots: 8 slots of 2000 rows/busy-s; 14 000 rows/s → load 0.875 (in band)
    s = stage(utilization=0.5, parallelism=8, records=8000.0)
    pol = UtilizationTargetPolicy()
    assert pol.evaluate(view([s], rate=14000, executors=2, slots=8), CFG) == []
    # 16 800 rows/s → load 1.05 → 12 slots at 0.7 → 3 executors
    (p,) = pol.evaluate(view([s], rate=16800, executors=2, slots=8), CFG)
    assert p.value == 3 and p.inputs["slots_per_executor"] == 4


def test_stages_share_the_pool_one_after_another():
    # the second stage sees half the rows at half the true rate: it needs as many busy slots as the
    # first; 4000 rows/s: 2 + 2 busy slots → ⌈4/0.7⌉ = 6 slots; load at 4 slots 0.5 + 0.5 = 1.0 (in
    # band); 4400 rows/s: 4.4 busy slots, load 1.1 → ⌈4.4/0.7⌉ = 7
    a = stage(utilization=0.5, parallelism=4, records=4000.0, key="a")
    b = stage(utilization=0.5, parallelism=4, records=2000.0, key="b")
    pol = UtilizationTargetPolicy()
    m = pol.model(view([a, b], rate=4000), CFG)
    assert m["stages"]["b"]["target_rate"] == pytest.approx(2000)
    assert m["stages"]["b"]["tpr_per_slot"] == pytest.approx(1000)
    assert pol.load(m, 4) == pytest.approx(1.0)
    assert pol.slots_needed(m, 0.7) == 6
    (p,) = pol.evaluate(view([a, b], rate=4400), CFG)
    assert p.value == math.ceil(2 * 4400 / 2000 / 0.7)


def test_a_stage_with_few_tasks_caps_its_parallelism():
    # 2 tasks per run: at most 2 slots help; 3600 rows/s at 2000 per slot-second needs 1.8 busy
    # slots, i.e. load 0.9 at its cap — infeasible at 0.7, so the plan stops at the cap
    s = stage(utilization=0.45, parallelism=2, records=1800.0, max_tasks=2)
    pol = UtilizationTargetPolicy()
    m = pol.model(view([s], rate=3600, executors=2), CFG)
    assert pol.slots_needed(m, 0.7) == 2
    assert pol.evaluate(view([s], rate=3600, executors=2), CFG) == []  # load 0.9: in band anyway


def test_arrival_rate_is_rows_over_trigger_gaps_and_survives_overrunning_batches():
    v = view([stage()], rate=5000)
    assert arrival_rate(v) == pytest.approx(5000)
    # one long overrunning batch long ago: its rows / gap still give the source's rate
    old = (BatchStats(1, NOW - 120_000, 90.0, 450_000, 5000.0, 2000.0),)
    assert arrival_rate(JobView("j", NOW, 30.0, batches=old)) == pytest.approx(5000)
    assert arrival_rate(JobView("j", NOW, 30.0)) is None


def test_a_batch_triggered_a_window_before_the_evaluation_counts_whatever_the_jitter():
    """Run 48 on the real cluster: the batch triggered 24 s before the evaluation was out of the 24 s
    window by 1 ms and the rate read 15 998 rows/s (the latest batch alone); runs 47 and 49 and the
    simulator read 12 496 (both batches). Within the schedule's slack (1 s) it counts."""
    ramp = (BatchStats(1, NOW - 24_001, 8.0, 72_000, 9_000.0, None),
            BatchStats(2, NOW - 16_000, 13.6, 128_000, 16_000.0, None))
    v = JobView("j", NOW, 24.0, batches=ramp)
    assert arrival_rate(v) == pytest.approx(200_000 / 16)
    early = (BatchStats(0, NOW - 25_001, 8.0, 16_000, 2_000.0, None),) + ramp[1:]
    assert arrival_rate(JobView("j", NOW, 24.0, batches=early)) == pytest.approx(16_000)  # older: not


def test_falls_back_to_the_stage_input_rate_without_batches():
    # no batches: the first stage's rate is the target, load = its utilization (0.5): in band
    assert UtilizationTargetPolicy().evaluate(view([stage()]), CFG) == []
    (p,) = UtilizationTargetPolicy().evaluate(view([stage(utilization=1.2, records=9600.0)]), CFG)
    assert p.value == math.ceil(9600 / (9600 / (1.2 * 4)) / 0.7)  # = ⌈4·1.2/0.7⌉ = 7


def test_no_decision_without_data_or_before_warm_up():
    pol = UtilizationTargetPolicy()
    assert pol.evaluate(view([], rate=9000), CFG) == []
    assert pol.evaluate(view([stage(windows=1)], rate=9000), CFG) == []
    assert pol.evaluate(view([stage(utilization=0.0)], rate=9000), CFG) == []
    assert pol.evaluate(view([stage()], rate=9000, executors=None, slots=None), CFG) == []
    assert pol.observe(view([stage(windows=1)], rate=9000), "executors", CFG) == {}


def test_uses_the_applied_directive_and_observes_the_load():
    pol = UtilizationTargetPolicy()
    applied = {"executors": DirectiveState("executors", 3, 5, 3, "applied")}
    # current = 5 (the applied directive), not the 4 registered: load 9000/(2000·5) = 0.9, in band
    assert pol.evaluate(view([stage()], rate=9000, executors=4, directives=applied), CFG) == []
    (p,) = pol.evaluate(view([stage()], rate=11000, executors=4, directives=applied), CFG)
    assert p.inputs["executors"] == 5 and p.value == math.ceil(11000 / 1400)  # load 1.1 → 8
    assert pol.observe(view([stage()], rate=9000), "executors", CFG) == {"utilization": pytest.approx(9000 / 8000)}


def live(rate, probed=True):
    from spark_governor.policies.base import LiveStats

    return LiveStats(status="waiting", observed_ms=NOW, arrival_rows_per_second=rate, arrival_probed=probed,
                     trigger_interval_s=4.0, completed_batches=6)


def test_a_probed_rate_step_is_sized_before_a_batch_at_the_new_rate_completes():
    # completed batches at 4 000 rows/s on 4 slots of 2 000 rows per busy slot-second: load 0.5, in the band;
    # the source's probe reads 9 000 rows/s now: load 1.125 → ⌈9000 / 1400⌉ = 7, as if the batches showed it
    (p,) = UtilizationTargetPolicy().evaluate(view([stage()], rate=4000, live=live(9000.0)), CFG)
    assert p.value == 7 and p.inputs["target_rate"] == pytest.approx(9000)
    # not probed (a rate extrapolated from completed batches' offsets): the batches' rate, no action
    assert UtilizationTargetPolicy().evaluate(view([stage()], rate=4000, live=live(9000.0, probed=False)), CFG) == []
    # live_rate forced on uses it unprobed, forced off ignores the probe
    on = CFG.model_copy(update={"live_rate": True})
    assert [p.value for p in UtilizationTargetPolicy().evaluate(
        view([stage()], rate=4000, live=live(9000.0, probed=False)), on)] == [7]
    off = CFG.model_copy(update={"live_rate": False})
    assert UtilizationTargetPolicy().evaluate(view([stage()], rate=4000, live=live(9000.0)), off) == []
    # a live rate below the batches' never lowers the target rate (a lull between batches)
    assert [p.value for p in UtilizationTargetPolicy().evaluate(view([stage()], rate=9000, live=live(1000.0)),
                                                                CFG)] == [7]


def test_uses_live_rate_is_the_setting_else_whether_the_source_is_probed():
    from spark_governor.policies import in_flight

    probed, extrapolated = view([stage()], live=live(9000.0)), view([stage()], live=live(9000.0, probed=False))
    assert in_flight.uses_live_rate(probed, None) and not in_flight.uses_live_rate(extrapolated, None)
    assert in_flight.uses_live_rate(extrapolated, True) and not in_flight.uses_live_rate(probed, False)
    assert not in_flight.uses_live_rate(view([stage()]), True)  # no live state: nothing to use
