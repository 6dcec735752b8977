"""Response bodies of the web API as pydantic models: the source of the OpenAPI document.

The handlers build plain dicts; these models describe them exactly (``extra="forbid"`` becomes
``additionalProperties: false``), and ``tests/test_openapi.py`` validates real responses against
the document built from them, so a field added to a handler without being added here fails a
test. Units are those of the handlers: ``*_ms`` epoch milliseconds (or durations in ms where the
name says so), statistics in seconds, rates per second.
"""
from __future__ import annotations

from typing import Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Error(_Body):
    """Every 4xx/5xx answer: ``error`` names the offending field or resource first."""

    error: str


class Health(_Body):
    status: Literal["ok", "error"]
    error: Optional[str] = None


# -- ingest ------------------------------------------------------------------------------------

class AcceptedCounts(_Body):
    tasks: int
    stages: int
    batches: int


class PendingDirective(_Body):
    """A knob's desired value the driver should apply if ``version`` is newer than its own."""

    knob: str
    version: int
    value: Any


class ReportAccepted(_Body):
    accepted: AcceptedCounts
    duplicate: bool
    directives: list[PendingDirective]
    #: the control plane's statistics window (ms): a v3 reporter folds its tasks into windows of this length
    window_ms: int


# -- statistics --------------------------------------------------------------------------------

class Job(_Body):
    name: str
    #: registered (pre-registered, never reported) | active | stopped (silent, or every query terminated);
    #: only active jobs get policy decisions
    state: Literal["registered", "active", "stopped"]
    state_reason: Optional[str] = None
    #: run id of the latest run (the Spark application id, or ``unknown-app``) and how many runs the job had
    latest_run: Optional[str] = None
    runs: int = 0
    created_ms: int
    last_report_ms: Optional[int]
    slots: Optional[int]
    app_id: Optional[str]
    master: Optional[str]
    executors: Optional[int]
    not_actuatable: dict[str, str]
    knob_state: dict[str, Any]  # what the job's appliers report per knob (e.g. declared exchanges)
    #: how the job's reporter is attached ({kind: "attach" | "jar", version, can_apply}); null when it did not say
    attachment: Optional[dict[str, Any]] = None
    #: knobs the attachment can apply at all (the listener jar: executors only); null: unknown, nothing refused
    can_apply: Optional[list[str]] = None
    reporters: int
    tasks_reported_total: int
    reporter_dropped_total: int
    reporter_orphaned_total: int


class JobList(_Body):
    jobs: list[Job]


class Run(_Body):
    """One run of a job: one Spark application (or reporter) reporting under the job's name."""

    run_id: str
    app_id: Optional[str]
    master: Optional[str]
    first_ms: int  # first report (control-plane clock)
    last_ms: int  # latest report
    latest: bool  # the run the statistics show by default


HealthState = Literal["unknown", "idle", "unhealthy", "no-progress", "underprovisioned", "overprovisioned", "optimal"]


class RunHealth(_Body):
    """A run's verdict (``aggregators.health_timeline``): the live run's now, an ended one's at its end."""

    state: HealthState
    reason: str
    evaluated_ms: int  # the instant judged (the run's clock: a replay's is the log's)


class RunSummary(Run):
    batches: int  # micro-batches stored for the run
    # ∫ executors registered dt over the run (first to latest report), executor events; null: none reported
    executor_seconds: Optional[float]
    max_executors: Optional[int]  # the most executors registered at once in the run
    health: RunHealth


class RunList(_Body):
    job: str
    runs: list[RunSummary]  # newest first


class Moments(_Body):
    """Count, mean, variance and coefficient of variation of a quantity (seconds)."""

    count: int
    mean: Optional[float]
    variance: Optional[float]
    cv: Optional[float]


class WindowStats(_Body):
    """Statistics of one window (or a summary over several): moments in seconds, counters summed."""

    latency: Moments
    service: Moments
    service_per_record: Moments
    interarrival: Moments
    launch_interarrival: Optional[Moments] = None  # template windows only
    makespan: Optional[Moments] = None  # template windows only
    tasks: int
    failed_tasks: int
    records_in: int
    records_in_per_second: Optional[float]
    busy_seconds: float
    parallelism: Optional[int]
    utilization: Optional[float]
    shuffle_read_bytes: int
    shuffle_write_bytes: int
    shuffle_read_records: int
    shuffle_write_records: int
    cpu_seconds: float
    gc_seconds: float
    window_start_ms: Optional[int] = None  # windows
    window_ms: Optional[int] = None  # windows
    partitions: Optional[int] = None  # template windows: partitions with a task finished in the window
    num_tasks: Optional[int] = None  # template windows: tasks of the largest stage run (its partition count)
    stages: Optional[int] = None  # template windows
    utilization_max: Optional[float] = None  # template windows: ρ^max, busiest partition's run time / window
    windows: Optional[int] = None  # summaries
    span_seconds: Optional[float] = None  # summaries


