"""Wire protocol between the driver-side reporter and the control plane (report schema v3).

This module is imported by both ends (collectors/ builds reports, api/ validates them) and by
nothing Spark- or Flask-specific, so the control plane never imports pyspark to parse a report.
It lives in ``policies`` because that is the one package both ends may import (imports run
api → aggregators → policies and collectors → policies; see ARCHITECTURE.md).

Units are in the field names: ``*_ms`` are milliseconds (epoch milliseconds for timestamps, as
Spark reports them), ``*_ns`` nanoseconds, ``*_records`` counts of rows, ``*_bytes`` bytes.
A report is validated as a whole; any invalid field rejects the whole report.

Schema versions: v3 (issue #42) carries the statistics folded at the edge instead of task rows
(``policies.task_fold``): ``window_ms`` and per window ``runtime_windows`` (per runtime vertex: counts, sums and
the moments of latency, service, service per record and interarrival) and ``template_windows`` (per completed
stage's template), ``task_spans`` per micro-batch, executors' first tasks in ``executors``; ``tasks`` are then
detail rows only (``detail`` says why each travels), stored and never folded again. v2 adds ``queries``
(:class:`QueryStateRecord`, the state of each streaming query between its micro-batches). Reports of v1 and v2
(whole task rows, folded by the control plane with the same fold) are still accepted and **deprecated**: a
reporter attached before an upgrade keeps reporting, at the control plane's cost of folding and storing every
task.
"""
from __future__ import annotations

import json
import math
from typing import Annotated, Any, Literal, Optional

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, model_validator

from spark_governor.policies.task_fold import TASK_DETAIL_MODES, killed

SCHEMA_VERSION = 3
#: report schema versions the control plane accepts (1 and 2 deprecated: whole task rows)
ACCEPTED_SCHEMA_VERSIONS = (1, 2, 3)
#: the window lengths a report may fold with (ms); the control plane keeps one and refuses the others
MIN_WINDOW_MS, MAX_WINDOW_MS = 100, 3_600_000
#: tasks per report: bounds the server's memory per request (a 20 000-task report is about 14 MB of JSON
#: and ~100 MB of parsed objects at peak); the reporter splits larger reports (issue #16)
MAX_TASKS_PER_REPORT = 20_000
MAX_ITEMS_PER_REPORT = 10_000
MAX_KNOB_STATE_BYTES = 16_384

#: the largest values the database columns hold: BIGINT (SQLite INTEGER, PostgreSQL bigint) and
#: INTEGER (PostgreSQL integer). Every integer of a report is bounded by the column it is stored in, so
#: a value the database cannot hold is a 400 naming the field, never a failed insert (500).
INT64_MAX = 2**63 - 1
INT32_MAX = 2**31 - 1

#: a count, id, or time stored in a BIGINT column
NonNeg = Annotated[int, Field(ge=0, le=INT64_MAX)]
#: a count or id stored in an INTEGER column (stage ids, partitions, attempts, slots, versions)
NonNeg32 = Annotated[int, Field(ge=0, le=INT32_MAX)]
#: the deepest nesting accepted inside free-form JSON values (observed metrics, knob state)
MAX_JSON_DEPTH = 32


def _check_json_value(value: Any, path: str = "", depth: int = 0) -> None:
    if depth > MAX_JSON_DEPTH:
        raise ValueError(f"{path or 'value'}: nested deeper than {MAX_JSON_DEPTH} levels")
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{path or 'value'}: NaN and Infinity are not allowed")
    elif isinstance(value, int):
        if not -INT64_MAX - 1 <= value <= INT64_MAX:
            raise ValueError(f"{path or 'value'}: integer outside the 64-bit range")
    elif isinstance(value, dict):
        for k, v in value.items():
            _check_json_value(v, f"{path}.{k}" if path else str(k), depth + 1)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            _check_json_value(v, f"{path}.{i}" if path else str(i), depth + 1)


