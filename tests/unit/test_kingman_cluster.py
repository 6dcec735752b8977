"""The Kingman policy with the job's measured cluster profile (issue #14): the load a scale-out is
sized for (rate trend over the provisioning delay), lazy scale-down (delay, peak load, backlog), the
latency split in the prediction, and the paper's model when no profile is known."""
import pytest

from spark_governor.policies.base import BatchStats, ConstraintStats, LiveStats, StageStats
from spark_governor.policies.cluster_inputs import ClusteredJobView, ClusterInputs, cluster_of
from spark_governor.policies.kingman import KingmanPolicy
from spark_governor.policies.kingman_config import KingmanConfig
from spark_governor.policies.kingman_signals import load_growth, peak_load, rate_trend, trigger_wait_s
from spark_governor.policies.queueing import VertexModel, with_load

NOW = 1_000_000_000
CFG = KingmanConfig(trigger_interval_s=4.0, min_value=1, max_value=64, warmup_windows=1, spare_executors=0,
                     scale_down_delay_s=30.0)  # the tests below are written for a 30 s delay (default: 15 s)


def stage(util=0.5, p=4, records=4000.0, tasks=16, S=0.5, w=1.0):
    return StageStats(key="s", name="s", tasks=tasks, service_mean_s=S, latency_mean_s=S + w, utilization=util,
                      parallelism=p, records_in_per_second=records, utilization_windows=(util, util),
                      service_cv=0.2, arrival_cv=0.5, wait_mean_s=w, max_tasks=tasks)


def batches(rates, gap_s=4.0, processing_s=2.0):
    """One batch per rate, every gap_s seconds, the last triggered gap_s before NOW."""
    n = len(rates)
    out = []
    for i, r in enumerate(rates):
        rows = int(r * gap_s)
        out.append(BatchStats(i, NOW - int((n - i) * gap_s * 1000), processing_s, rows, rows / gap_s, rows / 2.0))
    return tuple(out)


def view(rates, latency=5.0, bound=8.0, executors=4, util=0.5, cluster=None, last_ms=None, live=None, tasks=16):
    """The stage's latest window processed the latest batch's rate at busy fraction ``util``."""
    st = stage(util=util, records=float(rates[-1]), tasks=tasks)
    return ClusteredJobView(job="j", now_ms=NOW, window_s=30.0, stages=(st,), batches=batches(rates),
                            executors=executors, slots=executors,
                            constraints=(ConstraintStats("c", None, bound, 5.0, latency_s=latency),),
                            last_decision_ms={} if last_ms is None else {"executors": last_ms}, live=live,
                            cluster=cluster)


def test_with_load_scales_utilization_and_keeps_the_fitted_e():
    v = VertexModel(p=2, S=1.0, A=4.0, p_max=8, w=0.5)
    u = with_load(v, 1.5)
    assert u.e == pytest.approx(v.e) and u.rho(2) == pytest.approx(1.5 * v.rho(2))
    assert u.wait(4) > v.wait(4) and with_load(v, 1.0) is v
    with pytest.raises(ValueError):
        with_load(v, 0)


def test_rate_trend_and_the_load_a_scale_out_is_sized_for():
    rising = [2000 + 250 * i for i in range(8)]  # +250 rows/s every 4 s: 62.5 rows/s per second
    v = view(rising)
    assert rate_trend(v, 30.0) == pytest.approx(62.5)
    rate = 2000 + 250 * 6.5  # arrival_rate over the last 10 s: the batches triggered 8 and 4 s ago
    assert load_growth(v, CFG, 20.0) == pytest.approx(1 + 62.5 * (20.0 + 5.0) / rate, rel=1e-3)
    assert load_growth(v, CFG, None) == 1.0 and load_growth(view([3000] * 8), CFG, 20.0) == 1.0
    assert load_growth(v, CFG.model_copy(update={"max_load_growth": 1.1}), 600.0) == 1.1
    assert rate_trend(view([3000, 3000]), 30.0) is None  # fewer than three batches


def test_scale_out_is_sized_for_the_rate_when_new_executors_work():
    """The thesis' load rule (``batch_load`` off: Ā / load with e_v kept); the micro-batch rule's sizing
    is in tests/unit/test_batch_load.py."""
    rising = [2000 + 250 * i for i in range(8)]
    cfg = CFG.model_copy(update={"batch_load": False})
    literal = KingmanPolicy().evaluate(view(rising, latency=8.2, util=0.7, tasks=64), cfg)
    profiled = KingmanPolicy().evaluate(view(rising, latency=8.2, util=0.7, tasks=64,
                                             cluster=ClusterInputs(provisioning_delay_s=20.0)), cfg)
    assert literal and profiled
    assert literal[0].inputs["load_growth"] == 1.0 and literal[0].inputs["provisioning_delay_s"] is None
    assert profiled[0].inputs["load_growth"] > 1.3 and profiled[0].inputs["provisioning_delay_s"] == 20.0
    assert (literal[0].value, profiled[0].value) == (5, 7)
    assert "sized for" in profiled[0].reason
    # configured delay without a profile; off: the literal model again
    assert KingmanPolicy().evaluate(view(rising, latency=8.2, util=0.7, tasks=64),
                                    cfg.model_copy(update={"provisioning_delay_s": 20.0}))[0].value == profiled[0].value
    off = cfg.model_copy(update={"cluster_model": False})
    assert KingmanPolicy().evaluate(view(rising, latency=8.2, util=0.7, tasks=64,
                                         cluster=ClusterInputs(provisioning_delay_s=20.0)), off)[0].value \
        == literal[0].value