class Stage(_Body):
    """A template vertex: a stage of a query's plan, stable across micro-batches."""

    key: str
    name: str
    ordinal: int
    operators: list[str]
    parents: list[str]
    first_ms: Optional[int]
    last_ms: Optional[int]
    windows: list[WindowStats]
    latest: Optional[WindowStats]
    summary: Optional[WindowStats]


class StageList(_Body):
    job: str
    run: Optional[Run]  # the run shown (null: every run merged, or a job without recorded runs)
    stages: list[Stage]


class PartitionStats(_Body):
    partition: int
    windows: list[WindowStats]
    latest: WindowStats


class TaskDetail(_Body):
    """What task rows the store holds for the job (issue #42): the reporter's ``task_detail`` (``none``, ``failed``,
    ``all``; null: a reporter of whole task rows, schema v1/v2, so every task) and the same in words."""

    mode: Optional[Literal["none", "failed", "all"]]
    holds: str


class TaskRow(_Body):
    """A stored task row (Spark's units: ms, ns, records, bytes); ``detail`` why it travelled (``warmup``,
    ``sample``, ``failed``, ``all``; null: a whole-task report)."""

    model_config = ConfigDict(extra="allow")
    task_id: int
    partition: int
    executor_id: str
    launch_ms: int
    finish_ms: int
    successful: bool
    detail: Optional[str] = None


class TaskStats(_Body):
    """Runtime vertices (partitions) of one template vertex (their windows are stored once a window has ended: the
    latest one shows when it is over), and its latest stored task rows with what they are."""

    job: str
    run: Optional[Run]
    key: str
    name: str
    partitions: list[PartitionStats]
    task_detail: TaskDetail
    task_rows: list[TaskRow]


class Batch(_Body):
    query_id: str
    run_id: str
    name: Optional[str]
    batch_id: int
    trigger_ms: int
    batch_duration_ms: int
    durations_ms: dict[str, int]
    num_input_rows: int
    input_rows_per_second: Optional[float]
    processed_rows_per_second: Optional[float]
    state_operators: list[dict[str, Any]]
    event_time: dict[str, str]
    observed_metrics: dict[str, Any]
    record_interarrival_s: Optional[float]
    record_wait_s: Optional[float]
    job_run_id: Optional[str]  # the job run that reported the batch (``Run.run_id``; null before runs were recorded)


class RecordInterarrival(_Body):
    mean: Optional[float]
    gaps: int


class BatchList(_Body):
    job: str
    run: Optional[Run]
    batches: list[Batch]
    interarrival: Moments
    duration: Moments
    record_interarrival: RecordInterarrival


# -- policies, decisions, directives -----------------------------------------------------------

class PolicyDescription(_Body):
    name: str
    knobs: list[str]
    description: str
    config_schema: dict[str, Any]  # the policy's config as JSON Schema


class PolicyList(_Body):
    policies: list[PolicyDescription]
    load_errors: dict[str, str]  # entry-point name -> why it failed to load


class JobPolicyItem(_Body):
    policy: str
    enabled: bool
    mode: Literal["dry-run", "act"]
    config: dict[str, Any]
    updated_ms: int


class JobPolicy(JobPolicyItem):
    job: str


class JobPolicyList(_Body):
    job: str
    policies: list[JobPolicyItem]


class Deleted(_Body):
    deleted: str


class Decision(_Body):
    """A policy's decision: old and new value, what justified it, and later its outcome."""

    id: int
    policy: str
    knob: str
    old_value: Any
    new_value: Any
    reason: str
    inputs: dict[str, Any]
    prediction: dict[str, Any]
    mode: Literal["dry-run", "act"]
    status: str  # recorded | issued | applied | failed | not_actuatable | superseded | blocked
    status_message: Optional[str]
    directive_version: Optional[int]
    created_ms: int
    applied_ms: Optional[int]
    outcome: Optional[dict[str, Any]]
    effective: Optional[bool]
    outcome_ms: Optional[int]
    # policies.verification, once judged: the job's health before vs after (evidence in outcome)
    verification: Optional[Literal["verified", "ineffective", "rolled-back", "harmful"]]