def _finite_json(value: Any) -> Any:
    """A free-form JSON value as stored (JSON columns) and served again: no NaN/Infinity (they make the
    API's answers invalid JSON), integers within 64 bits, bounded depth. The error names the inner path."""
    _check_json_value(value)
    return value


#: free-form JSON (Spark's observed metrics, state operator progress, an applier's knob state)
JsonValue = Annotated[Any, AfterValidator(_finite_json)]
Name = Annotated[str, Field(min_length=1, max_length=256)]
JobName = Annotated[str, Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")]
TemplateKey = Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9._:-]+$")]


class _Strict(BaseModel):
    # allow_inf_nan=False: NaN/Infinity in any float field is a 400 (JsonValue checks the free-form ones)
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, allow_inf_nan=False)


Knob = Literal["executors", "batch_interval", "partition_plan", "exchanges"]


class DirectiveAck(_Strict):
    """What the driver did with a directive version."""

    knob: Knob
    version: NonNeg32  # directives.version is an INTEGER column
    status: Literal["applied", "failed", "not_actuatable"]
    message: Optional[Annotated[str, Field(max_length=2048)]] = None


class AttachmentInfo(_Strict):
    """How a reporter is attached to its job, and the knobs that attachment can apply at all.

    ``jar``: the JVM listener jar added by ``--jars``/``--conf`` (``collectors/jvm``): it applies
    ``executors`` only; knobs that need the job's cooperation (paced sources, ``foreachBatch``
    plans, declared exchanges) are outside ``can_apply`` and the policy API refuses policies that
    need them. ``attach``: ``attach()`` in the job's code. A reporter that sends no attachment
    (older ones, ``attach()`` today) applies whatever appliers the job installed: nothing is refused."""

    kind: Literal["attach", "jar"]
    version: Optional[Annotated[str, Field(max_length=64)]] = None
    can_apply: list[Knob] = Field(default_factory=list, max_length=16)


class ReporterInfo(_Strict):
    """Identity and cumulative counters of one reporter instance (one ``attach`` call)."""

    id: Annotated[str, Field(min_length=1, max_length=64)]
    seq: NonNeg  # report sequence number; a retried report keeps its seq (idempotent ingest)
    dropped_total: NonNeg = 0  # records and events dropped since attach (queue full)
    orphaned_total: NonNeg = 0  # task events whose job/stage context was lost
    app_id: Optional[Name] = None
    master: Optional[Name] = None
    slots: Optional[NonNeg32] = None  # current task slots (total executor cores / task cpus)
    executors: Optional[NonNeg32] = None  # executors registered, the driver excluded
    not_actuatable: dict[Knob, Annotated[str, Field(max_length=256)]] = Field(default_factory=dict)
    applied: list[DirectiveAck] = Field(default_factory=list, max_length=64)
    #: what the job's applier says about its knob, e.g. the optional exchanges it declared
    #: (``collectors.exchanges``); JSON, at most MAX_KNOB_STATE_BYTES per knob
    knob_state: dict[Knob, JsonValue] = Field(default_factory=dict)
    #: how this reporter is attached and which knobs it can apply (absent: unknown, none refused)
    attachment: Optional[AttachmentInfo] = None
    #: which task rows this reporter sends besides the statistics (``policies.task_fold.TASK_DETAIL_MODES``;
    #: absent: a v1/v2 reporter, every task)
    task_detail: Optional[Literal[TASK_DETAIL_MODES]] = None

    @model_validator(mode="after")
    def _knob_state_small(self) -> "ReporterInfo":
        for knob, state in self.knob_state.items():
            if len(json.dumps(state, separators=(",", ":"))) > MAX_KNOB_STATE_BYTES:
                raise ValueError(f"knob_state.{knob}: larger than {MAX_KNOB_STATE_BYTES} bytes of JSON")
        return self