def test_prediction_splits_latency_into_trigger_wait_overhead_queueing_processing():
    up = KingmanPolicy().evaluate(view([3000] * 8, latency=12.0, util=0.7,
                                       cluster=ClusterInputs(driver_overhead_s=1.5)), CFG)[0]
    t = up.prediction["terms"]
    assert t["trigger_wait_s"] == pytest.approx(2.0)  # max(4 s interval, 2 s processing) / 2
    assert t["driver_overhead_s"] == 1.5 and t["queueing_s"] >= 0 and t["processing_s"] >= 0
    assert sum(t.values()) == pytest.approx(up.prediction["latency_s"])
    # no profile: no overhead term (the paper's model)
    t0 = KingmanPolicy().evaluate(view([3000] * 8, latency=12.0, util=0.7), CFG)[0].prediction["terms"]
    assert t0["driver_overhead_s"] == 0.0
    assert trigger_wait_s(view([3000] * 8), CFG.model_copy(update={"trigger_interval_s": 1.0})) == pytest.approx(1.0)


def test_w_ob_budget_leaves_out_trigger_wait_and_driver_overhead_when_profiled():
    cfg = CFG.model_copy(update={"w_ob": 0.0})
    lit = KingmanPolicy().plan(view([3000] * 8, latency=6.0, util=0.7, tasks=64), cfg)
    prof = KingmanPolicy().plan(view([3000] * 8, latency=6.0, util=0.7, tasks=64,
                                     cluster=ClusterInputs(driver_overhead_s=5.0)), cfg)
    # Ŵ = 8 − 0.5 (l) = 7.5 s literally; less the 2 s trigger wait and 5 s overhead: 0.5 s
    assert (lit["constraints"]["c"]["slots"], prof["constraints"]["c"]["slots"]) == (4, 6)


def scale_down_view(**kw):
    return view([1000] * 8, latency=2.0, bound=8.0, executors=4, util=0.2, **kw)


def test_lazy_scale_down_waits_for_the_delay_after_an_executor_decision():
    assert KingmanPolicy().evaluate(scale_down_view(), CFG)[0].value == 3
    assert KingmanPolicy().evaluate(scale_down_view(last_ms=NOW - 10_000), CFG) == []
    assert KingmanPolicy().evaluate(scale_down_view(last_ms=NOW - 40_000), CFG)[0].value == 3
    assert KingmanPolicy().evaluate(scale_down_view(last_ms=NOW - 10_000),
                                    CFG.model_copy(update={"scale_down_delay_s": 5.0}))[0].value == 3


def test_no_scale_down_while_a_backlog_is_worked_off():
    def live(backlog_rows, running_age=None):
        return LiveStats(status="running" if running_age else "waiting", observed_ms=NOW, backlog_rows=backlog_rows,
                         arrival_rows_per_second=1000.0, running_batch_age_s=running_age,
                         running_batch_id=1 if running_age else None)
    assert KingmanPolicy().evaluate(scale_down_view(live=live(4000)), CFG)[0].value == 3  # 4 s ≤ 1.5 × 4 s
    assert KingmanPolicy().evaluate(scale_down_view(live=live(7000)), CFG) == []  # 7 s of arrivals waiting
    assert KingmanPolicy().evaluate(scale_down_view(live=live(0, running_age=7.0)), CFG) == []


def test_scale_down_must_hold_at_the_peak_rate_of_the_delay():
    # the rate was 4.5× higher 12-20 s ago: at that load one executor fewer would not keep the bound
    peaked = [1000, 1000, 1000, 4500, 4500, 1000, 1000, 1000]
    v = view(peaked, latency=2.0, executors=4, util=0.2)
    assert peak_load(v, CFG, 30.0) > 2.0 and peak_load(v, CFG, 0.0) == 1.0
    assert KingmanPolicy().evaluate(v, CFG) == []
    assert KingmanPolicy().evaluate(v, CFG.model_copy(update={"scale_down_delay_s": 0.0}))[0].value == 3


def test_cluster_of_ignores_an_empty_profile():
    assert cluster_of(view([1000])) is None
    assert cluster_of(view([1000], cluster=ClusterInputs())) is None
    assert cluster_of(view([1000], cluster=ClusterInputs(driver_overhead_s=1.0))).driver_overhead_s == 1.0


def test_no_scale_up_right_after_a_scale_down_unless_work_in_flight_is_far_past_the_bound():
    def v(direction, age, since_s=8.0):
        live = LiveStats(status="running", observed_ms=NOW, running_batch_id=9, running_batch_age_s=age,
                         oldest_record_age_s=age, trigger_interval_s=4.0)
        return ClusteredJobView(job="j", now_ms=NOW, window_s=30.0, stages=(stage(util=0.2, records=1000.0),),
                                batches=batches([1000] * 8), executors=3, slots=3,
                                constraints=(ConstraintStats("c", None, 6.0, 5.0, latency_s=3.5),),
                                last_decision_ms={"executors": NOW - int(since_s * 1000)}, live=live,
                                last_executor_direction=direction)
    # measured on the standalone cluster: the interrupted batch leaves records 8-9 s in flight (bound 6 s)
    assert KingmanPolicy().evaluate(v(-1, 8.9), CFG) == []
    assert KingmanPolicy().evaluate(v(+1, 8.9), CFG)[0].value == 6  # after a scale-up: in flight → double
    assert KingmanPolicy().evaluate(v(-1, 13.0, since_s=13.0), CFG)[0].value == 6  # > 2 × bound: at once
    assert KingmanPolicy().evaluate(v(-1, 8.9, since_s=13.0), CFG)[0].value == 6  # after after_scale_down_s