class DecisionList(_Body):
    job: str
    decisions: list[Decision]


class Approved(_Body):
    job: str
    directive_version: int
    decision: Decision


class Directive(_Body):
    knob: str
    version: int
    value: Any
    status: Literal["pending", "applied", "failed", "not_actuatable"]
    applied_version: Optional[int]
    message: Optional[str]
    decision_id: Optional[int]
    created_ms: int
    applied_ms: Optional[int]
    actuatable: Optional[str] = None  # "not actuatable: <reason>" when the driver cannot apply the knob


class DirectiveList(_Body):
    job: str
    directives: list[Directive]
    executors: Optional[int]
    not_actuatable: dict[str, str]


class Event(_Body):
    kind: str
    policy: Optional[str]
    message: str
    created_ms: int


class EventList(_Body):
    job: str
    events: list[Event]


class KnobHold(_Body):
    knob: str
    held: bool
    consecutive_ineffective_scale_ups: int
    last_change_ms: Optional[int]


class HoldList(_Body):
    job: str
    knobs: list[KnobHold]


# -- latency constraints -------------------------------------------------------------------------

class ConstraintSpan(_Body):
    """One averaging span: measured mean record latency against the bound (milliseconds).

    ``source`` ``in-flight``: no micro-batch completed in the span, but work in flight (the
    running batch, or the oldest unprocessed record) was already older than the bound; the span is
    violated and ``latency_ms`` is that age, a lower bound."""

    start_ms: int
    batches: Optional[int]
    records: Optional[int]
    latency_ms: float
    bound_ms: float
    attained: bool
    predicted_latency_ms: Optional[float]  # the latest model prediction made before the span ended
    source: Literal["event-time", "estimated", "stage-latency", "in-flight"]


class SloCounts(_Body):
    """The constraint's judged spans so far (``aggregators.slo_spans``), each counted once: exported as
    ``spark_governor_constraint_spans_total{result}``."""

    spans_good: int  # spans within the bound
    spans_bad: int  # spans over the bound (in-flight spans included)
    judged_until_ms: Optional[int]  # spans that start before this are counted; null: none judged yet


class ConstraintFields(_Body):
    name: str
    vertices: Optional[list[str]]  # template keys; null: the whole query
    bound_ms: float
    span_s: float
    use_event_time: bool
    objective: float  # the SLO: the share of spans that must be within the bound
    updated_ms: int
    slo: SloCounts


class Constraint(ConstraintFields):
    job: str


class ConstraintStatus(ConstraintFields):
    spans: list[ConstraintSpan]
    attainment: Optional[float]  # fraction of the listed spans whose latency was within the bound
    latest: Optional[ConstraintSpan]
    source: Optional[Literal["event-time", "estimated", "stage-latency", "in-flight"]]
    batching_wait_ms: Optional[float]  # mean wait of a record for its micro-batch to start, over the spans
    feasible: Optional[bool]  # the latest model decision: can the bound be met at maximum parallelism?


class ConstraintDetail(ConstraintStatus):
    job: str


class ConstraintList(_Body):
    job: str
    constraints: list[ConstraintStatus]


# -- the job between micro-batches ---------------------------------------------------------------

QueryStatus = Literal["running", "waiting", "idle", "terminated"]


class LiveSource(_Body):
    """One source of a query as its reporter last saw it (``policies.wire.SourceStateRecord``):
    offsets as JSON text, rows where the offsets count rows, epoch ms, rows per second."""

    description: Optional[str] = None
    processed_offset: Optional[str] = None
    latest_offset: Optional[str] = None
    processed_rows: Optional[int] = None
    available_rows: Optional[int] = None
    backlog_rows: Optional[int] = None
    oldest_unprocessed_ms: Optional[int] = None
    arrival_rows_per_second: Optional[float] = None
    arrival_probed: Optional[bool] = None  # rate and rows available read from the source now (a probe)
    min_offsets_behind_latest: Optional[float] = None
    avg_offsets_behind_latest: Optional[float] = None
    max_offsets_behind_latest: Optional[float] = None


class LiveFigures(_Body):
    """Ages in seconds as of the answer, backlog in rows and in seconds of work (rows / processing
    rate, rows per second of batch processing time)."""

    status: QueryStatus
    observed_ms: int  # when the reporter took the (latest) state, driver clock
    running_batch_id: Optional[int]
    running_batch_age_s: Optional[float]  # age of the micro-batch in flight; null: none is
    oldest_record_age_s: Optional[float]  # age of the oldest unprocessed record; null: none waits or unknown
    oldest_record_source: Optional[Literal["source", "running-batch"]]  # running-batch: a lower bound
    backlog_rows: Optional[float]
    backlog_s: Optional[float]
    processing_rows_per_second: Optional[float]
    arrival_rows_per_second: Optional[float]
    arrival_probed: bool  # every source's arrival rate read now by a probe, not from completed batches
    trigger_interval_s: Optional[float]