class TemplateRecord(_Strict):
    """A template vertex: a stage of a query's plan, stable across micro-batches."""

    key: TemplateKey
    name: Name
    ordinal: NonNeg32  # topological position of the stage among its query's stages
    operators: list[Annotated[str, Field(max_length=256)]] = Field(default_factory=list, max_length=256)
    parents: list[TemplateKey] = Field(default_factory=list, max_length=256)


class StageRecord(_Strict):
    """One completed stage attempt (one runtime instance of a template vertex per batch)."""

    template_key: TemplateKey
    query_id: Optional[Name] = None
    batch_id: Optional[NonNeg] = None
    stage_id: NonNeg32
    attempt: NonNeg32
    num_tasks: NonNeg32
    submission_ms: Optional[NonNeg] = None
    completion_ms: Optional[NonNeg] = None
    failure_reason: Optional[Annotated[str, Field(max_length=4096)]] = None
    slots: Optional[NonNeg32] = None


class TaskRecord(_Strict):
    """One finished task attempt, with Spark's TaskInfo and TaskMetrics in Spark's units."""

    template_key: TemplateKey
    query_id: Optional[Name] = None
    batch_id: Optional[NonNeg] = None
    stage_id: NonNeg32
    stage_attempt: NonNeg32
    task_id: NonNeg
    partition: NonNeg32
    attempt: NonNeg32
    executor_id: Name
    host: Optional[Name] = None
    stage_submission_ms: Optional[NonNeg] = None
    launch_ms: NonNeg
    finish_ms: NonNeg
    run_time_ms: NonNeg = 0
    cpu_time_ns: NonNeg = 0
    gc_time_ms: NonNeg = 0
    deserialize_ms: NonNeg = 0
    result_serialize_ms: NonNeg = 0
    input_records: NonNeg = 0
    input_bytes: NonNeg = 0
    output_records: NonNeg = 0
    output_bytes: NonNeg = 0
    shuffle_read_records: NonNeg = 0
    shuffle_read_bytes: NonNeg = 0
    shuffle_fetch_wait_ms: NonNeg = 0
    shuffle_write_records: NonNeg = 0
    shuffle_write_bytes: NonNeg = 0
    shuffle_write_time_ns: NonNeg = 0
    successful: bool = True
    speculative: bool = False
    failure_reason: Optional[Annotated[str, Field(max_length=4096)]] = None
    #: v3: why this row travels (``policies.task_fold``): ``warmup`` (among its executor's first tasks by
    #: launch as far as the reporter knew), ``sample``, ``failed`` or ``all``; absent in v1/v2 (every task)
    detail: Optional[Literal["warmup", "sample", "failed", "all"]] = None

    @model_validator(mode="after")
    def _times_ordered(self) -> "TaskRecord":
        if self.finish_ms < self.launch_ms:
            raise ValueError("finish_ms is before launch_ms")
        if self.stage_submission_ms is not None and self.stage_submission_ms > self.launch_ms:
            raise ValueError("stage_submission_ms is after launch_ms")
        return self


class BatchRecord(_Strict):
    """One micro-batch's progress (StreamingQueryListener.onQueryProgress)."""

    query_id: Name
    run_id: Name
    name: Optional[Name] = None
    batch_id: NonNeg
    trigger_ms: NonNeg  # trigger start, epoch ms
    batch_duration_ms: NonNeg
    durations_ms: dict[Annotated[str, Field(max_length=64)], NonNeg] = Field(default_factory=dict, max_length=64)
    num_input_rows: NonNeg
    input_rows_per_second: Optional[Annotated[float, Field(ge=0)]] = None
    processed_rows_per_second: Optional[Annotated[float, Field(ge=0)]] = None
    state_operators: list[dict[str, JsonValue]] = Field(default_factory=list, max_length=64)
    event_time: dict[str, Annotated[str, Field(max_length=256)]] = Field(default_factory=dict, max_length=16)
    observed_metrics: dict[str, JsonValue] = Field(default_factory=dict, max_length=64)


