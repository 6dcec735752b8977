"""The policy interface: a read-only view of one job in, proposals out.

Shaped like the Flink Kubernetes operator's autoscaler (collect → evaluate → decide → realize):
the control plane *collects* a :class:`JobView` from SQL, a policy *evaluates* it and returns
:class:`Proposal` objects, the framework *decides* (safety rules in ``policies.safety``, knob
ownership, persistence) and *realizes* them as versioned directives. A policy never imports
Spark, Flask or SQL.

Units: times in seconds unless a name ends in ``_ms`` (epoch milliseconds).
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar, Optional

from pydantic import BaseModel, ConfigDict

#: Largest slack (s) given to the scheduler's jitter where a time lands on a schedule's grid: Spark
#: triggers on multiples of its interval and the control plane evaluates every interval, so with the
#: same interval (and in the bench, the same phase) a batch triggered exactly one window before an
#: evaluation, or a change exactly n intervals before it, sits on the edge, and milliseconds decided
#: whether it counted (issue #14: on the real cluster one evaluation read 12 496 rows/s, another
#: 15 998, one scale-out came an interval later than the simulator's). Not in any of the papers.
SCHEDULE_SLACK_S = 1.0


def schedule_slack_s(period_s: float) -> float:
    """Slack (s) for jitter around a period of ``period_s`` seconds: a quarter of it, at most
    :data:`SCHEDULE_SLACK_S`."""
    return min(SCHEDULE_SLACK_S, 0.25 * max(period_s, 0.0))


#: The knobs a policy can own; at most one enabled policy owns a knob per job.
KNOBS = ("executors", "batch_interval", "partition_plan", "exchanges")


@dataclass(frozen=True)
class StageStats:
    """Template-vertex statistics over the policy's window (merged over partitions)."""

    key: str
    name: str
    tasks: int
    service_mean_s: Optional[float]
    latency_mean_s: Optional[float]
    utilization: Optional[float]  # busy slot time / (parallelism × window)
    parallelism: Optional[int]
    records_in_per_second: Optional[float]
    utilization_windows: tuple[float, ...] = ()  # per statistics window, oldest first
    service_cv: Optional[float] = None  # CV of task service (run) times
    arrival_cv: Optional[float] = None  # CV of task launch interarrival within the stage
    wait_mean_s: Optional[float] = None  # queueing for slots within a batch (aggregators.view._wait)
    max_tasks: Optional[int] = None  # tasks per stage run (partitions): the most slots the stage can use
    span_s: Optional[float] = None  # length of the statistics windows merged into these numbers
    busy_slots: Optional[float] = None  # busy slot-seconds per second over the span (work, whatever the parallelism)
    ordinal: Optional[int] = None  # position of the stage within its micro-batch (topological order)
    utilization_max: Optional[float] = None  # ρ^max: busiest partition's run time per second over the span
    last_seen_ms: Optional[int] = None  # when a task of this stage last reported (epoch ms)


@dataclass(frozen=True)
class BatchStats:
    """One micro-batch: ``processing_s`` is the trigger execution time, ``trigger_ms`` its start."""

    batch_id: int
    trigger_ms: int
    processing_s: float
    num_input_rows: int
    input_rows_per_second: Optional[float]
    processed_rows_per_second: Optional[float]
    interval_s: Optional[float] = None  # arrival-time span of the batch, as its paced source reports it
    queueing_s: Optional[float] = None  # batch start − its boundary (paced source), i.e. waiting in the source
    query_id: Optional[str] = None  # the streaming query (StreamingQuery.id)


@dataclass(frozen=True)
class PartitionBatchStats:
    """One micro-batch as the job partitioned it (``policies.wire.PartitionStatsRecord``).

    ``key_counts``: (key, tuples) of the most frequent keys, most frequent first (exact unless
    ``exact`` is false); the other keys are summarised by ``other_keys``/``other_tuples``.
    ``processing_s``: wall seconds of the whole batch job (statistics, plan, Map, Reduce)."""

    batch_id: Optional[int]
    received_ms: int
    algorithm: str
    partitions: int
    reduce: int
    tuples: int
    keys: int
    key_counts: tuple[tuple[str, int], ...] = ()
    other_keys: int = 0
    other_tuples: int = 0
    exact: bool = True
    block_loads: tuple[int, ...] = ()
    max_mean_load: Optional[float] = None
    mpi: Optional[float] = None
    processing_s: Optional[float] = None


