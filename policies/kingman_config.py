"""Kingman's configuration: the thesis' parameters (Lohrmann, §4.6–4.7, digest 004) and this project's
extensions (issue #14), each a named option with its default; :mod:`spark_governor.policies.kingman`
says what each does and why. Units: seconds unless a name says otherwise; utilizations are shares
(0.9 = 90 %)."""
from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field, model_validator

from spark_governor.policies.safety import SafetyConfig


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
    backlog_projected: bool = Field(True, description="A growing backlog is scaled out only when it would carry the "
                                                      "latency past the bound within the provisioning delay and one "
                                                      "batch period (:func:`backlog_horizon_s`); false: any growth "
                                                      "of backlog_growth_ratio")
    cluster_model: bool = Field(True, description="Use the job's measured cluster profile (provisioning delay, "
                                                  "driver overhead): latency terms, scale-outs sized for the rate "
                                                  "trend; off or no profile: the paper's model")
    provisioning_delay_s: Optional[float] = Field(None, ge=0, description="Directive → new executors working, "
                                                                          "seconds; unset: the measured one")
    trend_span_s: float = Field(30.0, gt=0, description="The arrival-rate trend is fitted over the batches "
                                                        "triggered in the last this many seconds")
    max_load_growth: float = Field(2.0, ge=1, description="A scale-out is sized for at most this many times "
                                                          "the current arrival rate")
    scale_down_delay_s: float = Field(15.0, ge=0, description="Lazy scale-down (Flink's scale-down.interval): "
                                                              "no scale-down within this many seconds of an "
                                                              "executor decision, and it must keep the bound "
                                                              "at the highest arrival rate of that long")
    after_scale_down_s: float = Field(12.0, ge=0, description="No scale-up within this many seconds after a "
                                                              "scale-down (the removed executor's tasks are re-run, "
                                                              "the batch it interrupted runs late), unless work in "
                                                              "flight is older than twice the bound")
    spare_executors: int = Field(1, ge=0, description="Executors kept beyond the plan (spare capacity for a "
                                                      "rate step while a scale-out takes effect)")
    spare_when: Literal["always", "blind", "rising", "auto", "slow"] = Field(
        "always", description="When the spare executors are kept (outside bottlenecks): 'always'; 'blind': unless "
                              "the sources are probed (LiveStats.arrival_probed: a rate step shows in the live "
                              "rate within a second, and the plan is made for it), i.e. 'always' where a "
                              "step shows only once a batch at the new rate completes; 'rising': only "
                              "while the arrival rate is rising (see rate_rising), released by the lazy "
                              "scale-down; 'auto': 'rising' when new executors work within the time between "
                              "batch starts (measured or configured provisioning delay), else 'always'; "
                              "'slow': 'always' when they do not register within that time (or the delay "
                              "is unknown), else never (a step is then met by the live rate, where the "
                              "source shows it between batches, and the in-flight rules)")
    spare_rise_margin: float = Field(0.1, ge=0, description="With spare_when 'rising': the rate is rising when "
                                                            "the live rate or the trend over the provisioning "
                                                            "delay is more than this share above the measured rate")
    live_rate: Optional[bool] = Field(None, description="Also size for the source's arrival rate of the live "
                                                        "state when above the completed batches' (a rate step "
                                                        "not yet in a completed batch; see live_load); unset: "
                                                        "when the sources are probed (arrival_probed)")
    batch_load: bool = Field(False, description="A planned load (rate trend, live rate, peak) runs as a micro-batch "
                                                "does: the same tasks, each longer (S̄ × load, Ā kept), the slot "
                                                "wait at the current size × load, the batch time beyond its fixed "
                                                "part × load, and that batch within max_utilization of the trigger "
                                                "(policies.batch_load); off: the thesis' rule (Ā / load, e_v kept, "
                                                "the whole batch time × load). Off by default: no better in the "
                                                "calibrated simulator, and without the batch floor it lost spans "
                                                "on the real cluster (run 111)")
    warmup_sizing: bool = Field(True, description="With a measured warm-up (cluster_model): a scale-out must "
                                                  "keep the bound while its new executors are still slow, "
                                                  "else it adds executors (see warm_equivalent)")
    wave_sizing: bool = Field(True, description="Size in whole task waves: a count of slots that leaves "
                                                "slots idle in a stage's last wave buys nothing (4 tasks "
                                                "on 3 slots run in 2 waves, as on 2): a planned size is "
                                                "raised to the next count that does not, a doubling or a "
                                                "spare trimmed to the fewest slots with its waves "
                                                "(queueing.wave_slots / same_waves_slots); off: the thesis")
    catch_up: bool = Field(True, description="Under in-flight pressure, also size for the arrival rate plus the "
                                             "rows waiting worked off within catch_up_s (policies.catch_up, the "
                                             "Flink autoscaler's catch-up rate), not only for Eq. 4.12's "
                                             "doubling; off: the thesis' doubling alone")
    catch_up_s: Optional[float] = Field(None, gt=0, description="With catch_up: the seconds to work the rows "
                                                                 "waiting off in; unset: the tightest latency "
                                                                 "bound (its records are late already), else one "
                                                                 "batch period")
    backlog_tolerance_intervals: float = Field(1.5, gt=0, description="No scale-down while the rows waiting are "
                                                                      "more than this many trigger intervals of "
                                                                      "arrivals (a backlog being worked off)")

    @model_validator(mode="after")
    def _clamp(self):
        if self.e_clamp_low > self.e_clamp_high:
            raise ValueError("e_clamp_low must not exceed e_clamp_high")
        return self
