"""Kingman's configuration: the thesis' parameters (Lohrmann, §4.6–4.7, digest 004) and the five extensions that
the ablation of issue #44 kept (``spark-governor bench scaling-ablation``; docs/policies/kingman.md,
"Options"), each a named option with its default; :mod:`spark_governor.policies.kingman` says what each does and why.
Units: seconds unless a name says otherwise; utilizations are shares (0.9 = 90 %)."""
from __future__ import annotations

from typing import Optional

from pydantic import Field

from spark_governor.policies.safety import SafetyConfig

#: options Kingman had before issue #44's ablation found they bought nothing (or cost spans) and removed them: a
#: stored config or a replayed report that still names one is read without it (migration 0012 drops them from the
#: stored configs; ``bench.scaling_calibrate`` from the reports it replays)
REMOVED_OPTIONS = ("e_clamp_low", "e_clamp_high", "min_relative_change", "latest_window_bottleneck",
                   "settle_after_change", "rate_span_s", "arrival_utilization", "in_flight", "backlog_growth_ratio",
                   "backlog_projected", "cluster_model", "provisioning_delay_s", "trend_span_s", "max_load_growth",
                   "scale_down_delay_s", "after_scale_down_s", "spare_when", "spare_rise_margin", "batch_load",
                   "warmup_sizing", "catch_up", "catch_up_s", "backlog_tolerance_intervals")


class KingmanConfig(SafetyConfig):
    # the thesis' parameters (Eq. 4.9, Algorithm 8)
    w_ob: Optional[float] = Field(None, ge=0, lt=1, description="Share of the latency slack left to batching "
                                                                "(Eq. 4.9); unset: use the measured non-queueing latency")
    safety_factor: float = Field(1.0, gt=0, le=1, description="Multiplies the queueing budget")
    max_utilization: float = Field(0.9, gt=0, lt=1, description="Utilization floor: never plan a stage above this")
    bottleneck_utilization: float = Field(0.99, gt=0, description="A stage (or the query's batch time over its "
                                                                  "trigger) at or above this is a bottleneck: "
                                                                  "Eq. 4.12 at least doubles its slots")
    warmup_windows: int = Field(2, ge=1, description="Statistics windows with data needed before deciding")
    # facts of the job, inferred
    trigger_interval_s: Optional[float] = Field(None, gt=0, description="Trigger interval; inferred when unset")
    slots_per_executor: Optional[int] = Field(None, ge=1, description="Task slots per executor; inferred when unset")
    # the extensions the ablation kept (issue #44; docs/policies/kingman.md, "Options")
    bulk_arrivals: bool = Field(True, description="c_A of a stage from its bulk task arrivals (tasks per slot − 1), "
                                                  "not from launch interarrival; see bulk_arrival_cv")
    scale_down_margin: float = Field(0.1, ge=0, lt=1, description="Scale down only when, one executor fewer, "
                                                                  "latency ≤ (1 − this)·bound and utilization ≤ "
                                                                  "max_utilization − this; 0: off")
    spare_executors: int = Field(1, ge=0, description="Executors kept beyond the plan (spare capacity for a "
                                                      "rate step while a scale-out takes effect); 0: the thesis")
    live_rate: Optional[bool] = Field(None, description="Also size for the source's arrival rate of the live "
                                                        "state when above the completed batches' (a rate step "
                                                        "not yet in a completed batch; see live_load); unset: "
                                                        "when the sources are probed (arrival_probed)")
    wave_sizing: bool = Field(True, description="Size in whole task waves: a count of slots that leaves "
                                                "slots idle in a stage's last wave buys nothing (4 tasks "
                                                "on 3 slots run in 2 waves, as on 2): a planned size is "
                                                "raised to the next count that does not, a doubling or a "
                                                "spare trimmed to the fewest slots with its waves "
                                                "(queueing.wave_slots / same_waves_slots); off: the thesis")
