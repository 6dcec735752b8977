"""Kingman with the live arrival rate (``live_rate``, ``live_load``; kept by issue #44's ablation: +13.3 points of
the worst case on a slower service): a rate step sized for before it reaches a completed batch.
Views as in test_kingman_cluster: one stage, trigger 4 s, bound 8 s, 4 executors of one slot."""
from dataclasses import replace

import pytest

from spark_governor.policies.base import BatchStats, ConstraintStats, LiveStats, StageStats
from spark_governor.policies.cluster_inputs import ClusteredJobView
from spark_governor.policies.kingman import KingmanPolicy
from spark_governor.policies.kingman_config import KingmanConfig
from spark_governor.policies.kingman_signals import live_load

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




# -- the live arrival rate (live_rate): a step not yet in a completed batch --------------------------------

def _live(arrival):
    return LiveStats(status="running", observed_ms=NOW, running_batch_id=9, running_batch_age_s=1.0,
                     arrival_rows_per_second=arrival, trigger_interval_s=4.0, completed_batches=3)


def test_live_load_is_the_live_arrival_rate_over_the_completed_batches():
    v = view([3000] * 8)
    assert live_load(replace(v, live=_live(9000.0))) == pytest.approx(3.0)
    assert live_load(replace(v, live=_live(1500.0))) == 1.0  # a falling rate: never below 1
    assert live_load(replace(v, live=_live(None))) == 1.0 and live_load(v) == 1.0


def test_live_rate_sizes_a_scale_out_before_the_step_reaches_a_completed_batch():
    steady = view([3000] * 8, latency=6.0, util=0.6, tasks=64)
    stepped = replace(steady, live=_live(9000.0))
    on, off = (CFG.model_copy(update={"live_rate": x}) for x in (True, False))
    assert KingmanPolicy().evaluate(steady, on) == []  # at 3 000 rows/s the 4 executors keep the bound
    assert KingmanPolicy().evaluate(stepped, off) == []  # off: the completed batches only
    assert KingmanConfig().live_rate is None  # unset: on where the sources are probed (policies.in_flight.uses_live_rate)
    out = KingmanPolicy().evaluate(stepped, on)
    assert out and out[0].value > 4
    plan = KingmanPolicy().plan(stepped, on, 3.0)
    assert out[0].value >= plan["executors"]
