"""Kingman's scale-out with the measured warm-up of new executors (issue #14: "a scale-out is sized for the
load expected when the new executors will be working"; ``warm_equivalent``, ``KingmanPolicy._warmup_sized``),
and with the live arrival rate (``live_rate``, ``live_load``).
Views as in test_kingman_cluster: one stage, trigger 4 s, bound 8 s, 4 executors of one slot, 64 tasks."""
import pytest

from spark_governor.policies.base import BatchStats, ConstraintStats, StageStats
from spark_governor.policies.cluster_inputs import ClusteredJobView, ClusterInputs
from spark_governor.policies.kingman import KingmanPolicy
from spark_governor.policies.kingman_config import KingmanConfig
from spark_governor.policies.kingman_signals import live_load, warm_equivalent

NOW = 1_000_000_000
CFG = KingmanConfig(trigger_interval_s=4.0, min_value=1, max_value=64, warmup_windows=1, spare_executors=0)


def view(rates, latency=5.0, bound=8.0, executors=4, util=0.5, cluster=None, tasks=16):
    """One batch per rate every 4 s (2 s each); the stage's latest window at busy fraction ``util``."""
    st = StageStats(key="s", name="s", tasks=tasks, service_mean_s=0.5, latency_mean_s=1.5, utilization=util,
                    parallelism=4, records_in_per_second=float(rates[-1]), utilization_windows=(util, util),
                    service_cv=0.2, arrival_cv=0.5, wait_mean_s=1.0, max_tasks=tasks)
    n = len(rates)
    batches = tuple(BatchStats(i, NOW - (n - i) * 4000, 2.0, int(r * 4), r, r * 2.0) for i, r in enumerate(rates))
    return ClusteredJobView(job="j", now_ms=NOW, window_s=30.0, stages=(st,), batches=batches,
                            executors=executors, slots=executors,
                            constraints=(ConstraintStats("c", None, bound, 5.0, latency_s=latency),),
                            last_decision_ms={}, cluster=cluster)

SLOW = ClusterInputs(warmup_factor=3.0, warmup_s=8.0)  # new executors a third as fast for a whole interval
MILD = ClusterInputs(warmup_factor=1.05, warmup_s=4.0)
TIGHT = dict(latency=8.6, util=0.75, tasks=64)  # the steady plan: 4 → 6, predicted 7.85 s of the 8 s bound
ROOMY = dict(latency=8.4, util=0.85, tasks=64)  # the steady plan: 4 → 5, predicted 7.07 s


def test_warm_equivalent_counts_a_new_executor_at_its_share_of_an_interval():
    # factor 2 for 4 s of an 8 s interval: η = 1 − 0.5 · (1 − 1/2) = 0.75 of a warm executor
    assert warm_equivalent(ClusterInputs(warmup_factor=2.0, warmup_s=4.0), 4, 6, 8.0) == pytest.approx(4 + 2 * 0.75)
    # slow for longer than the interval: 1/factor of a warm one
    assert warm_equivalent(SLOW, 4, 6, 4.0) == pytest.approx(4 + 2 / 3)
    # nothing to count: no profile, no warm-up measured, factor ≤ 1, a scale-in, no horizon
    assert warm_equivalent(None, 4, 6, 8.0) == 6
    assert warm_equivalent(ClusterInputs(provisioning_delay_s=5.0), 4, 6, 8.0) == 6
    assert warm_equivalent(ClusterInputs(warmup_factor=0.9, warmup_s=4.0), 4, 6, 8.0) == 6
    assert warm_equivalent(SLOW, 6, 4, 8.0) == 4
    assert warm_equivalent(SLOW, 4, 6, 0.0) == 6


