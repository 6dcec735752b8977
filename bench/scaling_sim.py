"""Discrete-event simulator of a Spark Structured Streaming micro-batch job under an executor policy.

Units: inside the engine every time is an integer number of milliseconds since the source started
(t = 0), so trigger boundaries are exact; results are reported in seconds. Rates are rows/s, the
per-row cost is core-seconds per row, executor-seconds are ∫ allocated executors dt.

Model (kept simple on purpose):

* Arrivals: ``rate(t)`` rows/s (a vectorised callable of seconds). Rows arrived by t,
  A(t) = ∫₀ᵗ rate, integrated by the trapezoid rule on a 10 ms grid (exact for a constant rate).
* Trigger (``processingTime``, Spark's ``ProcessingTimeExecutor``): boundaries are multiples of
  the trigger interval T. A trigger that started at s and finished at e is followed by one at
  max(e, ⌊s/T⌋·T + T): at the next boundary when on time, at once when it overran. A trigger
  finding no new rows runs no batch (Spark constructs none without new offsets) and takes no time.
* A batch started at s holds the rows that arrived in (cut, s], cut being the start of the
  previous batch (0 for the first); then cut := s.
* A batch is one stage of ``partitions`` (N) tasks: partition i holds ⌊rows/N⌋ rows, the first
  rows mod N one more. Task i's service (run) time is rows_i × row_cost_s × b × ε_i: b ~ lognormal
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
* Latency of a batch = its end − its cut: the latency of its oldest row (batching + waiting for
  the previous batch + processing). Steady state on time: latency = T + p.
* Executors: raising the target requests the difference, which registers ``up_delay_s`` later.
  Lowering it first cancels outstanding requests (newest first), then releases registered
  executors when the running batch ends (idle executors are killed, as
  ``collectors.appliers.ExecutorApplier`` does), at once when no batch runs. Executor-seconds
  integrate *allocated* executors (registered + requested but not yet registered: provisioning is
  paid for), over [0, duration].
* Control: every ``eval_interval_s`` the steps of ``api.governor.Governor._evaluate_policy`` run on
  in-memory state instead of SQL: build the ``JobView`` (completed batches of the last hour, at most
  500; the directive and whether it was applied; registered executors; time of the latest
  decision), judge applied decisions due for their effectiveness check (``policy.observe`` +
  ``judge_effect`` + ``next_history``), ``policy.evaluate``, ``safety.guard``, then issue the
  directive (``next_history`` with the direction). A directive is *applied* once the registered
  executors equal its value; a newer directive supersedes a pending one.
* End of run: no event after ``duration`` is simulated except that the batch running at the end
  is finished so its latency is counted; rows arrived after the last batch's start are reported as
  ``unprocessed_rows``.

* Statistics, as the control plane keeps them (``aggregators.ingest``, ``aggregators.queries``,
  ``aggregators.view``): every task is folded into the statistics window (``window_ms``, aligned
  on t = 0) of its finish time as soon as it finishes (also the tasks of the batch still
  running): tasks, busy slot time (Σ service), records in, service and task-latency (finish −
  stage submission) moments and the partitions seen; every completed stage into the window of its
  completion: launch interarrival within the stage (ms timestamps), makespan (completion −
  submission), task count and slots. The view's stage (key ``batch``) merges the latest
  ⌈span/window⌉ windows that have tasks, like ``aggregators.view.build_view``: utilization = busy
  / (min(tasks, slots) × window) of the latest window and per window (``utilization_windows``),
  mean and CV of service, CV of launch interarrival, ``wait_mean_s`` = mean makespan − mean
  service (``aggregators.view._wait``), ``max_tasks`` = partitions. Statistics are visible at
  once (no reporting delay); a window that starts at the evaluation time itself (it can only hold
  tasks finishing at that very millisecond) is left out, so with evaluations on window boundaries
  the latest window of a view is always complete (a real control plane evaluating mid-window
  also sees a partial latest window, with a low utilization).
* Latency constraint (``aggregators.constraints.measure`` on the whole query): bound
  ``constraint_bound_s`` (default: the SLO target); measured latency = mean over the last
  round(span/5 s) complete 5 s spans of the mean record latency of the batches completed in the
  span, estimated as trigger gap / 2 + processing (``aggregators.latency``: the estimate the
  control plane uses without an event-time column). Note the difference to the bench's SLO,
  which bounds the latency of a batch's *oldest* row (gap + processing).

Only the ``executors`` knob is actuated; proposals for other knobs are ignored.
"""
from __future__ import annotations

