"""Sizing in whole task waves (``queueing.same_waves_slots`` / ``wave_slots``, Kingman's ``wave_sizing``):
a micro-batch's stage ends at a barrier, so slots idle in a stage's last wave buy no latency — 4 tasks on
3 slots run in 2 waves, as on 2. Brute force on small instances, the queueing search with waves, and the
policy's decisions on a 4-partition job (the standalone cluster's: ``bench scaling-real``)."""
import math
import random
from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from spark_governor.policies.base import LiveStats
from spark_governor.policies.kingman import KingmanPolicy
from spark_governor.policies.kingman_config import KingmanConfig
from spark_governor.policies.queueing import rebalance_spark, same_waves_slots, sequence_wait, wave_slots

from test_kingman_cluster import NOW, view
from test_queueing import random_instance


def waves(p_maxes, c):
    return tuple(math.ceil(p / c) for p in p_maxes)


@given(st.lists(st.integers(1, 40), min_size=1, max_size=4), st.integers(1, 50))
def test_same_waves_and_wave_slots_equal_brute_force(p_maxes, c):
    fewest = min(k for k in range(1, c + 1) if waves(p_maxes, k) == waves(p_maxes, c))
    assert same_waves_slots(p_maxes, c) == fewest
    top = max(p_maxes)
    up = next((k for k in range(c, top + 1) if same_waves_slots(p_maxes, k) == k), c)
    assert wave_slots(p_maxes, c) == up
    assert waves(p_maxes, wave_slots(p_maxes, c)) <= waves(p_maxes, c)


def test_four_tasks_use_one_two_or_four_slots():
    assert [same_waves_slots([4], c) for c in range(1, 6)] == [1, 2, 2, 4, 4]
    assert [wave_slots([4], c) for c in range(1, 6)] == [1, 2, 4, 4, 5]
    assert same_waves_slots([4, 200], 3) == 3  # the 200-task stage gains from a third slot


def test_rebalance_with_waves_is_the_next_count_without_an_idle_last_wave():
    rng = random.Random(7)
    raised = 0
    for _ in range(300):
        vs, bound, w_ob = random_instance(rng)
        plain = rebalance_spark(vs, bound, w_ob)
        r = rebalance_spark(vs, bound, w_ob, waves=True)
        p_maxes = [v.p_max for v in vs]
        if not plain.feasible:
            assert r == plain
            continue
        # the smallest count ≥ the model's that wastes no slot, by a scan
        c = next(k for k in range(plain.slots, max(p_maxes) + 1) if same_waves_slots(p_maxes, k) == k)
        assert r.slots == c and r.predicted_wait == sequence_wait(vs, r.p) <= r.wait_budget
        raised += r.slots > plain.slots
    assert raised > 10


def _job(executors, util, live=None):
    """The bench's job: 4 tasks per stage run, 4 000 rows/s over 4 s batches."""
    v = view([4000] * 8, executors=executors, util=util, tasks=4, live=live)
    return replace(v, stages=(replace(v.stages[0], parallelism=executors),))


def decide(v, **kw):
    kw.setdefault("scale_down_margin", 0.0)
    cfg = KingmanConfig(trigger_interval_s=4.0, min_value=1, max_value=8, warmup_windows=1, **kw)
    return [(p.value, p.inputs.get("spare_executors")) for p in KingmanPolicy().evaluate(v, cfg)]


def test_a_doubling_is_trimmed_to_the_slots_its_waves_need():
    # one executor, a bottleneck at ρ 1.2: Eq. 4.12 asks ceil(2.4) = 3 slots, which run 4 tasks in 2 waves as
    # 2 do; with the spare the 3rd would add no wave either
    assert decide(_job(1, 1.2), spare_executors=0, wave_sizing=False) == [(3, 0)]
    assert decide(_job(1, 1.2), spare_executors=0) == [(2, 0)]