#: bounds of the per-batch partition statistics (``PartitionStatsRecord``)
MAX_KEY_COUNTS = 10_000
MAX_BLOCKS = 4_096
MAX_PARTITION_RECORDS = 64

NonNegFloat = Annotated[float, Field(ge=0)]
BlockList = Annotated[list[NonNeg], Field(max_length=MAX_BLOCKS)]


class PartitionStatsRecord(_Strict):
    """One micro-batch as partitioned by the job (``collectors.partition_plan``; Prompt, digest 000).

    ``key_counts`` are the batch's most frequent keys with their tuple counts (exact, or Algorithm
    1's approximate counts when ``exact`` is false), at most MAX_KEY_COUNTS; ``other_keys`` /
    ``other_tuples`` summarise the rest. Loads are tuples per Map block / Reduce bucket of the plan
    applied to the batch, cardinalities distinct keys per block; BSI/BCI/KSR/MPI are the paper's
    Eqs. 2–6 of that plan; times in milliseconds of driver wall time."""

    batch_id: Optional[NonNeg] = None
    query_id: Optional[Name] = None
    algorithm: Annotated[str, Field(min_length=1, max_length=64)]
    source: Optional[Annotated[str, Field(max_length=32)]] = None  # "directive" | "batch"
    partitions: Annotated[int, Field(ge=1, le=MAX_BLOCKS)]
    reduce: Annotated[int, Field(ge=1, le=MAX_BLOCKS)]
    tuples: NonNeg
    keys: NonNeg
    exact: bool = True
    key_counts: list[tuple[Annotated[str, Field(max_length=256)], Annotated[int, Field(ge=1, le=INT64_MAX)]]] = Field(
        default_factory=list, max_length=MAX_KEY_COUNTS)
    other_keys: NonNeg = 0
    other_tuples: NonNeg = 0
    block_loads: BlockList = Field(default_factory=list)
    block_cardinalities: BlockList = Field(default_factory=list)
    bucket_loads: BlockList = Field(default_factory=list)
    bsi: Optional[NonNegFloat] = None
    bci: Optional[NonNegFloat] = None
    ksr: Optional[NonNegFloat] = None
    mpi: Optional[NonNegFloat] = None
    max_mean_load: Optional[NonNegFloat] = None
    bsi_buckets: Optional[NonNegFloat] = None
    split_keys: Optional[NonNeg32] = None
    stats_ms: Optional[NonNegFloat] = None
    planning_ms: Optional[NonNegFloat] = None
    processing_ms: Optional[NonNegFloat] = None

    @model_validator(mode="after")
    def _consistent(self) -> "PartitionStatsRecord":
        if self.block_loads and len(self.block_loads) != self.partitions:
            raise ValueError(f"block_loads: {len(self.block_loads)} loads for {self.partitions} partitions")
        if self.bucket_loads and len(self.bucket_loads) != self.reduce:
            raise ValueError(f"bucket_loads: {len(self.bucket_loads)} loads for {self.reduce} buckets")
        if sum(c for _, c in self.key_counts) + self.other_tuples > self.tuples and self.exact:
            raise ValueError("key_counts: more tuples than the batch holds")
        return self


#: bounds of the query-state records (``QueryStateRecord``)
MAX_QUERIES_PER_REPORT = 256
MAX_SOURCES_PER_QUERY = 64
MAX_OFFSET_CHARS = 2048
OffsetText = Annotated[str, Field(max_length=MAX_OFFSET_CHARS)]
QueryStatus = Literal["running", "waiting", "idle", "terminated"]


