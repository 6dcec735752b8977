"""The simulated micro-batch job of ``bench scaling``: its parameters, Spark's FIFO task scheduling and
the records of a run (``bench.scaling_sim`` runs it; ``bench.scaling_sim_control`` watches and
steers it).

- :class:`SimParams` — job, cluster and control-plane constants: trigger interval, per-batch
  overhead (before the tasks, and the driver's overhead after them), per-row cost, cores per
  executor, tasks per batch, noise shapes, provisioning delay, warm-up of new executors, evaluation
  interval, statistics window, executor bounds, SLO and latency constraint;
- :func:`list_schedule` — the tasks of a stage run in partition order, each on the slot that frees
  first (Spark's FIFO task scheduling; equal tasks run in waves), with slots joining while the
  stage runs; :func:`warm_schedule` — the same with each slot's executor known, a new executor's
  first tasks slowed by the warm-up factor;
- the records: :class:`BatchRecord`, :class:`Action` (an issued executor directive),
  :class:`SimResult`, and the running batch with its tasks.

Units: seconds (records, parameters), integer milliseconds since the source started inside the
engine (``_Running``, ``_Tasks``), rows, core-seconds per row, executor-seconds.
"""
from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from spark_governor.bench.latency_truth import SpanTruth

__all__ = ["SimParams", "DEFAULT_PARAMS", "BatchRecord", "Action", "SimResult", "list_schedule", "warm_schedule"]


