"""Kingman rebalance of executors under latency constraints (Lohrmann's Elastic Scaler on Spark).

The job declares latency constraints (``aggregators.constraints``); every evaluation this policy
models each constrained stage as a G/G/1 queue (thesis §4.6.2, digest 004 §5.2), fits the model to
the measured wait, and asks for the fewest executors whose predicted latency meets every bound
(the Spark objective of digest §11.5 on top of Algorithm 7's model; ``policies.queueing``).

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
work per second scales out by that factor. The plan's own size is taken when larger. Never for an
idle query, and never a scale-down while it presses.

**Local mode** (``local[N]``: no executors, the knob not actuatable; ``JobView.local_slots``): the
same plan in task slots (one slot per "executor"), e.g. "2 → 4 task slots …; local mode: 2 task
slots; not actuatable" — a recommendation the governor records without a directive.
"""
from __future__ import annotations

import math
import statistics
from typing import Optional

from pydantic import Field, model_validator

from spark_governor.policies import in_flight
from spark_governor.policies.base import ConstraintStats, JobView, Policy, Proposal, StageStats
from spark_governor.policies.queueing import VertexModel, hysteresis_ok, rebalance_spark, sequence_wait
from spark_governor.policies.safety import SafetyConfig, within_bounds
from spark_governor.policies.threshold import trigger_interval_s
from spark_governor.policies.utilization_target import arrival_rate, true_rate_per_slot


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:,.0f} ms"


