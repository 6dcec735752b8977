"""Kingman with the live arrival rate (``live_rate``, ``live_load``; kept by issue #44's ablation: +13.3 points of
the worst case on a slower service): a rate step sized for before it reaches a completed batch.
Views as in test_kingman_cluster: one stage, trigger 4 s, bound 8 s, 4 executors of one slot."""
from dataclasses import replace

import pytest

from spark_governor.policies.base import BatchStats, ConstraintStats, LiveStats, StageStats
from spark_governor.policies.cluster_inputs import ClusterInputs, ClusteredJobView
from spark_governor.policies.kingman import KingmanPolicy
from spark_governor.policies.kingman_config import KingmanConfig
from spark_governor.policies.kingman_signals import live_load, row_share, work_growth

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


# -- the work a planned load adds: only the per-row part of a batch grows (kingman_signals.row_share) ----------

def _batches(points):
    """(rows, processing s) per batch, one every 4 s."""
    n = len(points)
    return tuple(BatchStats(i, NOW - (n - i) * 4000, s, rows, rows / 4.0, rows / s) for i, (rows, s) in enumerate(points))


def test_row_share_is_the_fitted_per_row_part_of_the_mean_batch():
    # 16 000 rows in 2.0 s and 64 000 rows in 4.4 s (the jar-path run of 2026-12-07 17:00, two executors):
    # processing = 1.2 s + 5e-5 s/row; at the mean (40 000 rows) 2.0 of 3.2 s grow with rows
    v = replace(view([4000] * 4), batches=_batches([(16000, 2.0), (16000, 2.0), (64000, 4.4), (64000, 4.4)]))
    assert row_share(v) == pytest.approx(2.0 / 3.2)
    assert work_growth(v, 4.0) == pytest.approx(1 + 3 * 2.0 / 3.2) and work_growth(v, 1.0) == 1.0
    # brute force: the least-squares line through the points, whatever their order
    pts = [(16000, 2.1), (40000, 2.9), (64000, 4.5), (30000, 2.6)]
    rows, secs = [r for r, _ in pts], [s for _, s in pts]
    mr, ms = sum(rows) / 4, sum(secs) / 4
    slope = sum((r - mr) * (s - ms) for r, s in pts) / sum((r - mr) ** 2 for r in rows)
    assert row_share(replace(v, batches=_batches(pts))) == pytest.approx(slope * mr / ms)


def test_one_level_of_rows_leaves_the_measured_driver_overhead_fixed():
    flat = view([4000] * 6)  # every batch 16 000 rows in 2.0 s: no line through one point
    assert row_share(flat) == 1.0  # nothing known to be fixed: the thesis' Ā / load
    measured = replace(flat, cluster=ClusterInputs(driver_overhead_s=0.5))
    assert row_share(measured) == pytest.approx(0.75) and work_growth(measured, 3.0) == pytest.approx(2.5)
    # a falling line (batches slower with fewer rows: another cause than rows) is not a fit
    falling = replace(measured, batches=_batches([(64000, 2.0), (16000, 3.0), (64000, 2.0)]))
    assert row_share(falling) == pytest.approx(1 - 0.5 / (7 / 3))


def test_a_live_step_is_planned_on_the_work_it_adds_not_on_the_whole_batch():
    # batches of 2.0 s every 4 s, 1.5 s of it fixed: a 3× live rate makes 2.0 + 2 × 0.5 = 3.0 s, not 6 s (ρ 1.5)
    steady = view([3000] * 8, latency=6.0, util=0.3, tasks=64, cluster=ClusterInputs(driver_overhead_s=1.5))
    stepped = replace(steady, live=_live(9000.0))
    on = CFG.model_copy(update={"live_rate": True})
    plan = KingmanPolicy().plan(stepped, on, 3.0)
    assert plan["work"] == pytest.approx(1.5) and plan["load"] == 3.0
    assert plan["query_load"] == pytest.approx(2.0 * 1.5 / 4.0)
    assert not plan["constraints"]["c"]["bottleneck"]
    whole = KingmanPolicy().plan(replace(stepped, cluster=None), on, 3.0)  # nothing known fixed: the thesis' rule
    assert whole["work"] == 3.0 and whole["constraints"]["c"]["bottleneck"]