@dataclass(frozen=True)
class SimParams:
    """Job, cluster and control-plane constants (seconds, rows, core-seconds per row)."""

    trigger_s: float = 4.0
    # The trigger's phase, seconds: boundaries at trigger_phase_s + k × trigger_s (the first batch
    # holds the rows since t = 0). A real run's trigger falls anywhere in its first interval, and a step
    # just after a boundary waits a whole interval longer than one just before it; calibration replays
    # the real run's phase (``bench.scaling_calibrate``). 0: boundaries at multiples of the interval.
    trigger_phase_s: float = 0.0
    overhead_s: float = 0.3  # fixed cost of a batch (planning, commit), seconds
    row_cost_s: float = 0.0005  # core-seconds per row: 2 000 rows/s per core
    cores_per_executor: int = 1
    partitions: int = 200  # tasks per batch (one stage); caps the parallelism of a batch
    noise_sigma: float = 0.1  # lognormal shape of the per-batch processing-time noise (mean 1)
    task_noise_sigma: float = 0.2  # lognormal shape of the per-task service-time noise (mean 1)
    up_delay_s: float = 10.0  # provisioning delay: requested executor → registered (and offered tasks)
    # Measured provisioning delays, seconds (issue 14): when given, each scale-out request's delay is
    # drawn from them (uniformly, a bootstrap of the measured distribution; its own seeded generator,
    # so the batches' noise draws do not change) instead of ``up_delay_s`` for all. On a loaded machine
    # the delay has a long tail (5.2–6.8 s, and 13–31 s for the executors asked for while the host was
    # busiest, ``scaling-real-2026-11-25-1539``) that one median does not carry. Empty: ``up_delay_s``.
    up_delays_s: tuple[float, ...] = ()
    # Released executor → gone from the driver's executor list, seconds (issue 14): a scale-in kills its
    # executors when no batch runs (``collectors.appliers.ExecutorApplier``), and on the standalone cluster
    # each then stays listed — and paid for — another 4.7–7.8 s (5th–95th percentile; median 5.5 s of
    # 113 scale-ins, runs 14–61, 2026-11-26/27), offered no task. Counted in the executor-seconds and
    # the timeline's registered executors, never in the slots. 0: gone at once (today's model).
    release_delay_s: float = 0.0
    # The driver's per-batch overhead outside the tasks, after the last one (offset/commit log writes,
    # state-store commit, progress; issue 14: 2–4 s on the real standalone cluster), seconds, added
    # unchanged (no noise) to every batch's duration. 0: today's model, where ``overhead_s`` is the
    # only non-task time.
    driver_overhead_s: float = 0.0
    # Fixed service time of every task, seconds per task, on top of its rows × ``row_cost_s`` (task
    # deserialisation, the Python worker's per-partition set-up, the shuffle write and the state store
    # of a partition): *inside* the task, so the control plane's stage statistics (service time, busy
    # slot-seconds per record) see it, unlike ``driver_overhead_s``. Measured on the standalone
    # cluster (issue 14): the tasks' busy seconds per row were 1.2e-4 while the batch durations grew
    # by 0.9e-4 per row; with the whole difference put outside the tasks, the busy time per record
    # policies size on (DS2's true processing rate) read 25 % low. 0: today's model.
    task_overhead_s: float = 0.0
    # The part of a task's fixed cost that grows with the slots running the stage at once, seconds per
    # task per slot: a task's fixed time is ``task_overhead_s`` + ``task_overhead_per_slot_s`` × slots
    # (slots at the batch's start). Contention: the fixed work of a task (deserialisation, the Python
    # worker, the state store) is CPU work, and the executors share the machine's cores, while the
    # per-row cost of the bench's job is not (it sleeps). Measured on the 2-core machine (issue 14,
    # ``bench.calibration_cluster.fit_split``): quiet, 0.07 s + 0.12 s per slot (0.19 s a task on 1
    # executor, 0.54 s on 4); loaded (load average 5–8), 0.63 s + 0.18 s per slot. 0: a task's
    # fixed time does not depend on the slots (today's model).
    task_overhead_per_slot_s: float = 0.0
    # Warm-up of a new executor (Python workers, JIT, state-store load; issue 14): a task launched on an
    # executor registered during the run is slower by ``warmup_factor`` while that executor has run
    # fewer than ``warmup_tasks`` tasks OR within ``warmup_s`` seconds of its registration. Executors
    # present at t = 0 are warm. Factor 1 or both limits 0: no warm-up (today's model).
    warmup_factor: float = 1.0
    warmup_tasks: int = 0
    warmup_s: float = 0.0
    # The warm-up factor the simulated control plane reports to the policies (``ClusterInputs``), as the
    # real one measured it (``aggregators.cluster_profile``'s ``factor``, while the executors here are
    # slowed by its ``work_factor``); None: ``warmup_factor``.
    reported_warmup_factor: Optional[float] = None
    # Start-up contention (issue 14): executors starting on the machine (JVM, Python workers, state-store
    # load) take CPU from those already working: a task launched on an executor present from the start
    # while an added executor is within ``startup_s`` of its registration runs ``startup_contention``
    # times slower. 1 or ``startup_s`` 0: none (the model until 2026-11-27).
    startup_contention: float = 1.0
    startup_s: float = 0.0
    # Executor warm-up job (issue 14; ``collectors.executor_warmup``, on by default in ``attach``): an
    # executor that registers while no task of the running stage waits for a slot runs a warm-up job for
    # ``prewarm_s`` seconds (its slot is busy) and then starts warm (no ``warmup_factor``); one that
    # registers while tasks wait takes one at once, cold, as before. 0: no warm-up job (the model until
    # 2026-11-28). On the standalone cluster a cold executor's first mapInPandas task held its slot 3.8 s
    # against 1.1 s on a warm one, and 1.3 s after a warm-up (``bench warmup``).
    prewarm_s: float = 0.0
    # How much slower a warmed executor's first task still runs (its streaming query's own classes and
    # code are loaded then: ×1.4 in runs 91 and 92, the profile's ``idle_work_factor``). 1: none. With
    # ``prewarm_s`` 0 (no warm-up job) and a factor ≠ 1, an executor that registers while no task waits
    # runs its first task that much slower, and one that takes a waiting task at once ``warmup_factor``
    # times: a job without the warm-up, whose cold executors differ by that (×2.6–2.8 at once against
    # ×2.1–2.3 later in runs 83–89).
    prewarm_factor: float = 1.0
    # The listener jar's launch hold (``io.sparkgovernor.LaunchHold``, ``collectors.launch_hold``): an executor
    # that registers while the running stage has tasks waiting (at most ``launch_hold_waves`` × those running)
    # takes none of them; it starts once none waits
    # (the last one launched on an old executor), at most ``launch_hold_max_s`` after its registration, and
    # then finds no task waiting (the warm-up job, with ``prewarm_s``). It is paid for (allocated) from its
    # registration. False: it takes the waiting tasks at once (Spark's default).
    launch_hold: bool = False
    launch_hold_max_s: float = 10.0
    # ... and only while the waiting tasks are at most this many times the running ones
    # (``spark.governor.launchHoldWaves``): with more, a cold executor still ends the stage sooner
    launch_hold_waves: float = 1.0
    # ... and the warm-up's slot hold (``io.sparkgovernor.SlotHold``, with ``prewarm_s``): a warmed executor
    # whose warm-up job ends while the stage has tasks waiting, at most ``launch_hold_waves`` × those running
    # (not counting the tasks of executors on their first), keeps its slot until the last of them launched on
    # the other executors (at most ``launch_hold_max_s``), when that comes within (``slot_hold_factor`` − 1) ×
    # the stage's mean task time (``LaunchHold.holdSlot``; the plugin's ``spark.governor.slotHoldFactor``, not
    # the measured ``prewarm_factor``). Runs before 2026-11-28 12:00 UTC had the launch hold without it
    # (reports without ``slot_hold``)
    slot_hold: bool = False
    slot_hold_factor: float = 1.6
    # The job between batches (issue 14, "See the job between batches"): give the policies the view's
    # ``live`` state (running batch age, oldest unprocessed record, backlog and its trend) as the real
    # control plane does (``aggregators.liveness``), so their in-flight rules (``policies.in_flight``)
    # act in the simulator too. False: no live state (the view as before; today's results).
    live_view: bool = False
    # What the live state knows of the source (with ``live_view``): True, what a reporter knows
    # (``collectors.query_state``): the offsets of the *completed* batches, whose progress carries them,
    # so the arrival rate is the rows offered between the starts of the last ``RATE_POINTS`` completed
    # batches, and the rows waiting are extrapolated at that rate from the latest completed batch's
    # start; a rate step shows only once a batch at the new rate has completed. False: the simulator's
    # truth (the rows that arrived in the last 10 s and since the running batch's cut), which no
    # reporter has between batches (until 2026-11-26 the only model: the live-rate variants of Kingman
    # won in the simulator with it and lost spans on the real cluster).
    live_offsets: bool = True
    # The source is probed (with ``live_view``; ``collectors.source_probe``, as ``bench scaling-real``'s job
    # probes its rate file): the arrival rate is the rows that arrived over the last ``PROBE_RATE_S``
    # seconds, the rows waiting are exact, and the view says so (``LiveStats.arrival_probed``); a rate
    # step shows within that window. Overrides ``live_offsets``. False: no probe.
    live_probe: bool = False
    # The reporter's cadence, seconds (``collectors.reporter``'s ``state_interval_s``, 1 s): a completed
    # batch's progress, and with ``live_view`` the backlog right after it (at the batch's end, as
    # ``aggregators.liveness.troughs`` reads it), reach the control plane with the first state the
    # reporter sends after the batch ended (every ``state_interval_s`` at a phase drawn per seed: the
    # reporter's loop runs from its own start), ``state_delay_s`` later (the post and its commit). On
    # the standalone cluster a batch ending 0.1 s before an evaluation was not yet in the trend, and the
    # backlog rule acted an evaluation (8 s) later than in a simulator that saw the batch end at once
    # (run 43: utilization-target +15.7 points simulated). 0: the batch end is seen at once (the model
    # until 2026-11-27; the default of the uncalibrated benchmark).
    state_interval_s: float = 0.0
    state_delay_s: float = 0.05
    # With ``live_probe``: the control plane's surge watch (``api.surge_watch``, serve's ``--surge-ratio``):
    # every second, a probed rate more than this share above its baseline evaluates the policy at once.
    # None: evaluations only every ``eval_interval_s``.
    surge_ratio: float | None = 0.25
    # The job's measured cluster profile in the view (issue 14, "Learn the cluster from the job";
    # ``policies.cluster_inputs``), as the control plane measures it from the job's own events: the
    # provisioning delay once a scale-out's executors have finished a batch's tasks (directive → end of
    # the first batch's tasks they ran: directive → first task finished), the warm-up once such an
    # executor exists (``warmup_factor``; its duration ``warmup_s``, else ``warmup_tasks`` of the mean
    # task's time slowed), the driver overhead (``overhead_s`` + ``driver_overhead_s``) once a batch
    # completed. False: no profile (Kingman's cluster model then uses the paper's model).
    cluster_profile: bool = False
    eval_interval_s: float = 10.0  # control plane's default evaluation interval
    # The evaluations' phase, seconds: at eval_phase_s + k × eval_interval_s (0: at multiples of the
    # interval). The control plane's scheduler runs from its own start, not the job's; a rule that acts
    # at the first evaluation after a batch completes acts up to an interval apart on the two
    # (calibration replays the real run's, ``bench.scaling_calibrate``).
    eval_phase_s: float = 0.0
    window_ms: int = 5000  # control plane's statistics window
    min_executors: int = 1
    max_executors: int = 12
    slo_s: float | None = None  # latency target; None → 2 × trigger_s
    constraint_bound_s: float | None = None  # the view's latency constraint; None → the SLO target
    constraint_span_s: float = 5.0  # averaging span of the constraint (aggregators.constraints)

    @property
    def slo(self) -> float:
        return self.slo_s if self.slo_s is not None else 2 * self.trigger_s

    @property
    def constraint_bound(self) -> float:
        return self.constraint_bound_s if self.constraint_bound_s is not None else self.slo

    def slots(self, executors: int) -> int:
        return max(1, min(executors * self.cores_per_executor, self.partitions))

    @property
    def warmup(self) -> bool:
        """Whether new executors warm up (``warmup_factor`` ≠ 1 and a task or time limit; a warmed one's
        ``prewarm_factor`` ≠ 1) or slow the others while they start (``startup_contention``)."""
        return ((self.warmup_factor != 1.0 and (self.warmup_tasks > 0 or self.warmup_s > 0))
                or self.prewarm_factor != 1.0
                or (self.startup_contention != 1.0 and self.startup_s > 0))

    def processing_s(self, rows: float, executors: int) -> float:
        """Noise-free processing time (s) of a batch of ``rows`` on ``executors`` (warm) executors:
        overhead + waves × task time + driver overhead (exact when rows is a multiple of the partitions);
        a task's time is :meth:`task_fixed_s` + its rows × ``row_cost_s``."""
        waves = math.ceil(self.partitions / self.slots(executors))
        return (self.overhead_s + waves * (self.task_fixed_s(executors) + rows / self.partitions * self.row_cost_s)
                + self.driver_overhead_s)

    def task_fixed_s(self, executors: int) -> float:
        """Fixed service time of a task (s) of a stage run on ``executors`` executors:
        ``task_overhead_s`` + ``task_overhead_per_slot_s`` × slots."""
        return self.task_overhead_s + self.task_overhead_per_slot_s * self.slots(executors)

    def executors_for_rate(self, rate: float) -> int:
        """Fewest executors in [min, max] that process a trigger interval of ``rate`` rows/s within it."""
        for n in range(self.min_executors, self.max_executors + 1):
            if self.processing_s(rate * self.trigger_s, n) <= self.trigger_s:
                return n
        return self.max_executors