class LiveQuery(LiveFigures):
    """One streaming query of the job."""

    query_id: str
    run_id: Optional[str]
    name: Optional[str]
    running_batch_start_ms: Optional[int]
    last_batch_id: Optional[int]  # the latest completed micro-batch
    last_batch_end_ms: Optional[int]
    last_idle_ms: Optional[int]  # the latest onQueryIdle (a trigger found no new data)
    backlog_growth_rows_per_second: Optional[float]  # the query's backlog trend
    sources: list[LiveSource]


class LiveState(LiveFigures):
    """The job: its queries combined (oldest ages, summed backlogs; running if any query runs a
    batch, else waiting, idle, terminated), the backlog trend and batches completed in the window."""

    backlog_growth_rows_per_second: Optional[float]  # slope of the backlog right after each batch
    completed_batches: int  # micro-batches completed within the window
    queries: list[LiveQuery]


class JobLive(_Body):
    job: str
    window_s: float
    live: Optional[LiveState]  # null: no reporter sent a query state in the last 30 s


class QueryHealth(_Body):
    """One streaming query's verdict: the same rules on the query's batches and live state (its stages
    are not told apart from the other queries', so no critical time)."""

    query_id: str
    name: Optional[str]
    state: Literal["unknown", "idle", "unhealthy", "no-progress", "underprovisioned", "overprovisioned", "optimal"]
    reason: str
    numbers: dict[str, Union[float, int, str, None]]


class HealthSegment(_Body):
    """Consecutive instants of a run judged the same (``aggregators.health_timeline``), epoch ms."""

    from_ms: int
    to_ms: int
    state: HealthState
    reason: str
    recommended_executors: Optional[int]


class JobHealth(_Body):
    """The job's health verdict (``aggregators.health``): numbers in seconds, fractions and rows."""

    job: str
    window_s: float
    run: Optional[Run]  # the run judged (None: a job without runs)
    at: Literal["now", "run end"]  # judged now (a live run) or at the run's end
    state: HealthState
    reason: str
    numbers: dict[str, Union[float, int, str, None]]
    recommended_executors: Optional[int]
    recommendation: Optional[str]
    evaluated_ms: int
    queries: list[QueryHealth]  # one verdict per streaming query with a current state
    timeline: Optional[list[HealthSegment]] = None  # with ?timeline=true: the run's verdicts over its life


# -- partitioning (Prompt) ---------------------------------------------------------------------

class PartitionBatch(_Body):
    """One partitioned micro-batch: the applied plan's loads (tuples) and metrics; times in ms."""

    received_ms: int
    batch_id: Optional[int]
    query_id: Optional[str]
    algorithm: str
    source: Optional[str]
    partitions: int
    reduce: int
    tuples: int
    keys: int
    exact: bool
    other_keys: int
    other_tuples: int
    block_loads: list[int]
    block_cardinalities: list[int]
    bucket_loads: list[int]
    bsi: Optional[float]
    bci: Optional[float]
    ksr: Optional[float]
    mpi: Optional[float]
    max_mean_load: Optional[float]
    bsi_buckets: Optional[float]
    split_keys: Optional[int]
    stats_ms: Optional[float]
    planning_ms: Optional[float]
    processing_ms: Optional[float]
    top_keys: Optional[list[tuple[str, int]]]  # latest batch only: most frequent keys with tuples


class PlanDecision(_Body):
    id: int
    policy: str
    status: str
    created_ms: int
    reason: str
    prediction: dict[str, Any]
    inputs: dict[str, Any]
    partitions: Optional[int]
    reduce: Optional[int]
    planned_keys: int
    based_on: Optional[dict[str, Any]]
    elasticity: Optional[dict[str, Any]]
    planning_s: Optional[float]
    directive_version: Optional[int]


class Partitioning(_Body):
    job: str
    batches: list[PartitionBatch]
    plan: Optional[PlanDecision]


class CurrentPlan(_Body):
    job: str
    version: int
    status: str
    applied_version: Optional[int]
    plan: Any  # PartitionPlan.to_dict form (assignment: key → {blocks: [[block, tuples]], bucket})
