"""Kingman rebalance of executors under latency constraints (Lohrmann's Elastic Scaler on Spark).

The job declares latency constraints (``aggregators.constraints``); every evaluation this policy
models each constrained stage as a G/G/1 queue (thesis §4.6.2, digest 004 §5.2), fits the model to
the measured wait, and asks for the fewest executors whose predicted latency meets every bound
(the Spark objective of digest §11.5 on top of Algorithm 7's model; ``policies.queueing``). Its
options are ``policies.kingman_config``; the signals it sizes with beyond the thesis (rate trend,
live and peak rate, provisioning delay, warm-up, trigger wait) ``policies.kingman_signals``.

**Template-vertex statistics → model** (digest §11.3; one choice per quantity, all in seconds,
per *task*). Records of a micro-batch move through a stage in bulk with their task, so the
queueing unit is the task waiting for an executor slot, not the record:

- ``p``: the stage's parallelism in the window, min(tasks, slots); ``p_max``: its task count
  (partitions): more slots than tasks cannot help that stage.
- ``S̄``: mean task service (executor run) time; ``c_S``: its coefficient of variation (1.0 if
  unknown).
- ``ρ``: utilization at the current parallelism. Default (``arrival_utilization``): the source's
  arrival rate (rows/s over the batches of the last ``rate_span_s``) × the stage's busy slot-seconds
  per record (latest window) / p — the thesis's ``S̄/Ā`` with Ā measured at the input, so it exceeds 1
  under overload (:func:`arrival_rho`). Otherwise busy slot-seconds per second over the span / p.
  ``Ā = S̄/ρ`` (mean interarrival of tasks per slot).
- ``c_A``: default (``bulk_arrivals``) from the stage's bulk task arrivals, ``√(tasks/p − 1)``
  (:func:`bulk_arrival_cv`); otherwise the CV of task launch interarrival within the stage (1.0 if
  unknown).
- ``w``: measured mean slot wait = mean makespan − mean run time; the fitting coefficient
  ``e = w / Kingman(p)`` is clamped to [``e_clamp_low``, ``e_clamp_high``] = [0.1, 10] by default,
  and is 1 when w or Kingman is ~0. The authors' implementation clamps to [0.8, 1.2] (digest §5.5),
  which assumes Kingman is already close; here the wave wait of bulk arrivals is ≈ ρ·T while Kingman
  grows as ρ²/(1−ρ), so the fitted e is ≈ 2(1−ρ)/ρ (2 at ρ = 0.5, 0.5 at 0.8) and [0.8, 1.2] would
  un-anchor the model from the measurement at the current p (measured in the bench: the prediction
  at the current size then misses the measured latency by up to 60 %, and the policy oscillates by
  one executor). [0.1, 10] still bounds e under bursts. Pass 0.8/1.2 for the literal [C] clamp.
- ``l``: mean task run time.

**Budget.** By default (``w_ob`` unset) the constraint's measured mean record latency L keeps
its non-queueing part fixed: ``Ŵ = ℓ − (L − Σ_v W_v(p))`` and the predicted latency is
``L − Σ_v W_v(p) + Σ_v W_v(p*)``; the batching share is what the trigger makes it, not a fixed
w_ob (in Spark the micro-batch interval is a separate knob). With ``w_ob`` set, Eq. 4.9 is used
literally: ``Ŵ = (1 − w_ob)(ℓ − Σ l_v)``.

**Decisions** (Algorithm 8 over the job's constraints, sorted by name): a constraint with a
bottleneck — a stage at ρ ≥ ``bottleneck_utilization`` (0.99) on the pool the job has now, a stage
busy ≥ 0.99 through its latest window (``latest_window_bottleneck``), or batches overrunning the
trigger interval; the last two not within the span after an executor change
(``settle_after_change``: a backlog keeps them high) — gets its slots per Eq. 4.12
(``max(2C, ⌈2Cρ⌉)``), without waiting for a latency measurement; otherwise the smallest slot
count C meeting its budget with every stage under its 90 % utilization floor. The executors needed
are the maximum over constraints of ``⌈C / slots per executor⌉`` (stages and constraints of one
query share one pool). Infeasible at p_max: p_max for all, and the constraint is reported
infeasible. Then: warm-up (``warmup_windows`` statistics windows before the first decision),
4 % hysteresis, scale-downs one executor at a time and only with ``scale_down_margin`` to spare
(:meth:`KingmanPolicy._scale_down_safe`); the framework adds bounds and the cool-down (no
scale-down within 3 intervals after a scale-up). Under a bottleneck no latency is predicted (the
model's wait at the current size is infinite). Measurements behind each extension of the thesis: the
README, "Scaling policies".

**Between batches** (``in_flight``, on by default; ``policies.in_flight``): the model is fitted to
completed batches and statistics windows, so a batch running far past the bound is seen only once
it has completed. Before planning, the work in flight is checked: when the running batch or the
oldest unprocessed record is older than the tightest whole-query constraint's bound,
the job is a bottleneck now and gets Eq. 4.12's at-least-double at once — without waiting for the
batch, a latency measurement or warm-up; a backlog growing by ``backlog_growth_ratio`` seconds of
work per second scales out by that factor when it would carry the latency past the bound within
the provisioning delay and a batch period (``backlog_projected``, :func:`backlog_horizon_s`). The
plan's own size is taken when larger. Never for an
idle query, and never a scale-down while it presses.

**The cluster the job runs on** (``cluster_model``, on by default; issue #14): the view carries the
job's measured profile (``aggregators.cluster_profile``: provisioning delay, executor warm-up,
driver overhead per batch; ``policies.cluster_inputs``). Predicted latency = trigger wait + driver
overhead + queueing + processing (``prediction["terms"]``, :meth:`KingmanPolicy.latency_terms`; with
``w_ob`` the Eq. 4.9 budget leaves out the first two); a scale-out is sized for the arrival rate
expected when the new executors work (:func:`load_growth`); a scale-down is lazy — not within
``scale_down_delay_s`` of an executor decision, it must keep the bound with margin at the peak rate
of that delay (:func:`peak_load`), and never while a backlog is being worked off
(:meth:`KingmanPolicy._scale_down_blocked`); no scale-up within ``after_scale_down_s`` of a
scale-down unless work in flight is past twice the bound (:meth:`KingmanPolicy._disrupted_by_scale_down`).
One executor is kept beyond the plan (``spare_executors``; 0: the thesis' size) for a rate step
met while a scale-out takes effect — by default on every level (``spare_when: always``, the variant
the real cluster confirmed, with and without source probes); ``blind``: unless the job's sources are
probed (:func:`policies.in_flight.probed`: ``collectors.source_probe`` reads a source's rows between batches, so a step
shows in the live rate within a second and the plan is made for it); ``auto``: while the arrival
rate is rising (:func:`rate_rising`), or on every level when new executors take longer than the time
between batch starts to work; ``slow``: only when new executors register later than that
(:meth:`KingmanPolicy._spare_pays`). The three options won in the calibrated simulator and lost spans
on the real cluster (docs/policies/kingman.md).
Sizes are whole task waves (``wave_sizing``, not in the thesis): a stage's tasks end at a barrier, so
a slot count that leaves slots idle in the last wave buys nothing (4 tasks on 3 slots run 2 waves, as
on 2): a planned size is raised to the next count that wastes none (``queueing.wave_slots``), a
doubling, a spare or a scale-down step goes to the fewest slots with its waves
(``queueing.same_waves_slots``).
A scale-out must also keep the bound while its new executors warm up (``warmup_sizing``;
:func:`warm_equivalent`, :meth:`KingmanPolicy._warmup_sized`: the pool counted as the warm executors
it is worth over one interval, from the measured warm-up factor and duration), else it adds executors.
With ``live_rate`` (unset by default: on when the sources are probed,
:func:`policies.in_flight.uses_live_rate`) the plan is also made for the source's arrival rate in the
live state when it exceeds the completed batches' (:func:`live_load`: a rate step is then sized for before
the first batch at the new rate completes; such a scale-out is not held back after a scale-down, the
live rate being no effect of the removal). Without a profile
(or ``cluster_model=False``) the overhead terms are 0 and no trend is used: the paper's model; the
lazy scale-down applies to both.

**A planned load** (the rate trend, the live rate, the peak of a scale-down) is modelled as the thesis
would (``queueing.with_load``: Ā / load, e_v kept, the fixed latency held, the query load × load).
``batch_load`` (off) models it as a micro-batch runs it instead (``policies.batch_load``: the same
tasks, each longer; the wait ×load at the current size; the batch's variable time ×load; such a batch
kept within ``max_utilization`` of its trigger, :func:`policies.batch_load.query_slots`). It predicts
the measured batches where the thesis' rule overshoots (run 104: 2 executors at 16 000 rows/s, the
thesis' rule 4), but the policy it makes is no better: without the batch floor it ran 16 000 rows/s on
2 executors at the edge of the trigger and lost spans on the real cluster (run 111: 0.938), and with
it the calibrated simulator puts it level with the thesis' rule (docs/policies/kingman.md, item 8).

**Local mode** (``local[N]``: no executors, the knob not actuatable; ``JobView.local_slots``): the
same plan in task slots (one slot per "executor"), e.g. "2 → 4 task slots …; local mode: 2 task
slots; not actuatable" — a recommendation the governor records without a directive.
"""
from __future__ import annotations