class SourceStateRecord(_Strict):
    """One source of a streaming query: how far it was processed and how much is available now.

    Offsets are the source's own JSON (``endOffset`` of the latest completed micro-batch, and the
    ``latestOffset`` Spark reported with it), as text, left out when longer than
    MAX_OFFSET_CHARS. Where the offsets count rows (the project's own sources ``{"rows": n, ...}``,
    Kafka ``{topic: {partition: offset}}``, numeric offsets) the reporter counts them:
    ``processed_rows`` up to the processed offset, ``available_rows`` the rows available at the
    record's ``observed_ms`` (the latest offset, plus the arrival rate times the time since), their
    difference ``backlog_rows``, and ``oldest_unprocessed_ms`` when the oldest of them became
    available (epoch ms). Kafka's ``*OffsetsBehindLatest`` source metrics are passed on as reported
    (offsets per topic-partition at the end of the latest completed batch). ``arrival_probed``: the
    arrival rate and the rows available were read from the source now (a probe,
    ``collectors.source_probe``), not extrapolated from the completed batches' offsets."""

    description: Optional[Name] = None
    processed_offset: Optional[OffsetText] = None
    latest_offset: Optional[OffsetText] = None
    processed_rows: Optional[NonNeg] = None
    available_rows: Optional[NonNeg] = None
    backlog_rows: Optional[NonNeg] = None
    oldest_unprocessed_ms: Optional[NonNeg] = None
    arrival_rows_per_second: Optional[NonNegFloat] = None
    arrival_probed: Optional[bool] = None
    min_offsets_behind_latest: Optional[NonNegFloat] = None
    avg_offsets_behind_latest: Optional[NonNegFloat] = None
    max_offsets_behind_latest: Optional[NonNegFloat] = None

    @model_validator(mode="after")
    def _consistent(self) -> "SourceStateRecord":
        if self.backlog_rows and self.available_rows is not None and self.backlog_rows > self.available_rows:
            raise ValueError("backlog_rows: more than available_rows")
        return self


class QueryStateRecord(_Strict):
    """The state of one streaming query as the reporter saw it at ``observed_ms`` (driver clock,
    epoch ms), sent at least once a second while the query runs.

    ``status``: ``running`` (a micro-batch is in flight: ``running_batch_id`` when known, and
    ``running_batch_start_ms``, from the first Spark job of the batch, i.e. the job property
    ``streaming.sql.batchId``, or from the query's status when no job has started yet),
    ``waiting`` (between micro-batches, new data may be waiting for the next trigger), ``idle`` (the
    last trigger found no new data: ``onQueryIdle`` or the query's status; not stuck) or
    ``terminated``. ``last_batch_*`` is the latest *completed* micro-batch (its progress),
    ``trigger_interval_ms`` the processing-time trigger (0: as fast as possible; absent for
    once/available-now triggers or when unknown). ``backlog_rows`` and ``oldest_unprocessed_ms``
    summarise the sources that count rows; absent when none does."""

    query_id: Name
    run_id: Optional[Name] = None
    name: Optional[Name] = None
    observed_ms: NonNeg
    status: QueryStatus
    running_batch_id: Optional[NonNeg] = None
    running_batch_start_ms: Optional[NonNeg] = None
    running_batch_age_ms: Optional[NonNeg] = None  # observed_ms − running_batch_start_ms
    last_batch_id: Optional[NonNeg] = None
    last_batch_end_ms: Optional[NonNeg] = None
    trigger_interval_ms: Optional[NonNeg] = None
    last_idle_ms: Optional[NonNeg] = None
    backlog_rows: Optional[NonNeg] = None
    oldest_unprocessed_ms: Optional[NonNeg] = None
    arrival_rows_per_second: Optional[NonNegFloat] = None
    sources: list[SourceStateRecord] = Field(default_factory=list, max_length=MAX_SOURCES_PER_QUERY)

    @model_validator(mode="after")
    def _consistent(self) -> "QueryStateRecord":
        running = self.running_batch_start_ms is not None
        if (self.status == "running") != running:
            raise ValueError("running_batch_start_ms: required exactly when status is running")
        if (self.running_batch_id is not None or self.running_batch_age_ms is not None) and not running:
            raise ValueError("running_batch_id: only while a batch runs")
        return self


