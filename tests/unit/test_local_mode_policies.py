"""Executor policies in Spark's local mode (``local[N]``: no executors, N task slots, the knob not
actuatable): they recommend in task slots and say so, instead of staying silent; and a decision's
current value, reason and direction agree (issue #15: "0 → 1" both as "remove 1 [raised to min 1]"
and as "add 1")."""
import pytest

from spark_governor.policies.base import BatchStats, ConstraintStats, JobView, StageStats
from spark_governor.policies.kingman import KingmanPolicy
from spark_governor.policies.kingman_config import KingmanConfig
from spark_governor.policies.queueing import kingman_wait
from spark_governor.policies.safety import KnobHistory, SafetyConfig, guard
from spark_governor.policies.threshold import (ThresholdConfig, ThresholdPolicy, UtilizationConfig,
                                               UtilizationThresholdPolicy)
from spark_governor.policies.utilization_target import UtilizationTargetConfig, UtilizationTargetPolicy

NOW = 1_800_000_000_000
LOCAL = {"executors": "local mode"}
NOTE = "local mode: 2 task slots; not actuatable"


def local_view(slots=2, **kw):
    """A job as the reporter of a ``local[slots]`` driver describes it."""
    return JobView(job="j", now_ms=NOW, window_s=60.0, executors=0, slots=slots, not_actuatable=dict(LOCAL), **kw)


def cluster_view(executors, slots=None, **kw):
    return JobView(job="j", now_ms=NOW, window_s=60.0, executors=executors,
                   slots=executors if slots is None else slots, **kw)


def test_local_mode_counts_the_executor_knob_in_task_slots():
    v = local_view(slots=4)
    assert (v.local_slots, v.current("executors"), v.slots_per_executor(8)) == (4, 4, 1)
    assert v.executor_unit == "task slots" and v.local_mode_note() == "; local mode: 4 task slots; not actuatable"
    # a cluster (even one with no executor registered yet) keeps counting executors
    for v in (cluster_view(0, slots=0), cluster_view(3, slots=12), JobView("j", NOW, 60.0, executors=0, slots=2)):
        assert v.local_slots is None and v.executor_unit == "executors" and v.local_mode_note() == ""
    assert cluster_view(3, slots=12).current("executors") == 3


# -- Kingman ------------------------------------------------------------------------------------

def kstage(rho=0.8, S=1.0, p=2, max_tasks=8, windows=3):
    w = kingman_wait(S, S / rho, 1.0, 1.0)
    return StageStats(key="s1", name="s1", tasks=100, service_mean_s=S, latency_mean_s=S + w, utilization=rho,
                      parallelism=p, records_in_per_second=None, utilization_windows=(rho,) * windows,
                      service_cv=1.0, arrival_cv=1.0, wait_mean_s=w, max_tasks=max_tasks, span_s=30.0)


KCFG = KingmanConfig(trigger_interval_s=10.0, bulk_arrivals=False, scale_down_margin=0)


def test_kingman_recommends_task_slots_in_local_mode():
    missed = (ConstraintStats("e2e", None, bound_s=3.0, span_s=5.0, latency_s=6.0),)
    v = local_view(stages=(kstage(),), constraints=missed)
    (p,) = KingmanPolicy().evaluate(v, KCFG)
    # local[2] sized like a cluster of one-slot executors: the same plan, in task slots
    (same,) = KingmanPolicy().evaluate(cluster_view(2, stages=(kstage(),), constraints=missed), KCFG)
    assert p.knob == "executors" and p.value == same.value > 2
    assert p.inputs["executors"] == 2 and p.inputs["unit"] == "task slots"
    assert f"2 → {p.value} task slots" in p.reason and p.reason.endswith(NOTE)
    predicted = p.prediction["constraints"]["e2e"]
    assert predicted == p.prediction["latency_s"] <= 3.0
    assert f"predicted {predicted * 1000:,.0f} ms vs bound 3,000 ms (measured 6,000 ms)" in p.reason
    # on a cluster the reason counts executors and has no local-mode note
    assert "executors" in same.reason and "local mode" not in same.reason


def test_kingman_in_local_mode_ignores_a_configured_slots_per_executor():
    missed = (ConstraintStats("e2e", None, bound_s=3.0, span_s=5.0, latency_s=6.0),)
    cfg = KCFG.model_copy(update={"slots_per_executor": 4})
    (p,) = KingmanPolicy().evaluate(local_view(stages=(kstage(),), constraints=missed), cfg)
    (q,) = KingmanPolicy().evaluate(local_view(stages=(kstage(),), constraints=missed), KCFG)
    assert p.value == q.value and p.inputs["plan"]["slots_per_executor"] == 1


# -- threshold ----------------------------------------------------------------------------------

def batches(processing_s, interval_s=2.0, n=10):
    return tuple(BatchStats(i, NOW - int((n - i) * interval_s * 1000), processing_s, 100, 50.0, 60.0)
                 for i in range(n))


@pytest.mark.parametrize("processing,expected,rule", [
    (1.9, 3, "ratio 0.95 ≥ 0.9: add 1 (2 → 3 task slots)"),
    (0.5, 1, "ratio 0.25 ≤ 0.3: remove 1 (2 → 1 task slots)"),
])
def test_threshold_recommends_task_slots_in_local_mode(processing, expected, rule):
    (p,) = ThresholdPolicy().evaluate(local_view(batches=batches(processing)), ThresholdConfig(trigger_interval_s=2.0))
    assert p.value == expected and p.reason == f"{rule}; {NOTE}"
    assert p.inputs["executors"] == 2 and p.inputs["unit"] == "task slots"


