"""The simulator's cluster effects of issue 14 ("The simulator learns from real runs"): provisioning
delay, warm-up of new executors and the driver's per-batch overhead, each on a deterministic run (no
noise) where its effect can be computed by hand; and that their defaults leave the model as it was."""
import numpy as np
import pytest

from spark_governor.bench.scaling_sim import Simulation, simulate
from spark_governor.bench.scaling_sim_control import Controller, StaticPolicy
from spark_governor.bench.scaling_sim_model import SimParams, list_schedule, warm_schedule
from spark_governor.policies.base import Policy, Proposal
from spark_governor.policies.safety import SafetyConfig

# 2 partitions of 1 000 rows per 4 s batch at 500 rows/s; 1 ms per row → each task 1 s of service
QUIET = dict(trigger_s=4.0, overhead_s=0.0, row_cost_s=0.001, partitions=2, noise_sigma=0.0, task_noise_sigma=0.0,
             eval_interval_s=10.0, window_ms=5000, min_executors=1, max_executors=4)


def rate(t):
    return np.full_like(t, 500.0, dtype=float)


class OneStepUp(Policy):
    """Asks for ``to`` executors once, at the first evaluation at or after ``at_s``."""

    name = "one-step-up"
    knobs = ("executors",)
    Config = SafetyConfig

    def __init__(self, to: int, at_s: float):
        self.to, self.at_ms, self.done = to, at_s * 1000, False

    def evaluate(self, view, config):
        if view.now_ms >= self.at_ms and not self.done:
            self.done = True
            return [Proposal("executors", self.to, "test step")]
        return []


class Recording(Simulation):
    """Keeps every finished batch's tasks: (start s, partition, executor, service s)."""

    def __init__(self, *a, **k):
        super().__init__(*a, **k)
        self.tasks = []

    def _end_batch(self, t):
        r = self.s.running
        ex_ids = r.tasks.executor.tolist() if r.tasks.executor is not None else [None] * len(r.tasks.partition)
        for part, ex, svc in zip(r.tasks.partition.tolist(), ex_ids, r.tasks.service_s.tolist()):
            self.tasks.append((r.start / 1000.0, part, ex, svc))
        super()._end_batch(t)


def static_ctrl(n):
    return Controller(StaticPolicy(), SafetyConfig(min_value=1, max_value=4), n)


def step_ctrl(to, at_s):
    return Controller(OneStepUp(to, at_s), SafetyConfig(min_value=1, max_value=4, cooldown_intervals_after_any=0), 1)


def test_driver_overhead_adds_exactly_its_value_to_every_batch():
    base = simulate(rate, 120.0, static_ctrl(2), SimParams(**QUIET))
    more = simulate(rate, 120.0, static_ctrl(2), SimParams(**QUIET, driver_overhead_s=1.5))
    assert len(base.batches) == len(more.batches) > 20
    for a, b in zip(base.batches, more.batches):
        assert b.start_s == a.start_s and b.rows == a.rows  # on time either way: same triggers, same rows
        assert b.processing_s == pytest.approx(a.processing_s + 1.5, abs=1e-9)
    assert base.batches[5].processing_s == pytest.approx(1.0)  # 2 tasks of 1 s on 2 slots
    assert SimParams(**QUIET, driver_overhead_s=1.5).processing_s(2000, 2) == pytest.approx(2.5)


def test_driver_overhead_is_outside_the_task_statistics():
    """The control plane sees the overhead in the batch duration, not in the stage's makespan."""
    sim = Simulation(rate, 60.0, static_ctrl(2), SimParams(**QUIET, driver_overhead_s=2.0))
    sim.run()
    stage = sim.view(60_000).stages[0]
    assert stage.service_mean_s == pytest.approx(1.0)
    assert stage.wait_mean_s == pytest.approx(0.0, abs=1e-9)
    assert sim.stats[-1].processing_s == pytest.approx(3.0)


def test_provisioning_delay_registers_executors_that_long_after_the_directive():
    for delay in (3.0, 17.0):
        res = simulate(rate, 60.0, step_ctrl(3, 10.0), SimParams(**QUIET, up_delay_s=delay))
        assert [(a.t_s, a.old, a.new) for a in res.actions] == [(10.0, 1, 3)]
        registered = [(t, r) for t, r, _ in res.timeline]
        assert (10.0 + delay, 3) in registered and all(r == 1 for t, r in registered if t < 10.0 + delay)
        allocated = [(t, a) for t, _, a in res.timeline]
        assert (10.0, 3) in allocated  # requested executors are paid for while they are provisioned


