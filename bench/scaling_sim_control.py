"""The control plane of ``bench scaling``, on in-memory state: the statistics it keeps of the simulated
job (``bench.scaling_sim``), the view a policy gets and the governor's steps, with the executor
policies plugged in unchanged (:class:`Controller`, :class:`StaticPolicy`).

* Control: every ``eval_interval_s`` the steps of ``api.governor.Governor._evaluate_policy`` run on
  in-memory state instead of SQL: build the ``JobView`` (completed batches of the last hour, at most
  500; the directive and whether it was applied; registered executors; time of the latest
  decision), judge applied decisions due for their effectiveness check (``policy.observe`` +
  ``judge_effect`` + ``next_history``), ``policy.evaluate``, ``safety.guard``, then issue the
  directive (``next_history`` with the direction). A directive is *applied* once the registered
  executors equal its value; a newer directive supersedes a pending one.
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

* Between batches (``SimParams.live_view``; ``aggregators.liveness``): the view's ``live`` state at
  ``t`` for a source that counts its rows, from the simulated job (completed batches and the backlog
  right after each reach the control plane with the reporter's next state when
  ``SimParams.state_interval_s`` is set, as calibrated runs do; else at once, ``bench.scaling_sim``):
  status ``running`` while a batch runs, else ``waiting`` (``idle`` when no row arrived since the
  last batch started); running batch age = t − its start; oldest unprocessed record = the first
  row after the last *completed* batch's rows (the running batch's rows are not processed yet), its
  age t − that batch's cut; backlog rows = rows arrived and not processed (the running batch's
  included), in seconds of work at the processing rate (Σ rows / Σ processing time of the latest 20
  batches with rows in 600 s); backlog growth = least-squares slope of the backlog right after each
  completed batch over the last max(view span, 30 s) (``aggregators.liveness.slope``); arrival rate
  = rows arrived over the last 10 s / 10; completed batches within the view's span.
* The job's cluster profile (``SimParams.cluster_profile``; ``aggregators.cluster_profile``, carried
  as ``policies.cluster_inputs.ClusterInputs`` on a ``ClusteredJobView``, with the direction of the
  latest executor decision): what the control plane would have measured by ``t`` — the provisioning
  delay (mean over the scale-outs whose executors ran a batch's tasks: directive → the end of that
  batch's tasks, ``bench.scaling_sim`` records it), the warm-up (factor; duration ``warmup_s``, else
  ``warmup_tasks`` × factor × the latest window's mean task service) once a scale-out registered, the
  driver overhead (``overhead_s`` + ``driver_overhead_s``) once a batch completed. Without it (the
  default) the view has no profile and Kingman uses the paper's model, as before.

Only the ``executors`` knob is actuated; proposals for other knobs are ignored. Units: t in integer
milliseconds since the source started, seconds in the view and in the issued ``Action`` records
(``bench.scaling_sim_model``).
"""
from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from spark_governor.aggregators.latency import BatchLatency, span_latencies
from spark_governor.aggregators.liveness import MIN_TREND_WINDOW_S, RATE_BATCHES, RATE_LOOKBACK_MS, slope
from spark_governor.collectors.query_state import PROBE_RATE_S, RATE_POINTS
from spark_governor.aggregators.view import _wait as stage_wait
from spark_governor.policies.moments import Moments
from spark_governor.bench.scaling_sim_model import Action, SimParams, _Running
from spark_governor.policies.cluster_inputs import ClusteredJobView, ClusterInputs
from spark_governor.policies.base import (
    BatchStats,
    ConstraintStats,
    DirectiveState,
    JobView,
    LiveStats,
    Policy,
    PolicyConfig,
    Proposal,
    StageStats,
)
from spark_governor.policies.safety import KnobHistory, SafetyConfig, guard, judge_effect, next_history

__all__ = ["KNOB", "StaticPolicy", "Controller", "SimControlPlane"]

KNOB = "executors"


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