import math
import statistics
from typing import Optional

from spark_governor.policies import in_flight
from spark_governor.policies.batch_load import batch_fixed_s, batch_time_at, loaded_fixed_latency_s, query_slots
from spark_governor.policies.base import ConstraintStats, JobView, Policy, Proposal, StageStats
from spark_governor.policies.catch_up import catch_up_executors, describe
from spark_governor.policies.cluster_inputs import ClusterInputs, cluster_of, last_executor_direction
from spark_governor.policies.kingman_config import KingmanConfig
from spark_governor.policies.kingman_signals import (backlog_horizon_s, live_load, load_growth, peak_load,
                                                     provisioning_delay_s, rate_rising, register_delay_s,
                                                     trigger_wait_s, warm_equivalent)
from spark_governor.policies.queueing import (VertexModel, hysteresis_ok, rebalance_spark, same_waves_slots,
                                              sequence_wait, wave_slots, with_batch_load, with_load)
from spark_governor.policies.safety import cooldown_s, within_bounds
from spark_governor.policies.threshold import trigger_interval_s
from spark_governor.policies.rate_model import arrival_rate, true_rate_per_slot


def _p_maxes(plan: dict) -> list[int]:
    """The task count (p_max) of every stage of a plan's constraints (``KingmanPolicy.plan``)."""
    return [m.p_max for models, _ in plan["models"].values() for m in models]


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:,.0f} ms"


def bulk_arrival_cv(tasks_per_run: int, parallelism: int) -> float:
    """c_A of one slot's task arrivals when every task of a stage run arrives at once (dimensionless).

    Spark submits all N tasks of a stage together, so each of the p slots receives b = N/p tasks in
    one bulk per stage run: an interarrival sequence of b − 1 zeros and one gap, whose squared CV is
    exactly b − 1 (mean g/b, second moment g²/b). The digest notes this for records (§11.3: "record-
    level c_A² ≈ batchSize − 1"); it holds for tasks as well. The launch interarrival the aggregators
    measure is the *departure* process of the slot queue (tasks start as slots free up), nearly
    regular, so it makes Kingman miss the measured slot wait by ~two orders of magnitude and the
    fitted e_v hit its clamp; with the bulk c_A, e_v ≈ 1 (measured in the bench: see the notes).
    Extension of the thesis (§4.6.2 assumes per-item arrivals); ``bulk_arrivals=False`` restores the
    measured CV. Thesis-literal, c_A is held at its value at the current p when predicting p*."""
    b = max(tasks_per_run / max(parallelism, 1), 1.0)
    return math.sqrt(b - 1.0)