DEFAULT_PARAMS = SimParams()


@dataclass(frozen=True)
class BatchRecord:
    """One simulated batch (seconds)."""

    batch_id: int
    start_s: float
    end_s: float
    cut_s: float  # start of the interval whose rows it holds
    rows: int
    executors: int

    @property
    def processing_s(self) -> float:
        return self.end_s - self.start_s

    @property
    def latency_s(self) -> float:
        return self.end_s - self.cut_s


@dataclass(frozen=True)
class Action:
    """An issued executor directive (seconds)."""

    t_s: float
    old: int
    new: int
    reason: str


@dataclass
class SimResult:
    batches: list[BatchRecord]
    actions: list[Action]
    timeline: list[tuple[float, int, int]]  # (t_s, registered, allocated) at every change
    executor_seconds: float
    duration_s: float
    unprocessed_rows: int
    holds: int  # scale-up holds entered after ineffective scale-ups
    spans: list[SpanTruth] = field(default_factory=list)  # the constraint per span (Eq. 4.1), ground truth


@dataclass
class _Running:
    batch_id: int
    start: int
    end: int
    cut: int
    rows: int
    executors: int
    boundary: int  # next trigger boundary after start
    submitted: int = 0  # stage submission (ms)
    tasks: "_Tasks | None" = None
    joins: tuple[float, ...] = ()  # slots that joined the running stage (s from submission)
    post: int = 0  # driver overhead after the last task (ms): end = last task's finish + post
    warm: "dict | None" = None  # warm-up only: the warm_schedule arguments at submission


