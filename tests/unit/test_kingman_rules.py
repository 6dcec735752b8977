"""The Kingman policy's Spark extensions (issue 4 benchmark work), each on a hand-built view, exact."""
import math

import pytest

from spark_governor.policies.base import BatchStats, ConstraintStats, JobView, StageStats
from spark_governor.policies.kingman import KingmanPolicy, arrival_rho, bulk_arrival_cv, vertex_model
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
    m = vertex_model(stage(), CFG.model_copy(update={"e_clamp_low": 0.1, "e_clamp_high": 10}))
    assert m.kingman_unfitted == pytest.approx(0.02 * (99 + 0.04) / 2)
    assert m.e == pytest.approx(2.0 / m.kingman_unfitted)
    # the launch-interarrival c_A (0.1) misses it by two orders of magnitude
    literal = vertex_model(stage(), CFG.model_copy(update={"bulk_arrivals": False, "e_clamp_low": 0.01,
                                                            "e_clamp_high": 10_000}))
    assert literal.e == pytest.approx(2.0 / (0.02 * (0.01 + 0.04) / 2))


def test_arrival_rho_is_source_rate_over_true_processing_rate():
    # the latest window: 2 slots busy 100 % processing 4000 rows/s → 2000 rows per busy slot-second;
    # the source sends 8000 rows/s → ρ = 8000 / (2000 · 2) = 2.0 (the busy fraction says 1.0)
    st = stage(util=1.0, records=4000.0)
    v = view(st, rate=8000.0)
    assert arrival_rho(v, st, st) == pytest.approx(2.0)
    assert vertex_model(st, CFG, arrival_rho(v, st, st)).utilization == pytest.approx(2.0)
    # Eq. 4.12 with the true ρ: max(2·2, ⌈2·2·2⌉) = 8 slots, not the 4 the saturated busy fraction gives
    plan = KingmanPolicy().plan(v, CFG)
    assert plan["constraints"]["c"]["bottleneck"] and plan["constraints"]["c"]["slots"] == 8
    off = KingmanPolicy().plan(v, CFG.model_copy(update={"arrival_utilization": False}))
    assert off["constraints"]["c"]["slots"] == 4
    # unknown without records or batch rates
    assert arrival_rho(view(stage(records=None)), stage(records=None), stage(records=None)) is None


def test_observe_reports_the_arrival_based_utilization():
    st = stage(util=0.9, records=4000.0)  # busy 90 % (draining a backlog), arrivals need only 0.5
    v = view(st, rate=4000.0 * 0.5 / 0.9)
    assert KingmanPolicy().observe(v, "executors", CFG)["utilization"] == pytest.approx(0.5, rel=1e-3)


def test_latest_window_busy_is_a_bottleneck_even_when_the_span_is_not():
    # span work says ρ = 0.6 (busy_slots 1.2 on 2 slots) and arrivals too; the latest window was busy 99.5 %
    st = stage(util=0.995, busy=1.2, records=4000.0)
    v = view(st, rate=0.6 * 4000.0 / 0.995 * 1.0)
    cfg = CFG.model_copy(update={"arrival_utilization": False})
    assert KingmanPolicy().plan(v, cfg)["constraints"]["c"]["bottleneck"]
    assert not KingmanPolicy().plan(v, cfg.model_copy(update={"latest_window_bottleneck": False}))[
        "constraints"]["c"]["bottleneck"]


def test_a_bottleneck_needs_no_latency_measurement_but_rebalance_does():
    hot = stage(util=1.0, records=4000.0)
    (p,) = KingmanPolicy().evaluate(view(hot, latency=None, rate=8000.0), CFG)
    assert p.value == 8 and p.prediction["constraints"]["c"] is None  # no model of the latency under ρ ≥ 1
    assert KingmanPolicy().evaluate(view(stage(), latency=None), CFG) == []


def test_scale_down_margin_keeps_one_executor_more_near_the_edge():
    # 4 slots, ρ(4) = 0.45 from arrivals (3600 rows/s over 2000 per busy slot-second);
    # at 3 executors ρ = 0.6; at 2, 0.9. Measured latency 4 s, bound 8 s.
    st = stage(util=0.9, p=4, records=7200.0, w=1.0)
    cfg0 = CFG.model_copy(update={"scale_down_margin": 0.0, "e_clamp_low": 0.01, "e_clamp_high": 100})
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