def arrival_rho(view: JobView, stage: StageStats, first: StageStats, rate_span_s: Optional[float] = None) -> Optional[float]:
    """ρ_v = S̄_v/Ā_v with Ā_v from the *source's* arrival rate (thesis §4.6.2: Ā is measured at the
    input of v; digest §5.4: under a bottleneck ρ > 1 "before queues fill"), per slot and dimensionless.

    ``(arrival rate × records_v/records_first) × busy slot-seconds per record / p``: the arrival rate is
    ``policies.rate_model.arrival_rate`` (Σ rows / Σ trigger gaps of the batches triggered in
    the last ``rate_span_s`` — the source's rate even while batches overrun), the busy time per record that of the stage's latest
    window (its true processing rate, DS2). The busy fraction the aggregators report saturates at 1
    under overload and, averaged over the span, lags a rate step by the span; this one does neither.
    None when the stage reports no records or no batch has a rate (the busy fraction is used then)."""
    tpr = true_rate_per_slot(stage)
    rate = arrival_rate(view, rate_span_s)
    if tpr is None or rate is None or not first.records_in_per_second:
        return None
    return rate * stage.records_in_per_second / first.records_in_per_second / (tpr * stage.parallelism)


def vertex_model(stage: StageStats, cfg: KingmanConfig, rho: Optional[float] = None) -> Optional[VertexModel]:
    """The G/G/1 model of one stage (see the module docstring), or None without enough data.
    ``rho``: the utilization at the current parallelism when the caller measured it from arrivals
    (:func:`arrival_rho`); else the busy fraction over the span."""
    if not stage.parallelism or not stage.service_mean_s or stage.utilization is None:
        return None
    # the work over the whole span at the current parallelism, not the latest window alone (a window
    # holds a whole number of micro-batches, so single windows swing with the trigger phase) and not
    # a mean of window utilizations (windows before a scaling action had another parallelism)
    if rho is not None:
        rho = max(rho, 1e-9)
    elif stage.busy_slots is not None:
        rho = max(stage.busy_slots / stage.parallelism, 1e-9)
    else:
        windows = stage.utilization_windows or (stage.utilization,)
        rho = max(sum(windows) / len(windows), 1e-9)
    p_max = max(stage.max_tasks or stage.parallelism, stage.parallelism)
    if cfg.bulk_arrivals and stage.max_tasks:
        c_a = bulk_arrival_cv(stage.max_tasks, stage.parallelism)
    else:
        c_a = stage.arrival_cv if stage.arrival_cv is not None else 1.0
    return VertexModel(p=stage.parallelism, S=stage.service_mean_s, A=stage.service_mean_s / rho,
                       cA=c_a,
                       cS=stage.service_cv if stage.service_cv is not None else 1.0,
                       p_max=p_max, w=stage.wait_mean_s, l=stage.service_mean_s,
                       e_clamp=(cfg.e_clamp_low, cfg.e_clamp_high), key=stage.key)