import heapq
import math
from bisect import bisect_left
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from spark_governor.aggregators.latency import BatchLatency, span_latencies
from spark_governor.aggregators.view import _wait as stage_wait
from spark_governor.aggregators.welford import Moments
from spark_governor.policies.base import (
    BatchStats,
    ConstraintStats,
    DirectiveState,
    JobView,
    Policy,
    PolicyConfig,
    Proposal,
    StageStats,
)
from spark_governor.policies.safety import KnobHistory, SafetyConfig, guard, judge_effect, next_history

KNOB = "executors"
GRID_MS = 10
RateFn = Callable[[np.ndarray], np.ndarray]  # seconds -> rows/s


@dataclass(frozen=True)
class SimParams:
    """Job, cluster and control-plane constants (seconds, rows, core-seconds per row)."""

    trigger_s: float = 4.0
    overhead_s: float = 0.3  # fixed cost of a batch (planning, commit), seconds
    row_cost_s: float = 0.0005  # core-seconds per row: 2 000 rows/s per core
    cores_per_executor: int = 1
    partitions: int = 200  # tasks per batch (one stage); caps the parallelism of a batch
    noise_sigma: float = 0.1  # lognormal shape of the per-batch processing-time noise (mean 1)
    task_noise_sigma: float = 0.2  # lognormal shape of the per-task service-time noise (mean 1)
    up_delay_s: float = 10.0  # requested executor → registered
    eval_interval_s: float = 10.0  # control plane's default evaluation interval
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

    def processing_s(self, rows: float, executors: int) -> float:
        """Noise-free processing time (s) of a batch of ``rows`` on ``executors``: overhead + waves ×
        task time (exact when rows is a multiple of the partitions)."""
        waves = math.ceil(self.partitions / self.slots(executors))
        return self.overhead_s + waves * rows / self.partitions * self.row_cost_s

    def executors_for_rate(self, rate: float) -> int:
        """Fewest executors in [min, max] that process a trigger interval of ``rate`` rows/s within it."""
        for n in range(self.min_executors, self.max_executors + 1):
            if self.processing_s(rate * self.trigger_s, n) <= self.trigger_s:
                return n
        return self.max_executors


DEFAULT_PARAMS = SimParams()


def span_truths(grid_s: np.ndarray, cum_rows: np.ndarray, starts_s, ends_s, span_s: float,
                end_s: float) -> list[SpanTruth]:
    """The true mean record latency per span of ``span_s`` seconds (aligned on t = 0) of the rows
    *arriving* in it (thesis Eq. 4.1), from the arrivals and the batches.

    ``cum_rows[i]``: rows arrived by ``grid_s[i]`` (an even grid); batch k holds the rows that arrived
    after the previous batch's start up to its own start ``starts_s[k]`` and finishes at ``ends_s[k]``
    (starts ascending). Rows are taken per grid cell at its midpoint τ: a cell belongs to the first
    batch starting at or after τ, and each of its rows has latency = that batch's end − τ (error ≤
    half a cell per row). Rows after the last start were not processed: their latency counts as its
    lower bound ``end_s − τ`` and they are reported as ``pending_rows``. Spans without arrivals are
    absent."""
    grid_s = np.asarray(grid_s, dtype=float)
    rows = np.diff(np.asarray(cum_rows, dtype=float))
    mid = (grid_s[:-1] + grid_s[1:]) / 2
    starts, ends = np.asarray(starts_s, dtype=float), np.asarray(ends_s, dtype=float)
    k = np.searchsorted(starts, mid, side="left")
    done = k < len(starts)
    leave = ends[np.minimum(k, len(starts) - 1)] if len(starts) else np.zeros_like(mid)
    lat = np.where(done, leave, end_s) - mid
    idx = np.floor(mid / span_s + 1e-9).astype(np.int64)
    n = int(idx.max()) + 1 if len(idx) else 0
    total = np.bincount(idx, weights=rows, minlength=n)
    weighted = np.bincount(idx, weights=rows * lat, minlength=n)
    pending = np.bincount(idx, weights=rows * ~done, minlength=n)
    return [SpanTruth(i * span_s, float(total[i]), float(weighted[i] / total[i]), float(pending[i]))
            for i in range(n) if total[i] > 0]


