"""Utilization-target scaling of executors: DS2's rate model with the Flink autoscaler's target and band.

DS2 (Kalavri et al., "Three steps is all you need: fast, accurate, automatic scaling decisions
for distributed streaming dataflows", OSDI 2018) sizes an operator from its *true processing
rate*, the records it processes per second of *busy* time, not per second of wall-clock time: at
parallelism p an operator whose instances are busy a fraction u of the time and that processes r
records/s can process r/u records/s when fully busy, so it needs
``p' = ⌈p · target rate / (r/u)⌉`` instances to keep up with the target rate. The Flink
Kubernetes operator's autoscaler (``flink-autoscaler``, ``JobVertexScaler`` and
``ScalingMetricEvaluator``; its documentation cites DS2) aims at a *target utilization* instead
of 100 %: ``p' = ⌈p · target rate / (true processing rate · target)⌉`` with
``job.autoscaler.utilization.target`` 0.7 by default, and only acts when the load leaves a band:
scale up when ``target rate / true processing rate`` exceeds ``utilization.max``, down when it
falls below ``utilization.min``; both default to target ± 0.3 (the older option
``target.utilization.boundary``), so [0.4, 1.0].

On Spark (one knob: executors, shared by the stages of a micro-batch, which run one after
another), per stage v of the view (all in seconds, records and records/s):

- true processing rate per slot ``tpr_v = records_in_per_second_v / (utilization_v · parallelism_v)``,
  records per busy slot-second, from the stage's latest statistics window (utilization is busy
  slot time / (parallelism · window), so this is records / busy slot time);
- target rate: the query's *arrival* rate, Σ input rows / Σ trigger gaps of the batches triggered
  in the view's window (each batch's ``input_rows_per_second`` is rows / gap since the previous
  trigger, so this stays the source's rate while batches overrun and a backlog grows, as Flink's
  target data rate is the source's ingestion rate, not what the job manages to process); the latest
  batch when none was triggered in the window; the first stage's input rate without batches. A
  later stage's target rate is scaled by its measured input ratio ``records_in_v / records_in_0``
  (Flink's output ratio along the edge);
- load with C slots: ``ρ(C) = Σ_v target_v / (tpr_v · min(C, max_tasks_v))`` — the fraction of
  wall-clock time the pool is busy at the target rate (the stages share the slots one after
  another); with one stage and an input rate equal to the arrival rate it is the stage's
  utilization.

Decision: no proposal while ``utilization_min ≤ ρ(current slots) ≤ utilization_max``; otherwise
the fewest slots C with ``ρ(C) ≤ target_utilization`` (for one stage
``⌈target rate / (tpr · target)⌉``), as executors ``⌈C / slots per executor⌉``. Scale-downs go
straight to the target, as in Flink (the framework's cool-downs and bounds still apply). Needs
``min_windows`` statistics windows of data first.

**The rate arriving now** (``live_rate``; unset, the default: when the sources are probed,
``policies.in_flight.probed``): the live state's arrival rate, when above the completed batches', is
the target rate, so a rate step is sized for before a batch at the new rate completes (Flink's
target rate is the source's current rate). Measured on the standalone cluster (2026-11-27, runs 68–74
against 44–66): +6 to +22 points of spans on 4× and 8× steps, 0.07–0.12× static's executor-seconds
more on every staircase.

Options, off by default (both lost in the calibrated simulator; docs/policies/utilization-target.md):
``catch_up`` (Flink's catch-up rate ``catch-up.duration``: under in-flight pressure, the executors
for the arrival rate plus the rows waiting over ``catch_up_s``, ``policies.catch_up``) and
``wave_sizing`` (a stage's load on C slots counts the slots of its whole task waves,
``rate_model.effective_slots``; DS2's operators have no barrier). Not modelled: Flink's scale-down
limit and its restart time — and, specific to micro-batches, the driver's per-batch time outside
tasks (planning, commit), which is not busy slot time, so a job whose batches overrun because of it
is not seen as loaded.

In local mode (``local[N]``, ``JobView.local_slots``) the same sizing is in task slots (one slot per
"executor") and the decision says the knob is not actuatable there.

**Between batches** (``in_flight``, on by default; ``policies.in_flight``): the rates above come
from completed batches and statistics windows, so a batch running far past its trigger is seen
only when it completes. Before the model, the work in flight is checked: a running batch older
than ``utilization_max`` × the trigger interval (the load is then above the band whatever the
batch turns out to take) and than the view's statistics window (no batch completed in it: a slow
batch that completes within the window is left to the model), a running batch or oldest
unprocessed record older than a whole-query latency constraint's bound, or a backlog growing by ``backlog_growth_ratio`` seconds of work per second, scales out at
once, by the factor the work in flight asks for (at least one more, at most double, as Lohrmann's
ResolveBottlenecks). Never for an idle query, and never a scale-down while it presses.
"""
from __future__ import annotations

import math
from typing import Optional

from pydantic import Field, model_validator