class KingmanPolicy(Policy):
    name = "kingman"
    knobs = ("executors",)
    Config = KingmanConfig
    description = ("Lohrmann's Elastic Scaler: G/G/1 (Kingman) model per stage, fewest executors that meet "
                   "the job's latency constraints")

    def _stages(self, view: JobView, c: ConstraintStats) -> list[StageStats]:
        if c.vertices is None:
            return list(view.stages)
        by_key = {s.key: s for s in view.stages}
        return [by_key[k] for k in c.vertices if k in by_key]

    @staticmethod
    def _changed_within_span(view: JobView) -> bool:
        """Whether the executors were changed within the statistics span: slots busy all through the
        latest window after a scale-up are working off the backlog (the thesis keeps ES inactive for
        three intervals after a scale-up for that reason, §4.6.4), not a sign of a new bottleneck."""
        last = view.last_decision_ms.get("executors")
        # a change a whole span before the evaluation (on its grid, whatever the jitter) is not within it
        return last is not None and view.now_ms - last < cooldown_s(1, view.window_s) * 1000

    @staticmethod
    def _batch_time(view: JobView, cfg: KingmanConfig) -> Optional[tuple[float, float]]:
        """``(mean, fixed)`` processing time (s) of the recent batches (the statistics span): the mean,
        and with ``batch_load`` the part of it that does not grow with the rows
        (:func:`policies.batch_load.batch_fixed_s` over the batches since the last executor change,
        else the measured driver overhead, else 0); 0 without ``batch_load`` (the thesis' rule). None
        without batches."""
        since = view.since_ms(view.window_s)
        recent = [b.processing_s for b in view.batches if b.trigger_ms >= since]
        if not recent:
            return None
        mean = statistics.fmean(recent)
        if not cfg.batch_load:
            return mean, 0.0
        cluster = cluster_of(view) if cfg.cluster_model else None
        overhead = (cluster.driver_overhead_s or 0.0) if cluster is not None else 0.0
        fixed = batch_fixed_s(view, view.last_decision_ms.get("executors"), overhead)
        return mean, min(fixed, mean)

    @staticmethod
    def _query_slots(view: JobView, cfg: KingmanConfig, times: Optional[tuple[float, float]], load: float,
                     p_maxes: list[int], slots_now: int) -> int:
        """The fewest slots whose batches at ``load`` keep within ``max_utilization`` of the trigger
        interval (:func:`policies.batch_load.query_slots`; ``times`` from :meth:`_batch_time`), in whole waves."""
        interval = trigger_interval_s(view, cfg.trigger_interval_s)
        if times is None or not interval:
            return slots_now
        c = query_slots(times[0], times[1], load, interval, p_maxes, max(1, slots_now), cfg.max_utilization)
        return wave_slots(p_maxes, c) if cfg.wave_sizing else c

    @staticmethod
    def _query_load(view: JobView, cfg: KingmanConfig, times: Optional[tuple[float, float]],
                    load: float = 1.0) -> Optional[float]:
        """Batch processing time at ``load`` / trigger interval over the recent batches (query-level ρ;
        ``times`` from :meth:`_batch_time`): with ``batch_load`` only the batch time beyond its fixed part
        grows with the load (:func:`policies.batch_load.batch_time_at`), else all of it."""
        interval = trigger_interval_s(view, cfg.trigger_interval_s)
        if times is None or not interval:
            return None
        return batch_time_at(times[0], times[1], load) / interval

    def _constraint_models(self, view: JobView, c: ConstraintStats, cfg: KingmanConfig, load: float = 1.0,
                           times: Optional[tuple[float, float]] = None):
        """``(models, fixed latency s)`` of one constraint at ``load`` times the measured rate, or None
        before warm-up / without data; the fixed latency is None while the constraint has no
        measurement yet (a bottleneck needs none). With ``batch_load`` the stages run as micro-batches
        (``queueing.with_batch_load``) and the fixed latency gains the batch's variable time
        (:func:`policies.batch_load.loaded_fixed_latency_s`); without it the models take the thesis'
        ``queueing.with_load`` and the fixed latency is that of the measured load."""
        stages = self._stages(view, c)
        if (not stages
                or any(len(s.utilization_windows) < cfg.warmup_windows for s in stages)):
            return None
        first = view.stages[0]
        models = [vertex_model(s, cfg, arrival_rho(view, s, first, cfg.rate_span_s) if cfg.arrival_utilization else None)
                  for s in stages]
        if any(m is None for m in models):
            return None
        loaded = [(with_batch_load if cfg.batch_load else with_load)(m, load) for m in models]
        if c.latency_s is None:
            return loaded, None
        queue_now = sequence_wait(models, [m.p for m in models])
        if not math.isfinite(queue_now):
            return loaded, None  # ρ ≥ 1 somewhere: a bottleneck
        # never below 0: with a clamped e_v the model's wait at p is not the measured one
        fixed = max(0.0, c.latency_s - queue_now)
        if cfg.batch_load and load != 1.0 and times is not None:
            fixed = loaded_fixed_latency_s(fixed, queue_now, times[0] - times[1], load)
        return loaded, fixed

    def plan(self, view: JobView, cfg: KingmanConfig, load: float = 1.0) -> Optional[dict]:
        """Slots and executors each constraint needs (Algorithm 8 with the Spark objective); None
        before warm-up. ``models`` maps a constraint to its stage models and fixed latency (s).
        ``load``: plan for that many times the measured arrival rate (:func:`load_growth`)."""
        spe = view.slots_per_executor(cfg.slots_per_executor)
        times = self._batch_time(view, cfg)  # once per plan: with batch_load a fit over the batches
        query_rho = self._query_load(view, cfg, times, load)
        cluster = cluster_of(view) if cfg.cluster_model else None
        out, models_by_name = {}, {}
        for c in sorted(view.constraints, key=lambda x: x.name):
            built = self._constraint_models(view, c, cfg, load, times)
            if built is None:
                return None
            models, fixed = built
            models_by_name[c.name] = (models, fixed)
            # the pool the job has now: stages report the parallelism of their last run, which lags a
            # scale-up while a long batch is still running
            slots_now = max(max(m.p for m in models), (view.current("executors") or 0) * spe)
            # ρ on the pool the job has now (a stage's last run may predate a scale-up)
            rhos = [m.rho(min(slots_now, m.p_max)) for m in models]
            # busy-time signals (latest window, overrunning batches) also flag a backlog being worked
            # off after a change; within the span after one, only the model's ρ counts (see
            # _changed_within_span)
            settled = not (cfg.settle_after_change and self._changed_within_span(view))
            if cfg.latest_window_bottleneck and settled:
                rhos += [s.utilization for s in self._stages(view, c) if s.utilization is not None]
            if c.vertices is None and query_rho is not None and settled:
                rhos.append(query_rho)
            bottleneck = max(rhos) >= cfg.bottleneck_utilization
            if not bottleneck and fixed is None:
                return None  # Rebalance needs the measured latency
            if bottleneck:  # Eq. 4.12 on the shared pool: at least double
                rho = max(rhos)
                slots = min(max(m.p_max for m in models), max(2 * slots_now, math.ceil(2 * slots_now * rho - 1e-9)))
                if cfg.wave_sizing:  # the doubling's waves, on the fewest slots that run them
                    slots = max(min(slots, 2), same_waves_slots([m.p_max for m in models], slots))
                feasible = None
            else:
                budget = None if cfg.w_ob is not None else cfg.safety_factor * (c.bound_s - fixed)
                if cfg.w_ob is not None and cluster is not None:  # Eq. 4.9 less the terms outside the tasks
                    outside = trigger_wait_s(view, cfg) + (cluster.driver_overhead_s or 0.0)
                    budget = cfg.safety_factor * (1 - cfg.w_ob) * (c.bound_s - sum(m.l for m in models) - outside)
                r = rebalance_spark(models, c.bound_s, cfg.w_ob or 0.0, slots_per_executor=spe,
                                    safety_factor=cfg.safety_factor, max_utilization=cfg.max_utilization,
                                    budget=budget, waves=cfg.wave_sizing)
                slots, feasible = r.slots, r.feasible
                if (cfg.batch_load and load != 1.0 and c.vertices is None and query_rho is not None
                        and query_rho > cfg.max_utilization):  # a planned load's batch past the floor
                    slots = max(slots, self._query_slots(view, cfg, times, load, [m.p_max for m in models],
                                                         min(slots_now, max(m.p_max for m in models))))
            out[c.name] = {"measured_latency_s": c.latency_s, "bound_s": c.bound_s, "bottleneck": bottleneck,
                           "feasible": feasible, "slots": slots, "executors": math.ceil(slots / spe),
                           "stages": {m.key: {"p": m.p, "p_max": m.p_max, "rho": m.utilization, "e": m.e,
                                              "S": m.S, "A": m.A, "cA": m.cA, "cS": m.cS, "w": m.w}
                                      for m in models}}
        if not out:
            return None
        return {"executors": max(1, max(c["executors"] for c in out.values())), "constraints": out,
                "query_load": query_rho, "slots_per_executor": spe, "models": models_by_name, "load": load}

    @staticmethod
    def latency_terms(view: JobView, cfg: KingmanConfig, cluster: Optional[ClusterInputs], latency_s: float,
                      queue_s: float) -> dict:
        """The predicted mean record latency split as issue #14 states the model (seconds):
        trigger wait (:func:`trigger_wait_s`) + driver overhead per batch (measured; 0 without a
        cluster profile) + queueing (Kingman at the decided size) + processing (the rest: the tasks'
        service and what the measurement holds beyond the other terms, never negative). The anchored
        prediction (module docstring, "Budget") already holds the first two through the measured
        latency; the split says how much of it the model attributes to each."""
        tw = trigger_wait_s(view, cfg)
        oh = (cluster.driver_overhead_s or 0.0) if cluster is not None else 0.0
        return {"trigger_wait_s": tw, "driver_overhead_s": oh, "queueing_s": queue_s,
                "processing_s": max(0.0, latency_s - tw - oh - queue_s)}

    @staticmethod
    def predict(models, fixed: Optional[float], executors: int, spe: int) -> tuple[Optional[float], float]:
        """Predicted mean latency (s; None when a stage would be unstable) and the highest stage
        utilization with ``executors`` executors of ``spe`` slots."""
        p = [min(executors * spe, m.p_max) for m in models]
        queue = sequence_wait(models, p)
        known = fixed is not None and math.isfinite(queue)
        return (fixed + queue if known else None), max(m.rho(pi) for m, pi in zip(models, p, strict=True))

    def _scale_down_safe(self, view: JobView, plan: dict, target: int, cfg: KingmanConfig, peak: float = 1.0) -> bool:
        """Hysteresis of a one-executor scale-down (extension; ``scale_down_margin`` m): at ``target``
        every constraint's predicted latency must be ≤ (1 − m)·ℓ and every stage's utilization ≤
        max_utilization − m. Rebalance alone lands on the edge of its floor or budget, so measurement
        noise flips the next plan back up (an oscillation by one executor, measured in the bench).
        ``peak``: check at that many times the measured load (:func:`peak_load`)."""
        m = cfg.scale_down_margin
        if m <= 0 and peak <= 1.0:
            return True
        spe = plan["slots_per_executor"]
        at_peak = plan if peak == 1.0 else self.plan(view, cfg, peak)
        if at_peak is None:
            return False
        for name, (models, fixed) in at_peak["models"].items():
            latency, rho = self.predict(models, fixed, target, spe)
            bound = plan["constraints"][name]["bound_s"]
            if latency is None or latency > (1 - m) * bound or rho > cfg.max_utilization - m:
                return False
        return True

    def _warmup_sized(self, plan: dict, current: int, target: int, useful: int, cfg: KingmanConfig,
                      cluster: ClusterInputs, horizon_s: float) -> tuple[int, Optional[dict]]:
        """A scale-out ``current → target`` checked for the time its new executors warm up (issue #14:
        "a scale-out is sized for the load expected when the new executors will be working"): every
        constraint's latency predicted on the warming pool — as many executors as it is worth warm,
        :func:`warm_equivalent` — must stay within its bound (and every stage under ρ = 1); else one
        more executor, up to ``useful`` (the most the stages' tasks can use). It never goes past the
        size whose warming pool is worth ``target`` warm executors (there the steady check holds), and
        adds nothing when the steady model cannot keep the bound at ``target`` (the plan's
        infeasibility, not the warm-up's). Returns (executors, record for the decision) — the record
        None without a measured warm-up. The steady sizing (plan, spare, rate trend) is unchanged; this
        only adds where the warm-up would break the bound."""
        if warm_equivalent(cluster, current, current + 1, horizon_s) >= current + 1:
            return target, None
        spe = plan["slots_per_executor"]

        def check(executors: float) -> tuple[bool, Optional[float]]:
            ok, worst = True, None
            for name, (models, fixed) in plan["models"].items():
                lat, rho = self.predict(models, fixed, executors, spe)
                if lat is not None:
                    worst = lat if worst is None else max(worst, lat)
                if lat is None or rho >= 1.0 or lat > plan["constraints"][name]["bound_s"]:
                    ok = False
            return ok, worst

        chosen = target
        worth = warm_equivalent(cluster, current, chosen, horizon_s)
        ok, latency = check(worth)
        if check(target)[0]:
            while not ok and chosen < useful:
                chosen += 1
                worth = warm_equivalent(cluster, current, chosen, horizon_s)
                ok, latency = check(worth)
        return chosen, {"factor": cluster.warmup_factor, "duration_s": cluster.warmup_s, "horizon_s": horizon_s,
                        "worth_executors": worth, "latency_s": latency, "added": chosen - target}

    @staticmethod
    def _spare_pays(view: JobView, cfg: KingmanConfig, delay_s: Optional[float],
                    register_s: Optional[float] = None) -> bool:
        """Whether ``spare_executors`` are kept now (``spare_when``; issue #14, not in the thesis): always
        with 'always'; with 'rising' while the arrival rate rises (:func:`rate_rising`); with 'auto' also
        whenever the provisioning delay (s; None: unknown) exceeds the time between batch starts
        (max(trigger interval, mean batch time), s): a rate step met then runs more than one batch on the
        pool of before, so the spare is kept as insurance on every level. 'slow' keeps it when new
        executors *register* (``register_s``, :func:`register_delay_s`; None: unknown) later than that,
        and only then: executors that register within a batch period take tasks of the batch running
        then (Spark offers a registering executor's cores to running task sets), a step is left to the
        live rate (``live_rate``) and the in-flight rules, and a spare on a flat level is only cost. The
        delay to the first finished task would count the wait for the next batch and the warm-up: on the
        standalone cluster (2026-11-26) 2.3 s to register, 10 s to the first finished task, against 8 s
        between batch starts. Not the default: a source whose offsets come only with completed batches
        shows a step in the live rate one batch late, and 'slow' kept 0.812 of a 4x step's spans there."""
        if cfg.spare_when == "always":
            return True
        if cfg.spare_when == "blind":
            return not in_flight.probed(view)
        interval = 2 * trigger_wait_s(view, cfg)
        if cfg.spare_when == "slow":
            return register_s is None or register_s > interval
        if cfg.spare_when == "auto" and (delay_s is None or delay_s > interval):
            return True
        return rate_rising(view, cfg, delay_s)

    def _live_step(self, view: JobView, cfg: KingmanConfig, current: int) -> bool:
        """Whether the live arrival rate alone asks for more than ``current`` executors: a rate step, no
        effect of a recent scale-down, so not held back after one (run 23 on the standalone cluster: a
        scale-down 12 s before a 2x step held the in-flight scale-out for 20 s)."""
        surge = live_load(view, cfg) if in_flight.uses_live_rate(view, cfg.live_rate) else 1.0
        if surge <= 1.0:
            return False
        now = self.plan(view, cfg, surge)
        return now is not None and now["executors"] > current

    @staticmethod
    def _wave_spare(plan: dict, target: int, spare: int, cfg: KingmanConfig) -> int:
        """``spare`` executors beyond ``target`` (the plan's), less those that add no task wave
        (``wave_sizing``: 4 tasks on 2 + 1 executors run in 2 waves, as on 2)."""
        if not spare or not cfg.wave_sizing:
            return spare
        spe = plan["slots_per_executor"]
        return max(0, math.ceil(same_waves_slots(_p_maxes(plan), (target + spare) * spe) / spe) - target)

    def _spare_base(self, plan: dict, target: int, spare: int, cfg: KingmanConfig) -> int:
        """The size a scale-down to ``target`` keeps ``spare`` executors beyond: the largest whose spare,
        in whole waves (:meth:`_wave_spare`), fits within ``target`` — the size the scale-up path would
        keep ``target`` for. Without waves ``target − spare`` (at least 1). With waves and 4 tasks, 2
        executors at 8 000 rows/s are the plan with no spare (a third runs 2 waves as 2 do): checking 1
        instead held 4 executors through the 8 000 rows/s level on the standalone cluster (run 26,
        2026-11-26: 76 s at 4 where the way up kept 2, about 0.15× static)."""
        for base in range(target, 1, -1):
            if base + self._wave_spare(plan, base, spare, cfg) <= target:
                return base
        return 1

    @staticmethod
    def _scale_down_blocked(view: JobView, cfg: KingmanConfig) -> Optional[str]:
        """Why no scale-down may happen now, or None (issue #14; the thesis scales down at once, its
        effects being "almost instantly visible", §4.6.4 — on Spark a released executor takes a
        provisioning delay to come back, so scale-downs are lazy, as Flink's ``scale-down.interval``):
        within ``scale_down_delay_s`` of the latest executor decision, or while a backlog is being
        worked off — more rows waiting than ``backlog_tolerance_intervals`` trigger intervals (or
        mean batch times, when longer) of arrivals, or the running batch older than that many
        intervals (``aggregators.liveness``)."""
        last = view.last_decision_ms.get("executors")
        if last is not None and view.now_ms - last < cfg.scale_down_delay_s * 1000:
            return "scale-down delay"
        live = view.live
        interval = 2 * trigger_wait_s(view, cfg)  # time between batch starts
        if live is None or not interval:
            return None
        limit = cfg.backlog_tolerance_intervals * interval
        if live.running_batch_age_s is not None and live.running_batch_age_s > limit:
            return "batch overrunning"
        rate = live.arrival_rows_per_second or arrival_rate(view, cfg.rate_span_s)
        if live.backlog_rows and rate and live.backlog_rows / rate > limit:
            return "backlog being worked off"
        return None

    def _in_flight(self, view: JobView, cfg: KingmanConfig, current: int) -> Optional[list[Proposal]]:
        """Scale out on the work in flight (module docstring); None when nothing presses. The
        decision is shaped like a planned one: ``inputs["plan"]`` marks the whole-query constraints
        as bottlenecks (no latency is predicted for them), ``inputs["latency_s"]`` is the latency
        known now (the age in flight, a lower bound, or the measured one) and ``utilization`` the
        load (the plan's highest stage ρ, at least the pressure's factor)."""
        p = in_flight.pressure(view, in_flight.bound_s(view), cfg.backlog_growth_ratio,
                               horizon_s=backlog_horizon_s(view, cfg))
        if p is None:
            return None
        wanted = in_flight.scaled(current, p)
        if p.kind == "in-flight":
            wanted = max(wanted, 2 * current)  # Eq. 4.12: a bottleneck gets at least double
        catch_up = self._catch_up(view, cfg)
        if catch_up is not None and catch_up["executors"] > wanted:
            wanted = catch_up["executors"]
        else:
            catch_up = None  # not what sized it
        plan = self.plan(view, cfg)
        if plan is not None:
            wanted = max(wanted, plan["executors"])
        surge = live_load(view, cfg) if in_flight.uses_live_rate(view, cfg.live_rate) else 1.0
        if surge > 1.0:  # the rate arriving now, ahead of the completed batches
            now = self.plan(view, cfg, surge)
            if now is not None:
                wanted = max(wanted, now["executors"])
        if cfg.wave_sizing and plan is not None:  # the pressure's size in whole waves (queueing.wave_slots)
            spe = plan["slots_per_executor"]
            wanted = math.ceil(wave_slots(_p_maxes(plan),
                                          wanted * spe) / spe)
        new = int(within_bounds(wanted, cfg))
        if new <= current:
            return []  # at the maximum: nothing to add, and never a scale-down now
        rho = max([p.factor] + [st["rho"] for c in (plan or {}).get("constraints", {}).values()
                                for st in c["stages"].values() if st["rho"] is not None])
        age = view.live.in_flight_age_s
        cons = {}
        for c in sorted(view.constraints, key=lambda x: x.name):
            planned = (plan or {}).get("constraints", {}).get(c.name, {})
            cons[c.name] = {"measured_latency_s": c.latency_s, "bound_s": c.bound_s, "feasible": None,
                            "bottleneck": c.vertices is None or bool(planned.get("bottleneck")),
                            "executors": new, "in_flight_age_s": age}
        first = min(view.constraints, key=lambda c: c.name) if view.constraints else None
        latency = age if p.kind == "in-flight" or first is None or first.latency_s is None else first.latency_s
        reason = f"bottleneck in flight: {p.reason}: {current} → {new} {view.executor_unit}{view.local_mode_note()}"
        if catch_up is not None:
            reason += "; " + describe(catch_up)
        inputs = {**p.inputs, "latency_s": latency, "executors": current, "utilization": rho, "infeasible": [],
                  "plan": {"executors": new, "constraints": cons, "in_flight": p.kind}, "unit": view.executor_unit,
                  "catch_up": catch_up}
        prediction = {"constraints": {name: None for name in cons}, "utilization": rho * current / new}
        return [Proposal("executors", new, reason, inputs, prediction)]

    @staticmethod
    def _catch_up(view: JobView, cfg: KingmanConfig) -> Optional[dict]:
        """Executors that keep up with the arrival rate and work the rows waiting off within
        ``catch_up_s`` (unset: the tightest latency bound, else one batch period), at
        ``max_utilization`` (:func:`policies.catch_up.catch_up_slots`, with the provisioning delay
        the backlog keeps growing over); None with ``catch_up`` off or nothing to size from. Not in
        the thesis: its bottleneck rule doubles per interval (Eq. 4.12), which stays the floor. The
        Flink autoscaler sizes sources for the input rate + lag / ``catch-up.duration`` (default
        minutes, for throughput); here the horizon is the latency bound: the rows waiting are late
        already. Measured in ``bench scaling`` (seeds 0–4, 2026-11-27): the sinusoid's first minute
        on one executor recovers one evaluation sooner (+0.6–0.8 points), the other profiles and
        the calibrated cluster (at most 4 executors) unchanged. Returns ``executors``, the catch-up
        rate (``rows_per_second``), ``backlog_rows`` (with the growth over the delay), ``horizon_s``
        and ``provisioning_delay_s``: the decision's ``inputs["catch_up"]`` when it sized the scale-out."""
        if not cfg.catch_up:
            return None
        horizon = cfg.catch_up_s or in_flight.bound_s(view) or 2 * trigger_wait_s(view, cfg)
        delay = provisioning_delay_s(cluster_of(view), cfg) if cfg.cluster_model else None
        return catch_up_executors(view, horizon, delay, cfg.max_utilization,
                                  view.slots_per_executor(cfg.slots_per_executor))

    @staticmethod
    def _disrupted_by_scale_down(view: JobView, cfg: KingmanConfig) -> bool:
        """Within ``after_scale_down_s`` of a scale-down (issue #14; measured on the standalone
        cluster: removing an executor re-runs its tasks, the interrupted batch leaves records in
        flight past the bound and the latest window reads busy, so the policy scaled straight back
        up, 4 → 3 → 4 every 40 s at a load three executors kept within the bound). The thesis sees
        scale-down effects "almost instantly" (§4.6.4) and has no such rule; this project's choice."""
        last = view.last_decision_ms.get("executors")
        return (last_executor_direction(view) < 0 and last is not None
                and view.now_ms - last < cfg.after_scale_down_s * 1000)

    def evaluate(self, view: JobView, config: KingmanConfig) -> list[Proposal]:
        current = view.current("executors")
        disrupted = self._disrupted_by_scale_down(view, config)
        if current and config.in_flight:
            up = self._in_flight(view, config, current)
            if up is not None:
                severe = (view.live is not None and view.live.in_flight_age_s is not None
                          and (in_flight.bound_s(view) or math.inf) * 2 < view.live.in_flight_age_s)
                if not disrupted or severe or not up or self._live_step(view, config, current):
                    return up
                return []
        plan = self.plan(view, config)
        if plan is None or not current:
            return []
        target = plan["executors"]
        # spare capacity beyond the plan (issue #14; not in the thesis, which sizes for the measured rate):
        # a rate step arriving while a scale-out takes effect (detection + provisioning) meets one spare
        # executor instead of a full pool; a growing rate's sizing (below) counts it in. Never beyond
        # what the stages' tasks can use (their largest p_max), never under a bottleneck (Eq. 4.12 sizes)
        cluster = cluster_of(view) if config.cluster_model else None
        delay = provisioning_delay_s(cluster, config) if config.cluster_model else None
        spare = 0 if any(c["bottleneck"] for c in plan["constraints"].values()) else config.spare_executors
        if spare and not self._spare_pays(view, config, delay,
                                          register_delay_s(cluster, config) if config.cluster_model else None):
            spare = 0  # a flat or falling rate, new executors quick: no spare (released by the lazy scale-down)
        useful = math.ceil(max(_p_maxes(plan))
                           / plan["slots_per_executor"])
        wanted = spare
        spare = self._wave_spare(plan, target, max(0, min(spare, useful - target)), config)
        target += spare
        surged = False
        surge = live_load(view, config) if in_flight.uses_live_rate(view, config.live_rate) else 1.0
        if surge > 1.0:  # the rate arriving now, ahead of the completed batches
            now = self.plan(view, config, surge)
            extra = 0 if now is None or any(c["bottleneck"] for c in now["constraints"].values()) else wanted
            if now is not None:
                extra = self._wave_spare(now, now["executors"], max(0, min(extra, useful - now["executors"])), config)
            if now is not None and now["executors"] + extra > target:
                plan, target, spare = now, now["executors"] + extra, extra
                surged = True
        # right after a scale-down the completed batches and busy time read high (its re-run tasks); the
        # live arrival rate does not, so a plan raised by it is not held back (with or without a spare)
        if disrupted and target > current and not surged:
            return []
        growth = 1.0
        if target > current:  # sized for the load when the new executors will be working
            growth = load_growth(view, config, delay)
            future = self.plan(view, config, growth) if growth > 1.0 else None
            if future is not None and future["executors"] > target:
                plan, target = future, future["executors"]
        warm = None
        if (target > current and config.warmup_sizing and cluster is not None
                and not any(c["bottleneck"] for c in plan["constraints"].values())):
            target, warm = self._warmup_sized(plan, current, target, useful, config, cluster,
                                              2 * trigger_wait_s(view, config))
        cons = plan["constraints"]
        if target < current:
            if any(c["bottleneck"] for c in cons.values()):
                return []  # never release executors while a stage or the query is a bottleneck
            if self._scale_down_blocked(view, config) is not None:
                return []
            target = current - 1  # scale-downs one by one (thesis §4.6.4)
            if config.wave_sizing:  # one wave at a time: the fewest executors that run the waves of current − 1
                spe = plan["slots_per_executor"]
                target = max(1, math.ceil(same_waves_slots(_p_maxes(plan), target * spe) / spe))
            peak = peak_load(view, config, config.scale_down_delay_s) if config.scale_down_delay_s else 1.0
            # the spare is kept beyond a size that is safe with margin, not beyond the plan of the moment:
            # near a size boundary the plan flips between evaluations (measured on the standalone cluster:
            # 4 → 3 → 4 → 3 at the peak rate), the safe size with margin does not
            if not self._scale_down_safe(view, plan, self._spare_base(plan, target, spare, config), config, peak):
                return []
        if target == current or not hysteresis_ok(current, target, config.min_relative_change):
            return []
        bounded = int(within_bounds(target, config))  # reason and prediction at the value to be decided
        if bounded == current or (bounded > current) != (target > current):
            return []
        target = bounded
        spe = plan["slots_per_executor"]
        predicted, utilization = {}, {}
        queue_at = {}
        for name, (models, fixed) in plan.pop("models").items():
            predicted[name], utilization[name] = self.predict(models, fixed, target, spe)
            queue_at[name] = sequence_wait(models, [min(target * spe, m.p_max) for m in models])
        infeasible = sorted(n for n, c in cons.items() if c["feasible"] is False)
        bottleneck = any(c["bottleneck"] for c in cons.values())
        first = min(cons)
        reason = (f"{'bottleneck: ' if bottleneck else ''}{current} → {target} {view.executor_unit} for "
                  f"{len(cons)} constraint(s)")
        if predicted[first] is not None:
            reason += (f"; {first}: predicted {_ms(predicted[first])} vs bound {_ms(cons[first]['bound_s'])}"
                       + (f" (measured {_ms(cons[first]['measured_latency_s'])})"
                          if cons[first]["measured_latency_s"] is not None else ""))
        if infeasible:
            reason += f"; infeasible even at p_max: {', '.join(infeasible)}"
        if spare and target > current:
            reason += f"; {spare} spare {view.executor_unit} beyond the plan's {plan['executors']}"
        reason += view.local_mode_note()
        inputs = {"spare_executors": spare, "latency_s": cons[first]["measured_latency_s"], "executors": current,
                  "utilization": max(s["rho"] for c in cons.values() for s in c["stages"].values()),
                  "infeasible": infeasible, "plan": plan, "unit": view.executor_unit,
                  "load_growth": growth, "provisioning_delay_s": delay}
        if growth > 1.0:
            reason += f"; sized for {growth:.2f}× the arrival rate (trend over {delay:.1f} s of provisioning)"
        if warm is not None:
            inputs["warmup"] = warm
            if warm["added"]:
                reason += (f"; {warm['added']} more for the new {view.executor_unit}' warm-up "
                           f"(×{warm['factor']:.2f} for {warm['duration_s']:.1f} s)")
        prediction = {"constraints": predicted, "utilization": max(utilization.values())}
        if warm is not None and warm.get("latency_s") is not None:
            prediction["warmup_latency_s"] = warm["latency_s"]
        if predicted[first] is not None:
            prediction["latency_s"] = predicted[first]
            prediction["terms"] = self.latency_terms(view, config, cluster, predicted[first], queue_at[first])
        return [Proposal("executors", target, reason, inputs, prediction)]

    def observe(self, view: JobView, knob: str, config) -> dict:
        out = {}
        if view.constraints:
            first = min(view.constraints, key=lambda c: c.name)
            if first.latency_s is not None:
                out["latency_s"] = first.latency_s
        # the quantity the prediction is in: arrival-based ρ when known (the busy fraction stays high
        # while added executors drain a backlog, which would judge an effective scale-up ineffective)
        first = view.stages[0] if view.stages else None
        stages = []
        for s in view.stages:
            rho = arrival_rho(view, s, first, config.rate_span_s) if config.arrival_utilization else None
            stages.append(rho if rho is not None else s.utilization)
        stages = [x for x in stages if x is not None]
        if stages:
            out["utilization"] = max(stages)
        return out
