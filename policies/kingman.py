"""Kingman rebalance of executors under latency constraints (Lohrmann's Elastic Scaler on Spark).

The job declares latency constraints (``aggregators.constraints``); every evaluation this policy
models each constrained stage as a G/G/1 queue (thesis §4.6.2, digest 004 §5.2), fits the model to
the measured wait, and asks for the fewest executors whose predicted latency meets every bound
(the Spark objective of digest §11.5 on top of Algorithm 7's model; ``policies.queueing``). Its
options are ``policies.kingman_config``: the thesis' parameters and the five extensions that issue
#44's ablation kept (``spark-governor bench scaling-ablation``, docs/policies/kingman.md).

**Template-vertex statistics → model** (digest §11.3; one choice per quantity, all in seconds,
per *task*). Records of a micro-batch move through a stage in bulk with their task, so the
queueing unit is the task waiting for an executor slot, not the record:

- ``p``: the stage's parallelism in the window, min(tasks, slots); ``p_max``: its task count
  (partitions): more slots than tasks cannot help that stage.
- ``S̄``: mean task service (executor run) time; ``c_S``: its coefficient of variation (1.0 if
  unknown).
- ``ρ``: utilization at the current parallelism: busy slot-seconds per second over the statistics
  span / p (the thesis' S̄/Ā over the adjustment interval); ``Ā = S̄/ρ`` (mean interarrival of tasks
  per slot). (ρ from the source's arrival rate × the stage's busy time per record, which exceeds 1
  under overload, was an option until issue #44: it cost 9 points of the worst case on a staircase.)
- ``c_A``: default (``bulk_arrivals``) from the stage's bulk task arrivals, ``√(tasks/p − 1)``
  (:func:`bulk_arrival_cv`); otherwise the CV of task launch interarrival within the stage (1.0 if
  unknown).
- ``w``: measured mean slot wait = mean makespan − mean run time; the fitting coefficient
  ``e = w / Kingman(p)`` is clamped to [0.1, 10] (:data:`E_CLAMP`), and is 1 when w or Kingman is ~0.
  The thesis does not clamp; the authors' implementation clamps to [0.8, 1.2] (digest §5.5), which
  assumes Kingman is already close; here the wave wait of bulk arrivals is ≈ ρ·T while Kingman grows
  as ρ²/(1−ρ), so the fitted e is ≈ 2(1−ρ)/ρ (2 at ρ = 0.5, 0.5 at 0.8) and [0.8, 1.2] un-anchors the
  prediction at the current size from the measurement (a 2-slot stage measured at 5.5 s against a
  4.5 s bound is then predicted to miss it on 4 slots, where one wave keeps it). [0.1, 10] still
  bounds e under bursts. Not an option since issue #44: the two clamps made the same decisions in
  every cell of the ablation, and the wide one keeps the prediction honest.
- ``l``: mean task run time.

**Budget.** By default (``w_ob`` unset) the constraint's measured mean record latency L keeps
its non-queueing part fixed: ``Ŵ = ℓ − (L − Σ_v W_v(p))`` and the predicted latency is
``L − Σ_v W_v(p) + Σ_v W_v(p*)``; the batching share is what the trigger makes it, not a fixed
w_ob (in Spark the micro-batch interval is a separate knob). With ``w_ob`` set, Eq. 4.9 is used
literally: ``Ŵ = (1 − w_ob)(ℓ − Σ l_v)``, less the trigger wait and driver overhead when the job's
cluster profile measured them (``aggregators.cluster_profile``).

**Decisions** (Algorithm 8 over the job's constraints, sorted by name): a constraint with a
bottleneck — a stage at ρ ≥ ``bottleneck_utilization`` (0.99) on the pool the job has now, or (a
whole-query constraint) batches whose processing time reaches that share of the trigger interval —
gets its slots per Eq. 4.12 (``max(2C, ⌈2Cρ⌉)``), without waiting for a latency measurement;
otherwise the smallest slot count C meeting its budget with every stage under its 90 % utilization
floor. The executors needed are the maximum over constraints of ``⌈C / slots per executor⌉``
(stages and constraints of one query share one pool). Infeasible at p_max: p_max for all, and the
constraint is reported infeasible. Then: warm-up (``warmup_windows`` statistics windows before the
first decision), scale-downs one executor at a time (thesis §4.6.4) and only with
``scale_down_margin`` to spare (:meth:`KingmanPolicy._scale_down_safe`); the framework adds bounds
and the cool-down (no scale-down within 3 intervals after a scale-up). Under a bottleneck no latency
is predicted (the model's wait at the current size is infinite).

**Beyond the thesis**, each kept by issue #44's ablation (the rows in docs/policies/kingman.md):

- ``spare_executors`` (1): one executor is kept beyond the plan, for a rate step met while a
  scale-out takes effect (the thesis' workers start in well under a second; Spark's take seconds to
  register and warm up). Never under a bottleneck, never beyond what the stages' tasks can use.
- ``live_rate`` (unset: on when the sources are probed, :func:`policies.in_flight.uses_live_rate`):
  the plan is also made for the source's arrival rate in the live state when it exceeds the
  completed batches' (:func:`kingman_signals.live_load`): a rate step is sized for before the first
  batch at the new rate completes.
- ``wave_sizing``: sizes are whole task waves: a stage's tasks end at a barrier, so a slot count that
  leaves slots idle in the last wave buys nothing (4 tasks on 3 slots run 2 waves, as on 2): a
  planned size is raised to the next count that wastes none (``queueing.wave_slots``), a doubling, a
  spare or a scale-down step goes to the fewest slots with its waves (``queueing.same_waves_slots``).
- ``bulk_arrivals`` and ``scale_down_margin`` above.

A planned load (the live rate) is modelled as the thesis would (``queueing.with_load``: Ā / factor,
e_v kept, the fixed latency held, the query load × factor), with one change where the thesis is silent on
a micro-batch's fixed costs: the factor is the growth of the work, not of the rows
(:func:`kingman_signals.work_growth`: only the per-row share of a batch grows; measured on the standalone
cluster, the default staircase on ``attach()`` went from 0.69–0.72× static's executor-seconds to 0.62×
with every span kept). Predicted latency is split into trigger
wait + driver overhead + queueing + processing for the decision's record
(:meth:`KingmanPolicy.latency_terms`).

**Local mode** (``local[N]``: no executors, the knob not actuatable; ``JobView.local_slots``): the
same plan in task slots (one slot per "executor"), e.g. "2 → 4 task slots …; local mode: 2 task
slots; not actuatable" — a recommendation the governor records without a directive.
"""
from __future__ import annotations