def test_utilization_threshold_recommends_task_slots_in_local_mode():
    s = StageStats("k", "s0", 10, 0.1, 0.2, 0.95, 2, 100.0, (0.5, 0.95))
    (p,) = UtilizationThresholdPolicy().evaluate(local_view(stages=(s,)), UtilizationConfig())
    assert p.value == 4 and p.reason.endswith(f"(2 → 4 task slots); {NOTE}")


@pytest.mark.parametrize("processing", [0.48, 0.36])  # ratios 0.24 and 0.18: "remove 1"
def test_threshold_never_turns_a_scale_down_into_a_scale_up(processing):
    """No executor registered (0) and a low ratio: removing one is impossible, and raising to the
    minimum would be an "add" with a "remove" reason — no decision at all."""
    v = cluster_view(0, slots=0, batches=batches(processing))
    assert ThresholdPolicy().evaluate(v, ThresholdConfig(trigger_interval_s=2.0)) == []
    # local[1]: one slot is the minimum
    assert ThresholdPolicy().evaluate(local_view(slots=1, batches=batches(processing)),
                                      ThresholdConfig(trigger_interval_s=2.0)) == []


def test_threshold_decisions_agree_with_their_bounds():
    cfg = ThresholdConfig(trigger_interval_s=2.0, min_value=1, max_value=4)
    # at the maximum: an "add" that adds nothing is no decision
    assert ThresholdPolicy().evaluate(cluster_view(4, batches=batches(1.9)), cfg) == []
    # above the maximum: "add" must not become a removal
    assert ThresholdPolicy().evaluate(cluster_view(6, batches=batches(1.9)), cfg) == []
    # below the minimum: "remove" must not become an addition
    assert ThresholdPolicy().evaluate(cluster_view(0, batches=batches(0.4)), cfg) == []
    # bounded but in the rule's direction: the reason gives the value decided
    (p,) = ThresholdPolicy().evaluate(cluster_view(3, batches=batches(7.0)), cfg)  # ratio 3.5: add 4 → 7, max 4
    assert p.value == 4 and p.reason.startswith("ratio 3.50 ≥ 0.9: add 1 (3 → 4 executors) [bounded: 7 is outside")
    (p,) = ThresholdPolicy().evaluate(cluster_view(3, batches=batches(0.4)), cfg)
    assert (p.value, p.reason) == (2, "ratio 0.20 ≤ 0.3: remove 1 (3 → 2 executors)")


def test_guard_never_reverses_a_proposal_or_makes_a_no_op_a_change():
    cfg, fresh = SafetyConfig(min_value=1, max_value=4), KnobHistory()
    reversed_down = guard(-1, 0, cfg, fresh, NOW, 10)  # "remove 1" from 0, raised to min 1
    assert reversed_down.value is None and "reverse" in reversed_down.note
    assert guard(7, 6, cfg, fresh, NOW, 10).value is None  # "add" above max, lowered to 4
    assert guard(0, 0, cfg, fresh, NOW, 10).value is None  # no change proposed: none made (not raised to 1)
    assert guard(0, 2, cfg, fresh, NOW, 10).value == 1     # bounded in the proposal's direction: kept


# -- utilization-target -------------------------------------------------------------------------

def test_utilization_target_recommends_task_slots_in_local_mode():
    # 2 slots busy 0.9 at 1800 rows/s: 1000 rows per busy slot-second; 3000 rows/s arrive:
    # load 3000 / (1000·2) = 1.5 > 1.0 → ⌈3000 / (1000·0.7)⌉ = 5 slots
    s = StageStats(key="s0", name="s0", tasks=100, service_mean_s=0.1, latency_mean_s=0.5, utilization=0.9,
                   parallelism=2, records_in_per_second=1800.0, utilization_windows=(0.9,) * 3, max_tasks=8)
    rate = tuple(BatchStats(i, NOW - int((6 - i) * 4000), 1.0, 12000, 3000.0, None) for i in range(6))
    v = local_view(stages=(s,), batches=rate)
    # (DS2's fluid count, the default; ignored in local mode: slots_per_executor, the knob counts slots)
    cfg = UtilizationTargetConfig(slots_per_executor=4)
    (p,) = UtilizationTargetPolicy().evaluate(v, cfg)
    assert p.value == 5 and p.inputs["utilization"] == pytest.approx(1.5) and p.inputs["slots_per_executor"] == 1
    assert "→ 2 → 5 task slots" in p.reason and p.reason.endswith(NOTE)
    # in whole waves (wave_sizing): 8 tasks on 5–7 slots run in 2 waves as on 4 (load 0.75 > 0.7), so 8
    (p,) = UtilizationTargetPolicy().evaluate(v, UtilizationTargetConfig(wave_sizing=True))
    assert p.value == 8 and p.prediction["utilization"] == pytest.approx(3000 / (1000 * 8))
    # never a move against the load: under the band with the minimum above the need, no decision
    low = StageStats(key="s0", name="s0", tasks=100, service_mean_s=0.1, latency_mean_s=0.5, utilization=0.1,
                     parallelism=2, records_in_per_second=200.0, utilization_windows=(0.1,) * 3, max_tasks=8)
    slow = tuple(BatchStats(i, NOW - int((6 - i) * 4000), 1.0, 800, 200.0, None) for i in range(6))
    assert UtilizationTargetPolicy().evaluate(local_view(stages=(low,), batches=slow),
                                              UtilizationTargetConfig(min_value=3)) == []
