"""The Kingman policy with the job's measured cluster profile (issue #14): the latency split in the
prediction, the Eq. 4.9 budget less the terms outside the tasks, and the paper's model when no profile is
known. (The sizing by the rate trend over the provisioning delay and the lazy scale-down were removed by
issue #44's ablation; a scale-down is planned at once, the framework's cool-down holding it after a
scale-up.)"""
import pytest

from spark_governor.policies.base import BatchStats, ConstraintStats, StageStats
from spark_governor.policies.cluster_inputs import ClusteredJobView, ClusterInputs, cluster_of
from spark_governor.policies.kingman import KingmanPolicy
from spark_governor.policies.kingman_config import KingmanConfig
from spark_governor.policies.kingman_signals import trigger_wait_s
from spark_governor.policies.queueing import VertexModel, with_load

NOW = 1_000_000_000
CFG = KingmanConfig(trigger_interval_s=4.0, min_value=1, max_value=64, warmup_windows=1, spare_executors=0)


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


def test_a_scale_down_is_planned_at_once_even_after_a_peak():
    """No lazy scale-down in the policy (issue #44: 16 % more executor-seconds for no span): one executor
    fewer as soon as the plan with its margin allows, whenever the last decision and whatever the rate was."""
    quiet = view([1000] * 8, latency=2.0, bound=8.0, executors=4, util=0.2, last_ms=NOW - 10_000)
    assert KingmanPolicy().evaluate(quiet, CFG)[0].value == 3
    peaked = view([1000, 1000, 1000, 4500, 4500, 1000, 1000, 1000], latency=2.0, executors=4, util=0.2)
    assert KingmanPolicy().evaluate(peaked, CFG)[0].value == 3


def test_cluster_of_ignores_an_empty_profile():
    assert cluster_of(view([1000])) is None
    assert cluster_of(view([1000], cluster=ClusterInputs())) is None
    assert cluster_of(view([1000], cluster=ClusterInputs(driver_overhead_s=1.0))).driver_overhead_s == 1.0