@dataclass(frozen=True)
class ConstraintStats:
    """A latency constraint with its recent measurement (``aggregators.constraints``).

    ``latency_s`` is the mean record latency over the recent complete spans, ``batching_wait_s``
    the part of it spent waiting for the micro-batch to start (measured or estimated)."""

    name: str
    vertices: Optional[tuple[str, ...]]  # template keys; None: the whole query
    bound_s: float
    span_s: float
    latency_s: Optional[float] = None
    batching_wait_s: Optional[float] = None
    attainment: Optional[float] = None
    source: Optional[str] = None


@dataclass(frozen=True)
class LiveStats:
    """The job between its micro-batches, as of the view's ``now_ms`` (``aggregators.liveness``).

    From the reporters' query states (at least one a second): ``status`` is ``running`` when a
    micro-batch is in flight (any query), else ``waiting`` (between triggers, data may be queued),
    ``idle`` (every query's last trigger found no new data: not stuck) or ``terminated``.
    ``running_batch_age_s``: age of the oldest micro-batch in flight (None when none is);
    ``oldest_record_age_s``: age of the oldest record not yet processed, from the sources' offsets
    (``oldest_record_source`` ``"source"``) or, where no source counts rows, the running batch's age
    as a lower bound (``"running-batch"``); None when nothing waits. ``backlog_rows``: rows
    available but not processed, ``backlog_s`` the seconds of work they are at the recent
    processing rate (rows per second of batch processing time), ``backlog_growth_rows_per_second``
    the trend of the backlog (least squares over the backlog right after each completed batch in
    the window; None with fewer than three batches). ``completed_batches``: micro-batches that
    completed within the view's window. ``arrival_probed``: the arrival rate (rows per second the
    sources offer) was read from every source now by a probe (``collectors.source_probe``), so it
    shows a rate step within a second; False: extrapolated from the completed batches' offsets, a
    step shows once a batch at the new rate has completed."""

    status: str  # running | waiting | idle | terminated
    observed_ms: int
    queries: int = 1
    running_batch_id: Optional[int] = None
    running_batch_age_s: Optional[float] = None
    oldest_record_age_s: Optional[float] = None
    oldest_record_source: Optional[str] = None  # source | running-batch
    backlog_rows: Optional[float] = None
    backlog_s: Optional[float] = None
    processing_rows_per_second: Optional[float] = None
    arrival_rows_per_second: Optional[float] = None
    arrival_probed: bool = False
    backlog_growth_rows_per_second: Optional[float] = None
    trigger_interval_s: Optional[float] = None
    completed_batches: int = 0

    @property
    def idle(self) -> bool:
        return self.status == "idle"

    @property
    def in_flight_age_s(self) -> Optional[float]:
        """The larger of the running batch's and the oldest record's age: a lower bound on the
        latency of records not yet processed (None when nothing is in flight)."""
        ages = [a for a in (self.running_batch_age_s, self.oldest_record_age_s) if a is not None]
        return max(ages) if ages else None

    def exceeds(self, bound_s: float) -> bool:
        """Does work in flight already exceed a latency bound (seconds)?"""
        age = self.in_flight_age_s
        return age is not None and age > bound_s and not self.idle

    def backlog_growth_ratio(self) -> Optional[float]:
        """Backlog growth in seconds of work per second (growth / processing rate): the fraction by
        which the load exceeds what the job processes; None when unknown."""
        g, rate = self.backlog_growth_rows_per_second, self.processing_rows_per_second
        if g is None or not rate:
            return None
        return g / rate

    def backlog_growing(self, min_ratio: float = 0.05) -> bool:
        """Is the backlog growing by at least ``min_ratio`` seconds of work per second?"""
        ratio = self.backlog_growth_ratio()
        return ratio is not None and ratio >= min_ratio and not self.idle


@dataclass(frozen=True)
class DirectiveState:
    """Desired value of a knob (``version``) and what the driver last reported applying."""

    knob: str
    version: int
    value: Any
    applied_version: Optional[int] = None
    status: str = "pending"  # pending | applied | failed | not_actuatable
    message: Optional[str] = None