def test_a_released_executor_stays_listed_and_paid_for_its_release_delay():
    """A scale-in 3 → 1 at 10 s: the two executors take no task after their release, and stay in the
    driver's list (the timeline's registered executors) and in the executor-seconds 6 s longer."""
    def down():
        return Controller(OneStepUp(1, 10.0), SafetyConfig(min_value=1, max_value=4, cooldown_intervals_after_any=0), 3)

    base = simulate(rate, 60.0, down(), SimParams(**QUIET))
    slow = simulate(rate, 60.0, down(), SimParams(**QUIET, release_delay_s=6.0))
    assert [(a.t_s, a.old, a.new) for a in slow.actions] == [(10.0, 3, 1)]
    assert [(b.start_s, b.processing_s) for b in slow.batches] == [(b.start_s, b.processing_s) for b in base.batches]
    released = next(t for t, r, _ in base.timeline if r == 1)  # at once, or when the running batch ends
    assert released >= 10.0
    assert (released, 3, 3) not in slow.timeline[1:]  # no change at the release itself: still listed
    assert (released + 6.0, 1, 1) in slow.timeline
    assert slow.executor_seconds == pytest.approx(base.executor_seconds + 2 * 6.0)
    sim = Simulation(rate, 60.0, down(), SimParams(**QUIET, release_delay_s=6.0))
    sim.run()
    assert sim.s.registered == 1 and not sim.s.leaving  # offered no task after the release; gone by the end


def test_warm_schedule_without_warm_up_is_list_schedule():
    rng = np.random.default_rng(1)
    service = rng.uniform(0.5, 1.5, 9)
    launch, finish = list_schedule(service, 3, (0.7, 2.0))
    wl, wf, ex = warm_schedule(service, [0, 1, 2], [(0.7, 3), (2.0, 4)], {}, {}, 5.0)
    assert np.allclose(wl, launch) and np.allclose(wf, finish)
    assert set(ex.tolist()) <= {0, 1, 2, 3, 4}


def test_warm_schedule_slows_only_the_first_tasks_of_a_new_executor():
    service = np.ones(6)
    # executor 0 warm, executor 1 new with 2 warm-up tasks, factor 3
    launch, finish, ex = warm_schedule(service, [0, 1], [], {0: 0, 1: 2}, {}, 3.0)
    took = finish - launch
    on1 = [d for d, e in zip(took, ex) if e == 1]
    on0 = [d for d, e in zip(took, ex) if e == 0]
    assert on0 and all(d == pytest.approx(1.0) for d in on0)
    assert on1[:2] == [pytest.approx(3.0)] * 2 and all(d == pytest.approx(1.0) for d in on1[2:])


def test_warm_schedule_timed_warm_up():
    # executor 1 is slow for launches before 2.5 s: tasks launched at 0 take 2 s, at 2 s take 2 s, at 4 s take 1 s
    # (executor 0 takes the others; at equal times its slot, listed first, goes first)
    launch, finish, ex = warm_schedule(np.ones(8), [0, 1], [], {}, {1: 2.5}, 2.0)
    on1 = [(lt, f - lt) for lt, f, e in zip(launch, finish, ex) if e == 1]
    assert on1 == [(0.0, 2.0), (2.0, 2.0), (4.0, 1.0)]


def test_warm_schedule_start_up_contention_slows_the_executors_present_from_the_start_only():
    """Executor 1 starts in [1, 3), executor 2 was added earlier (its window is over): executor 0's task
    launched then takes 2 s; the added executors' do not (their warm-up is their own factor, 1 here);
    before and after the window, 1 s."""
    crowded = ((1.0, 3.0, 1), (-9.0, -5.0, 2))
    launch, finish, ex = warm_schedule(np.ones(8), [0, 1, 2], [], {}, {}, 1.0, crowded, 2.0)
    got = sorted((lt, int(e), f - lt) for lt, f, e in zip(launch, finish, ex))
    assert got == [(0.0, 0, 1.0), (0.0, 1, 1.0), (0.0, 2, 1.0), (1.0, 0, 2.0), (1.0, 1, 1.0), (1.0, 2, 1.0),
                   (2.0, 1, 1.0), (2.0, 2, 1.0)]


def test_start_up_contention_slows_the_working_executor_of_a_joined_stage():
    """8 tasks of 1 s on 1 executor from 4 s; a second registers at 6.5 s and starts for 3 s at contention 2:
    executor 0's tasks launched at 7 and 9 s take 2 s, and the stage ends at 11 s instead of 9.5 s."""
    base = {**QUIET, "partitions": 8, "row_cost_s": 0.004, "eval_interval_s": 2.0, "up_delay_s": 0.5}
    ends = {}
    for contention in (1.0, 2.0):
        sim = Recording(rate, 12.0, step_ctrl(2, 6.0), SimParams(**base, startup_contention=contention, startup_s=3.0))
        res = sim.run()
        ends[contention] = res.batches[0].end_s
        first = sorted((part, e, svc) for s, part, e, svc in sim.tasks if s == 4.0)
    assert ends == {1.0: pytest.approx(9.5), 2.0: pytest.approx(11.0)}
    assert [svc for _, e, svc in first if e == 0] == [pytest.approx(x) for x in (1, 1, 1, 2, 2)]
    assert all(svc == pytest.approx(1.0) for _, e, svc in first if e == 1)