class StaticPolicy(Policy):
    """Proposes nothing: the executors stay at the controller's initial count."""

    name = "static"
    knobs = (KNOB,)
    Config = SafetyConfig

    def evaluate(self, view: JobView, config: PolicyConfig) -> list[Proposal]:
        return []


@dataclass(frozen=True)
class Controller:
    """What decides the executors: a policy, its validated config and the starting count."""

    policy: Policy
    config: SafetyConfig
    initial_executors: int


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
    spans: list["SpanTruth"] = field(default_factory=list)  # the constraint per span (Eq. 4.1), ground truth


@dataclass(frozen=True)
class SpanTruth:
    """The true mean latency (s) of the rows that *entered* the job in one constraint span
    ``[start_s, start_s + span)`` (thesis Eq. 4.1: D_t = the items entering S during the span).
    ``pending_rows`` of them were not processed by the end of the run; their latency counts as its
    lower bound, end of run − arrival (so a run that falls behind at the end is not flattered)."""

    start_s: float
    rows: float
    latency_s: float
    pending_rows: float = 0.0


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


@dataclass
class _Tasks:
    """The tasks of one stage run, sorted by finish time; ``folded`` of them are in the windows."""

    partition: np.ndarray
    launch_ms: np.ndarray
    finish_ms: np.ndarray
    service_s: np.ndarray
    rows: np.ndarray
    folded: int = 0


@dataclass
class _Window:
    """One statistics window of the stage (runtime windows merged, plus the template window)."""

    partitions: np.ndarray  # bool per partition: had a task finishing in the window
    tasks: int = 0
    busy_s: float = 0.0
    records: int = 0
    service: Moments = Moments()
    latency: Moments = Moments()
    stages: int = 0  # stage runs completed in the window
    max_num_tasks: int = 0
    max_slots: int = 0
    launch: Moments = Moments()  # launch interarrival within a stage (s)
    makespan: Moments = Moments()


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


@dataclass
class _Decision:
    created: int
    old: Any
    new: Any
    inputs: dict
    prediction: dict
    version: int
    status: str = "issued"  # issued | applied | superseded
    applied: int | None = None
    judged: bool = False
    effective: bool | None = None


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
    clock: int = 0

    @property
    def allocated(self) -> int:
        return self.registered + sum(c for _, c in self.requests)

    @property
    def target(self) -> int:
        return self.allocated - self.release


