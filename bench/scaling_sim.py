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
* Processing time p = (overhead_s + rows × row_cost_s / slots) × noise, rounded to ms (≥ 1 ms),
  slots = min(executors × cores_per_executor, partitions) (at least 1), executors = those
  registered when the batch starts (executors registering during a batch do not help it),
  noise ~ lognormal with mean 1 and shape ``noise_sigma`` (one draw per batch from a seeded numpy
  Generator; 0 disables it).
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

Only the ``executors`` knob is actuated; proposals for other knobs are ignored. Stage statistics
are not simulated (``JobView.stages`` is empty).
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from policies.base import (
    BatchStats,
    DirectiveState,
    JobView,
    Policy,
    PolicyConfig,
    Proposal,
)
from policies.safety import KnobHistory, SafetyConfig, guard, judge_effect, next_history

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
    partitions: int = 200  # caps the parallelism of a batch
    noise_sigma: float = 0.1  # lognormal shape of the processing-time noise (mean 1)
    up_delay_s: float = 10.0  # requested executor → registered
    eval_interval_s: float = 10.0  # control plane's default evaluation interval
    window_ms: int = 5000  # control plane's statistics window (only enters the view's span)
    min_executors: int = 1
    max_executors: int = 12
    slo_s: float | None = None  # latency target; None → 2 × trigger_s

    @property
    def slo(self) -> float:
        return self.slo_s if self.slo_s is not None else 2 * self.trigger_s

    def processing_s(self, rows: float, executors: int) -> float:
        """Noise-free processing time (s) of a batch of ``rows`` on ``executors``."""
        slots = max(1, min(executors * self.cores_per_executor, self.partitions))
        return self.overhead_s + rows * self.row_cost_s / slots

    def executors_for_rate(self, rate: float) -> int:
        """Fewest executors in [min, max] that process a trigger interval of ``rate`` rows/s within it."""
        for n in range(self.min_executors, self.max_executors + 1):
            if self.processing_s(rate * self.trigger_s, n) <= self.trigger_s:
                return n
        return self.max_executors


DEFAULT_PARAMS = SimParams()


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


@dataclass
class _Running:
    batch_id: int
    start: int
    end: int
    cut: int
    rows: int
    executors: int
    boundary: int  # next trigger boundary after start


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
                         self.arrived(self.D) - self.arrived(self.s.cut), self.holds)

    # -- batches ----------------------------------------------------------------------------
    def _start_batch(self, t: int) -> None:
        rows = self.arrived(t) - self.arrived(self.s.cut)
        boundary = (t // self.T) * self.T + self.T
        if rows <= 0:
            self.s.next_start = boundary
            return
        n = self.s.registered
        noise = self.rng.lognormal(-self.p.noise_sigma ** 2 / 2, self.p.noise_sigma) if self.p.noise_sigma else 1.0
        p_ms = max(1, round(1000 * self.p.processing_s(rows, n) * noise))
        self.s.running = _Running(self._next_id, t, t + p_ms, self.s.cut, rows, n, boundary)
        self._next_id += 1
        self.s.cut = t

    @staticmethod
    def _record(r: _Running) -> BatchRecord:
        return BatchRecord(r.batch_id, r.start / 1000.0, r.end / 1000.0, r.cut / 1000.0, r.rows, r.executors)

    def _end_batch(self, t: int) -> None:
        r, self.s.running = self.s.running, None
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
        self.s.registered += sum(c for a, c in self.s.requests if a <= t)
        self.s.requests = [[a, c] for a, c in self.s.requests if a > t]
        self._check_applied(t)

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
    def view(self, t: int) -> JobView:
        cfg = self.c.config
        span_s = max(self.p.eval_interval_s * cfg.effectiveness_intervals,
                     getattr(cfg, "scaling_interval_s", 0) or 0, self.p.window_ms / 1000.0)
        batches = tuple(b for b in self.stats[-500:] if b.trigger_ms >= t - 3_600_000)
        return JobView(job="sim", now_ms=t, window_s=span_s, batches=batches,
                       directives={KNOB: self.directive} if self.directive else {},
                       executors=self.s.registered, slots=self.s.registered * self.p.cores_per_executor,
                       last_decision_ms={KNOB: self.last_decision} if self.last_decision is not None else {})

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