def test_warm_up_slows_the_first_tasks_of_an_executor_added_during_the_run():
    """One executor, scaled to 2 at 10 s (registered 12 s, between batches): the new executor's first 2
    tasks (one per batch) take 3 s instead of 1 s, its later ones 1 s; the first executor's stay 1 s."""
    p = SimParams(**QUIET, up_delay_s=2.0, warmup_factor=3.0, warmup_tasks=2)
    sim = Recording(rate, 60.0, step_ctrl(2, 10.0), p)
    res = sim.run()
    new = [(s, svc) for s, _, e, svc in sim.tasks if e == 1]
    old = [svc for _, _, e, svc in sim.tasks if e == 0]
    assert all(x == pytest.approx(1.0) for x in old)
    assert [svc for _, svc in new[:2]] == [pytest.approx(3.0)] * 2
    assert len(new) > 4 and all(svc == pytest.approx(1.0) for _, svc in new[2:])
    by_start = {b.start_s: b.processing_s for b in res.batches}
    assert by_start[8.0] == pytest.approx(2.0)  # 1 executor: 2 tasks in a row
    assert by_start[12.0] == by_start[16.0] == pytest.approx(3.0)  # waits for the slow new executor
    assert by_start[20.0] == pytest.approx(1.0)


def test_warm_up_leaves_executors_present_at_the_start_alone():
    quiet = simulate(rate, 60.0, static_ctrl(2), SimParams(**QUIET))
    warm = simulate(rate, 60.0, static_ctrl(2), SimParams(**QUIET, warmup_factor=3.0, warmup_tasks=5, warmup_s=30))
    assert [b.processing_s for b in warm.batches] == [b.processing_s for b in quiet.batches]


def test_warm_up_applies_to_an_executor_joining_a_running_stage():
    """8 tasks of 1 s on 1 executor from 4 s; a second one registers at 6.5 s, mid-stage, with a 4 s timed
    warm-up at factor 2: it takes task 3 at 6.5 s and task 6 at 8.5 s, 2 s each, and the stage ends at
    10.5 s instead of 9.5 s without warm-up; the first executor's tasks stay 1 s."""
    base = {**QUIET, "partitions": 8, "row_cost_s": 0.004, "eval_interval_s": 2.0, "up_delay_s": 0.5}
    runs = {}
    for factor in (1.0, 2.0):
        sim = Recording(rate, 12.0, step_ctrl(2, 6.0), SimParams(**base, warmup_factor=factor, warmup_s=4.0))
        res = sim.run()
        runs[factor] = (sim.tasks, res.batches)
    tasks, batches = runs[2.0]
    first = sorted((part, e, svc) for s, part, e, svc in tasks if s == 4.0)
    assert [(part, svc) for part, e, svc in first if e == 1] == [(3, pytest.approx(2.0)), (6, pytest.approx(2.0))]
    assert all(svc == pytest.approx(1.0) for _, e, svc in first if e == 0) and len(first) == 8
    assert batches[0].start_s == 4.0 and batches[0].end_s == pytest.approx(10.5)
    assert runs[1.0][1][0].end_s == pytest.approx(9.5)


def test_a_warm_up_job_warms_an_executor_that_registers_with_no_task_waiting():
    """As above, registered at 11 s (the 8 s batch ended at 10 s): with a 0.5 s warm-up job
    (``prewarm_s``) its slot is free at 11.5 s and warm, so the 12 s batch takes 1 s, not 3 s; with a 2 s
    job it is busy until 13 s, the first executor takes both tasks (2 s) and the new one starts warm at
    16 s."""
    out = {}
    for prewarm in (0.0, 0.5, 2.0):
        sim = Recording(rate, 30.0, step_ctrl(2, 10.0), SimParams(**QUIET, up_delay_s=1.0, warmup_factor=3.0,
                                                                 warmup_tasks=2, prewarm_s=prewarm))
        res = sim.run()
        out[prewarm] = ({b.start_s: b.processing_s for b in res.batches},
                        [svc for s, _, e, svc in sim.tasks if e == 1])
    assert out[0.0][0][12.0] == pytest.approx(3.0) and out[0.0][1][:2] == [pytest.approx(3.0)] * 2
    assert out[0.5][0][12.0] == pytest.approx(1.0) and all(svc == pytest.approx(1.0) for svc in out[0.5][1])
    assert out[2.0][0][12.0] == pytest.approx(2.0) and out[2.0][0][16.0] == pytest.approx(1.0)
    assert all(svc == pytest.approx(1.0) for svc in out[2.0][1])
    # a warmed executor whose first task still runs ×1.5 (``prewarm_factor``): 1.5 s, then 1 s
    sim = Recording(rate, 30.0, step_ctrl(2, 10.0), SimParams(**QUIET, up_delay_s=1.0, warmup_factor=3.0,
                                                             warmup_tasks=2, prewarm_s=0.5, prewarm_factor=1.5))
    assert {b.start_s: b.processing_s for b in sim.run().batches}[12.0] == pytest.approx(1.5)
    assert [svc for s, _, e, svc in sim.tasks if e == 1][:3] == [pytest.approx(x) for x in (1.5, 1.0, 1.0)]
    # no warm-up job but a prewarm_factor (a run without the warm-up whose idle new executors were slowed
    # less than the one that took a waiting task): its slot is free at once, its first task ×1.5
    sim = Recording(rate, 30.0, step_ctrl(2, 10.0), SimParams(**QUIET, up_delay_s=1.0, warmup_factor=3.0,
                                                             warmup_tasks=2, prewarm_s=0.0, prewarm_factor=1.5))
    assert {b.start_s: b.processing_s for b in sim.run().batches}[12.0] == pytest.approx(1.5)
    assert [svc for s, _, e, svc in sim.tasks if e == 1][:3] == [pytest.approx(x) for x in (1.5, 1.0, 1.0)]