def test_after_a_change_only_the_models_rho_flags_a_bottleneck():
    # the latest window was busy (a backlog being worked off) and batches overran, but the arrivals need
    # only ρ = 0.5 of the pool; 10 s after a scale-up this is no bottleneck, without the change it is
    st = stage(util=1.0, records=4000.0)
    overran = tuple(BatchStats(i, NOW - (6 - i) * 4000, 6.0, 8000, 2000.0, 1333.0) for i in range(6))
    v = JobView(job="j", now_ms=NOW, window_s=30.0, stages=(st,), batches=overran, executors=4, slots=4,
                constraints=(ConstraintStats("c", None, 8.0, 5.0, latency_s=7.0),),
                last_decision_ms={"executors": NOW - 10_000})
    # arrivals 2000 rows/s over 2000 rows per busy slot-second → 1 busy slot; on the 4-slot pool ρ = 0.25
    assert KingmanPolicy().plan(v, CFG)["constraints"]["c"]["bottleneck"] is False
    quiet = JobView(**{**v.__dict__, "last_decision_ms": {"executors": NOW - 40_000}})
    assert KingmanPolicy().plan(quiet, CFG)["constraints"]["c"]["bottleneck"] is True
    off = CFG.model_copy(update={"settle_after_change": False})
    assert KingmanPolicy().plan(v, off)["constraints"]["c"]["bottleneck"] is True


def test_rho_is_taken_on_the_pool_the_job_has_now():
    # the stage last ran on 2 slots at ρ = 1.2 (arrivals 4800 rows/s over 2000 per busy slot-second · 2)
    st = stage(util=0.9, p=2, records=3600.0)
    assert arrival_rho(view(st, rate=4800.0), st, st) == pytest.approx(1.2)
    # on those 2 executors: a bottleneck, Eq. 4.12 → max(4, ⌈2·2·1.2⌉) = 5
    (p,) = KingmanPolicy().evaluate(view(st, executors=2, rate=4800.0), CFG)
    assert p.value == 5
    # 6 executors registered since (ρ = 0.4 on the pool): no bottleneck; the model, anchored at the old
    # run's ρ ≥ 1, cannot split the latency, so no decision until a stage has run on the new pool
    assert KingmanPolicy().plan(view(st, executors=6, rate=4800.0), CFG) is None
    assert KingmanPolicy().evaluate(view(st, executors=6, rate=4800.0), CFG) == []


def test_arrival_rate_span():
    # batches at 2000 rows/s, then the latest two at 8000: a 10 s span sees the new rate, 30 s the mix
    bs = tuple(BatchStats(i, NOW - (6 - i) * 4000 - 500, 2.0, 8000 if i < 4 else 32000, 2000.0 if i < 4 else 8000.0,
                          4000.0) for i in range(6))
    st = stage(util=0.5, records=4000.0)
    v = JobView(job="j", now_ms=NOW, window_s=30.0, stages=(st,), batches=bs, executors=2, slots=2,
                constraints=(ConstraintStats("c", None, 8.0, 5.0, latency_s=5.0),))
    tpr = 4000.0 / (0.5 * 2)
    assert arrival_rho(v, st, st, 10.0) == pytest.approx(8000.0 / (tpr * 2))
    assert arrival_rho(v, st, st, 30.0) == pytest.approx((4 * 8000 + 2 * 32000) / (6 * 4.0) / (tpr * 2))


def test_one_spare_executor_beyond_the_plan_by_default():
    # the over-provisioned job of test_scale_down_margin_keeps_one_executor_more_near_the_edge: the plan
    # needs P executors; with the default spare the policy holds at P + 1, the thesis' size is P
    loose = {"e_clamp_low": 0.01, "e_clamp_high": 100, "scale_down_margin": 0.0}
    default = KingmanConfig(trigger_interval_s=4.0, min_value=1, max_value=64, warmup_windows=1, **loose)
    paper = CFG.model_copy(update=loose)
    assert default.spare_executors == 1 and paper.spare_executors == 0

    def at(n):  # the stage's latest run had 4 tasks in parallel; the job has n executors now
        return view(stage(util=0.9, p=4, records=7200.0, w=1.0), latency=4.0, executors=n, rate=3600.0)

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