@dataclass
class _Tasks:
    """The tasks of one stage run, sorted by finish time; ``folded`` of them are in the windows."""

    partition: np.ndarray
    launch_ms: np.ndarray
    finish_ms: np.ndarray
    service_s: np.ndarray
    rows: np.ndarray
    folded: int = 0
    executor: "np.ndarray | None" = None  # warm-up only: the executor each task ran on


def list_schedule(service: np.ndarray, slots: int, later: tuple[float, ...] = ()) -> tuple[np.ndarray, np.ndarray]:
    """(launch, finish) of tasks run in order, each on the slot that frees first (s from submission).
    ``later``: slots that join at these times (s from submission; executors registering while the
    stage runs), at most ``len(service)`` slots in all."""
    n = len(service)
    if slots >= n:
        return np.zeros(n), service.astype(float)
    free = sorted([0.0] * slots + sorted(later)[:n - slots])
    launch = np.empty(n)
    for i, d in enumerate(service.tolist()):
        t = free[0]
        launch[i] = t
        heapq.heapreplace(free, t + d)
    return launch, launch + service


def warm_schedule(service: np.ndarray, slot_execs: list[int], joins: list[tuple[float, int]],
                  warm_left: dict[int, int], warm_until: dict[int, float],
                  factor: float, crowded: tuple[tuple[float, float, int], ...] = (),
                  contention: float = 1.0, factors: Optional[dict[int, float]] = None
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`list_schedule` with each slot's executor known and a new executor's warm-up: (launch,
    finish, executor) per task, seconds from submission. ``slot_execs``: the executor of each slot free
    at submission (oldest executors first); ``joins``: (time, executor) of slots joining while the stage
    runs (at most ``len(service)`` slots in all); a task launched on executor e takes ``factor`` × its
    service while e has ``warm_left[e]`` > 0 tasks of warm-up left (each launch uses one) or the
    launch is before ``warm_until[e]``; on an executor with no window in ``crowded`` (one not added
    during the run), ``contention`` × its service when launched within a window (start, end, executor)
    of ``crowded`` (an added executor's start-up), as ``aggregators.cluster_profile`` measures it.
    ``factors``: executor → its own warm-up factor instead of ``factor`` (a warmed executor's,
    ``SimParams.prewarm_factor``).
    Ties go to the slot listed first (a slot free at submission
    before a joining one), so a stage rescheduled when executors join keeps the launches made before
    the join. With no warm-up left anywhere it gives exactly :func:`list_schedule`'s times."""
    n = len(service)
    left = dict(warm_left)
    slots = [(0.0, i, e) for i, e in enumerate(slot_execs[:n])]
    extra = sorted(joins)[:max(0, n - len(slots))]
    free = sorted(slots + [(t, len(slots) + i, e) for i, (t, e) in enumerate(extra)])
    launch, finish, execs = np.empty(n), np.empty(n), np.empty(n, dtype=np.int64)
    new = {x for _, _, x in crowded}
    for i, d in enumerate(service.tolist()):
        t, seq, e = free[0]
        if left.get(e, 0) > 0 or t < warm_until.get(e, -math.inf):
            d *= factors.get(e, factor) if factors else factor
            left[e] = max(0, left.get(e, 0) - 1)
        elif contention != 1.0 and e not in new and any(a <= t < b for a, b, _ in crowded):
            d *= contention
        launch[i], finish[i], execs[i] = t, t + d, e
        heapq.heapreplace(free, (t + d, seq, e))
    return launch, finish, execs