def test_an_executor_that_registers_while_tasks_wait_takes_one_cold_warm_up_job_or_not():
    """The joining executor of the test above finds tasks 3..7 waiting: Spark offers it one at once, so a
    warm-up job changes nothing there (task 3 and 6 still 2 s each, the stage still ends at 10.5 s)."""
    base = {**QUIET, "partitions": 8, "row_cost_s": 0.004, "eval_interval_s": 2.0, "up_delay_s": 0.5,
            "warmup_factor": 2.0, "warmup_s": 4.0}
    ends = {}
    for prewarm, factor in ((0.0, 1.0), (1.0, 1.0), (0.0, 1.5)):
        sim = Recording(rate, 12.0, step_ctrl(2, 6.0), SimParams(**base, prewarm_s=prewarm, prewarm_factor=factor))
        ends[prewarm, factor] = (sim.run().batches[0].end_s, sorted((part, svc) for s, part, e, svc in sim.tasks
                                                                    if s == 4.0 and e == 1))
    assert ends[1.0, 1.0] == ends[0.0, 1.0] == ends[0.0, 1.5] == \
        (pytest.approx(10.5), [(3, pytest.approx(2.0)), (6, pytest.approx(2.0))])


def test_live_view_reports_the_running_batch_and_the_backlog():
    """Static 1 executor, 2 000-row batches of 2 s (2 tasks of 1 s on 1 slot) every 4 s. At 9 s the batch
    started at 8 s runs: age 1 s; its rows (arrived after 4 s) are not processed, so the oldest record is
    5 s old and 2 500 rows wait, 2.5 s of work at the 1 000 rows/s the earlier batch processed."""
    sim = Simulation(rate, 9.0, static_ctrl(1), SimParams(**QUIET, live_view=True))
    sim.run()
    live = sim.control.live(9000, 30.0, sim.s.running, sim.s.cut, sim.arrived)
    assert live.status == "running" and live.running_batch_id == 1
    assert live.running_batch_age_s == pytest.approx(1.0) and live.oldest_record_age_s == pytest.approx(5.0)
    assert live.backlog_rows == pytest.approx(2500) and live.processing_rows_per_second == pytest.approx(1000)
    assert live.backlog_s == pytest.approx(2.5) and live.arrival_rows_per_second == pytest.approx(500)
    assert sim.view(9000).live is not None
    assert Simulation(rate, 9.0, static_ctrl(1), SimParams(**QUIET)).view(9000).live is None  # default: off


def test_live_view_knows_the_source_as_a_reporter_does():
    """500 → 1 500 rows/s at 10 s, batches every 4 s on 1 executor. At 14.5 s the batch started at 12 s (its
    rows partly at the new rate) runs. A reporter knows the offsets of completed batches only (the batches
    of 4 and 8 s: 4 000 rows since the start, 500 rows/s), so the live arrival rate is still the old one and
    the rows waiting are extrapolated at it from the running batch's cut (8 s): 3 250 rows. The simulator's
    truth (``live_offsets=False``) knows the rows of the last 10 s (9 500: 950 rows/s) and the 7 750 that
    arrived since 8 s."""
    def step(t):
        return np.where(t < 10, 500.0, 1500.0)
    at = {}
    for honest in (True, False):
        sim = Simulation(step, 14.5, static_ctrl(1), SimParams(**QUIET, live_view=True, live_offsets=honest))
        sim.run()
        at[honest] = sim.control.live(14_500, 30.0, sim.s.running, sim.s.cut, sim.arrived)
    for live in at.values():
        assert live.running_batch_age_s == pytest.approx(2.5) and live.oldest_record_age_s == pytest.approx(6.5)
    assert at[True].arrival_rows_per_second == pytest.approx(500.0) and at[True].backlog_rows == pytest.approx(3250)
    assert at[False].arrival_rows_per_second == pytest.approx(950.0, rel=0.01)
    assert at[False].backlog_rows == pytest.approx(7750, rel=0.01)