from spark_governor.policies import in_flight
from spark_governor.policies.base import JobView, Policy, Proposal, StageStats
from spark_governor.policies.catch_up import catch_up_executors, describe
from spark_governor.policies.cluster_inputs import cluster_of
from spark_governor.policies.rate_model import (EPS, arrival_rate, slots_needed, stage_load, stage_model,
                                                true_rate_per_slot)
from spark_governor.policies.safety import SafetyConfig, within_bounds

__all__ = ["UtilizationTargetConfig", "UtilizationTargetPolicy", "arrival_rate", "slots_needed", "stage_load",
           "stage_model", "true_rate_per_slot"]


class UtilizationTargetConfig(SafetyConfig):
    target_utilization: float = Field(0.7, gt=0, le=1, description="Load to size the job for (Flink: utilization.target)")
    utilization_boundary: float = Field(0.3, ge=0, description="No action while the load is within target ± this")
    utilization_min: Optional[float] = Field(None, ge=0, description="Scale down below this load; default target − boundary")
    utilization_max: Optional[float] = Field(None, gt=0, description="Scale up above this load; default target + boundary")
    slots_per_executor: Optional[int] = Field(None, ge=1, description="Task slots per executor; inferred when unset")
    min_windows: int = Field(2, ge=1, description="Statistics windows with data needed before deciding")
    in_flight: bool = Field(True, description="Scale out at once on a batch running past utilization_max × the "
                                              "trigger interval (or a latency bound), or a growing backlog, "
                                              "without waiting for it to complete")
    backlog_growth_ratio: float = Field(0.05, gt=0, description="A backlog growing by this many seconds of work "
                                                                "per second is scaled out (with in_flight)")
    backlog_projected: bool = Field(False, description="A growing backlog is scaled out only when, projected over "
                                                       "the provisioning delay and a batch period, it would carry "
                                                       "the latency past a whole-query constraint's bound or the batch "
                                                       "time past utilization_max × the trigger interval "
                                                       "(policies.in_flight); false (default): any growth of "
                                                       "backlog_growth_ratio, which kept more spans of a 4x step in "
                                                       "the calibrated simulator (Kingman's default is true)")
    trigger_interval_s: Optional[float] = Field(None, gt=0, description="Trigger interval for in_flight; unset: "
                                                                        "the query's own, as the reporter reads it")
    wave_sizing: bool = Field(False, description="A stage's load on C slots counts the slots of its whole task "
                                                 "waves (4 tasks on 3 slots run in 2 waves, as on 2: "
                                                 "rate_model.effective_slots), so a size that idles slots in a "
                                                 "last wave is not chosen; off (default: it cost 6-18 % more "
                                                 "executor-seconds in the calibrated simulator and kept no more "
                                                 "spans on the real cluster): DS2's fluid min(C, tasks)")
    live_rate: Optional[bool] = Field(None, description="Also size for the source's arrival rate in the live state "
                                                        "when above the completed batches' (a rate step before a "
                                                        "batch at the new rate completes; Flink's target rate is the "
                                                        "source's current rate); unset: when the sources are probed "
                                                        "(policies.in_flight.probed)")
    catch_up: bool = Field(False, description="Under in-flight pressure, scale out to the executors that run the "
                                              "arrival rate plus the rows waiting worked off within catch_up_s at "
                                              "target_utilization (Flink's catch-up rate; policies.catch_up), when "
                                              "more than the pressure's factor asks for; off by default (it cost "
                                              "executor-seconds and kept no more spans in the calibrated "
                                              "simulator)")
    catch_up_s: Optional[float] = Field(None, gt=0, description="With catch_up: seconds to work the rows waiting "
                                                                "off in (Flink: catch-up.duration); unset: the "
                                                                "tightest whole-query latency bound, else two "
                                                                "trigger intervals")

    @property
    def lower(self) -> float:
        return self.utilization_min if self.utilization_min is not None else \
            max(0.0, self.target_utilization - self.utilization_boundary)

    @property
    def upper(self) -> float:
        return self.utilization_max if self.utilization_max is not None else \
            self.target_utilization + self.utilization_boundary

    @model_validator(mode="after")
    def _band(self):
        if not self.lower <= self.target_utilization <= self.upper:
            raise ValueError("need utilization_min ≤ target_utilization ≤ utilization_max")
        return self


