"""Catch-up sizing (``policies.catch_up``) and its use by utilization-target under in-flight pressure: exact, on
hand-made views."""
import math
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spark_governor.policies.base import BatchStats, ConstraintStats, JobView, LiveStats, StageStats
from spark_governor.policies.catch_up import catch_up_slots, waiting

NOW = 1_800_000_000_000


def stage(key="s", records=4000.0, util=1.0, p=2, tasks=200):
    # true rate per slot = records / (util × p) = 2 000 rows per busy slot-second
    return StageStats(key=key, name=key, tasks=tasks, service_mean_s=0.5, latency_mean_s=1.0, utilization=util,
                      parallelism=p, records_in_per_second=records, utilization_windows=(util, util),
                      max_tasks=tasks)


def batches(rate, n=6, gap_s=4.0):
    rows = int(rate * gap_s)
    return tuple(BatchStats(i, NOW - int((n - i) * gap_s * 1000), 2.0, rows, rows / gap_s, rows / 2.0)
                 for i in range(n))


def view(backlog=60_000.0, growth=None, arrival=5000.0, stages=None, executors=2, bound=8.0, age=20.0):
    live = LiveStats(status="running", observed_ms=NOW, running_batch_id=9, running_batch_age_s=age,
                     oldest_record_age_s=age + 4.0, oldest_record_source="source", backlog_rows=backlog,
                     processing_rows_per_second=4000.0, arrival_rows_per_second=arrival,
                     backlog_growth_rows_per_second=growth, trigger_interval_s=4.0, completed_batches=6)
    return JobView(job="j", now_ms=NOW, window_s=30.0, stages=tuple(stages or (stage(),)), batches=batches(4000.0),
                   executors=executors, slots=executors, live=live,
                   constraints=(ConstraintStats("e2e", None, bound, 5.0, latency_s=12.0),))


def test_the_rows_waiting_grow_over_the_provisioning_delay():
    # 5 000 rows/s arriving, 60 000 waiting
    assert waiting(view()) == (5000.0, 60_000.0)
    # a backlog growing by 3 000 rows/s grows 30 000 more over a 10 s provisioning delay
    assert waiting(view(growth=3000.0), delay_s=10.0) == (5000.0, 90_000.0)
    assert waiting(view(growth=-3000.0), delay_s=10.0) == (5000.0, 60_000.0)  # shrinking: as now
    # no live arrival rate: the completed batches' (4 000 rows/s)
    assert waiting(view(arrival=None)) == (4000.0, 60_000.0)
    for nothing in (view(backlog=0.0), view(backlog=None), replace(view(), live=None)):
        assert waiting(nothing) is None


def test_catch_up_slots_are_the_fewest_that_run_the_rate_within_rho_max():
    # 5 000 + 60 000 / 8 = 12 500 rows/s at 2 000 rows per busy slot-second: 6.25 busy slots, at ρ_max 0.9: 7
    assert catch_up_slots(view(), 12_500.0, 0.9) == 7
    # a second stage seeing half the records per source row, at 1 000 rows per busy slot-second: + 6.25
    two = [stage("a"), stage("b", records=2000.0, util=1.0, p=2)]
    assert catch_up_slots(view(stages=two), 12_500.0, 0.9) == math.ceil(12.5 / 0.9)
    # never more slots than a stage has tasks
    assert catch_up_slots(view(stages=[stage(tasks=4)]), 12_500.0, 0.9) == 4
    # a stage without a true rate (no busy time): unknown
    assert catch_up_slots(view(stages=[stage(util=0.0)]), 12_500.0, 0.9) is None


@settings(max_examples=200, deadline=None)
@given(backlog=st.floats(1, 2e5), arrival=st.floats(1, 2e4), horizon=st.floats(1, 600), rho=st.floats(0.3, 0.99),
       util=st.floats(0.1, 1.0), p=st.integers(1, 8))
def test_the_slots_are_the_fewest_that_run_the_catch_up_rate_within_rho_max(backlog, arrival, horizon, rho, util, p):
    # brute force: count whole slots up until their busy share at the catch-up rate is within ρ_max
    v = view(backlog=backlog, arrival=arrival, stages=[stage(records=4000.0, util=util, p=p, tasks=10**6)])
    busy = (arrival + backlog / horizon) / (4000.0 / (util * p))  # rows/s over rows per busy slot-second
    k = 1
    while busy / k > rho * (1 + 1e-9):
        k += 1
    assert catch_up_slots(v, arrival + backlog / horizon, rho) == k


def test_utilization_target_catch_up_is_an_option_sized_at_its_target():
    from spark_governor.policies.utilization_target import UtilizationTargetConfig, UtilizationTargetPolicy

    cfg = UtilizationTargetConfig(min_value=1, max_value=64, slots_per_executor=1)
    # work in flight 20 s against the 8 s bound: the pressure's factor doubles 2 → 4 (its default)
    (p,) = UtilizationTargetPolicy().evaluate(view(), cfg)
    assert p.value == 4 and p.inputs["catch_up"] is None and "catch up" not in p.reason
    # with catch_up: 5 000 + 60 000 / 8 = 12 500 rows/s at 2 000 rows per busy slot-second, 6.25 busy slots
    # at the target utilization 0.7: ⌈8.93⌉ = 9 executors
    (p,) = UtilizationTargetPolicy().evaluate(view(), cfg.model_copy(update={"catch_up": True}))
    assert p.value == 9
    assert "sized to catch up: 60,000 rows waiting worked off within 8 s at 12,500 rows/s" in p.reason
    assert p.inputs["catch_up"]["executors"] == 9 and p.inputs["catch_up"]["horizon_s"] == 8.0
    # a horizon of 60 s: 6 000 rows/s, 4.3 slots → 5, still above the doubling
    (p,) = UtilizationTargetPolicy().evaluate(view(), cfg.model_copy(update={"catch_up": True, "catch_up_s": 60.0}))
    assert p.value == 5
    # never beyond the bounds
    (p,) = UtilizationTargetPolicy().evaluate(view(), cfg.model_copy(update={"catch_up": True, "max_value": 6}))
    assert p.value == 6
    with pytest.raises(ValueError, match="catch_up_s"):
        UtilizationTargetConfig(catch_up_s=0)
