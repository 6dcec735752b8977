"""The health verdict (aggregators.health) on constructed views: every state, the order of the rules,
and the recommendation formula."""
import math

import pytest
from hypothesis import given, strategies as st

from spark_governor.aggregators.health import STATES, critical_time_s, query_view, recommend, verdict
from spark_governor.policies.base import BatchStats, ConstraintStats, JobView, LiveStats, StageStats

NOW = 1_000_000_000


def stage(key="s0", service=0.2, busy=1.0, ordinal=0):
    return StageStats(key=key, name=key, tasks=10, service_mean_s=service, latency_mean_s=service,
                      utilization=None, parallelism=4, records_in_per_second=100.0, busy_slots=busy, ordinal=ordinal)


def batches(n=5, processing=1.0, rows=100, every_ms=2000):
    return tuple(BatchStats(batch_id=i, trigger_ms=NOW - (n - i) * every_ms, processing_s=processing,
                            num_input_rows=rows, input_rows_per_second=50.0, processed_rows_per_second=100.0)
                 for i in range(n))


def view(**kw):
    base = dict(job="j", now_ms=NOW, window_s=30.0, stages=(stage(),), batches=batches(), executors=4, slots=8)
    base.update(kw)
    return JobView(**base)


def live(**kw):
    base = dict(status="waiting", observed_ms=NOW, trigger_interval_s=2.0, completed_batches=5)
    base.update(kw)
    return LiveStats(**base)


def test_unknown_without_data():
    v = verdict(view(stages=(), batches=()))
    assert v.state == "unknown" and v.recommendation is None


def test_idle_from_the_live_state_and_from_empty_batches():
    assert verdict(view(live=live(status="idle"))).state == "idle"
    v = verdict(view(batches=batches(rows=0)))
    assert v.state == "idle" and "read no rows" in v.reason


def test_failed_tasks_and_terminated_queries_are_unhealthy_first():
    v = verdict(view(live=live(status="idle")), failed_tasks=3)
    assert v.state == "unhealthy" and "3 task(s) failed" in v.reason
    assert verdict(view(live=live(status="terminated"))).state == "unhealthy"


def test_no_progress_when_data_waits_and_nothing_completes():
    lv = live(status="running", running_batch_age_s=25.0, backlog_rows=5000, arrival_rows_per_second=100.0,
              completed_batches=0)
    v = verdict(view(batches=(), live=lv))
    assert v.state == "no-progress" and "25.00 s" in v.reason
    # younger than the budget (the 2 s trigger): not yet
    young = live(status="running", running_batch_age_s=1.0, backlog_rows=10, completed_batches=0)
    assert verdict(view(batches=(), live=young)).state == "unknown"


def test_underprovisioned_with_a_recommendation():
    # batches take 3 s against a 2 s trigger; critical time 0.2 s; 4 executors
    v = verdict(view(batches=batches(processing=3.0), live=live()))
    assert v.state == "underprovisioned" and "3.00 s against a 2.00 s trigger" in v.reason
    assert v.recommended_executors == math.ceil(4 * (3.0 - 0.2) / (0.8 * 2.0 - 0.2))  # 8
    assert "about 8 executors" in v.recommendation


def test_missed_slo_is_underprovisioned():
    c = ConstraintStats(name="e2e", vertices=None, bound_s=4.0, span_s=10.0, latency_s=5.0, batching_wait_s=1.0,
                        attainment=0.6)
    v = verdict(view(constraints=(c,), batches=batches(processing=1.9), live=live()))
    assert v.state == "underprovisioned" and "60%" in v.reason
    assert v.numbers["budget_s"] == pytest.approx(2.0)  # min(trigger 2, bound 4 − wait 1)