class ExecutorEventRecord(_Strict):
    """An executor registered (``SparkListenerExecutorAdded``) or removed, at ``added_ms`` /
    ``removed_ms`` (the event's time, driver clock, epoch ms); ``cores``: its task cores. v3: its first task
    launch and first successful task finish so far (epoch ms; the earliest sent wins), sent when they change."""

    executor_id: Name
    added_ms: Optional[NonNeg] = None
    removed_ms: Optional[NonNeg] = None
    cores: Optional[NonNeg32] = None
    first_launch_ms: Optional[NonNeg] = None
    first_finish_ms: Optional[NonNeg] = None


class MomentsRecord(_Strict):
    """Count, mean, M2 (sum of squared deviations), min and max of a sample (``policies.moments``), in the unit of
    the statistic that holds it (JSON integers are accepted for the floats)."""

    n: NonNeg
    mean: float = 0.0
    m2: Annotated[float, Field(ge=0)] = 0.0
    min: Optional[float] = None
    max: Optional[float] = None

    @model_validator(mode="after")
    def _consistent(self) -> "MomentsRecord":
        if self.n == 0:
            if self.mean != 0 or self.m2 != 0 or self.min is not None or self.max is not None:
                raise ValueError("an empty sample (n 0) has mean 0, m2 0 and no min or max")
            return self
        if self.min is None or self.max is None:
            raise ValueError("min and max: required when n > 0")
        if self.min > self.max:
            raise ValueError("min is above max")
        if self.n == 1 and self.m2 != 0:
            raise ValueError("m2: a sample of one has m2 0")
        return self


class _WindowTasks(_Strict):
    """The tasks of a window (a runtime vertex's, or a template's merged over its partitions): ``tasks`` successful,
    ``failed_tasks``, sums in Spark's units (ms, ns, records, bytes), moments in seconds (``service_per_record``:
    seconds per record)."""

    tasks: NonNeg = 0
    failed_tasks: NonNeg = 0
    run_time_ms: NonNeg = 0
    cpu_time_ns: NonNeg = 0
    gc_time_ms: NonNeg = 0
    input_records: NonNeg = 0
    records_in: NonNeg = 0
    input_bytes: NonNeg = 0
    output_records: NonNeg = 0
    output_bytes: NonNeg = 0
    shuffle_read_records: NonNeg = 0
    shuffle_read_bytes: NonNeg = 0
    shuffle_write_records: NonNeg = 0
    shuffle_write_bytes: NonNeg = 0
    shuffle_fetch_wait_ms: NonNeg = 0
    latency: MomentsRecord = MomentsRecord(n=0)
    service: MomentsRecord = MomentsRecord(n=0)
    service_per_record: MomentsRecord = MomentsRecord(n=0)
    interarrival: MomentsRecord = MomentsRecord(n=0)

    @model_validator(mode="after")
    def _tasks_consistent(self) -> "_WindowTasks":
        if self.service.n != self.tasks:
            raise ValueError(f"service.n: {self.service.n} service times for {self.tasks} tasks")
        for name in ("latency", "service_per_record", "interarrival"):
            if getattr(self, name).n > self.tasks:
                raise ValueError(f"{name}.n: more samples than the window's {self.tasks} tasks")
        if self.records_in < self.input_records:
            raise ValueError("records_in: fewer than input_records")
        return self


class RuntimeWindowRecord(_WindowTasks):
    """v3: the tasks of one runtime vertex (template, partition) that finished in one window
    (``window_start_ms`` a multiple of the report's ``window_ms``), folded by the reporter
    (``policies.task_fold``) and sent once the window ended (a task folded later: a further delta)."""

    template_key: TemplateKey
    partition: NonNeg32
    window_start_ms: NonNeg


