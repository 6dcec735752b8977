"""Discrete-event simulator of a Spark Structured Streaming micro-batch job under an executor policy.

Units: inside the engine every time is an integer number of milliseconds since the source started
(t = 0), so trigger boundaries are exact; results are reported in seconds. Rates are rows/s, the
per-row cost is core-seconds per row, executor-seconds are ∫ allocated executors dt.

Model (kept simple on purpose):

* Arrivals: ``rate(t)`` rows/s (a vectorised callable of seconds). Rows arrived by t,
  A(t) = ∫₀ᵗ rate, integrated by the trapezoid rule on a 10 ms grid (exact for a constant rate).
* Trigger (``processingTime``, Spark's ``ProcessingTimeExecutor``): boundaries are multiples of
  the trigger interval T, shifted by ``trigger_phase_s`` (0 by default; a real run's first trigger
  falls anywhere in its first interval). A trigger that started at s and finished at e is followed by one at
  max(e, ⌊s/T⌋·T + T): at the next boundary when on time, at once when it overran. A trigger
  finding no new rows runs no batch (Spark constructs none without new offsets) and takes no time.
* A batch started at s holds the rows that arrived in (cut, s], cut being the start of the
  previous batch (0 for the first); then cut := s.
* A batch is one stage of ``partitions`` (N) tasks: partition i holds ⌊rows/N⌋ rows, the first
  rows mod N one more. Task i's service (run) time is (fixed + rows_i × row_cost_s) × b × ε_i
  (fixed = ``task_overhead_s`` + ``task_overhead_per_slot_s`` × the batch's slots at its start: a fixed
  cost per task, inside the task, growing with the slots that share the machine; 0 by default): b ~ lognormal
  with mean 1 and shape ``noise_sigma`` (one draw per batch, as before), ε_i ~ lognormal with mean 1
  and shape ``task_noise_sigma`` (N draws per batch; 0 disables either), from one seeded numpy
  Generator, so every policy sees the same draws per batch index. The driver first spends
  overhead_s × b (planning; the stage is submitted then), then the tasks run on
  slots = min(executors × cores_per_executor, partitions) (at least 1) slots, in partition order,
  each on the slot that frees first (Spark's FIFO task scheduling; equal tasks run in waves), so
  the stage's makespan ≈ ⌈N/slots⌉ × task time. Processing time p = overhead_s × b + makespan,
  rounded to ms (≥ 1 ms); the batch ends when its last task does. The stage starts on the executors
  registered when the batch starts; executors registering while it runs take its tasks not yet
  launched at once (Spark's scheduler backend offers a new executor's cores to the running task
  sets). Change from the earlier model, where they waited for the next batch: that made every
  scale-up look 1–2 batches slower than on Spark and charged reactive policies for it.
  Change from the earlier model p = (overhead_s + rows × row_cost_s / slots) × b: the work is
  now split into tasks, so the makespan exceeds rows × cost × b / slots by the wave quantization
  and, with ``task_noise_sigma`` > 0, the stragglers of the last wave — together less than one
  task's time (≈ 6 % of the makespan with 200 partitions on 12 slots, ≈ 2.5 % on 5). With both
  noises off, rows a multiple of N and N a multiple of the slots, p is exactly the earlier
  formula (``SimParams.processing_s`` is the noise-free value: overhead + ⌈N/slots⌉ × task time).
* Driver overhead (issue 14): ``driver_overhead_s`` is added after the last task to every batch's
  duration, without noise (the driver's offset/commit work, outside the task statistics; the
  control plane sees it in the batch's duration, not in the stage's makespan). Default 0.
* Warm-up (issue 14): an executor that registers during the run runs its first ``warmup_tasks``
  tasks, and those it launches within ``warmup_s`` of registering, ``warmup_factor`` times slower
  (``scaling_sim_model.warm_schedule``; the control plane's statistics see the slowed service
  times). Executors are tracked in registration order; a scale-in releases the newest first.
  Default factor 1: no warm-up, and the schedule is ``list_schedule``'s as before.
* Start-up contention (issue 14): while an executor added during the run is within ``startup_s`` of
  its registration, the tasks the executors present from the start launch run ``startup_contention``
  times slower (executors starting on
  the machine take CPU from those working; ``aggregators.cluster_profile``'s ``contention_factor``).
  A task launched before the window keeps its time. Default 1: none.
* Latency of a batch = its end − its cut: the latency of its oldest row (batching + waiting for
  the previous batch + processing). Steady state on time: latency = T + p.
* Executors: raising the target requests the difference, which registers ``up_delay_s`` later
  (the provisioning delay: directive → ``ExecutorAdded``; the new executor is offered tasks at once),
  or, with ``up_delays_s`` (measured delays), a delay drawn from them per request.
  Lowering it first cancels outstanding requests (newest first), then releases registered
  executors when the running batch ends (idle executors are killed, as
  ``collectors.appliers.ExecutorApplier`` does), at once when no batch runs; a released executor
  takes no task but stays listed ``release_delay_s`` longer (0 by default; the standalone cluster:
  5.5 s). Executor-seconds integrate *allocated* executors (registered + requested but not yet
  registered: provisioning is paid for; + released but still listed), over [0, duration]; the
  timeline's registered executors count the listed ones, as the driver's executor list does.
* Surge watch (with ``live_probe`` and ``surge_ratio``, ``api.surge_watch``): every second the probed
  rate is checked against its baseline (``policies.surge``), and a settled surge evaluates the policy at
  once. With the reporter's ticks (``state_interval_s`` > 0, as calibrated runs have) the probed rate,
  in the surge check and in the live view, is the one the latest tick delivered carries (the counter's
  growth over the ``PROBE_RATE_S`` before that tick), and the watch runs at a phase of its own drawn
  per seed: a step is evaluated 2.0–3.4 s after it (mean 2.75 s; the standalone cluster's runs 68–97:
  2.0–3.5 s, mean 2.7 s). Without ticks the check reads the source itself, every second from 0
  (2.0 s after a step at a whole second: the model until 2026-11-28).
* End of run: no event after ``duration`` is simulated except that the batch running at the end
  is finished so its latency is counted; rows arrived after the last batch's start are reported as
  ``unprocessed_rows``.

The control plane that watches and steers the job (statistics, view, latency constraint, policy
evaluation, directives) is ``bench.scaling_sim_control``; the parameters, task scheduling and
records are ``bench.scaling_sim_model``; the ground-truth latency per span ``bench.latency_truth``.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from spark_governor.bench.latency_truth import SpanTruth, span_truths
from spark_governor.bench.scaling_sim_control import Controller, SimControlPlane
from spark_governor.bench.scaling_sim_model import (
    DEFAULT_PARAMS,
    BatchRecord,
    SimParams,
    SimResult,
    _Running,
    _Tasks,
    list_schedule,
    warm_schedule,
)
from spark_governor.collectors.query_state import PROBE_RATE_S
from spark_governor.policies.base import BatchStats, JobView
from spark_governor.policies.surge import SURGE_CHECK_S, SurgeBaselines

__all__ = ["RateFn", "Simulation", "simulate"]

GRID_MS = 10
RateFn = Callable[[np.ndarray], np.ndarray]  # seconds -> rows/s


@dataclass
class _State:
    registered: int
    requests: list[list[int]] = field(default_factory=list)  # [arrival_ms, count]
    release: int = 0  # registered executors to release when the running batch ends
    running: _Running | None = None
    next_start: int = 0
    cut: int = 0
    next_eval: int = 0
    exec_ms: int = 0  # ∫ allocated dt, executor-milliseconds
    leaving: list[list[int]] = field(default_factory=list)  # released executors still listed: [gone_ms, count]
    clock: int = 0
    # registered executors in registration order: [id, registered ms (None: present at t = 0), warm-up
    # tasks left, ms from which its slot is free, warmed by a warm-up job] (only read when the params have a
    # warm-up; the last two with ``SimParams.prewarm_s``)
    execs: list[list] = field(default_factory=list)
    next_exec: int = 0

    @property
    def listed(self) -> int:
        """Registered executors and those released but not gone yet (``SimParams.release_delay_s``)."""
        return self.registered + sum(c for _, c in self.leaving)

    @property
    def allocated(self) -> int:
        return self.listed + sum(c for _, c in self.requests)

    @property
    def target(self) -> int:
        return self.registered + sum(c for _, c in self.requests) - self.release


SURGE_CHECK_MS = round(SURGE_CHECK_S * 1000)


class Simulation:
    """One run of one controller on one rate profile; call :meth:`run` once."""

    def __init__(self, rate: RateFn, duration_s: float, controller: Controller, params: SimParams,
                 seed: int = 0):
        self.p = params
        self.T = round(params.trigger_s * 1000)
        self.D = round(duration_s * 1000)
        self.eval_ms = round(params.eval_interval_s * 1000)
        grid = np.arange(0, self.D + GRID_MS, GRID_MS)
        r = np.broadcast_to(np.asarray(rate(grid / 1000.0), dtype=float), grid.shape)
        self._grid = grid
        self._cum = np.concatenate([[0.0], np.cumsum((r[1:] + r[:-1]) / 2 * GRID_MS / 1000.0)])
        self.rng = np.random.default_rng(seed)
        self._up_rng = np.random.default_rng([seed, 1])  # provisioning draws (SimParams.up_delays_s)
        # the reporter's state ticks (SimParams.state_interval_s): at state_phase + k·interval, the phase
        # drawn per seed from a stream of its own (the other draws stay as they were)
        self.state_ms = round(params.state_interval_s * 1000)
        self.state_phase = int(np.random.default_rng([seed, 2]).integers(self.state_ms)) if self.state_ms > 0 else 0
        # what a completed batch tells the control plane (its progress, the backlog right after it), by the
        # time it gets there: (ms, "batch" | "trough", item), in that order (:meth:`_deliver`)
        self._pending: list[tuple[int, str, object]] = []
        # the trigger's phase (SimParams.trigger_phase_s): boundaries at phase + k·T
        self.phase = round(params.trigger_phase_s * 1000) % self.T
        # the control plane's evaluation phase (SimParams.eval_phase_s): evaluations at phase + k·interval
        eval_phase = round(params.eval_phase_s * 1000) % self.eval_ms
        self.s = _State(registered=controller.initial_executors, next_eval=eval_phase or self.eval_ms,
                        next_start=self.phase)
        # the control plane's surge watch (api.surge_watch): a probed rate step evaluates at once
        self._surges = SurgeBaselines(params.surge_ratio) if params.live_probe and params.surge_ratio else None
        # with the reporter's ticks: the watch's own one-second loop runs from its own start, at a phase drawn
        # per seed from a stream of its own (without them every second from t = 0, as before 2026-11-28)
        self._next_surge = (int(np.random.default_rng([seed, 3]).integers(SURGE_CHECK_MS)) or SURGE_CHECK_MS) \
            if self.state_ms > 0 else SURGE_CHECK_MS
        self.s.execs = [[i, None, 0, 0, False] for i in range(controller.initial_executors)]
        self.s.next_exec = controller.initial_executors
        self.batches: list[BatchRecord] = []
        self.control = SimControlPlane(controller, params)
        self.timeline = [(0.0, self.s.registered, self.s.allocated)]
        self._next_id = 0
        # cluster profile (SimParams.cluster_profile): directive ms of each request (by arrival ms), the
        # scale-outs registered but not measured yet ([directive ms, registered ms]), the measured delays
        self._directive_at: dict[int, int] = {}
        self._registered_at: dict[int, int] = {}  # launch hold: a held request's arrival ms -> its registration ms
        self._unmeasured: list[list[int]] = []

    @property
    def stats(self) -> list[BatchStats]:
        """The completed batches as the control plane stores them."""
        return self.control.stats

    # -- arrivals and time ------------------------------------------------------------------
    def arrived(self, t_ms: int) -> int:
        """Rows arrived in [0, t_ms], rounded."""
        return round(float(np.interp(t_ms, self._grid, self._cum)))

    def _advance(self, t: int) -> None:
        self.s.exec_ms += self.s.allocated * (t - self.s.clock)
        self.s.clock = t

    def run(self) -> SimResult:
        while True:
            events = [(self.s.next_eval, 2, self._evaluate)]
            if self._surges is not None:
                events.append((self._next_surge, 4, self._surge))
            if self.s.requests:
                events.append((min(a for a, _ in self.s.requests), 0, self._arrive))
            if self.s.leaving:
                events.append((min(g for g, _ in self.s.leaving), 0, self._gone))
            if self.s.running:
                events.append((self.s.running.end, 1, self._end_batch))
            else:
                events.append((self.s.next_start, 3, self._start_batch))
            t, _, handler = min(events)
            if t > self.D:
                break
            self._advance(t)
            before = (self.s.listed, self.s.allocated)
            handler(t)
            if (self.s.listed, self.s.allocated) != before:
                self.timeline.append((t / 1000.0, self.s.listed, self.s.allocated))
        self._advance(self.D)
        if self.s.running:  # finish the batch in flight so its latency counts
            self.batches.append(self._record(self.s.running))
        return SimResult(self.batches, self.control.actions, self.timeline, self.s.exec_ms / 1000.0, self.D / 1000.0,
                         self.arrived(self.D) - self.arrived(self.s.cut), self.control.holds, self.span_truth())

    def span_truth(self) -> list[SpanTruth]:
        """Per constraint span (``constraint_span_s``, aligned on t = 0): the exact mean latency of the
        rows arriving in it (:func:`span_truths` on the simulated arrivals and batches)."""
        return span_truths(self._grid / 1000.0, self._cum, [b.start_s for b in self.batches],
                           [b.end_s for b in self.batches], self.p.constraint_span_s, self.D / 1000.0)

    # -- batches ----------------------------------------------------------------------------
    def _start_batch(self, t: int) -> None:
        rows = self.arrived(t) - self.arrived(self.s.cut)
        boundary = ((t - self.phase) // self.T) * self.T + self.T + self.phase
        if rows <= 0:
            self.s.next_start = boundary
            return
        n, p = self.s.registered, self.p
        noise = self.rng.lognormal(-p.noise_sigma ** 2 / 2, p.noise_sigma) if p.noise_sigma else 1.0
        parts = p.partitions
        eps = (self.rng.lognormal(-p.task_noise_sigma ** 2 / 2, p.task_noise_sigma, parts) if p.task_noise_sigma
               else np.ones(parts))
        task_rows = np.full(parts, rows // parts, dtype=np.int64)
        task_rows[:rows % parts] += 1
        service = (p.task_fixed_s(n) + task_rows * p.row_cost_s) * noise * eps
        submit_s = p.overhead_s * noise
        post = round(1000 * p.driver_overhead_s)
        warm, execs = None, None
        if p.warmup:
            submitted = t + round(1000 * submit_s)
            # an executor still running its warm-up job (SimParams.prewarm_s) joins the stage when it ends
            free = [e for e in self.s.execs if e[3] <= submitted]
            busy = [e for e in self.s.execs if e[3] > submitted]
            slot_execs = [e[0] for e in free for _ in range(p.cores_per_executor)][:p.slots(n)] or [-1]
            warm = {"service": service, "slot_execs": slot_execs,
                    "joins": [((e[3] - submitted) / 1000.0, e[0]) for e in busy for _ in range(p.cores_per_executor)],
                    "left": {e[0]: e[2] for e in self.s.execs},
                    "until": {e[0]: self._warm_until(e, submitted) for e in self.s.execs}}
            self._slot_hold(warm, submitted)
            launch, finish, execs = warm_schedule(service, slot_execs, warm["joins"], warm["left"], warm["until"],
                                                  p.warmup_factor, self._crowded(submitted), p.startup_contention,
                                                  self._warmed_factors())
            service = finish - launch
        else:
            launch, finish = list_schedule(service, p.slots(n))
        p_ms = max(1, round(1000 * (submit_s + float(finish.max())))) + post
        order = np.argsort(finish, kind="stable")
        tasks = _Tasks(order, t + np.round(1000 * (submit_s + launch[order])).astype(np.int64),
                       np.minimum(t + np.round(1000 * (submit_s + finish[order])).astype(np.int64), t + p_ms),
                       service[order], task_rows[order], executor=execs[order] if execs is not None else None)
        self.s.running = _Running(self._next_id, t, t + p_ms, self.s.cut, rows, n, boundary,
                                  min(t + round(1000 * submit_s), t + p_ms), tasks, post=post, warm=warm)
        self._next_id += 1
        self.s.cut = t

    @staticmethod
    def _record(r: _Running) -> BatchRecord:
        return BatchRecord(r.batch_id, r.start / 1000.0, r.end / 1000.0, r.cut / 1000.0, r.rows, r.executors)

    def _slot_hold(self, w: dict, submitted_ms: int) -> None:
        """With ``SimParams.slot_hold`` (the launch hold plugin's, ``io.sparkgovernor.SlotHold``): a warmed
        executor whose warm-up job ends while the stage has tasks waiting, at most ``launch_hold_waves`` × those
        running, keeps its slot until the last of them launches on the other slots (at most
        ``launch_hold_max_s``), and so takes none of them. Moves its joins in ``w["joins"]`` (seconds from
        ``submitted_ms``), executors in the order their warm-ups end. The running tasks counted leave out those
        of executors on their first task (``StageTasks.counts``: it frees its slot late); and it is kept only
        when the last waiting task launches within (``slot_hold_factor`` − 1) × the stage's mean task time
        (``LaunchHold.holdSlot``: sooner than the warmed executor, ×that factor, would end it)."""
        if not self.p.slot_hold or not w["joins"]:
            return
        warmed = {e[0] for e in self.s.execs if e[4]}
        joins = sorted(w["joins"])
        order = [x for x in dict.fromkeys(x for _, x in joins) if x in warmed]
        for k, ex in enumerate(order):
            mine = [j for j, x in joins if x == ex]
            # the schedule on the slots decided so far: the executors whose warm-up ends later are not counted
            others = [(j, x) for j, x in joins if x != ex]
            decided = [(j, x) for j, x in others if x not in order[k + 1:]]
            launch, finish, execs = warm_schedule(w["service"], w["slot_execs"], decided, w["left"], w["until"],
                                                  self.p.warmup_factor, self._crowded(submitted_ms),
                                                  self.p.startup_contention, self._warmed_factors())
            at = min(mine)
            waiting = launch[launch > at]
            # the running tasks that free a slot soon: not those of executors on their first task (slow)
            fresh = np.array([w["left"].get(int(x), 0) > 0 for x in execs], dtype=bool)
            running = int(np.count_nonzero((launch <= at) & (finish > at) & ~fresh))
            wait = float(waiting.max()) - at if len(waiting) else 0.0
            task_s = float(np.mean(w["service"]))
            if (len(waiting) and len(waiting) <= self.p.launch_hold_waves * running
                    and wait < (self.p.slot_hold_factor - 1.0) * task_s):
                until = min(float(waiting.max()) + 0.001, at + self.p.launch_hold_max_s)
                joins = sorted(others + [(max(j, until), ex) for j in mine])
        w["joins"] = joins

    def _warmed_factors(self) -> dict[int, float]:
        """The warmed executors' own warm-up factor (``SimParams.prewarm_factor``)."""
        return {e[0]: self.p.prewarm_factor for e in self.s.execs if e[4]}

    def _warm_until(self, e: list, submitted_ms: int) -> float:
        """End of executor ``e``'s timed warm-up, seconds from the stage's submission (−inf: warm)."""
        if e[1] is None or e[4] or self.p.warmup_s <= 0:
            return -np.inf
        return (e[1] - submitted_ms) / 1000.0 + self.p.warmup_s

    def _crowded(self, submitted_ms: int) -> tuple[tuple[float, float, int], ...]:
        """(start, end, executor): the windows, seconds from a stage's submission, in which an executor
        registered during the run is starting (``SimParams.startup_s`` from its registration)."""
        if self.p.startup_s <= 0 or self.p.startup_contention == 1.0:
            return ()
        return tuple(((e[1] - submitted_ms) / 1000.0, (e[1] - submitted_ms) / 1000.0 + self.p.startup_s, e[0])
                     for e in self.s.execs if e[1] is not None)

    def _end_batch(self, t: int) -> None:
        self.control.fold_tasks(self.s.running, t)
        r, self.s.running = self.s.running, None
        if r.tasks.executor is not None:  # warm-up: each task used one of its executor's warm-up tasks
            ran = dict(zip(*np.unique(r.tasks.executor, return_counts=True)))
            for e in self.s.execs:
                e[2] = max(0, e[2] - int(ran.get(e[0], 0)))
        self.control.fold_stage(r)
        if self._unmeasured:  # scale-outs whose executors ran this batch's tasks: directive → tasks done
            done = r.end - r.post
            ran = [u for u in self._unmeasured if u[1] < done]
            self.control.provisioning += [(done - d) / 1000.0 for d, _ in ran]
            self.control.registrations += [(reg - d) / 1000.0 for d, reg in ran]
            self._unmeasured = [u for u in self._unmeasured if u[1] >= done]
        self.batches.append(self._record(r))
        processing_s = (r.end - r.start) / 1000.0
        self._pending.append((self._delivered(self._reported(t)), "batch", BatchStats(
            batch_id=r.batch_id, trigger_ms=r.start, processing_s=processing_s, num_input_rows=r.rows,
            input_rows_per_second=r.rows * 1000.0 / (r.start - r.cut) if r.start > r.cut else None,
            processed_rows_per_second=r.rows / processing_s)))
        self.s.next_start = max(t, r.boundary)
        if self.p.live_view:  # the backlog right after the batch: rows arrived after its start
            # at the batch's end, as the control plane reads it from the reporter's next state (aggregators.liveness.troughs)
            self._pending.append((self._delivered(self._reported(t)), "trough",
                                  (t / 1000.0, float(self.arrived(t) - self.arrived(r.start)))))
        self._deliver(t)
        if self.s.release:
            self.s.registered -= self.s.release
            self._remove_execs(self.s.release)
            self.s.release = 0
            self._check_applied(t)

    # -- executors --------------------------------------------------------------------------
    def _arrive(self, t: int) -> None:
        if self.p.launch_hold:
            self._hold(t)
        joined = sum(c for a, c in self.s.requests if a <= t)
        self._unmeasured += [[self._directive_at.pop(a, a - round(self.p.up_delay_s * 1000)), t]
                             for a, c in self.s.requests if a <= t and c]
        self.s.registered += joined
        # SimParams.prewarm_s: the executors that find no task waiting (Spark offers a registering executor
        # the running stage's pending tasks first) run a warm-up job instead, and start warm after it; with
        # no warm-up job (prewarm_s 0) but a prewarm_factor, they run their first task ×prewarm_factor
        r, cores = self.s.running, self.p.cores_per_executor
        pending = (int(np.count_nonzero(r.tasks.launch_ms > t)) if r is not None and t < r.end and r.tasks is not None
                   else 0)
        for i in range(joined):
            warmed = (self.p.prewarm_s > 0 or self.p.prewarm_factor != 1.0) and i * cores >= pending
            left = (1 if self.p.prewarm_factor != 1.0 else 0) if warmed else self.p.warmup_tasks
            self.s.execs.append([self.s.next_exec, t, left,
                                 t + round(1000 * self.p.prewarm_s) if warmed else t, warmed])
            self.s.next_exec += 1
        self.s.requests = [[a, c] for a, c in self.s.requests if a > t]
        if self.s.running is not None and joined:
            self._join_running(t, joined)
        self._check_applied(t)

    def _hold(self, t: int) -> None:
        """With ``SimParams.launch_hold``: the requests registering at ``t`` while the running stage has tasks
        waiting, at most ``launch_hold_waves`` × those running, start when its last waiting task launches (on
        the executors it has; checked again then), at most
        ``launch_hold_max_s`` after they registered. Their directive time stays, so the measured provisioning
        delay counts the hold (the control plane reads the registration; here they are listed once they start)."""
        r = self.s.running
        if r is None or t >= r.end or r.tasks is None:
            return
        waiting = r.tasks.launch_ms[r.tasks.launch_ms > t]
        running = int(np.count_nonzero((r.tasks.launch_ms <= t) & (r.tasks.finish_ms > t)))
        if not len(waiting) or len(waiting) > self.p.launch_hold_waves * running:
            return  # nothing to take, or more than the executors working launch soon: a cold one helps
        for req in self.s.requests:
            if req[0] > t or not req[1]:
                continue
            since = self._registered_at.pop(req[0], req[0])
            until = min(int(waiting.max()) + 1, since + round(1000 * self.p.launch_hold_max_s))
            if until > t:
                if req[0] in self._directive_at:
                    self._directive_at[until] = self._directive_at.pop(req[0])
                self._registered_at[until] = since
                req[0] = until

    def _join_running(self, t: int, joined: int) -> None:
        """Executors registering while a stage runs take its pending tasks at once (Spark's scheduler
        backend offers a registering executor's cores to the running task sets, ``makeOffers``): the
        stage is rescheduled with the new slots free from ``t`` on. Launches before ``t`` do not change
        (each took a slot that freed before ``t``), so the tasks already folded stay as they were."""
        r, p = self.s.running, self.p
        if t >= r.end:
            return
        r.joins = r.joins + (((t - r.submitted) / 1000.0,) * (joined * p.cores_per_executor))
        k = r.tasks
        order = np.argsort(k.partition)
        service, rows, part = k.service_s[order], k.rows[order], k.partition[order]
        execs = None
        if r.warm is not None:
            w = r.warm
            for e in self.s.execs[-joined:]:
                w["joins"] += [((max(t, e[3]) - r.submitted) / 1000.0, e[0])] * p.cores_per_executor
                w["left"][e[0]], w["until"][e[0]] = e[2], self._warm_until(e, r.submitted)
            self._slot_hold(w, r.submitted)
            launch, finish, execs = warm_schedule(w["service"], w["slot_execs"], w["joins"], w["left"], w["until"],
                                                  p.warmup_factor, self._crowded(r.submitted), p.startup_contention,
                                                  self._warmed_factors())
            service = np.where(k.launch_ms[order] <= t, service, finish - launch)
        else:
            launch, finish = list_schedule(service, p.slots(r.executors), r.joins)
        launch_ms = r.submitted + np.round(1000 * launch).astype(np.int64)
        finish_ms = r.submitted + np.round(1000 * finish).astype(np.int64)
        launched = k.launch_ms[order] <= t  # same schedule; keep their ms exactly as folded
        launch_ms = np.where(launched, k.launch_ms[order], launch_ms)
        finish_ms = np.where(launched, k.finish_ms[order], finish_ms)
        if execs is not None:
            execs = np.where(launched, k.executor[order], execs)
        r.end = max(int(finish_ms.max()) + r.post, r.submitted + 1)
        by = np.argsort(finish_ms, kind="stable")
        r.tasks = _Tasks(part[by], launch_ms[by], finish_ms[by], service[by], rows[by], k.folded,
                         executor=execs[by] if execs is not None else None)

    def _set_target(self, t: int, new: int) -> None:
        s = self.s
        if new > s.target:
            keep = min(s.release, new - s.target)
            s.release -= keep
            extra = new - s.target
            if extra:
                s.requests.append([t + round(self._up_delay() * 1000), extra])
                self._directive_at[s.requests[-1][0]] = t
            return
        drop = s.target - new
        while drop and s.requests:
            cancel = min(drop, s.requests[-1][1])
            s.requests[-1][1] -= cancel
            drop -= cancel
            if not s.requests[-1][1]:
                s.requests.pop()
        if s.running:
            s.release += drop
        else:
            s.registered -= drop
            self._remove_execs(drop)

    def _up_delay(self) -> float:
        """Provisioning delay of one scale-out request (s): ``up_delay_s``, or a draw from ``up_delays_s``."""
        if self.p.up_delays_s:
            return float(self.p.up_delays_s[int(self._up_rng.integers(len(self.p.up_delays_s)))])
        return self.p.up_delay_s

    def _remove_execs(self, count: int) -> None:
        """Release ``count`` registered executors, the newest first; they stay listed (and paid for)
        ``release_delay_s`` longer."""
        if count > 0:
            del self.s.execs[-count:]
            if self.p.release_delay_s > 0:
                self.s.leaving.append([self.s.clock + round(self.p.release_delay_s * 1000), count])

    def _gone(self, t: int) -> None:
        self.s.leaving = [x for x in self.s.leaving if x[0] > t]

    def _check_applied(self, t: int) -> None:
        if self.s.requests or self.s.release:
            return
        self.control.check_applied(t, self.s.registered)

    # -- control (bench.scaling_sim_control) -------------------------------------------------
    def view(self, t: int) -> JobView:
        """The ``JobView`` the policy gets at ``t`` (the running stage's tasks finished by ``t`` folded, the
        completed batches reported by ``t``)."""
        self._deliver(t)
        self.control.fold_tasks(self.s.running, t)
        live = None
        if self.p.live_view:
            def live(span_s: float):
                return self.control.live(t, span_s, self.s.running, self.s.cut, self.arrived, self._probed_at(t))
        return self.control.view(t, self.s.registered, live)

    def _reported(self, t: int) -> int:
        """When the reporter sends what happened at ``t`` (ms): its next state tick at or after ``t``
        (``SimParams.state_interval_s``; 0: at once)."""
        if self.state_ms <= 0:
            return t
        return self.state_phase + -(-(t - self.state_phase) // self.state_ms) * self.state_ms

    def _probed_at(self, t: int) -> int:
        """When the probed source counter the control plane holds at ``t`` (ms) was read: the latest
        reporter tick delivered by ``t`` (``collectors.query_state`` samples the probe at each snapshot and
        sends its growth over ``PROBE_RATE_S``), ``t`` itself without ticks. On the standalone cluster the
        surge evaluations came 2.0–3.5 s after a rate step (runs 68–97), where a simulator reading the
        counter at the check itself evaluated 2.0 s after every step."""
        if self.state_ms <= 0:
            return t
        seen = t - round(self.p.state_delay_s * 1000) - self.state_phase
        return max(0, self.state_phase + (seen // self.state_ms) * self.state_ms) if seen >= 0 else 0

    def _delivered(self, sent: int) -> int:
        """When a report sent at ``sent`` (ms) is in the control plane (``SimParams.state_delay_s`` later)."""
        return sent + round(self.p.state_delay_s * 1000) if self.state_ms > 0 else sent

    def _deliver(self, t: int) -> None:
        """Hand the control plane the completed batches and backlog troughs that reached it by ``t``."""
        while self._pending and self._pending[0][0] <= t:
            _, kind, item = self._pending.pop(0)
            if kind == "batch":
                self.control.stats.append(item)
            else:
                self.control.troughs.append(item)
                del self.control.troughs[:-1000]

    def _evaluate(self, t: int) -> None:
        self.s.next_eval += self.eval_ms
        self.control.evaluate(t, self.view(t), self._actuate)

    def _surge(self, t: int) -> None:
        """The surge watch's check at ``t``: the probed rate (rows over the probe's window, as of the tick
        the control plane holds, :meth:`_probed_at`) against its baseline; a surge evaluates the policy now,
        as ``api.surge_watch`` does."""
        self._next_surge += SURGE_CHECK_MS
        at = self._probed_at(t)
        window = min(at, round(PROBE_RATE_S * 1000))
        if window <= 0 or t == self.s.next_eval:
            return
        rate = (self.arrived(at) - self.arrived(at - window)) * 1000.0 / window
        if self._surges.surged(0, rate, t):
            self.control.evaluate(t, self.view(t), self._actuate)

    def _actuate(self, t: int, new: int) -> None:
        self._set_target(t, new)
        self._check_applied(t)


def simulate(rate: RateFn, duration_s: float, controller: Controller, params: SimParams | None = None,
             seed: int = 0) -> SimResult:
    """Run ``controller`` on the rate profile for ``duration_s`` seconds."""
    return Simulation(rate, duration_s, controller, params or DEFAULT_PARAMS, seed).run()