def test_a_plan_between_wave_counts_is_raised_to_the_next():
    # two executors at ρ 0.95: the model asks 3 slots, which run the 4 tasks in 2 waves as 2 do (the model,
    # without a barrier, overrates them): 4
    cfg = dict(trigger_interval_s=4.0, warmup_windows=1, spare_executors=0)
    assert KingmanPolicy().plan(_job(2, 0.95), KingmanConfig(wave_sizing=False, **cfg))["executors"] == 3
    assert KingmanPolicy().plan(_job(2, 0.95), KingmanConfig(**cfg))["executors"] == 4


def test_a_spare_that_adds_no_wave_is_not_kept():
    base = dict(live_rate=False)
    assert decide(_job(2, 0.5), **base) == []  # 2 + 1 spare = 3 slots: still 2 waves
    assert decide(_job(2, 0.5), wave_sizing=False, **base) == [(3, 1)]


def test_scale_downs_skip_counts_with_an_idle_last_wave():
    # 4 executors, lightly loaded: down one wave at a time, 4 → 2 (3 would run 2 waves as well)
    assert decide(_job(4, 0.1), spare_executors=0) == [(2, 0)]
    assert decide(_job(4, 0.1), spare_executors=0, wave_sizing=False) == [(3, 0)]


def test_a_probed_step_is_sized_for_at_once_in_whole_waves():
    # a probed source shows a step within a second and the plan is made for its live rate (live_rate unset,
    # the default = when probed), with the spare on top, in whole waves
    assert KingmanConfig().live_rate is None
    offsets = LiveStats(status="waiting", observed_ms=NOW, arrival_rows_per_second=4000.0, trigger_interval_s=4.0,
                        completed_batches=3)
    probed = replace(offsets, arrival_probed=True)
    v = view([3000] * 8, executors=3, util=0.5, tasks=16)
    assert decide(replace(v, live=offsets)) == [(4, 1)]  # the plan's 3 and the spare
    assert decide(replace(v, live=replace(probed, arrival_rows_per_second=3000.0))) == [(4, 1)]  # no step
    # a probed step to 4 800 rows/s is sized for at once (the completed batches still say 3 000): the plan for
    # 1.6× the rate is 6 slots (16 tasks in 3 waves); a spare would run 3 waves as well, so none
    (up,) = decide(replace(v, live=replace(probed, arrival_rows_per_second=4800.0)))
    assert up == (6, 0)
    # the same live rate from the offsets is not used by default (a step shows there a batch late)
    assert decide(replace(v, live=replace(offsets, arrival_rows_per_second=4800.0))) == [(4, 1)]


def test_a_spare_on_a_surge_plan_is_trimmed_to_whole_waves_too():
    # two executors, the completed batches' plan 1 (+ the spare: 2); a probed step doubles the rate: the plan
    # for it is 2, and its spare would be a third executor running 4 tasks in 2 waves as 2 do. Nothing to do
    # (run 20 on the standalone cluster: 2 → 3 "1 spare beyond the plan's 2")
    live = LiveStats(status="waiting", observed_ms=NOW, arrival_rows_per_second=6000.0, arrival_probed=True,
                     trigger_interval_s=4.0, completed_batches=3)
    v = _job(2, 0.2, live=live)
    assert decide(v) == []
    assert decide(v, wave_sizing=False) == [(3, 1)]


def test_a_scale_down_keeps_the_spare_in_whole_waves_as_the_way_up_does():
    # 4 executors after a peak; the plan is 1 (ρ 0.84 at one), the spare makes 2. One executor is not safe with
    # the 10 % margin, two are, and a spare beyond two adds no wave (3 run the 4 tasks as 2 do): 4 → 2. Checking
    # one executor instead held 4 through the whole 8 000 rows/s level of run 26 on the standalone cluster
    kw = dict(live_rate=False, scale_down_margin=0.1)
    v = _job(4, 0.21)
    assert KingmanPolicy().plan(v, KingmanConfig(trigger_interval_s=4.0, warmup_windows=1))["executors"] == 1
    assert [x for x, _ in decide(v, **kw)] == [2]
    assert [x for x, _ in decide(v, **kw, wave_sizing=False)] == [3]