class Simulation:
    """One run of one controller on one rate profile; call :meth:`run` once."""

    def __init__(self, rate: RateFn, duration_s: float, controller: Controller, params: SimParams,
                 seed: int = 0):
        self.p, self.c = params, controller
        self.T = round(params.trigger_s * 1000)
        self.D = round(duration_s * 1000)
        self.eval_ms = round(params.eval_interval_s * 1000)
        grid = np.arange(0, self.D + GRID_MS, GRID_MS)
        r = np.broadcast_to(np.asarray(rate(grid / 1000.0), dtype=float), grid.shape)
        self._grid = grid
        self._cum = np.concatenate([[0.0], np.cumsum((r[1:] + r[:-1]) / 2 * GRID_MS / 1000.0)])
        self.rng = np.random.default_rng(seed)
        self.s = _State(registered=controller.initial_executors, next_eval=self.eval_ms)
        self.batches: list[BatchRecord] = []
        self.stats: list[BatchStats] = []
        self.actions: list[Action] = []
        self.decisions: list[_Decision] = []
        self.timeline = [(0.0, self.s.registered, self.s.allocated)]
        self.directive: DirectiveState | None = None
        self.history = KnobHistory()
        self.last_decision: int | None = None
        self.holds = 0
        self._next_id = 0
        self.windows: dict[int, _Window] = {}  # window start (ms) -> statistics
        self._lat_from = 0  # index into self.stats of the oldest batch the constraint may need

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
            if self.s.requests:
                events.append((min(a for a, _ in self.s.requests), 0, self._arrive))
            if self.s.running:
                events.append((self.s.running.end, 1, self._end_batch))
            else:
                events.append((self.s.next_start, 3, self._start_batch))
            t, _, handler = min(events)
            if t > self.D:
                break
            self._advance(t)
            before = (self.s.registered, self.s.allocated)
            handler(t)
            if (self.s.registered, self.s.allocated) != before:
                self.timeline.append((t / 1000.0, self.s.registered, self.s.allocated))
        self._advance(self.D)
        if self.s.running:  # finish the batch in flight so its latency counts
            self.batches.append(self._record(self.s.running))
        return SimResult(self.batches, self.actions, self.timeline, self.s.exec_ms / 1000.0, self.D / 1000.0,
                         self.arrived(self.D) - self.arrived(self.s.cut), self.holds, self.span_truth())

    def span_truth(self) -> list[SpanTruth]:
        """Per constraint span (``constraint_span_s``, aligned on t = 0): the exact mean latency of the
        rows arriving in it (:func:`span_truths` on the simulated arrivals and batches)."""
        return span_truths(self._grid / 1000.0, self._cum, [b.start_s for b in self.batches],
                           [b.end_s for b in self.batches], self.p.constraint_span_s, self.D / 1000.0)

    # -- batches ----------------------------------------------------------------------------
    def _start_batch(self, t: int) -> None:
        rows = self.arrived(t) - self.arrived(self.s.cut)
        boundary = (t // self.T) * self.T + self.T
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
        service = task_rows * p.row_cost_s * noise * eps
        launch, finish = list_schedule(service, p.slots(n))
        submit_s = p.overhead_s * noise
        p_ms = max(1, round(1000 * (submit_s + float(finish.max()))))
        order = np.argsort(finish, kind="stable")
        tasks = _Tasks(order, t + np.round(1000 * (submit_s + launch[order])).astype(np.int64),
                       np.minimum(t + np.round(1000 * (submit_s + finish[order])).astype(np.int64), t + p_ms),
                       service[order], task_rows[order])
        self.s.running = _Running(self._next_id, t, t + p_ms, self.s.cut, rows, n, boundary,
                                  min(t + round(1000 * submit_s), t + p_ms), tasks)
        self._next_id += 1
        self.s.cut = t

    @staticmethod
    def _record(r: _Running) -> BatchRecord:
        return BatchRecord(r.batch_id, r.start / 1000.0, r.end / 1000.0, r.cut / 1000.0, r.rows, r.executors)

    # -- statistics (aggregators.ingest folding) ----------------------------------------------
    def _window(self, start: int) -> _Window:
        w = self.windows.get(start)
        if w is None:
            w = self.windows[start] = _Window(np.zeros(self.p.partitions, dtype=bool))
        return w

    def _fold_tasks(self, t: int) -> None:
        """Fold the running stage's tasks finished by ``t`` into the windows of their finish times."""
        r = self.s.running
        if r is None or r.tasks is None:
            return
        k = r.tasks
        upto = int(np.searchsorted(k.finish_ms, t, side="right"))
        if upto <= k.folded:
            return
        sl = slice(k.folded, upto)
        fin, svc = k.finish_ms[sl], k.service_s[sl]
        win = fin - fin % self.p.window_ms
        for start in np.unique(win).tolist():
            m = win == start
            w = self._window(start)
            w.partitions[k.partition[sl][m]] = True
            w.tasks += int(m.sum())
            w.busy_s += float(svc[m].sum())
            w.records += int(k.rows[sl][m].sum())
            w.service = w.service.merge(Moments.of(svc[m]))
            w.latency = w.latency.merge(Moments.of((fin[m] - r.submitted) / 1000.0))
        k.folded = upto

    def _fold_stage(self, r: _Running) -> None:
        """Fold the completed stage into the window of its completion (aggregators.ingest._fold_stages)."""
        launches = np.sort(r.tasks.launch_ms)
        w = self._window(r.end - r.end % self.p.window_ms)
        w.stages += 1
        w.max_num_tasks = max(w.max_num_tasks, self.p.partitions)
        w.max_slots = max(w.max_slots, min(self.p.partitions, r.executors * self.p.cores_per_executor + len(r.joins)))
        w.launch = w.launch.merge(Moments.of(np.diff(launches) / 1000.0))
        w.makespan = w.makespan.merge(Moments.of([(r.end - r.submitted) / 1000.0]))

    def _end_batch(self, t: int) -> None:
        self._fold_tasks(t)
        r, self.s.running = self.s.running, None
        self._fold_stage(r)
        self.batches.append(self._record(r))
        processing_s = (r.end - r.start) / 1000.0
        self.stats.append(BatchStats(
            batch_id=r.batch_id, trigger_ms=r.start, processing_s=processing_s, num_input_rows=r.rows,
            input_rows_per_second=r.rows * 1000.0 / (r.start - r.cut) if r.start > r.cut else None,
            processed_rows_per_second=r.rows / processing_s))
        self.s.next_start = max(t, r.boundary)
        if self.s.release:
            self.s.registered -= self.s.release
            self.s.release = 0
            self._check_applied(t)

    # -- executors --------------------------------------------------------------------------
    def _arrive(self, t: int) -> None:
        joined = sum(c for a, c in self.s.requests if a <= t)
        self.s.registered += joined
        self.s.requests = [[a, c] for a, c in self.s.requests if a > t]
        if self.s.running is not None and joined:
            self._join_running(t, joined)
        self._check_applied(t)

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
        launch, finish = list_schedule(service, p.slots(r.executors), r.joins)
        launch_ms = r.submitted + np.round(1000 * launch).astype(np.int64)
        finish_ms = r.submitted + np.round(1000 * finish).astype(np.int64)
        launched = k.launch_ms[order] <= t  # same schedule; keep their ms exactly as folded
        launch_ms = np.where(launched, k.launch_ms[order], launch_ms)
        finish_ms = np.where(launched, k.finish_ms[order], finish_ms)
        r.end = max(int(finish_ms.max()), r.submitted + 1)
        by = np.argsort(finish_ms, kind="stable")
        r.tasks = _Tasks(part[by], launch_ms[by], finish_ms[by], service[by], rows[by], k.folded)

    def _set_target(self, t: int, new: int) -> None:
        s = self.s
        if new > s.target:
            keep = min(s.release, new - s.target)
            s.release -= keep
            extra = new - s.target
            if extra:
                s.requests.append([t + round(self.p.up_delay_s * 1000), extra])
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

    def _check_applied(self, t: int) -> None:
        d = self.directive
        if d is None or d.status == "applied" or self.s.requests or self.s.release or self.s.registered != d.value:
            return
        self.directive = replace(d, status="applied", applied_version=d.version)
        for dec in self.decisions:
            if dec.version == d.version and dec.status == "issued":
                dec.status, dec.applied = "applied", t

    # -- control (mirrors api.governor.Governor._evaluate_policy) ---------------------------
    def stage_stats(self, t: int, span_s: float) -> tuple[StageStats, ...]:
        """The stage over the last ``span_s`` seconds, as ``aggregators.view.build_view`` builds it."""
        self._fold_tasks(t)
        wms = self.p.window_ms
        for old in [s for s in self.windows if s < t - 3_600_000]:
            del self.windows[old]
        n_windows = max(1, math.ceil(span_s * 1000 / wms))
        since = t - int(span_s * 1000)
        # windows starting at t hold only tasks that finished exactly at t (evaluations fall on window
        # boundaries here): leave them to the next evaluation, so the latest window is a complete one
        recent = [s for s in sorted(self.windows) if s < t][-n_windows:]
        starts = [s for s in recent if s + wms > since and self.windows[s].tasks]
        if not starts:
            return ()
        job_slots = self.s.registered * self.p.cores_per_executor
        per, summary = [], {"service": Moments(), "latency": Moments(), "launch": Moments(), "makespan": Moments()}
        for s in starts:
            w = self.windows[s]
            slots = w.max_slots or job_slots
            num_tasks = w.max_num_tasks or int(w.partitions.sum())
            p = min(num_tasks, slots) if slots else num_tasks
            per.append((w, p, w.busy_s / (p * wms / 1000.0) if p else None))
            for name in summary:
                summary[name] = summary[name].merge(getattr(w, name))
        last, p_last, u_last = per[-1]
        svc, mk = summary["service"].to_dict(), summary["makespan"].to_dict()
        wait = stage_wait({"service": svc, "makespan": mk if mk["count"] else None,
                           "latency": summary["latency"].to_dict()})
        return (StageStats(
            key="batch", name="micro-batch stage", tasks=sum(w.tasks for w, _, _ in per),
            service_mean_s=svc["mean"], latency_mean_s=summary["latency"].to_dict()["mean"],
            utilization=u_last, parallelism=p_last, records_in_per_second=last.records / (wms / 1000.0),
            utilization_windows=tuple(u for _, _, u in per if u is not None), service_cv=svc["cv"],
            arrival_cv=summary["launch"].cv, wait_mean_s=wait,
            max_tasks=max(int(w.partitions.sum()) for w, _, _ in per) or None,
            span_s=len(per) * wms / 1000.0),)

    def constraint(self, t: int, span_s: float) -> ConstraintStats:
        """The whole-query latency constraint as ``aggregators.constraints.measure`` reports it."""
        c_span = self.p.constraint_span_s
        span_ms = round(c_span * 1000)
        spans = max(1, round(span_s / c_span))
        current = t - t % span_ms
        since = current - spans * span_ms
        stats = self.stats
        while self._lat_from + 1 < len(stats) and \
                stats[self._lat_from + 1].trigger_ms + round(stats[self._lat_from + 1].processing_s * 1000) < since:
            self._lat_from += 1  # batches end in order; keep the one before as the previous trigger
        items = [BatchLatency("sim", b.trigger_ms, b.processing_s, b.num_input_rows) for b in stats[self._lat_from:]]
        measured = [m for m in span_latencies(items, c_span) if since <= m.start_ms < current]
        bound = self.p.constraint_bound
        lat = [m.latency_s for m in measured]
        return ConstraintStats(
            name="slo", vertices=None, bound_s=bound, span_s=c_span,
            latency_s=sum(lat) / len(lat) if lat else None,
            batching_wait_s=sum(m.wait_s for m in measured) / len(measured) if measured else None,
            attainment=sum(x <= bound for x in lat) / len(lat) if lat else None,
            source=measured[-1].source if measured else None)

    def view(self, t: int) -> JobView:
        cfg = self.c.config
        span_s = max(self.p.eval_interval_s * cfg.effectiveness_intervals,
                     getattr(cfg, "scaling_interval_s", 0) or 0, self.p.window_ms / 1000.0)
        lo = bisect_left(self.stats, t - 3_600_000, key=lambda b: b.trigger_ms)
        batches = tuple(self.stats[max(lo, len(self.stats) - 500):])
        return JobView(job="sim", now_ms=t, window_s=span_s, stages=self.stage_stats(t, span_s), batches=batches,
                       directives={KNOB: self.directive} if self.directive else {},
                       executors=self.s.registered, slots=self.s.registered * self.p.cores_per_executor,
                       last_decision_ms={KNOB: self.last_decision} if self.last_decision is not None else {},
                       constraints=(self.constraint(t, span_s),))

    def _judge(self, view: JobView, t: int) -> None:
        cfg, policy = self.c.config, self.c.policy
        due = t - int(cfg.effectiveness_intervals * self.p.eval_interval_s * 1000)
        for d in self.decisions:
            if d.status != "applied" or d.judged or d.applied > due:
                continue
            observed = policy.observe(view, KNOB, cfg)
            d.judged, d.effective = True, judge_effect(d.inputs, d.prediction, observed, cfg.effective_fraction)
            if d.new > d.old and d.effective is not None:
                before = self.history
                self.history = next_history(before, effective=d.effective, cfg=cfg)
                self.holds += self.history.held and not before.held

    def _evaluate(self, t: int) -> None:
        self.s.next_eval += self.eval_ms
        policy, cfg = self.c.policy, self.c.config
        view = self.view(t)
        self._judge(view, t)
        for prop in policy.evaluate(view, cfg):
            if prop.knob not in policy.knobs:
                raise ValueError(f"policy {policy.name} proposed knob {prop.knob!r} it does not own")
            if prop.knob != KNOB:
                continue
            current = view.current(KNOB)
            g = guard(prop.value, current, cfg, self.history, t, self.p.eval_interval_s)
            if g.value is not None:
                self._issue(t, prop, current, int(g.value), prop.reason + (f" [{g.note}]" if g.note else ""))

    def _issue(self, t: int, prop: Proposal, current: int, new: int, reason: str) -> None:
        for d in self.decisions:
            if d.status == "issued":
                d.status = "superseded"
        version = (self.directive.version if self.directive else 0) + 1
        applied = self.directive.applied_version if self.directive else None
        self.directive = DirectiveState(KNOB, version, new, applied, "pending")
        self.decisions.append(_Decision(t, current, new, dict(prop.inputs), dict(prop.prediction), version))
        self.last_decision = t
        self.history = next_history(self.history, changed_ms=t, direction=int(math.copysign(1, new - current)))
        self.actions.append(Action(t / 1000.0, current, new, reason))
        self._set_target(t, new)
        self._check_applied(t)


def simulate(rate: RateFn, duration_s: float, controller: Controller, params: SimParams | None = None,
             seed: int = 0) -> SimResult:
    """Run ``controller`` on the rate profile for ``duration_s`` seconds."""
    return Simulation(rate, duration_s, controller, params or DEFAULT_PARAMS, seed).run()