@dataclass(frozen=True)
class JobView:
    """Everything a policy may look at for one job, frozen at evaluation time."""

    job: str
    now_ms: int
    window_s: float
    stages: tuple[StageStats, ...] = ()
    batches: tuple[BatchStats, ...] = ()
    directives: dict[str, DirectiveState] = field(default_factory=dict)
    executors: Optional[int] = None  # executors currently registered (not counting the driver)
    slots: Optional[int] = None
    not_actuatable: dict[str, str] = field(default_factory=dict)  # knob -> why it cannot be actuated
    last_decision_ms: dict[str, int] = field(default_factory=dict)  # knob -> time of the latest decision
    constraints: tuple[ConstraintStats, ...] = ()
    knob_state: dict[str, Any] = field(default_factory=dict)  # knob -> what the job's applier reports
    partition_stats: tuple[PartitionBatchStats, ...] = ()  # recent partitioned batches, oldest first
    live: Optional[LiveStats] = None  # the job between its micro-batches (None: no reporter sends it)

    @property
    def local_slots(self) -> Optional[int]:
        """The task slots of a job that runs without executors and cannot actuate the executor knob
        (Spark's ``local[N]`` mode: one JVM, N task slots, ``executors`` reported as 0), else None.

        Executor policies then size the job in task slots: :meth:`current` gives the slots for the
        ``executors`` knob and :meth:`slots_per_executor` is 1, so a decision reads "2 → 4 task slots"
        and is kept as a recommendation (the governor records it as not actuatable)."""
        if self.executors == 0 and self.slots and "executors" in self.not_actuatable:
            return self.slots
        return None

    def since_ms(self, span_s: float) -> int:
        """Start (epoch ms) of "the last ``span_s`` seconds" for batches by trigger time: a batch
        triggered at ``now − span`` counts whatever the jitter of either clock
        (:func:`schedule_slack_s`)."""
        return self.now_ms - int((span_s + schedule_slack_s(span_s)) * 1000)

    def trigger_interval_s(self, configured: Optional[float] = None) -> Optional[float]:
        """The query's trigger interval (s): ``configured``, else as the reporter read it from the query,
        else the ``batch_interval`` directive's value (s), else the median gap between the batches'
        trigger starts; None when unknown or 0 (the default trigger)."""
        if configured:
            return configured
        if self.live is not None and self.live.trigger_interval_s:
            return self.live.trigger_interval_s
        d = self.directives.get("batch_interval")
        if d is not None and isinstance(d.value, (int, float)) and d.value > 0:
            return float(d.value)
        starts = sorted(b.trigger_ms for b in self.batches)
        gaps = sorted(b - a for a, b in zip(starts, starts[1:]) if b > a)
        if not gaps:
            return None
        mid = len(gaps) // 2
        return (gaps[mid] if len(gaps) % 2 else (gaps[mid - 1] + gaps[mid]) / 2) / 1000.0

    @property
    def executor_unit(self) -> str:
        """What the ``executors`` knob counts for this job: "executors", or "task slots" in local mode."""
        return "task slots" if self.local_slots else "executors"

    def local_mode_note(self) -> str:
        """For a decision's reason: "" on a cluster, else e.g. "; local mode: 2 task slots; not actuatable"."""
        if not self.local_slots:
            return ""
        return f"; local mode: {self.local_slots} task slots; not actuatable"

    def slots_per_executor(self, configured: Optional[int] = None) -> int:
        """Task slots per executor: 1 in local mode (the knob counts slots, see :attr:`local_slots`),
        else configured, else reported slots / executors, else 1."""
        if self.local_slots:
            return 1
        if configured:
            return configured
        if self.slots and self.executors:
            return max(1, round(self.slots / self.executors))
        return 1

    def current(self, knob: str, default: Any = None) -> Any:
        """The knob's current value: the applied directive, else what the job reports."""
        d = self.directives.get(knob)
        if d is not None and d.status == "applied":
            return d.value
        if knob == "executors" and self.executors is not None:
            return self.local_slots or self.executors
        reported = self.knob_state.get(knob)
        if d is None and isinstance(reported, dict) and "value" in reported:
            return reported["value"]  # what the job's applier says it runs with
        return default if d is None else d.value


@dataclass(frozen=True)
class Proposal:
    """A policy's wish for one knob, with what justified it.

    ``prediction`` holds what the policy expects to observe after the change (same names as
    the measured ``inputs``), which the effectiveness check compares later."""

    knob: str
    value: Any
    reason: str
    inputs: dict = field(default_factory=dict)
    prediction: dict = field(default_factory=dict)


class PolicyConfig(BaseModel):
    """Base of every policy's config schema: unknown fields are refused."""

    model_config = ConfigDict(extra="forbid")


class Policy(ABC):
    """Subclass, set ``name``, ``knobs`` and ``Config``, implement ``evaluate``; then register
    the class under the entry-point group ``spark_governor.policies``."""

    name: ClassVar[str]
    knobs: ClassVar[tuple[str, ...]]
    Config: ClassVar[type[PolicyConfig]] = PolicyConfig
    description: ClassVar[str] = ""

    @abstractmethod
    def evaluate(self, view: JobView, config: PolicyConfig) -> list[Proposal]:
        """Return proposals (possibly none) for the knobs this policy owns."""

    # -- effectiveness (policies that predict can override) --------------------------------
    def observe(self, view: JobView, knob: str, config: PolicyConfig) -> dict:
        """Measured values comparable to a proposal's ``prediction`` (default: none)."""
        return {}