class SimControlPlane:
    """The control plane of one simulated job: statistics windows, the completed batches (``stats``),
    the view, and the governor's steps for the job's one policy (``controller``)."""

    def __init__(self, controller: Controller, params: SimParams):
        self.p, self.c = params, controller
        self.stats: list[BatchStats] = []
        self.actions: list[Action] = []
        self.decisions: list[_Decision] = []
        self.directive: DirectiveState | None = None
        self.history = KnobHistory()
        self.last_decision: int | None = None
        self.holds = 0
        self.windows: dict[int, _Window] = {}  # window start (ms) -> statistics
        self._lat_from = 0  # index into self.stats of the oldest batch the constraint may need
        self.troughs: list[tuple[float, float]] = []  # (batch end s, rows not processed then), live view
        self.provisioning: list[float] = []  # measured directive → first tasks done on new executors (s)
        # measured directive → new executors registered (s); recorded with ``provisioning`` (once their first
        # batch's tasks are done), where the control plane reads it at ExecutorAdded: the same values, later
        self.registrations: list[float] = []

    def live(self, t: int, span_s: float, running: _Running | None, cut: int, arrived,
             probed_at: int | None = None) -> LiveStats:
        """The job's live state at ``t`` (module docstring): ``running`` the batch in flight, ``cut``
        the start of the latest batch (its rows and earlier are taken), ``arrived(ms)`` rows by then;
        ``probed_at`` (ms, default ``t``): when the probed rate the control plane holds was read."""
        probed_at = t if probed_at is None else probed_at
        oldest_cut = running.cut if running is not None else cut
        backlog = float(arrived(t) - arrived(oldest_cut))
        if self.p.live_probe:  # a probed source (SimParams.live_probe): what it offered over the probe's window
            window = min(probed_at, PROBE_RATE_S * 1000)
            offered = (arrived(probed_at) - arrived(probed_at - window)) * 1000.0 / window if window > 0 else None
        elif self.p.live_offsets:  # what a reporter knows: the completed batches' offsets (SimParams.live_offsets)
            done = self.stats[-(RATE_POINTS - 1):]  # with the offset before the first: RATE_POINTS points
            first = self.stats[-RATE_POINTS].trigger_ms if len(self.stats) >= RATE_POINTS else 0
            offered = None
            if done and done[-1].trigger_ms > first:
                offered = sum(b.num_input_rows for b in done) * 1000.0 / (done[-1].trigger_ms - first)
            if offered is not None and backlog > 0:  # extrapolated from the latest offset known (oldest_cut)
                backlog = offered * max(0, t - oldest_cut) / 1000.0
        else:  # the simulator's truth: the rows that arrived in the last 10 s
            offered = (arrived(t) - arrived(max(0, t - 10_000))) / (min(t, 10_000) / 1000.0) if t else None
        recent = [b for b in self.stats[-20 * RATE_BATCHES:] if b.num_input_rows and b.trigger_ms >= t - RATE_LOOKBACK_MS]
        recent = recent[-RATE_BATCHES:]
        busy = sum(b.processing_s for b in recent)
        rate = sum(b.num_input_rows for b in recent) / busy if busy > 0 else None
        trend_from = t / 1000.0 - max(span_s, MIN_TREND_WINDOW_S)
        growth = slope([x for x in self.troughs if x[0] >= trend_from])
        idle = running is None and arrived(t) == arrived(cut)
        completed = sum(1 for b in self.stats[-500:] if t - span_s * 1000 < b.trigger_ms + b.processing_s * 1000 <= t)
        return LiveStats(
            status="running" if running is not None else "idle" if idle else "waiting", observed_ms=t,
            running_batch_id=running.batch_id if running is not None else None,
            running_batch_age_s=(t - running.start) / 1000.0 if running is not None else None,
            oldest_record_age_s=(t - oldest_cut) / 1000.0 if backlog > 0 else None,
            oldest_record_source="source" if backlog > 0 else None,
            backlog_rows=0.0 if idle else backlog, backlog_s=(0.0 if idle else backlog / rate) if rate else None,
            processing_rows_per_second=rate,
            arrival_rows_per_second=offered, arrival_probed=self.p.live_probe and offered is not None,
            backlog_growth_rows_per_second=growth, trigger_interval_s=self.p.trigger_s, completed_batches=completed)

    # -- statistics (aggregators.ingest folding) ----------------------------------------------
    def _window(self, start: int) -> _Window:
        w = self.windows.get(start)
        if w is None:
            w = self.windows[start] = _Window(np.zeros(self.p.partitions, dtype=bool))
        return w

    def fold_tasks(self, r: _Running | None, t: int) -> None:
        """Fold the running stage's tasks (``r``) finished by ``t`` into the windows of their finish times."""
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

    def fold_stage(self, r: _Running) -> None:
        """Fold the completed stage into the window of its completion (aggregators.ingest._fold_stages)."""
        launches = np.sort(r.tasks.launch_ms)
        w = self._window(r.end - r.end % self.p.window_ms)
        w.stages += 1
        w.max_num_tasks = max(w.max_num_tasks, self.p.partitions)
        w.max_slots = max(w.max_slots, min(self.p.partitions, r.executors * self.p.cores_per_executor + len(r.joins)))
        w.launch = w.launch.merge(Moments.of(np.diff(launches) / 1000.0))
        # the stage ends with its last task; the driver's overhead after it (r.post) is not the stage's
        w.makespan = w.makespan.merge(Moments.of([(r.end - r.post - r.submitted) / 1000.0]))

    # -- control (mirrors api.governor.Governor._evaluate_policy) ---------------------------
    def check_applied(self, t: int, registered: int) -> None:
        """The executors settled at ``registered`` (no request or release outstanding): the pending
        directive is applied when it asked for that many."""
        d = self.directive
        if d is None or d.status == "applied" or registered != d.value:
            return
        self.directive = replace(d, status="applied", applied_version=d.version)
        for dec in self.decisions:
            if dec.version == d.version and dec.status == "issued":
                dec.status, dec.applied = "applied", t

    def stage_stats(self, t: int, span_s: float, registered: int) -> tuple[StageStats, ...]:
        """The stage over the last ``span_s`` seconds, as ``aggregators.view.build_view`` builds it
        (``registered`` executors; the tasks finished by ``t`` folded already)."""
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
        job_slots = registered * self.p.cores_per_executor
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

    def cluster(self) -> ClusterInputs | None:
        """The job's cluster profile as measured so far (``SimParams.cluster_profile``), or None."""
        p = self.p
        if not p.cluster_profile:
            return None
        prov = sum(self.provisioning) / len(self.provisioning) if self.provisioning else None
        reg = sum(self.registrations) / len(self.registrations) if self.registrations else None
        warm_f = warm_s = None
        if self.provisioning and p.warmup:
            warm_f = p.reported_warmup_factor if p.reported_warmup_factor is not None else p.warmup_factor
            filled = [k for k, w in self.windows.items() if w.tasks]
            mean_task = self.windows[max(filled)].service.mean if filled else None
            warm_s = p.warmup_s or (p.warmup_tasks * warm_f * mean_task if mean_task else None)
        overhead = p.overhead_s + p.driver_overhead_s if self.stats else None
        return ClusterInputs(provisioning_delay_s=prov, register_s=reg, warmup_factor=warm_f, warmup_s=warm_s,
                             driver_overhead_s=overhead)

    def view(self, t: int, registered: int, live=None) -> JobView:
        """The ``JobView`` at ``t`` with ``registered`` executors; ``live(span_s)`` gives the live state
        (``SimParams.live_view``; None: no live state)."""
        cfg = self.c.config
        span_s = max(self.p.eval_interval_s * cfg.effectiveness_intervals,
                     getattr(cfg, "scaling_interval_s", 0) or 0, self.p.window_ms / 1000.0)
        lo = bisect_left(self.stats, t - 3_600_000, key=lambda b: b.trigger_ms)
        batches = tuple(self.stats[max(lo, len(self.stats) - 500):])
        return ClusteredJobView(
                       cluster=self.cluster(),
                       job="sim", now_ms=t, window_s=span_s, stages=self.stage_stats(t, span_s, registered),
                       batches=batches,
                       directives={KNOB: self.directive} if self.directive else {},
                       executors=registered, slots=registered * self.p.cores_per_executor,
                       last_decision_ms={KNOB: self.last_decision} if self.last_decision is not None else {},
                       constraints=(self.constraint(t, span_s),), live=live(span_s) if live else None)

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

    def evaluate(self, t: int, view: JobView, actuate: Callable[[int, int], None]) -> None:
        """One evaluation at ``t`` on ``view``; ``actuate(t, executors)`` sets the job's new target."""
        policy, cfg = self.c.policy, self.c.config
        self._judge(view, t)
        for prop in policy.evaluate(view, cfg):
            if prop.knob not in policy.knobs:
                raise ValueError(f"policy {policy.name} proposed knob {prop.knob!r} it does not own")
            if prop.knob != KNOB:
                continue
            current = view.current(KNOB)
            g = guard(prop.value, current, cfg, self.history, t, self.p.eval_interval_s)
            if g.value is not None:
                self._issue(t, prop, current, int(g.value), prop.reason + (f" [{g.note}]" if g.note else ""), actuate)

    def _issue(self, t: int, prop: Proposal, current: int, new: int, reason: str,
               actuate: Callable[[int, int], None]) -> None:
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
        actuate(t, new)
