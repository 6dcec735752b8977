"""A micro-batch under a planned load (``policies.batch_load``, ``queueing.with_batch_load``; issue #14):
the fixed part of a batch fitted from its rows, the stage model with longer tasks, and Kingman's plan
at a rate step seen live — the case measured on the standalone cluster (run 104: 2 executors at
16 000 rows/s worked at 0.9, where the thesis' rule planned 4)."""
import math

import pytest
from hypothesis import given, strategies as st

from spark_governor.policies.base import BatchStats, ConstraintStats, JobView, LiveStats, StageStats
from spark_governor.policies.batch_load import (batch_fixed_s, batch_time_at, loaded_fixed_latency_s, query_slots,
                                                 waves)
from spark_governor.policies.cluster_inputs import ClusteredJobView, ClusterInputs
from spark_governor.policies.kingman import KingmanPolicy
from spark_governor.policies.kingman_config import KingmanConfig
from spark_governor.policies.queueing import VertexModel, with_batch_load, with_load

NOW = 1_000_000_000
TRIGGER_S = 8.0


def batch_s(rows: int) -> float:
    """Run 104's batches on 2 executors: 1.7, 4.0 and 7.2 s at 16 000, 64 000 and 128 000 rows."""
    return 0.8 + 5e-5 * rows


def batches(sizes, processing=batch_s):
    n = len(sizes)
    return tuple(BatchStats(i, NOW - int((n - i) * TRIGGER_S * 1000), processing(r), r, r / TRIGGER_S,
                            r / processing(r)) for i, r in enumerate(sizes))


def plain_view(sizes, processing=batch_s):
    return JobView(job="j", now_ms=NOW, window_s=16.0, stages=(), batches=batches(sizes, processing))


def test_the_fixed_part_is_the_intercept_of_batch_time_against_rows():
    assert batch_fixed_s(plain_view([16000] * 4 + [64000] * 4 + [128000] * 2), None) == pytest.approx(0.8)
    assert batch_time_at(batch_s(64000), 0.8, 2.0) == pytest.approx(batch_s(128000))


def test_the_fit_falls_back_without_rows_that_spread():
    same = plain_view([64000] * 6)
    assert batch_fixed_s(same, None, fallback_s=0.2) == 0.2  # one batch size says nothing of the intercept
    assert batch_fixed_s(plain_view([16000, 64000]), None, fallback_s=0.2) == 0.2  # fewer than 3 batches
    # only the batches since the last executor change count (one pool): here those are all one size
    mixed = plain_view([16000] * 4 + [64000] * 4)
    assert batch_fixed_s(mixed, NOW - 4 * 8000) == 0.0
    assert batch_fixed_s(plain_view([16000, 32000, 64000], processing=lambda r: 5.0), None, 0.3) == 0.3  # slope 0


def test_the_fixed_part_stays_within_zero_and_the_shortest_batch():
    # a negative intercept (cost growing faster than linearly) is 0; one above the shortest batch is capped
    assert batch_fixed_s(plain_view([1000, 2000, 4000], processing=lambda r: (r / 1000) ** 2), None) == 0.0
    assert batch_fixed_s(plain_view([1000, 2000, 8000], processing=lambda r: 3.0 + math.log(r / 1000)), None) \
        <= 3.0
    assert batch_time_at(4.0, 9.0, 2.0) == 4.0  # a fixed part above the mean is the mean: nothing grows


def test_the_latency_at_a_load_grows_by_the_batch_variable_time():
    # measured 8 s of which 1 s slot wait; the batch's variable time 3.2 s; at twice the rate the
    # non-queueing part gains 3.2 − 1 = 2.2 s (the wait, ×2 in the model, carries the rest)
    assert loaded_fixed_latency_s(7.0, 1.0, 3.2, 2.0) == pytest.approx(9.2)
    assert loaded_fixed_latency_s(7.0, 1.0, 3.2, 1.0) == 7.0
    assert loaded_fixed_latency_s(7.0, 4.0, 3.2, 2.0) == 7.0  # never less than the measured part


def test_with_batch_load_makes_tasks_longer_and_the_wait_grow_with_them():
    v = VertexModel(p=2, S=1.7, A=4.0, cA=1.0, cS=0.2, p_max=4, w=0.86, e_clamp=(0.1, 10.0))
    u = with_batch_load(v, 2.0)
    assert (u.S, u.A, u.l) == (pytest.approx(3.4), 4.0, pytest.approx(2 * v.l))
    assert u.rho(2) == pytest.approx(2 * v.rho(2)) == pytest.approx(with_load(v, 2.0).rho(2))
    assert u.wait(2) == pytest.approx(2 * v.wait(2))
    # the thesis' rule keeps e_v: its wait at p grows as Kingman's ρ/(1 − ρ), far more
    assert with_load(v, 2.0).wait(2) > 3 * u.wait(2)  # ×7.7 against ×2
    assert u.wait(4) < u.wait(3) < u.wait(2) and with_batch_load(v, 1.0) is v
    assert with_batch_load(v, 2.5).wait(2) == math.inf  # ρ 1.06: unstable at p
    with pytest.raises(ValueError):
        with_batch_load(v, 0.0)


@given(p=st.integers(1, 16), s=st.floats(0.01, 10), rho=st.floats(0.01, 0.95), w=st.floats(0.0, 20),
       factor=st.floats(0.2, 3.0), c_a=st.floats(0, 3), c_s=st.floats(0, 3))