class KingmanConfig(SafetyConfig):
    w_ob: Optional[float] = Field(None, ge=0, lt=1, description="Share of the latency slack left to batching "
                                                                "(Eq. 4.9); unset: use the measured non-queueing latency")
    safety_factor: float = Field(1.0, gt=0, le=1, description="Multiplies the queueing budget")
    e_clamp_low: float = Field(0.1, gt=0, description="Lower clamp of the fitting coefficient ([C]: 0.8)")
    e_clamp_high: float = Field(10.0, gt=0, description="Upper clamp of the fitting coefficient ([C]: 1.2)")
    max_utilization: float = Field(0.9, gt=0, lt=1, description="Utilization floor: never plan a stage above this")
    bottleneck_utilization: float = Field(0.99, gt=0, description="A stage at or above this is a bottleneck")
    min_relative_change: float = Field(0.04, ge=0, description="Hysteresis: ignore smaller relative changes")
    warmup_windows: int = Field(2, ge=1, description="Statistics windows with data needed before deciding")
    trigger_interval_s: Optional[float] = Field(None, gt=0, description="Trigger interval; inferred when unset")
    slots_per_executor: Optional[int] = Field(None, ge=1, description="Task slots per executor; inferred when unset")
    bulk_arrivals: bool = Field(True, description="c_A of a stage from its bulk task arrivals (tasks per slot − 1), "
                                                  "not from launch interarrival; see bulk_arrival_cv")
    scale_down_margin: float = Field(0.1, ge=0, lt=1, description="Scale down only when, one executor fewer, "
                                                                  "latency ≤ (1 − this)·bound and utilization ≤ "
                                                                  "max_utilization − this; 0: off")
    latest_window_bottleneck: bool = Field(True, description="Also a bottleneck: a stage busy ≥ bottleneck_utilization "
                                                              "in its latest statistics window (thesis: the last adjustment "
                                                              "interval), unless the executors changed within the span")
    settle_after_change: bool = Field(True, description="Within the statistics span after an executor change, "
                                                        "only the model's ρ can flag a bottleneck (not busy time "
                                                        "or overrunning batches, which a backlog keeps high)")
    rate_span_s: Optional[float] = Field(10.0, gt=0, description="Arrival rate over the batches triggered in the last "
                                                                "this many seconds (unset: the statistics span); "
                                                                "short, so a rate step is seen within an interval")
    arrival_utilization: bool = Field(True, description="ρ from the source's arrival rate × per-record service "
                                                        "(can exceed 1 under overload); see arrival_rho")
    in_flight: bool = Field(True, description="Scale out at once (Eq. 4.12) on a batch or record in flight past "
                                              "the bound, or a growing backlog, without waiting for the batch")
    backlog_growth_ratio: float = Field(0.05, gt=0, description="A backlog growing by this many seconds of work "
                                                                "per second is scaled out (with in_flight)")

    @model_validator(mode="after")
    def _clamp(self):
        if self.e_clamp_low > self.e_clamp_high:
            raise ValueError("e_clamp_low must not exceed e_clamp_high")
        return self


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
    ``policies.utilization_target.arrival_rate`` (Σ rows / Σ trigger gaps of the batches triggered in
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
        return last is not None and view.now_ms - last < view.window_s * 1000

    def _query_load(self, view: JobView, cfg: KingmanConfig) -> Optional[float]:
        """Mean batch processing time / trigger interval over the recent batches (query-level ρ)."""
        interval = trigger_interval_s(view, cfg.trigger_interval_s)
        since = view.now_ms - int(view.window_s * 1000)
        recent = [b.processing_s for b in view.batches if b.trigger_ms >= since]
        return statistics.fmean(recent) / interval if recent and interval else None

    def _constraint_models(self, view: JobView, c: ConstraintStats, cfg: KingmanConfig):
        """``(models, fixed latency s)`` of one constraint, or None before warm-up / without data; the
        fixed latency is None while the constraint has no measurement yet (a bottleneck needs none)."""
        stages = self._stages(view, c)
        if (not stages
                or any(len(s.utilization_windows) < cfg.warmup_windows for s in stages)):
            return None
        first = view.stages[0]
        models = [vertex_model(s, cfg, arrival_rho(view, s, first, cfg.rate_span_s) if cfg.arrival_utilization else None)
                  for s in stages]
        if any(m is None for m in models):
            return None
        if c.latency_s is None:
            return models, None
        queue_now = sequence_wait(models, [m.p for m in models])
        if not math.isfinite(queue_now):
            return models, None  # ρ ≥ 1 somewhere: the model cannot split the latency (a bottleneck)
        # never below 0: with a clamped e_v the model's wait at p is not the measured one
        return models, max(0.0, c.latency_s - (queue_now if math.isfinite(queue_now) else 0.0))

    def plan(self, view: JobView, cfg: KingmanConfig) -> Optional[dict]:
        """Slots and executors each constraint needs (Algorithm 8 with the Spark objective); None
        before warm-up. ``models`` maps a constraint to its stage models and fixed latency (s)."""
        spe = view.slots_per_executor(cfg.slots_per_executor)
        query_rho = self._query_load(view, cfg)
        out, models_by_name = {}, {}
        for c in sorted(view.constraints, key=lambda x: x.name):
            built = self._constraint_models(view, c, cfg)
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
                feasible = None
            else:
                budget = None if cfg.w_ob is not None else cfg.safety_factor * (c.bound_s - fixed)
                r = rebalance_spark(models, c.bound_s, cfg.w_ob or 0.0, slots_per_executor=spe,
                                    safety_factor=cfg.safety_factor, max_utilization=cfg.max_utilization,
                                    budget=budget)
                slots, feasible = r.slots, r.feasible
            out[c.name] = {"measured_latency_s": c.latency_s, "bound_s": c.bound_s, "bottleneck": bottleneck,
                           "feasible": feasible, "slots": slots, "executors": math.ceil(slots / spe),
                           "stages": {m.key: {"p": m.p, "p_max": m.p_max, "rho": m.utilization, "e": m.e,
                                              "S": m.S, "A": m.A, "cA": m.cA, "cS": m.cS, "w": m.w}
                                      for m in models}}
        if not out:
            return None
        return {"executors": max(1, max(c["executors"] for c in out.values())), "constraints": out,
                "query_load": query_rho, "slots_per_executor": spe, "models": models_by_name}

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

    def _in_flight(self, view: JobView, cfg: KingmanConfig, current: int) -> Optional[list[Proposal]]:
        """Scale out on the work in flight (module docstring); None when nothing presses. The
        decision is shaped like a planned one: ``inputs["plan"]`` marks the whole-query constraints
        as bottlenecks (no latency is predicted for them), ``inputs["latency_s"]`` is the latency
        known now (the age in flight, a lower bound, or the measured one) and ``utilization`` the
        load (the plan's highest stage ρ, at least the pressure's factor)."""
        p = in_flight.pressure(view, in_flight.bound_s(view), cfg.backlog_growth_ratio)
        if p is None:
            return None
        wanted = in_flight.scaled(current, p)
        if p.kind == "in-flight":
            wanted = max(wanted, 2 * current)  # Eq. 4.12: a bottleneck gets at least double
        plan = self.plan(view, cfg)
        if plan is not None:
            wanted = max(wanted, plan["executors"])
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
        inputs = {**p.inputs, "latency_s": latency, "executors": current, "utilization": rho, "infeasible": [],
                  "plan": {"executors": new, "constraints": cons, "in_flight": p.kind}, "unit": view.executor_unit}
        prediction = {"constraints": {name: None for name in cons}, "utilization": rho * current / new}
        return [Proposal("executors", new, reason, inputs, prediction)]

    def evaluate(self, view: JobView, config: KingmanConfig) -> list[Proposal]:
        current = view.current("executors")
        if current and config.in_flight:
            up = self._in_flight(view, config, current)
            if up is not None:
                return up
        plan = self.plan(view, config)
        if plan is None or not current:
            return []
        target = plan["executors"]
        cons = plan["constraints"]
        if target < current:
            if any(c["bottleneck"] for c in cons.values()):
                return []  # never release executors while a stage or the query is a bottleneck
            target = current - 1  # scale-downs one by one (thesis §4.6.4)
            if not self._scale_down_safe(plan, target, config):
                return []
        if target == current or not hysteresis_ok(current, target, config.min_relative_change):
            return []
        bounded = int(within_bounds(target, config))  # reason and prediction at the value to be decided
        if bounded == current or (bounded > current) != (target > current):
            return []
        target = bounded
        spe = plan["slots_per_executor"]
        predicted, utilization = {}, {}
        for name, (models, fixed) in plan.pop("models").items():
            predicted[name], utilization[name] = self.predict(models, fixed, target, spe)
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
        reason += view.local_mode_note()
        inputs = {"latency_s": cons[first]["measured_latency_s"], "executors": current,
                  "utilization": max(s["rho"] for c in cons.values() for s in c["stages"].values()),
                  "infeasible": infeasible, "plan": plan, "unit": view.executor_unit}
        prediction = {"constraints": predicted, "utilization": max(utilization.values())}
        if predicted[first] is not None:
            prediction["latency_s"] = predicted[first]
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