class UtilizationTargetPolicy(Policy):
    name = "utilization-target"
    knobs = ("executors",)
    Config = UtilizationTargetConfig
    description = ("DS2 / Flink autoscaler: executors for the arrival rate at a target utilization of the true "
                   "processing rate (records per busy slot-second), with a no-action band")

    @staticmethod
    def _usable(s: StageStats, cfg: UtilizationTargetConfig) -> bool:
        return bool(s.parallelism and s.utilization and s.records_in_per_second
                    and len(s.utilization_windows) >= cfg.min_windows)

    def model(self, view: JobView, cfg: UtilizationTargetConfig) -> Optional[dict]:
        """Per-stage true processing rate and target rate, or None without data (see the module docstring)."""
        if not view.stages or not all(self._usable(s, cfg) for s in view.stages):
            return None
        rate = arrival_rate(view)
        if in_flight.uses_live_rate(view, cfg.live_rate) and view.live.arrival_rows_per_second > (rate or 0.0):
            rate = view.live.arrival_rows_per_second
        return stage_model(view, view.stages[0].records_in_per_second if rate is None else rate)

    @staticmethod
    def catch_up(view: JobView, cfg: UtilizationTargetConfig, interval: Optional[float]) -> Optional[dict]:
        """The catch-up size under pressure (``catch_up``; :func:`policies.catch_up.catch_up_executors`
        at ``target_utilization``, over ``catch_up_s`` or the latency bound or two trigger intervals,
        the backlog's growth counted over the measured provisioning delay); None when off or unknown."""
        if not cfg.catch_up:
            return None
        horizon = cfg.catch_up_s or in_flight.bound_s(view) or 2 * (interval or 0.0)
        cluster = cluster_of(view)
        delay = cluster.provisioning_delay_s if cluster is not None else None
        return catch_up_executors(view, horizon, delay, cfg.target_utilization,
                                  view.slots_per_executor(cfg.slots_per_executor)) if horizon else None

    load = staticmethod(stage_load)
    slots_needed = staticmethod(slots_needed)

    def _in_flight(self, view: JobView, cfg: UtilizationTargetConfig, current: int) -> Optional[list[Proposal]]:
        """Scale out on the work in flight (module docstring); None when nothing presses."""
        interval = in_flight.trigger_s(view, cfg.trigger_interval_s)
        # a batch that completes within the statistics window is left to the model
        batch_bound = in_flight.batch_bound_s(interval, cfg.upper)
        p = in_flight.pressure(view, in_flight.bound_s(view), cfg.backlog_growth_ratio,
                               batch_bound=max(batch_bound, view.window_s) if batch_bound else None,
                               horizon_s=(in_flight.measured_horizon_s(view, interval)
                                          if cfg.backlog_projected else None),
                               growth_batch_bound=batch_bound)
        if p is None:
            return None
        wanted = in_flight.scaled(current, p)
        catch_up = self.catch_up(view, cfg, interval)
        if catch_up is not None and catch_up["executors"] > wanted:
            wanted = catch_up["executors"]
        else:
            catch_up = None  # not what sized it
        new = int(within_bounds(wanted, cfg))
        if new <= current:
            return []  # at the maximum: nothing to add, and never a scale-down now
        m = self.model(view, cfg)
        spe = view.slots_per_executor(cfg.slots_per_executor)
        load = self.load(m, current * spe, cfg.wave_sizing) if m is not None else None
        reason = f"{p.reason}: {current} → {new} {view.executor_unit}{view.local_mode_note()}"
        if catch_up is not None:
            reason += "; " + describe(catch_up)
        inputs = {**p.inputs, "utilization": load, "executors": current, "slots_per_executor": spe,
                  "unit": view.executor_unit, "catch_up": catch_up}
        return [Proposal("executors", new, reason, inputs,
                         {} if m is None else {"utilization": self.load(m, new * spe, cfg.wave_sizing)})]

    def evaluate(self, view: JobView, config: UtilizationTargetConfig) -> list[Proposal]:
        current = view.current("executors")
        if current and config.in_flight:
            up = self._in_flight(view, config, current)
            if up is not None:
                return up
        m = self.model(view, config)
        if m is None or not current:
            return []
        spe = view.slots_per_executor(config.slots_per_executor)
        load = self.load(m, current * spe, config.wave_sizing)
        if config.lower <= load <= config.upper:
            return []
        slots = self.slots_needed(m, config.target_utilization, config.wave_sizing)
        new = int(within_bounds(max(1, math.ceil(slots / spe - EPS)), config))
        # a decision moves the way the load asks (up above the band, down below it) and changes something
        if new == current or (new > current) != (load > config.upper):
            return []
        side = f"> max {config.upper:g}" if load > config.upper else f"< min {config.lower:g}"
        reason = (f"load {load:.2f} {side}: {m['target_rate']:.0f} rows/s at "
                  f"{config.target_utilization:g} of the true rate → {current} → {new} {view.executor_unit}"
                  f"{view.local_mode_note()}")
        inputs = {"utilization": load, "executors": current, "target_rate": m["target_rate"],
                  "slots_per_executor": spe, "stages": m["stages"], "unit": view.executor_unit}
        return [Proposal("executors", new, reason, inputs,
                         {"utilization": self.load(m, new * spe, config.wave_sizing)})]

    def observe(self, view: JobView, knob: str, config) -> dict:
        m = self.model(view, config)
        current = view.current("executors")
        if m is None or not current:
            return {}
        return {"utilization": self.load(m, current * view.slots_per_executor(config.slots_per_executor),
                                         config.wave_sizing)}