import math
import statistics
from typing import Optional

from spark_governor.policies import in_flight
from spark_governor.policies.base import ConstraintStats, JobView, Policy, Proposal, StageStats
from spark_governor.policies.cluster_inputs import ClusterInputs, cluster_of
from spark_governor.policies.kingman_config import KingmanConfig
from spark_governor.policies.kingman_signals import live_load, trigger_wait_s, work_growth
from spark_governor.policies.queueing import (VertexModel, rebalance_spark, same_waves_slots, sequence_wait,
                                              wave_slots, with_load)
from spark_governor.policies.safety import within_bounds
from spark_governor.policies.threshold import trigger_interval_s

#: the clamp of the fitting coefficient e_v (module docstring): wider than [C]'s [0.8, 1.2] (digest §5.5), which
#: un-anchors the prediction at the current size from the measurement; the thesis has none
E_CLAMP = (0.1, 10.0)


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


def vertex_model(stage: StageStats, cfg: KingmanConfig) -> Optional[VertexModel]:
    """The G/G/1 model of one stage (see the module docstring), or None without enough data."""
    if not stage.parallelism or not stage.service_mean_s or stage.utilization is None:
        return None
    # the work over the whole span at the current parallelism, not the latest window alone (a window
    # holds a whole number of micro-batches, so single windows swing with the trigger phase) and not
    # a mean of window utilizations (windows before a scaling action had another parallelism)
    if stage.busy_slots is not None:
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
                       e_clamp=E_CLAMP, key=stage.key)


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
    def _query_load(view: JobView, cfg: KingmanConfig, load: float = 1.0) -> Optional[float]:
        """Mean batch processing time over the statistics span × ``load`` / trigger interval (the query-level
        ρ: the batches' share of the time between triggers); None without batches or an interval."""
        interval = trigger_interval_s(view, cfg.trigger_interval_s)
        since = view.since_ms(view.window_s)
        recent = [b.processing_s for b in view.batches if b.trigger_ms >= since]
        if not recent or not interval:
            return None
        return statistics.fmean(recent) * load / interval

    def _constraint_models(self, view: JobView, c: ConstraintStats, cfg: KingmanConfig, load: float = 1.0):
        """``(models at load, fixed latency s)`` of one constraint at ``load`` times the measured rate (the
        thesis' ``queueing.with_load``: Ā / load, e_v kept), or None before warm-up / without data; the fixed
        latency (that of the measured load) is None while the constraint has no measurement yet (a bottleneck
        needs none)."""
        stages = self._stages(view, c)
        if (not stages
                or any(len(s.utilization_windows) < cfg.warmup_windows for s in stages)):
            return None
        models = [vertex_model(s, cfg) for s in stages]
        if any(m is None for m in models):
            return None
        loaded = [with_load(m, load) for m in models]
        if c.latency_s is None:
            return loaded, None
        queue_now = sequence_wait(models, [m.p for m in models])
        if not math.isfinite(queue_now):
            return loaded, None  # ρ ≥ 1 somewhere: a bottleneck
        # never below 0: with a clamped e_v the model's wait at p is not the measured one
        return loaded, max(0.0, c.latency_s - queue_now)

    def plan(self, view: JobView, cfg: KingmanConfig, load: float = 1.0) -> Optional[dict]:
        """Slots and executors each constraint needs (Algorithm 8 with the Spark objective); None
        before warm-up. ``models`` maps a constraint to its stage models and fixed latency (s).
        ``load``: plan for that many times the measured arrival rate (the live rate, :func:`live_load`)."""
        spe = view.slots_per_executor(cfg.slots_per_executor)
        work = work_growth(view, load)
        query_rho = self._query_load(view, cfg, work)
        cluster = cluster_of(view)
        out, models_by_name = {}, {}
        for c in sorted(view.constraints, key=lambda x: x.name):
            built = self._constraint_models(view, c, cfg, work)
            if built is None:
                return None
            models, fixed = built
            models_by_name[c.name] = (models, fixed)
            # the pool the job has now: stages report the parallelism of their last run, which lags a
            # scale-up while a long batch is still running
            slots_now = max(max(m.p for m in models), (view.current("executors") or 0) * spe)
            # ρ on the pool the job has now (a stage's last run may predate a scale-up)
            rhos = [m.rho(min(slots_now, m.p_max)) for m in models]
            if c.vertices is None and query_rho is not None:
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
            out[c.name] = {"measured_latency_s": c.latency_s, "bound_s": c.bound_s, "bottleneck": bottleneck,
                           "feasible": feasible, "slots": slots, "executors": math.ceil(slots / spe),
                           "stages": {m.key: {"p": m.p, "p_max": m.p_max, "rho": m.utilization, "e": m.e,
                                              "S": m.S, "A": m.A, "cA": m.cA, "cS": m.cS, "w": m.w}
                                      for m in models}}
        if not out:
            return None
        return {"executors": max(1, max(c["executors"] for c in out.values())), "constraints": out,
                "query_load": query_rho, "slots_per_executor": spe, "models": models_by_name, "load": load,
                "work": work}

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

    def _scale_down_safe(self, plan: dict, target: int, cfg: KingmanConfig) -> bool:
        """Hysteresis of a one-executor scale-down (extension; ``scale_down_margin`` m): at ``target``
        every constraint's predicted latency must be ≤ (1 − m)·ℓ and every stage's utilization ≤
        max_utilization − m. Rebalance alone lands on the edge of its floor or budget, so measurement
        noise flips the next plan back up (an oscillation by one executor, measured in the bench)."""
        m = cfg.scale_down_margin
        if m <= 0:
            return True
        spe = plan["slots_per_executor"]
        for name, (models, fixed) in plan["models"].items():
            latency, rho = self.predict(models, fixed, target, spe)
            bound = plan["constraints"][name]["bound_s"]
            if latency is None or latency > (1 - m) * bound or rho > cfg.max_utilization - m:
                return False
        return True

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

    def evaluate(self, view: JobView, config: KingmanConfig) -> list[Proposal]:
        current = view.current("executors")
        plan = self.plan(view, config)
        if plan is None or not current:
            return []
        target = plan["executors"]
        # spare capacity beyond the plan (issue #14; not in the thesis, which sizes for the measured rate):
        # a rate step arriving while a scale-out takes effect (detection + provisioning) meets one spare
        # executor instead of a full pool. Never beyond what the stages' tasks can use (their largest
        # p_max), never under a bottleneck (Eq. 4.12 sizes)
        wanted = 0 if any(c["bottleneck"] for c in plan["constraints"].values()) else config.spare_executors
        useful = math.ceil(max(_p_maxes(plan)) / plan["slots_per_executor"])
        spare = self._wave_spare(plan, target, max(0, min(wanted, useful - target)), config)
        target += spare
        surge = live_load(view) if in_flight.uses_live_rate(view, config.live_rate) else 1.0
        if surge > 1.0:  # the rate arriving now, ahead of the completed batches
            now = self.plan(view, config, surge)
            extra = 0 if now is None or any(c["bottleneck"] for c in now["constraints"].values()) else wanted
            if now is not None:
                extra = self._wave_spare(now, now["executors"], max(0, min(extra, useful - now["executors"])), config)
            if now is not None and now["executors"] + extra > target:
                plan, target, spare = now, now["executors"] + extra, extra
        cons = plan["constraints"]
        if target < current:
            if any(c["bottleneck"] for c in cons.values()):
                return []  # never release executors while a stage or the query is a bottleneck
            target = current - 1  # scale-downs one by one (thesis §4.6.4)
            if config.wave_sizing:  # one wave at a time: the fewest executors that run the waves of current − 1
                spe = plan["slots_per_executor"]
                target = max(1, math.ceil(same_waves_slots(_p_maxes(plan), target * spe) / spe))
            # the spare is kept beyond a size that is safe with margin, not beyond the plan of the moment:
            # near a size boundary the plan flips between evaluations (measured on the standalone cluster:
            # 4 → 3 → 4 → 3 at the peak rate), the safe size with margin does not
            if not self._scale_down_safe(plan, self._spare_base(plan, target, spare, config), config):
                return []
        if target == current:
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
        if plan["load"] > 1.0 and target > current:
            reason += (f"; sized for the live rate, {plan['load']:.2f}× the completed batches' "
                       f"({plan['work']:.2f}× their work)")
        if spare and target > current:
            reason += f"; {spare} spare {view.executor_unit} beyond the plan's {plan['executors']}"
        reason += view.local_mode_note()
        inputs = {"spare_executors": spare, "latency_s": cons[first]["measured_latency_s"], "executors": current,
                  "utilization": max(s["rho"] for c in cons.values() for s in c["stages"].values()),
                  "infeasible": infeasible, "plan": plan, "unit": view.executor_unit, "live_load": surge}
        prediction = {"constraints": predicted, "utilization": max(utilization.values())}
        if predicted[first] is not None:
            prediction["latency_s"] = predicted[first]
            prediction["terms"] = self.latency_terms(view, config, cluster_of(view), predicted[first],
                                                     queue_at[first])
        return [Proposal("executors", target, reason, inputs, prediction)]

    def observe(self, view: JobView, knob: str, config) -> dict:
        out = {}
        if view.constraints:
            first = min(view.constraints, key=lambda c: c.name)
            if first.latency_s is not None:
                out["latency_s"] = first.latency_s
        stages = [s.utilization for s in view.stages if s.utilization is not None]
        if stages:
            out["utilization"] = max(stages)
        return out