def test_live_view_lets_a_policy_scale_out_before_the_batch_completes():
    """A step from 1 000 to 9 000 rows/s at 60 s on 1 executor: with the live view threshold scales out on
    the work in flight (here the backlog growing behind the running batch), while that batch still runs."""
    def step_rate(t):
        return np.where(t < 60, 1000.0, 9000.0)
    p = SimParams(noise_sigma=0.0, task_noise_sigma=0.0, live_view=True)
    from spark_governor.bench.scaling import governed
    res = simulate(step_rate, 120.0, governed("threshold")(p, 0.0), p)
    first = res.actions[0]
    assert ("in flight" in first.reason or "backlog growing" in first.reason) and first.new > first.old
    assert any(b.start_s < first.t_s < b.end_s for b in res.batches)


def test_task_overhead_is_inside_the_task_where_the_stage_statistics_see_it():
    """``task_overhead_s`` (a fixed time per task): each task of 1 000 rows takes 0.5 + 1.0 s, and the
    stage's service time and busy time hold it (unlike the driver overhead, which is outside)."""
    sim = Simulation(rate, 60.0, static_ctrl(2), SimParams(**QUIET, task_overhead_s=0.5))
    sim.run()
    stage = sim.view(60_000).stages[0]
    assert stage.service_mean_s == pytest.approx(1.5)
    assert sim.stats[-1].processing_s == pytest.approx(1.5)  # 2 tasks on 2 slots: one wave
    assert SimParams(**QUIET, task_overhead_s=0.5).processing_s(2000, 1) == pytest.approx(3.0)  # two waves
    # busy slot-seconds per record (DS2's true processing rate): (0.5 + 1.0) s per 1 000 rows
    assert stage.records_in_per_second / (stage.utilization * stage.parallelism) == pytest.approx(1000 / 1.5)


def test_the_per_slot_task_overhead_grows_with_the_slots_a_batch_runs_on():
    """``task_overhead_per_slot_s``: a task's fixed time is ``task_overhead_s`` + per slot × the batch's
    slots (executors sharing the machine's cores): 0.1 + 0.2 × 1 s on 1 executor, 0.1 + 0.2 × 2 s on 2,
    inside the task (the stage's service time holds it)."""
    params = SimParams(**QUIET, task_overhead_s=0.1, task_overhead_per_slot_s=0.2)
    assert params.task_fixed_s(1) == pytest.approx(0.3) and params.task_fixed_s(2) == pytest.approx(0.5)
    assert params.task_fixed_s(4) == pytest.approx(0.5)  # 2 partitions: at most 2 slots run the stage
    assert params.processing_s(2000, 1) == pytest.approx(2 * (0.3 + 1.0))  # two waves
    assert params.processing_s(2000, 2) == pytest.approx(0.5 + 1.0)
    for n, task in ((1, 1.3), (2, 1.5)):
        sim = Simulation(rate, 60.0, static_ctrl(n), params)
        sim.run()
        assert sim.view(60_000).stages[0].service_mean_s == pytest.approx(task)
        assert sim.stats[-1].processing_s == pytest.approx(task * (2 if n == 1 else 1))
    # 0 (the default): the fixed time does not depend on the slots
    assert SimParams(**QUIET, task_overhead_s=0.5).task_fixed_s(2) == SimParams(**QUIET, task_overhead_s=0.5).task_fixed_s(1)


def test_cluster_profile_is_what_the_control_plane_has_measured_by_then():
    params = SimParams(**QUIET, up_delay_s=3.0, driver_overhead_s=0.25, warmup_factor=2.0, warmup_tasks=1,
                       cluster_profile=True)
    sim = Simulation(rate, 40.0, step_ctrl(3, 10.0), params)
    sim.run()
    # directive at 10 s, registered at 13 s, joining the batch started at 12 s, whose tasks end at 14 s
    assert sim.control.provisioning == [pytest.approx(4.0)]
    c = sim.view(40_000).cluster
    assert c.provisioning_delay_s == pytest.approx(4.0) and c.driver_overhead_s == pytest.approx(0.25)
    assert c.warmup_factor == 2.0 and c.warmup_s == pytest.approx(2.0)  # 1 task × 2 × the 1 s steady task
    # before any scale-out: no provisioning or warm-up measured yet, only the driver overhead
    early = Simulation(rate, 9.0, step_ctrl(3, 10.0), params)
    early.run()
    c = early.view(9_000).cluster
    assert c.provisioning_delay_s is None and c.warmup_factor is None and c.driver_overhead_s == pytest.approx(0.25)
    # off (the default): no profile in the view
    plain = Simulation(rate, 9.0, step_ctrl(3, 10.0), SimParams(**QUIET))
    plain.run()
    assert getattr(plain.view(9_000), "cluster", None) is None


