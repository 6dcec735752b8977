"""The Kingman policy's Spark extensions (issue 4 benchmark work), each on a hand-built view, exact."""
import math

import pytest

from spark_governor.policies.base import BatchStats, ConstraintStats, JobView, StageStats
from spark_governor.policies.kingman import E_CLAMP, KingmanPolicy, bulk_arrival_cv, vertex_model
from spark_governor.policies.kingman_config import KingmanConfig

NOW = 1_000_000_000
# the spare executor (on by default) has its own test; the other rules are checked on the plan alone
CFG = KingmanConfig(trigger_interval_s=4.0, min_value=1, max_value=64, warmup_windows=1, spare_executors=0)


def stage(util=0.5, p=2, records=4000.0, tasks=200, S=0.02, w=2.0, busy=None, cA=0.1):
    return StageStats(key="s", name="s", tasks=tasks, service_mean_s=S, latency_mean_s=S + w, utilization=util,
                      parallelism=p, records_in_per_second=records, utilization_windows=(util, util),
                      service_cv=0.2, arrival_cv=cA, wait_mean_s=w, max_tasks=tasks, busy_slots=busy)


def batches(rate, n=6, gap_s=4.0):
    """n batches every gap_s seconds, each holding gap_s × rate rows, the last ending before NOW."""
    rows = int(rate * gap_s)
    return tuple(BatchStats(i, NOW - int((n - i) * gap_s * 1000), 2.0, rows, rows / gap_s, rows / 2.0)
                 for i in range(n))


def view(st, latency=5.0, bound=8.0, executors=2, rate=4000.0):
    return JobView(job="j", now_ms=NOW, window_s=30.0, stages=(st,), batches=batches(rate), executors=executors,
                   slots=executors, constraints=(ConstraintStats("c", None, bound, 5.0, latency_s=latency),))


def test_bulk_arrival_cv_is_tasks_per_slot_minus_one():
    assert bulk_arrival_cv(200, 2) == pytest.approx(math.sqrt(99))
    assert bulk_arrival_cv(16, 4) == pytest.approx(math.sqrt(3))
    assert bulk_arrival_cv(4, 8) == 0.0  # fewer tasks than slots: one wave, no queue
    assert vertex_model(stage(), CFG).cA == pytest.approx(math.sqrt(99))
    assert vertex_model(stage(), CFG.model_copy(update={"bulk_arrivals": False})).cA == 0.1


def test_bulk_cv_makes_kingman_fit_the_wave_wait():
    # 200 tasks of 20 ms on 2 slots every 4 s: ρ = 0.5, makespan 2 s = the measured w
    # Kingman: S·ρ/(1−ρ)·(c_A² + c_S²)/2 = 0.02·1·(99 + 0.04)/2 = 0.9904 s → e = 2/0.9904
    m = vertex_model(stage(), CFG)
    assert m.kingman_unfitted == pytest.approx(0.02 * (99 + 0.04) / 2)
    assert m.e == pytest.approx(2.0 / m.kingman_unfitted)  # ≈ 2, within E_CLAMP
    # the launch-interarrival c_A (0.1) misses it by more than three orders of magnitude: e hits its clamp
    literal = vertex_model(stage(), CFG.model_copy(update={"bulk_arrivals": False}))
    assert literal.kingman_unfitted == pytest.approx(0.02 * (0.01 + 0.04) / 2)
    assert 2.0 / literal.kingman_unfitted > 1000 and literal.e == E_CLAMP[1] == 10.0


def test_a_saturated_stage_is_a_bottleneck_and_observe_reports_its_busy_fraction():
    # the busy fraction over the span (the thesis' S̄/Ā over the adjustment interval): 1.0 on 2 slots is a
    # bottleneck, Eq. 4.12 → max(2·2, ⌈2·2·1.0⌉) = 4 slots, whatever the source's rate
    st = stage(util=1.0, records=4000.0)
    plan = KingmanPolicy().plan(view(st, rate=8000.0), CFG)
    assert plan["constraints"]["c"]["bottleneck"] and plan["constraints"]["c"]["slots"] == 4
    assert KingmanPolicy().observe(view(stage(util=0.9)), "executors", CFG)["utilization"] == pytest.approx(0.9)


def test_a_bottleneck_needs_no_latency_measurement_but_rebalance_does():
    hot = stage(util=1.0, records=4000.0)
    (p,) = KingmanPolicy().evaluate(view(hot, latency=None, rate=8000.0), CFG)
    assert p.value == 4 and p.prediction["constraints"]["c"] is None  # no model of the latency under ρ ≥ 1
    assert KingmanPolicy().evaluate(view(stage(), latency=None), CFG) == []