def test_a_wait_beyond_the_bound_is_the_trigger_only_when_the_job_keeps_up():
    """The measured wait for a batch to start includes the queue behind overrunning batches: with batches that
    keep up it is the trigger's fault (unhealthy: shorten it); behind overrunning batches, underprovisioned."""
    c = ConstraintStats(name="e2e", vertices=None, bound_s=3.0, span_s=5.0, latency_s=9.0, batching_wait_s=4.0,
                        attainment=0.0)
    keeps_up = verdict(view(constraints=(c,), batches=batches(processing=1.0), live=live()))
    assert keeps_up.state == "unhealthy" and "shorten the trigger interval" in keeps_up.reason
    behind = verdict(view(constraints=(c,), batches=batches(processing=3.5), live=live()))
    assert behind.state == "underprovisioned" and "3.50 s against a 2.00 s trigger" in behind.reason
    stuck = verdict(view(constraints=(c,), live=live(status="running", running_batch_age_s=9.0)))
    assert stuck.state == "underprovisioned" and "beyond the bound" in stuck.reason


def test_growing_backlog_is_underprovisioned():
    lv = live(backlog_growth_rows_per_second=20.0, processing_rows_per_second=100.0)
    v = verdict(view(live=lv))
    assert v.state == "underprovisioned" and "backlog grows" in v.reason


def test_critical_time_beyond_the_budget_is_unhealthy_not_underprovisioned():
    stages = (stage("a", service=1.0, ordinal=0), stage("b", service=0.9, ordinal=1))
    v = verdict(view(stages=stages, batches=batches(processing=3.0), live=live()))
    assert v.state == "unhealthy" and "cannot help" in v.reason and v.recommended_executors is None


def test_overprovisioned_and_optimal():
    # 0.5 s batches of a 2 s budget, 1 busy slot of 8
    v = verdict(view(batches=batches(processing=0.5), live=live()))
    assert v.state == "overprovisioned"
    assert v.recommended_executors == math.ceil(4 * (0.5 - 0.2) / (0.8 * 2.0 - 0.2))  # 1
    # busy: optimal
    v = verdict(view(batches=batches(processing=0.5), stages=(stage(busy=6.0),), live=live()))
    assert v.state == "optimal" and v.recommendation is None
    # one executor cannot shrink
    assert verdict(view(batches=batches(processing=0.5), executors=1, slots=2, live=live())).state == "optimal"


def test_trigger_interval_falls_back_to_the_batch_spacing():
    assert view().trigger_interval_s() == pytest.approx(2.0)
    assert view(live=live(trigger_interval_s=5.0)).trigger_interval_s() == 5.0
    assert view().trigger_interval_s(3.0) == 3.0
    assert critical_time_s(view(stages=(stage("a", 0.1), stage("b", 0.3)))) == pytest.approx(0.4)


def test_every_state_is_listed():
    assert set(STATES) == {"unknown", "idle", "unhealthy", "no-progress", "underprovisioned", "overprovisioned",
                           "optimal"}


@given(e=st.integers(1, 64), p=st.floats(0.01, 100), c=st.floats(0, 5), b=st.floats(0.1, 60))
def test_recommendation_is_the_least_executors_that_fit(e, p, c, b):
    """The least N with c + (p − c)·e/N ≤ 0.8·b (checked against its neighbours, brute force when small)."""
    n = recommend(e, p, c, b, 0.8)
    if 0.8 * b - c <= 0:
        assert n is None
        return
    parallel = max(p - c, 0)
    def fits(k, slack):
        return c + parallel * e / k <= 0.8 * b * (1 + slack)
    assert fits(n, 1e-9)  # N is enough ...
    assert n == 1 or not fits(n - 1, -1e-9)  # ... and one fewer is not (up to rounding)


def test_a_query_is_judged_on_its_own_batches_and_state():
    import dataclasses
    fast = batches(processing=0.5)
    slow = tuple(dataclasses.replace(b, batch_id=b.batch_id + 100, processing_s=3.0, query_id="q2") for b in fast)
    v = view(batches=tuple(dataclasses.replace(b, query_id="q1") for b in fast) + slow, live=live())
    q2 = query_view(v, {"query_id": "q2", "status": "waiting", "observed_ms": NOW, "trigger_interval_s": 2.0})
    assert [b.query_id for b in q2.batches] == ["q2"] * 5 and q2.stages == () and q2.live.completed_batches == 5
    assert verdict(q2).state == "underprovisioned"
    q1 = query_view(v, {"query_id": "q1", "status": "idle", "observed_ms": NOW, "trigger_interval_s": 2.0})
    assert verdict(q1).state == "idle"