def test_measured_provisioning_delays_are_drawn_per_scale_out_without_changing_the_batch_noise():
    """``up_delays_s``: each scale-out request registers after a delay drawn from the measured ones (its own
    generator: the batches' noise draws are those of a run without it)."""
    noisy = dict(QUIET, noise_sigma=0.3)
    base = simulate(rate, 40.0, step_ctrl(3, 10.0), SimParams(**noisy, up_delay_s=3.0))
    one = simulate(rate, 40.0, step_ctrl(3, 10.0), SimParams(**noisy, up_delay_s=9.0, up_delays_s=(3.0,)))
    assert [t for t, reg, _ in one.timeline if reg == 3] == [13.0]  # directive at 10 s + 3 s, not 9 s
    assert [b.processing_s for b in one.batches] == [b.processing_s for b in base.batches]
    late = simulate(rate, 40.0, step_ctrl(3, 10.0), SimParams(**noisy, up_delays_s=(7.0, 7.0)))
    assert [t for t, reg, _ in late.timeline if reg == 3] == [17.0]
    seen = set()
    for seed in range(12):
        res = simulate(rate, 40.0, step_ctrl(3, 10.0), SimParams(**noisy, up_delays_s=(2.0, 6.0)), seed)
        seen |= {t for t, reg, _ in res.timeline if reg == 3}
    assert seen == {12.0, 16.0}


def test_the_trigger_phase_shifts_every_boundary_and_the_rows_each_batch_holds():
    """Boundaries at phase + k·T: the first batch holds the rows since t = 0, every later one a whole
    interval; a step lands in the batch whose interval holds it."""
    def step(t):
        return np.where(t < 20.0, 500.0, 2000.0)

    base = simulate(step, 60.0, static_ctrl(4), SimParams(**QUIET))
    shifted = simulate(step, 60.0, static_ctrl(4), SimParams(**QUIET, trigger_phase_s=2.5))
    assert [b.start_s for b in base.batches][:3] == [4.0, 8.0, 12.0]
    assert [b.start_s for b in shifted.batches][:3] == [2.5, 6.5, 10.5]
    assert shifted.batches[0].rows == 1250 and shifted.batches[1].rows == 2000
    # (18.5, 22.5] holds 1.5 s at 500 and 2.5 s at 2 000 rows/s (the trapezoid rule smooths the step
    # over one 10 ms grid cell); at phase 0 the step is on a boundary
    assert next(b.rows for b in shifted.batches if b.start_s == 22.5) == pytest.approx(750 + 5000, abs=10)
    assert next(b.rows for b in base.batches if b.start_s == 24.0) == 8000
    assert SimParams(**QUIET, trigger_phase_s=6.5).trigger_phase_s % 4.0 == 2.5
    wrapped = simulate(step, 60.0, static_ctrl(4), SimParams(**QUIET, trigger_phase_s=6.5))
    assert [b.start_s for b in wrapped.batches] == [b.start_s for b in shifted.batches]


class Clock(Policy):
    """Records when it is evaluated (``seen``, ms) and the trigger times (ms) of the completed batches in its
    view then (``batches``)."""

    name = "clock"
    knobs = ("executors",)
    Config = SafetyConfig

    def __init__(self):
        self.seen, self.batches = [], []

    def evaluate(self, view, config):
        self.seen.append(view.now_ms)
        self.batches.append((view.now_ms, [b.trigger_ms for b in view.batches]))
        return []


def test_the_evaluation_phase_shifts_every_evaluation():
    for phase, first in ((0.0, 10_000), (4.5, 4_500), (14.5, 4_500)):
        clock = Clock()
        simulate(rate, 40.0, Controller(clock, SafetyConfig(min_value=1, max_value=4), 1),
                 SimParams(**QUIET, eval_phase_s=phase))
        assert clock.seen[:3] == [first, first + 10_000, first + 20_000]


