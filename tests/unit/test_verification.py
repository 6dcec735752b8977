"""Verified actions (policies.verification): the job's health before vs after a change, and the verdict."""
from spark_governor.policies.base import BatchStats, ConstraintStats, JobView, LiveStats, PartitionBatchStats
from spark_governor.policies.verification import confounders, judge_harm, snapshot, verification

NOW = 2_000_000_000


def view(processing=1.0, latency=None, bound=None, growth=None, load=None):
    batches = tuple(BatchStats(batch_id=i, trigger_ms=NOW - (5 - i) * 2000, processing_s=processing, num_input_rows=10,
                               input_rows_per_second=5.0, processed_rows_per_second=10.0) for i in range(5))
    constraints = (ConstraintStats("e2e", None, bound, 10.0, latency_s=latency),) if bound else ()
    live = (LiveStats(status="waiting", observed_ms=NOW, backlog_growth_rows_per_second=growth * 100,
                      processing_rows_per_second=100.0) if growth is not None else None)
    parts = (PartitionBatchStats(batch_id=1, received_ms=NOW, algorithm="x", partitions=4, reduce=4, tuples=10,
                                 keys=3, max_mean_load=load),) if load else ()
    return JobView(job="j", now_ms=NOW, window_s=30.0, batches=batches, constraints=constraints, live=live,
                   partition_stats=parts)


def test_snapshot_reads_the_views_health_quantities():
    s = snapshot(view(processing=1.5, latency=3.0, bound=4.0, growth=0.2, load=1.3))
    assert s == {"bound_s": 4.0, "latency_s": 3.0, "batches": 5, "batch_s": 1.5, "trigger_s": 2.0,
                 "backlog_growth": 0.2, "max_mean_load": 1.3, "rate_rows_s": 5.0}
    assert snapshot(JobView(job="j", now_ms=NOW, window_s=30.0)) == {"batches": 0}


def test_slo_violated_where_it_held_before_is_harm():
    before, after = snapshot(view(latency=3.0, bound=4.0)), snapshot(view(latency=6.0, bound=4.0))
    (evidence,) = judge_harm(before, after)
    assert "SLO violated" in evidence and "6.00 s > bound 4.00 s" in evidence
    # already violated before, or still within the bound: not harm by this rule
    assert judge_harm(snapshot(view(latency=5.0, bound=4.0)), after) == []
    assert judge_harm(before, snapshot(view(latency=3.9, bound=4.0))) == []


def test_falling_behind_is_harm():
    before, after = snapshot(view(processing=1.0, growth=0.0)), snapshot(view(processing=2.6, growth=0.3))
    (evidence,) = judge_harm(before, after)
    assert evidence.startswith("falls behind: batches take 2.60 s against a 2.00 s trigger") and "0.30 s" in evidence
    # batches beyond the trigger while the backlog shrinks (a slow batch after an executor left): not harm
    assert judge_harm(before, snapshot(view(processing=2.6, growth=-0.2))) == []
    # a growing backlog with batches still within the trigger: not yet
    assert judge_harm(before, snapshot(view(processing=1.5, growth=0.1))) == []
    # no backlog measured: the batches decide, over two batches at least
    assert judge_harm(snapshot(view(processing=1.0)), snapshot(view(processing=2.6)))
    assert judge_harm(snapshot(view(processing=1.0)), {**snapshot(view(processing=2.6)), "batches": 1}) == []
    # fell behind before already: not harm by this rule
    assert judge_harm(snapshot(view(processing=2.5)), after) == []


def test_worse_balance_is_harm_beyond_the_fraction():
    assert judge_harm(snapshot(view(load=1.05)), snapshot(view(load=1.30)))
    assert judge_harm(snapshot(view(load=1.05)), snapshot(view(load=1.10))) == []


def test_verification_words():
    assert verification(True, [], True) == "verified"
    assert verification(None, [], True) == "verified"
    assert verification(False, [], True) == "ineffective"
    assert verification(True, ["x"], True) == "rolled-back"
    assert verification(True, ["x"], False) == "harmful"


def test_what_the_load_or_added_capacity_explains_is_not_harm():
    before, after = snapshot(view(latency=3.0, bound=4.0)), snapshot(view(latency=6.0, bound=4.0))
    behind = snapshot(view(processing=2.6, growth=0.3))
    # a scale-up cannot make latency or throughput worse: the worse latency is the load's
    assert judge_harm(before, after, capacity_added=True) == []
    assert judge_harm(snapshot(view(processing=1.0, growth=0.0)), behind, capacity_added=True) == []
    # ... but a worse balance still counts
    assert judge_harm(snapshot(view(load=1.05)), snapshot(view(load=1.30)), capacity_added=True)
    # the arrival rate rose beyond the tolerance (10 %): the load's, not the action's
    assert judge_harm(before, {**after, "rate_rows_s": 5.6}) == []
    assert judge_harm(before, {**after, "rate_rows_s": 5.4})  # within the tolerance: harm
    assert judge_harm(before, {**after, "rate_rows_s": 5.6}, load_tolerance=0.2)
    assert judge_harm(before, {**after, "rate_rows_s": 5.6}, load_tolerance=None)  # a knob that moves the rate


def test_confounders_follow_the_knob_and_the_direction():
    assert confounders("executors", 2, 4) == {"capacity_added": True, "load_tolerance": 0.1}
    assert confounders("executors", 4, 2) == {"capacity_added": False, "load_tolerance": 0.1}
    # a batch interval moves a paced source's measured rate: no load excuse, and never "capacity"
    assert confounders("batch_interval", 1.0, 8.0) == {"capacity_added": False, "load_tolerance": None}
    assert confounders("executors", None, 2) == {"capacity_added": False, "load_tolerance": 0.1}