def test_scale_down_margin_keeps_one_executor_more_near_the_edge():
    # 4 slots busy 45 %: at 3 executors ρ = 0.6; at 2, 0.9. Measured latency 4 s, bound 8 s.
    st = stage(util=0.45, p=4, records=7200.0, w=1.0)
    cfg0 = CFG.model_copy(update={"scale_down_margin": 0.0})
    v = view(st, latency=4.0, executors=4, rate=3600.0)
    plan = KingmanPolicy().plan(v, cfg0)
    models, fixed = plan["models"]["c"]
    lat3, rho3 = KingmanPolicy.predict(models, fixed, 3, 1)
    assert rho3 == pytest.approx(0.6)
    (down,) = KingmanPolicy().evaluate(v, cfg0)
    assert down.value == 3
    # a margin the prediction at 3 does not keep: no scale-down; one it keeps: the same step
    tight = (8.0 - lat3) / 8.0 + 1e-6
    assert KingmanPolicy().evaluate(v, cfg0.model_copy(update={"scale_down_margin": tight})) == []
    (same,) = KingmanPolicy().evaluate(v, cfg0.model_copy(update={"scale_down_margin": min(tight, 0.3) - 2e-6}))
    assert same.value == 3
    # the utilization side: 0.6 must be ≤ max_utilization − margin
    assert KingmanPolicy().evaluate(v, cfg0.model_copy(update={"scale_down_margin": 0.31})) == []


def test_rho_is_taken_on_the_pool_the_job_has_now():
    # the stage last ran on 2 slots busy all the time (ρ = 1)
    st = stage(util=1.0, p=2, records=3600.0)
    # on those 2 executors: a bottleneck, Eq. 4.12 → max(4, ⌈2·2·1.0⌉) = 4
    (p,) = KingmanPolicy().evaluate(view(st, executors=2, rate=4800.0), CFG)
    assert p.value == 4
    # 6 executors registered since (ρ = 1/3 on the pool): no bottleneck; the model, anchored at the old
    # run's ρ ≥ 1, cannot split the latency, so no decision until a stage has run on the new pool
    assert KingmanPolicy().plan(view(st, executors=6, rate=4800.0), CFG) is None
    assert KingmanPolicy().evaluate(view(st, executors=6, rate=4800.0), CFG) == []


def test_one_spare_executor_beyond_the_plan_by_default():
    # the over-provisioned job of test_scale_down_margin_keeps_one_executor_more_near_the_edge: the plan
    # needs P executors; with the default spare the policy holds at P + 1, the thesis' size is P
    loose = {"scale_down_margin": 0.0}
    default = KingmanConfig(trigger_interval_s=4.0, min_value=1, max_value=64, warmup_windows=1, **loose)
    paper = CFG.model_copy(update=loose)
    assert default.spare_executors == 1 and paper.spare_executors == 0

    def at(n):  # the stage's latest run had 4 tasks in parallel; the job has n executors now
        return view(stage(util=0.45, p=4, records=7200.0, w=1.0), latency=4.0, executors=n, rate=3600.0)

    P = KingmanPolicy().plan(at(4), default)["executors"]
    assert P == KingmanPolicy().plan(at(P + 2), default)["executors"] and P >= 1
    assert KingmanPolicy().evaluate(at(P + 1), default) == []  # P planned + 1 spare: hold
    (down,) = KingmanPolicy().evaluate(at(P + 2), default)
    assert down.value == P + 1 and down.inputs["spare_executors"] == 1
    (thesis,) = KingmanPolicy().evaluate(at(P + 1), paper)
    assert thesis.value == P
    # a scale-up gets the spare on top of the plan, and says so
    hot = view(stage(util=0.5, p=2, records=4000.0, w=2.0), latency=9.0, bound=8.0, executors=2)
    (up_paper,) = KingmanPolicy().evaluate(hot, paper)
    (up,) = KingmanPolicy().evaluate(hot, default)
    assert up.value == up_paper.value + 1 and "1 spare executors beyond the plan's" in up.reason
    # never more than the stages' tasks can use: 3 tasks → at most 3 executors of one slot
    few = stage(util=0.5, p=2, records=4000.0, tasks=3, w=2.0)
    assert all(p.value <= 3 for p in KingmanPolicy().evaluate(view(few, latency=9.0, bound=8.0, executors=2),
                                                              default))