def test_with_batch_load_reproduces_the_wait_times_the_load_at_the_current_size(p, s, rho, w, factor, c_a, c_s):
    v = VertexModel(p=p, S=s, A=s / rho, cA=c_a, cS=c_s, p_max=4 * p, w=w, e_clamp=(0.1, 10.0))
    u = with_batch_load(v, factor)
    assert u.rho(p) == pytest.approx(factor * v.rho(p))
    if factor * rho < 1 and v.wait(p) > 1e-9 and math.isfinite(u.wait_unfitted(p)):
        assert u.wait(p) == pytest.approx(factor * v.wait(p), rel=1e-9)
    elif factor * rho >= 1:
        assert u.wait(p) == math.inf


def run104_view(live_rate: float = 16000.0, processing=batch_s) -> ClusteredJobView:
    """Run 104 at the 16 000 rows/s step: 2 executors (1 slot each), 4 tasks a batch, batches of 16 000
    then 64 000 rows since the last executor change, the live rate showing the step."""
    stage = StageStats(key="s", name="s", tasks=4, service_mean_s=1.72, latency_mean_s=2.58, utilization=0.43,
                       parallelism=2, records_in_per_second=8000.0, utilization_windows=(0.43, 0.43),
                       service_cv=0.2, arrival_cv=0.5, wait_mean_s=0.86, max_tasks=4)
    live = LiveStats(status="waiting", observed_ms=NOW, arrival_rows_per_second=live_rate, arrival_probed=True)
    return ClusteredJobView(job="j", now_ms=NOW, window_s=16.0, stages=(stage,),
                            batches=batches([16000] * 6 + [64000] * 6, processing), executors=2, slots=2,
                            constraints=(ConstraintStats("e2e", None, 14.0, 8.0, latency_s=8.0),),
                            last_decision_ms={"executors": NOW - 12 * 8000 - 1}, live=live,
                            cluster=ClusterInputs(provisioning_delay_s=10.0, driver_overhead_s=0.2))


CFG = KingmanConfig(min_value=1, max_value=4, warmup_windows=1, trigger_interval_s=TRIGGER_S, batch_load=True)


def test_a_doubled_rate_seen_live_keeps_the_two_executors_that_carry_it():
    policy = KingmanPolicy()
    assert policy.evaluate(run104_view(), CFG) == []  # 16 000 rows/s on 2: batches of 7.2 s, ρ 0.86
    plan = policy.plan(run104_view(), CFG, 2.0)
    assert plan["executors"] == 2 and plan["query_load"] == pytest.approx(batch_s(128000) / TRIGGER_S)
    thesis = policy.evaluate(run104_view(), CFG.model_copy(update={"batch_load": False}))
    assert [p.value for p in thesis] == [4] and thesis[0].reason.startswith("bottleneck")
    # the thesis' rule doubles the whole batch time: query load 1.0, a bottleneck
    assert policy.plan(run104_view(), CFG.model_copy(update={"batch_load": False}), 2.0)["query_load"] \
        == pytest.approx(2 * batch_s(64000) / TRIGGER_S)


def test_a_rate_the_two_cannot_carry_is_still_scaled_out_before_its_batch():
    up = KingmanPolicy().evaluate(run104_view(live_rate=20000.0), CFG)  # ρ 1.08 on 2
    assert [p.value for p in up] == [4]


def test_query_slots_keep_the_batch_within_the_floor_of_its_trigger():
    # run 104: 4 s batches at 64 000 rows on 2 slots (0.8 s fixed), 8 s trigger, 4 tasks a stage
    assert query_slots(4.0, 0.8, 2.0, 8.0, [4, 4], 2, 0.9) == 2  # 7.2 s: 0.9 of the trigger
    assert query_slots(4.3, 0.8, 2.0, 8.0, [4, 4], 2, 0.9) == 4  # 7.8 s on 2; 4.3 s on 4 (one wave)
    assert query_slots(4.3, 0.8, 2.0, 8.0, [4, 4], 2, 0.99) == 2
    assert query_slots(4.3, 0.8, 5.0, 8.0, [4, 4], 2, 0.9) == 4  # too much even in one wave: the most tasks
    assert query_slots(2.0, 0.5, 3.0, 8.0, [8], 2, 0.9) == 2  # 5 s
    assert query_slots(3.0, 0.5, 3.0, 8.0, [8], 2, 0.9) == 3  # 8 s on 2 (4 waves); 3 waves: 6.1 s
    assert waves([4, 8], 3) == 3 and waves([4], 4) == 1


def test_a_planned_batch_past_the_floor_of_its_trigger_gets_the_waves_that_bring_it_back():
    # batches 0.3 s slower than run 104's (run 111 on the same machine): 7.8 s at 16 000 rows/s on 2
    slower = lambda rows: 1.0 + 5.2e-5 * rows  # noqa: E731
    up = KingmanPolicy().evaluate(run104_view(processing=slower), CFG)
    assert [p.value for p in up] == [4]
    assert up[0].inputs["plan"]["query_load"] == pytest.approx(slower(128000) / TRIGGER_S, rel=1e-6)
    assert not up[0].reason.startswith("bottleneck")  # a plan, with its predicted latency
    assert up[0].prediction["latency_s"] < 14.0


def test_batch_load_is_off_by_default_the_thesis_rule():
    assert KingmanConfig().batch_load is False