class TemplateWindowRecord(_WindowTasks):
    """v3: one template vertex in one window, folded by the reporter for this report (``policies.task_fold``): its
    tasks of the report merged over partitions, the partitions with a task in the window so far and the busiest
    one's run time (ms), and its stage runs completed in the window: ``stages``, the largest task count and slots,
    moments (seconds) of the interarrival of each stage's task launches and of its makespan."""

    template_key: TemplateKey
    window_start_ms: NonNeg
    stages: NonNeg = 0
    max_num_tasks: NonNeg32 = 0
    max_slots: Optional[NonNeg32] = None
    launch_interarrival: MomentsRecord = MomentsRecord(n=0)
    makespan: MomentsRecord = MomentsRecord(n=0)
    partitions: NonNeg32 = 0
    max_vertex_run_time_ms: NonNeg = 0

    @model_validator(mode="after")
    def _consistent(self) -> "TemplateWindowRecord":
        if self.makespan.n > self.stages:
            raise ValueError(f"makespan.n: more makespans than the window's {self.stages} stages")
        if self.tasks + self.failed_tasks > 0 and self.partitions == 0:
            raise ValueError("partitions: a window with tasks has at least one partition")
        return self


class TaskSpanRecord(_Strict):
    """v3: the first task launch and last task finish (epoch ms) of one micro-batch's tasks in this report (the
    control plane keeps the earliest and the latest over reports)."""

    query_id: Name
    batch_id: NonNeg
    first_launch_ms: NonNeg
    last_finish_ms: NonNeg

    @model_validator(mode="after")
    def _ordered(self) -> "TaskSpanRecord":
        if self.last_finish_ms < self.first_launch_ms:
            raise ValueError("last_finish_ms is before first_launch_ms")
        return self


class Report(_Strict):
    """A batch of records from one reporter: the body of ``POST /api/v1/reports``."""

    schema_version: Literal[ACCEPTED_SCHEMA_VERSIONS]
    job: JobName
    reporter: ReporterInfo
    templates: list[TemplateRecord] = Field(default_factory=list, max_length=MAX_ITEMS_PER_REPORT)
    stages: list[StageRecord] = Field(default_factory=list, max_length=MAX_ITEMS_PER_REPORT)
    tasks: list[TaskRecord] = Field(default_factory=list, max_length=MAX_TASKS_PER_REPORT)
    batches: list[BatchRecord] = Field(default_factory=list, max_length=MAX_ITEMS_PER_REPORT)
    #: optional per-batch key counts and partition statistics (Prompt); older reports omit it
    partitions: list[PartitionStatsRecord] = Field(default_factory=list, max_length=MAX_PARTITION_RECORDS)
    #: the state of each streaming query of the job (schema v2); v1 reports omit it
    queries: list[QueryStateRecord] = Field(default_factory=list, max_length=MAX_QUERIES_PER_REPORT)
    #: executors added and removed (the provisioning delay, ``aggregators.cluster_profile``); optional
    executors: list[ExecutorEventRecord] = Field(default_factory=list, max_length=MAX_ITEMS_PER_REPORT)
    #: v3: the window length the statistics below were folded with (ms); must be the control plane's
    window_ms: Optional[Annotated[int, Field(ge=MIN_WINDOW_MS, le=MAX_WINDOW_MS)]] = None
    runtime_windows: list[RuntimeWindowRecord] = Field(default_factory=list, max_length=MAX_ITEMS_PER_REPORT)
    template_windows: list[TemplateWindowRecord] = Field(default_factory=list, max_length=MAX_ITEMS_PER_REPORT)
    task_spans: list[TaskSpanRecord] = Field(default_factory=list, max_length=MAX_ITEMS_PER_REPORT)

    @model_validator(mode="after")
    def _folded(self) -> "Report":
        folded = self.runtime_windows or self.template_windows or self.task_spans
        if self.schema_version < 3:
            if folded or self.window_ms is not None:
                raise ValueError("schema_version: window_ms, runtime_windows, template_windows and task_spans "
                                 "need schema_version 3")
            return self
        if (self.runtime_windows or self.template_windows) and self.window_ms is None:
            raise ValueError("window_ms: required with runtime_windows or template_windows")
        for field_name in ("runtime_windows", "template_windows"):
            for i, w in enumerate(getattr(self, field_name)):
                if w.window_start_ms % self.window_ms:
                    raise ValueError(f"{field_name}.{i}.window_start_ms: {w.window_start_ms} is not aligned to "
                                     f"window_ms {self.window_ms}")
        if self.tasks:
            if self.window_ms is None:
                raise ValueError("window_ms: required with tasks in schema_version 3")
            windows = {(w.template_key, w.window_start_ms) for w in self.template_windows
                       if w.tasks + w.failed_tasks}
            for i, t in enumerate(self.tasks):
                if (t.template_key, t.finish_ms - t.finish_ms % self.window_ms) not in windows:
                    raise ValueError(f"tasks.{i}: a task row of schema_version 3 is detail of a task folded in "
                                     f"this report's template_windows, and none holds it")
        return self

    @property
    def folded_tasks(self) -> int:
        """The tasks this report accounts for: folded in its windows (v3), else its task rows but those Spark killed
        (``policies.task_fold.killed``: in no window either way)."""
        if self.schema_version >= 3:
            return sum(w.tasks + w.failed_tasks for w in self.template_windows)
        return sum(1 for t in self.tasks if not killed(t.__dict__))