def test_a_completed_batch_reaches_the_control_plane_with_the_reporters_next_state():
    """1 executor, 2 000-row batches of 2 s every 4 s: a batch started at 8 s ends at 10 s, on an evaluation.
    With the reporter's 1 s state cadence (``state_interval_s``) the control plane has a batch, and the backlog
    right after it (at the batch's end), from the first tick at or after its end (phase drawn per seed) plus
    ``state_delay_s``:
    never at the evaluation its end coincides with. Without (the default) it has it at once."""
    def tick(end_ms, phase):
        return phase + -(-(end_ms - phase) // 1000) * 1000

    at_once = Clock()
    simulate(rate, 30.0, Controller(at_once, SafetyConfig(min_value=1, max_value=4), 1), SimParams(**QUIET))
    assert at_once.batches[0] == (10_000, [4_000, 8_000])
    phases = set()
    for seed in range(5):
        clock = Clock()
        sim = Simulation(rate, 30.0, Controller(clock, SafetyConfig(min_value=1, max_value=4), 1),
                         SimParams(**QUIET, live_view=True, state_interval_s=1.0), seed=seed)
        res = sim.run()
        phases.add(sim.state_phase)
        ends = [(round(b.start_s * 1000), round(b.end_s * 1000)) for b in res.batches]
        for now, seen in clock.batches:
            assert seen == [s for s, e in ends if tick(e, sim.state_phase) + 50 <= now]
        assert clock.batches[0][1] == [4_000]  # the batch that ended at 10 s is not there at 10 s
        # each trough is the backlog at its batch's end (the rows that arrived after the batch started), in the
        # control plane from the tick after the end on
        assert len(sim.control.troughs) == sum(tick(e, sim.state_phase) + 50 <= 30_000 for _, e in ends)
        for (start, end), (at_s, rows) in zip(ends, sim.control.troughs):
            assert at_s * 1000 == end and rows == pytest.approx(sim.arrived(end) - sim.arrived(start))
    assert len(phases) > 1  # the phase is drawn per seed


class RateClock(Clock):
    """Also records the probed arrival rate in its view (``rates``: (ms, rows/s))."""

    def __init__(self):
        super().__init__()
        self.rates = []

    def evaluate(self, view, config):
        self.rates.append((view.now_ms, view.live.arrival_rows_per_second if view.live else None))
        return super().evaluate(view, config)


def step_rate(t):
    return np.where(t < 20.0, 500.0, 4000.0)


PROBED = dict(QUIET, live_view=True, live_probe=True, surge_ratio=0.25)


def surge_evaluations(clock: RateClock, eval_ms: int = 10_000) -> list[int]:
    return [t for t in clock.seen if t % eval_ms]  # the regular evaluations fall on multiples of 10 s


def test_without_the_reporters_ticks_the_surge_watch_reads_the_source_at_its_check():
    """No state cadence (the uncalibrated model): checks every second from 0, the probe read at the check; the
    8× step at 20 s reads 4 000 rows/s at 21 s and has settled at 22 s, when the policy is evaluated."""
    clock = RateClock()
    simulate(step_rate, 40.0, Controller(clock, SafetyConfig(min_value=1, max_value=4), 1), SimParams(**PROBED))
    assert surge_evaluations(clock) == [22_000]
    assert dict(clock.rates)[22_000] == pytest.approx(4000.0)


def test_with_the_reporters_ticks_the_surge_watch_sees_the_rate_of_the_latest_tick_delivered():
    """The reporter samples the probe at its 1 s ticks (phase per seed) and its state lands ``state_delay_s``
    later; the surge watch checks every second at a phase of its own. A rate step is then evaluated 2–4 s after
    it (on the standalone cluster 2.0–3.5 s, mean 2.7 s, runs 68–97), not 2.0 s after every step, and the rate
    the policy gets is the counter's growth over the second before that tick."""
    lags, phases = [], set()
    for seed in range(12):
        clock = RateClock()
        sim = Simulation(step_rate, 40.0, Controller(clock, SafetyConfig(min_value=1, max_value=4), 1),
                         SimParams(**PROBED, state_interval_s=1.0, state_delay_s=0.05), seed=seed)
        sim.run()
        phases.add((sim.state_phase, sim._next_surge % 1000))
        surges = surge_evaluations(clock)
        assert len(surges) == 1 and surges[0] % 1000 == sim._next_surge % 1000
        lags.append(surges[0] - 20_000)
        at = surges[0] - 50 - sim.state_phase
        tick = sim.state_phase + (at // 1000) * 1000  # the latest tick delivered by then
        assert sim._probed_at(surges[0]) == tick
        expect = (sim.arrived(tick) - sim.arrived(tick - 1000)) / 1.0
        assert dict(clock.rates)[surges[0]] == pytest.approx(expect)
        assert expect > 500 * 1.25 * 1.25  # a surge over the 500 rows/s baseline, settled
    assert all(1_000 < lag < 4_100 for lag in lags)
    assert len(set(lags)) > 3 and len(phases) > 3
    assert 2_000 < np.mean(lags) < 3_500


def test_with_the_launch_hold_an_executor_registering_while_tasks_wait_takes_none_of_them():
    """The stage above: 8 tasks of 1 s on 1 executor from 4 s, a second executor registering at 6.5 s with a 4 s
    warm-up at factor 2. Without the hold it takes tasks 3 and 6 cold (the stage ends at 10.5 s). With the
    hold at its default (``launch_hold_waves`` 1) it does the same: 5 tasks wait behind 1 running, and a cold
    executor still ends the stage sooner. Held whatever waits (``launch_hold_waves`` 8) it starts when the last
    waiting task launches on the first executor (task 7 at 11 s, so 11.001 s): the first executor runs all 8,
    the stage ends at 12 s, and the held executor, idle then, runs its warm-up job (``prewarm_s`` 0.5 s) and the
    next batch's tasks warm (as long as the first executor's); with ``launch_hold_max_s`` 2 s it starts at
    8.5 s and takes task 5 cold. Registering at 10.5 s (task 6 running, task 7 waiting: 1 ≤ 1 × 1) it is
    held at the default too, and takes no task of the stage."""
    base = {**QUIET, "partitions": 8, "row_cost_s": 0.004, "eval_interval_s": 2.0, "up_delay_s": 0.5,
            "warmup_factor": 2.0, "warmup_s": 4.0, "prewarm_s": 0.5}
    free = Recording(rate, 20.0, step_ctrl(2, 6.0), SimParams(**base))
    assert free.run().batches[0].end_s == pytest.approx(10.5)
    default = Recording(rate, 20.0, step_ctrl(2, 6.0), SimParams(**base, launch_hold=True))
    assert default.run().batches[0].end_s == pytest.approx(10.5)
    held = Recording(rate, 20.0, step_ctrl(2, 6.0), SimParams(**base, launch_hold=True, launch_hold_waves=8))
    res = held.run()
    first = [(part, e, svc) for s, part, e, svc in held.tasks if s == 4.0]
    assert len(first) == 8 and {e for _, e, _ in first} == {0} and res.batches[0].end_s == pytest.approx(12.0)
    assert [t for t, reg, _ in res.timeline if reg == 2][0] == pytest.approx(11.001)
    nxt = [(e, svc) for s, part, e, svc in held.tasks if s == res.batches[1].start_s]
    # the next batch (12 s, 4 000 rows: 2 s tasks) on both, the held one warm: its tasks as long as the first's
    assert {e for e, _ in nxt} == {0, 1} and all(svc == pytest.approx(2.0) for _, svc in nxt)
    capped = Recording(rate, 20.0, step_ctrl(2, 6.0), SimParams(**base, launch_hold=True, launch_hold_waves=8,
                                                                launch_hold_max_s=2.0))
    capped.run()
    late = sorted((part, svc) for s, part, e, svc in capped.tasks if s == 4.0 and e == 1)
    assert late[0] == (5, pytest.approx(2.0))  # started at 8.5 s, took the waiting task 5 cold
    one = Recording(rate, 20.0, step_ctrl(2, 6.0), SimParams(**{**base, "up_delay_s": 4.5}, launch_hold=True))
    res = one.run()
    assert {e for s, _, e, _ in one.tasks if s == 4.0} == {0} and res.batches[0].end_s == pytest.approx(12.0)
    assert [t for t, reg, _ in res.timeline if reg == 2][0] == pytest.approx(11.001)


def test_with_the_slot_hold_a_warmed_executor_takes_no_task_the_warm_ones_launch_sooner():
    """2 warm executors run 4 tasks of 1 s from 4 s (2 waves: the stage ends at 6 s). A third registers at 3.5 s
    with no task waiting, so it runs a 1.1 s warm-up job and its slot is free at 4.6 s, where it would take task
    3 and run it ×1.5 (to 6.1 s). With the slot hold (``SimParams.slot_hold``: 2 tasks waiting behind 2 running,
    whose slots free in 0.4 s, under (1.6 − 1) × 1 s) it keeps its slot until the last of them launched, takes
    none, and the stage ends at 6 s. With a ``slot_hold_factor`` of 1.3 (0.4 s ≥ 0.3 s) it takes task 3 as
    without the hold. Its next batch's first task runs ×1.5 either way."""
    base = {**QUIET, "partitions": 4, "row_cost_s": 0.002, "eval_interval_s": 2.0, "up_delay_s": 1.5,
            "prewarm_s": 1.1, "prewarm_factor": 1.5, "warmup_factor": 3.0}
    ctrl = lambda: Controller(OneStepUp(3, 2.0), SafetyConfig(min_value=1, max_value=4, cooldown_intervals_after_any=0), 2)
    ends, took = {}, {}
    for name, extra in (("free", {}), ("held", {"launch_hold": True, "slot_hold": True}),
                        ("low", {"launch_hold": True, "slot_hold": True, "slot_hold_factor": 1.3})):
        sim = Recording(rate, 12.0, ctrl(), SimParams(**base, **extra))
        res = sim.run()
        assert [t for t, reg, _ in res.timeline if reg == 3][0] == pytest.approx(3.5)
        ends[name] = res.batches[0].end_s
        took[name] = sorted((part, svc) for s, part, e, svc in sim.tasks if s == 4.0 and e == 2)
    assert ends["free"] == ends["low"] == pytest.approx(6.1) and took["free"] == took["low"] == [(2, pytest.approx(1.5))]
    assert ends["held"] == pytest.approx(6.0) and took["held"] == []