def test_a_scale_out_the_warm_up_would_break_gets_more_executors():
    steady = KingmanPolicy().evaluate(view([3000] * 8, **TIGHT), CFG)
    warm = KingmanPolicy().evaluate(view([3000] * 8, cluster=SLOW, **TIGHT), CFG)
    assert steady[0].value == 6 and "warmup" not in steady[0].inputs
    w = warm[0].inputs["warmup"]
    assert warm[0].value == 6 + w["added"] and w["added"] >= 1
    # the warming pool of the chosen size keeps the bound, one fewer would not
    assert w["latency_s"] <= 8.0 and warm[0].prediction["warmup_latency_s"] == w["latency_s"]
    assert w["worth_executors"] == pytest.approx(warm_equivalent(SLOW, 4, warm[0].value, 4.0))
    fewer = warm_equivalent(SLOW, 4, warm[0].value - 1, 4.0)
    plan = KingmanPolicy().plan(view([3000] * 8, cluster=SLOW, **TIGHT), CFG)
    models, fixed = plan["models"]["c"]
    assert KingmanPolicy.predict(models, fixed, fewer, 1)[0] > 8.0
    # never past the size whose warming pool is worth the steady plan's 6 warm executors
    assert w["worth_executors"] <= 6 + 1e-9 or warm[0].value == 4 + 1
    assert "warm-up" in warm[0].reason and "×3.00" in warm[0].reason


def test_the_warm_up_adds_nothing_where_the_bound_holds_anyway():
    roomy = KingmanPolicy().evaluate(view([3000] * 8, cluster=SLOW, **ROOMY), CFG)
    assert roomy[0].value == 5 and roomy[0].inputs["warmup"]["added"] == 0
    assert roomy[0].inputs["warmup"]["latency_s"] <= 8.0
    mild = KingmanPolicy().evaluate(view([3000] * 8, cluster=MILD, **TIGHT), CFG)
    assert mild[0].value == 6 and mild[0].inputs["warmup"]["added"] == 0
    assert "warm-up" not in mild[0].reason


def test_warmup_sizing_off_or_without_a_cluster_model_is_the_steady_plan():
    off = CFG.model_copy(update={"warmup_sizing": False})
    assert KingmanPolicy().evaluate(view([3000] * 8, cluster=SLOW, **TIGHT), off)[0].value == 6
    paper = CFG.model_copy(update={"cluster_model": False})
    out = KingmanPolicy().evaluate(view([3000] * 8, cluster=SLOW, **TIGHT), paper)
    assert out[0].value == 6 and "warmup" not in out[0].inputs


def test_no_warm_up_executors_within_the_useful_maximum():
    # 8 tasks: at most 8 one-slot executors can work; the warm-up never asks beyond them
    out = KingmanPolicy().evaluate(view([3000] * 8, cluster=SLOW, latency=8.6, util=0.75, tasks=8), CFG)
    assert out and out[0].value <= 8


# -- the live arrival rate (live_rate): a step not yet in a completed batch --------------------------------

def _live(arrival):
    from spark_governor.policies.base import LiveStats
    return LiveStats(status="running", observed_ms=NOW, running_batch_id=9, running_batch_age_s=1.0,
                     arrival_rows_per_second=arrival, trigger_interval_s=4.0, completed_batches=3)


def test_live_load_is_the_live_arrival_rate_over_the_completed_batches():
    from dataclasses import replace


    v = view([3000] * 8)
    assert live_load(replace(v, live=_live(9000.0)), CFG) == pytest.approx(3.0)  # measured: not capped at 2
    assert live_load(replace(v, live=_live(1500.0)), CFG) == 1.0  # a falling rate: never below 1
    assert live_load(replace(v, live=_live(None)), CFG) == 1.0 and live_load(v, CFG) == 1.0


def test_live_rate_sizes_a_scale_out_before_the_step_reaches_a_completed_batch():
    from dataclasses import replace

    steady = view([3000] * 8, latency=6.0, util=0.6, tasks=64)
    stepped = replace(steady, live=_live(9000.0))
    on, off = (CFG.model_copy(update={"live_rate": x}) for x in (True, False))
    assert KingmanPolicy().evaluate(steady, on) == []  # at 3 000 rows/s the 4 executors keep the bound
    assert KingmanPolicy().evaluate(stepped, off) == []  # off: the completed batches only
    assert not KingmanConfig().live_rate  # off by default (docs/policies/kingman.md, the what-if searches)
    out = KingmanPolicy().evaluate(stepped, on)
    assert out and out[0].value > 4
    plan = KingmanPolicy().plan(stepped, on, 3.0)
    assert out[0].value >= plan["executors"]