class ReportError(ValueError):
    """A report that failed validation; ``message`` names the first offending field."""


def describe_validation_error(exc: ValidationError, limit: int = 5) -> str:
    """Human-readable summary naming fields as dotted paths, e.g. ``tasks.3.launch_ms``."""
    parts = []
    for err in exc.errors()[:limit]:
        loc = ".".join(str(x) for x in err.get("loc", ())) or "body"
        parts.append(f"{loc}: {err.get('msg')}")
    more = exc.error_count() - limit
    if more > 0:
        parts.append(f"... and {more} more error(s)")
    return "; ".join(parts)


def validate_job_name(job: str) -> str:
    """Return ``job`` if it is a valid job name, else raise ValueError saying why."""
    try:
        return TypeAdapter(JobName).validate_python(job)
    except ValidationError as exc:
        raise ValueError(f"job: {exc.errors()[0]['msg']} (got {job!r})") from None


def _nul_path(value: Any, path: str = "") -> Optional[str]:
    """The dotted path of the first string (value or key) holding a NUL character, or None."""
    if isinstance(value, str):
        return (path or "body") if "\x00" in value else None
    if isinstance(value, dict):
        for k, v in value.items():
            sub = f"{path}.{k}" if path else str(k)
            if "\x00" in str(k):
                return sub
            found = _nul_path(v, sub)
            if found:
                return found
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            found = _nul_path(v, f"{path}.{i}" if path else str(i))
            if found:
                return found
    return None


def parse_report(raw: bytes | str) -> Report:
    """Parse and validate a JSON report; raises ReportError with a message naming the field.

    Beyond the schema: a NUL character (``\\u0000``) in any string is refused, because PostgreSQL
    text columns cannot hold it (the insert would fail); looked for only when the raw text has one."""
    try:
        report = Report.model_validate_json(raw)
    except ValidationError as exc:
        raise ReportError(describe_validation_error(exc)) from None
    probe = raw if isinstance(raw, bytes) else raw.encode("utf-8", "surrogatepass")
    if b"\\u0000" in probe.lower():
        path = _nul_path(report.model_dump())
        if path is not None:
            raise ReportError(f"{path}: NUL characters (\\u0000) are not allowed in strings")
    return report


#: Name of the observed metric that ``collectors.observe.observe_event_time`` adds to a query;
#: its row has ``records``, ``min_us``, ``max_us`` (event time, epoch microseconds) and
#: ``wait_us_avg`` (mean of batch start − event time, microseconds).
EVENT_TIME_METRIC = "spark_governor_event_time"
