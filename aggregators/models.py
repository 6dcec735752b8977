"""SQL schema (SQLAlchemy 2 Core tables) of the statistics store.

Units: ``*_ms`` epoch or duration milliseconds, ``*_ns`` nanoseconds. Moments are stored as
``<stat>_n``, ``<stat>_mean``, ``<stat>_m2`` (Welford count, mean, sum of squared deviations)
in **seconds** (``*_per_record``: seconds per record), so windows and vertices merge exactly
(aggregators.welford).

Graph (Lohrmann §2.3.1): a *job* (one user-named streaming job) has *template vertices*
(stages stable across micro-batches) and *runtime vertices* (template, partition index).
"""
from __future__ import annotations

from sqlalchemy import (JSON, BigInteger, Boolean, Column, Float, ForeignKey, Index, Integer, MetaData,
                        String, Table, Text, UniqueConstraint)

# the statistics a window keeps (policies.task_fold, the fold the reporters and ingest share): moments per
# runtime window (seconds; with min and max), moments per template window (seconds), sums per runtime window
from spark_governor.policies.task_fold import RUNTIME_MOMENTS, RUNTIME_SUMS, TEMPLATE_MOMENTS

metadata = MetaData(naming_convention={
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
})



def _moments(*names: str, extremes: bool = False) -> list[Column]:
    cols: list[Column] = []
    for name in names:
        cols += [Column(f"{name}_n", BigInteger, nullable=False, default=0),
                 Column(f"{name}_mean", Float, nullable=False, default=0.0),
                 Column(f"{name}_m2", Float, nullable=False, default=0.0)]
        if extremes:  # migration 0011: NULL in windows stored before it and where n is 0
            cols += [Column(f"{name}_min", Float), Column(f"{name}_max", Float)]
    return cols


jobs = Table(
    "jobs", metadata,
    Column("id", Integer, primary_key=True),
    Column("name", String(128), nullable=False, unique=True),
    Column("created_ms", BigInteger, nullable=False),
    Column("last_report_ms", BigInteger),
    Column("slots", Integer),
    Column("app_id", String(256)),
    Column("master", String(256)),
    Column("executors", Integer),  # executors registered (driver excluded), as the reporter last said
    Column("not_actuatable", JSON),  # knob -> reason it cannot be actuated (e.g. "local mode")
    Column("knob_state", JSON),  # knob -> what the job's applier reports about it (e.g. declared exchanges)
    Column("attachment", JSON),  # how the job's reporter is attached: {kind, version, can_apply} (migration 0007)
    # which task rows the job's reporter sends (policies.task_fold.TASK_DETAIL_MODES; NULL: every task, v1/v2)
    Column("task_detail", String(8)),
)

reporters = Table(
    "reporters", metadata,
    Column("id", String(64), primary_key=True),
    Column("job_id", Integer, ForeignKey("jobs.id", ondelete="CASCADE"), nullable=False, index=True),
    Column("last_seq", BigInteger, nullable=False),
    Column("dropped_total", BigInteger, nullable=False, default=0),
    Column("orphaned_total", BigInteger, nullable=False, default=0),
    Column("reports_total", BigInteger, nullable=False, default=0),
    Column("tasks_total", BigInteger, nullable=False, default=0),
    Column("first_ms", BigInteger, nullable=False),
    Column("last_ms", BigInteger, nullable=False),
    Column("token_name", String(128)),  # the token the reporter is bound to (migration 0008); NULL: anonymous
)

template_vertices = Table(
    "template_vertices", metadata,
    Column("id", Integer, primary_key=True),
    Column("job_id", Integer, ForeignKey("jobs.id", ondelete="CASCADE"), nullable=False),
    Column("key", String(64), nullable=False),
    Column("name", String(256), nullable=False),
    Column("ordinal", Integer),
    Column("operators", JSON),
    Column("parents", JSON),
    Column("first_ms", BigInteger, nullable=False),
    Column("last_ms", BigInteger, nullable=False),
    UniqueConstraint("job_id", "key", name="uq_template_vertices_job_key"),
)

runtime_vertices = Table(
    "runtime_vertices", metadata,
    Column("id", Integer, primary_key=True),
    Column("template_id", Integer, ForeignKey("template_vertices.id", ondelete="CASCADE"), nullable=False),
    Column("partition", Integer, nullable=False),
    Column("last_launch_ms", BigInteger),
    UniqueConstraint("template_id", "partition", name="uq_runtime_vertices_template_partition"),
)

stage_runs = Table(
    "stage_runs", metadata,
    Column("id", Integer, primary_key=True),
    Column("job_id", Integer, ForeignKey("jobs.id", ondelete="CASCADE"), nullable=False),
    Column("template_id", Integer, ForeignKey("template_vertices.id", ondelete="CASCADE"), nullable=False),
    Column("app_id", String(256), nullable=False, default=""),
    Column("query_id", String(256)),
    Column("batch_id", BigInteger),
    Column("stage_id", Integer, nullable=False),
    Column("attempt", Integer, nullable=False),
    Column("num_tasks", Integer, nullable=False),
    Column("submission_ms", BigInteger),
    Column("completion_ms", BigInteger),
    Column("failure_reason", Text),
    Column("slots", Integer),
    UniqueConstraint("job_id", "app_id", "stage_id", "attempt", name="uq_stage_runs_job_app_stage_attempt"),
    Index("ix_stage_runs_job_completion", "job_id", "completion_ms"),
)

tasks = Table(
    "tasks", metadata,
    Column("id", Integer, primary_key=True),
    Column("job_id", Integer, ForeignKey("jobs.id", ondelete="CASCADE"), nullable=False),
    Column("template_id", Integer, ForeignKey("template_vertices.id", ondelete="CASCADE"), nullable=False),
    Column("runtime_vertex_id", Integer, ForeignKey("runtime_vertices.id", ondelete="CASCADE"), nullable=False),
    Column("app_id", String(256), nullable=False, default=""),
    Column("query_id", String(256)),
    Column("batch_id", BigInteger),
    Column("stage_id", Integer, nullable=False),
    Column("stage_attempt", Integer, nullable=False),
    Column("task_id", BigInteger, nullable=False),
    Column("partition", Integer, nullable=False),
    Column("attempt", Integer, nullable=False),
    Column("executor_id", String(256), nullable=False),
    Column("host", String(256)),
    Column("stage_submission_ms", BigInteger),
    Column("launch_ms", BigInteger, nullable=False),
    Column("finish_ms", BigInteger, nullable=False),
    Column("run_time_ms", BigInteger, nullable=False),
    Column("cpu_time_ns", BigInteger, nullable=False),
    Column("gc_time_ms", BigInteger, nullable=False),
    Column("deserialize_ms", BigInteger, nullable=False),
    Column("result_serialize_ms", BigInteger, nullable=False),
    Column("input_records", BigInteger, nullable=False),
    Column("input_bytes", BigInteger, nullable=False),
    Column("output_records", BigInteger, nullable=False),
    Column("output_bytes", BigInteger, nullable=False),
    Column("shuffle_read_records", BigInteger, nullable=False),
    Column("shuffle_read_bytes", BigInteger, nullable=False),
    Column("shuffle_fetch_wait_ms", BigInteger, nullable=False),
    Column("shuffle_write_records", BigInteger, nullable=False),
    Column("shuffle_write_bytes", BigInteger, nullable=False),
    Column("shuffle_write_time_ns", BigInteger, nullable=False),
    Column("successful", Boolean, nullable=False),
    Column("speculative", Boolean, nullable=False),
    Column("failure_reason", Text),
    # migration 0011: why the row travelled (v3: warmup | sample | failed | all; NULL: a v1/v2 report, every
    # task) and whether it is in the uniform sample (policies.task_fold.sampled)
    Column("detail", String(8)),
    Column("sampled", Boolean),
    Index("ix_tasks_job_finish", "job_id", "finish_ms"),
    Index("ix_tasks_job_app_stage", "job_id", "app_id", "stage_id", "stage_attempt"),
)

runtime_windows = Table(
    "runtime_windows", metadata,
    Column("id", Integer, primary_key=True),
    Column("runtime_vertex_id", Integer, ForeignKey("runtime_vertices.id", ondelete="CASCADE"), nullable=False),
    Column("template_id", Integer, ForeignKey("template_vertices.id", ondelete="CASCADE"), nullable=False),
    Column("window_start_ms", BigInteger, nullable=False),
    Column("window_ms", Integer, nullable=False),
    Column("tasks", BigInteger, nullable=False, default=0),
    Column("failed_tasks", BigInteger, nullable=False, default=0),
    *_moments(*RUNTIME_MOMENTS, extremes=True),
    *[Column(name, BigInteger, nullable=False, default=0) for name in RUNTIME_SUMS],
    UniqueConstraint("runtime_vertex_id", "window_start_ms", name="uq_runtime_windows_vertex_window"),
    Index("ix_runtime_windows_template_window", "template_id", "window_start_ms"),
)

template_windows = Table(
    "template_windows", metadata,
    Column("id", Integer, primary_key=True),
    Column("template_id", Integer, ForeignKey("template_vertices.id", ondelete="CASCADE"), nullable=False),
    Column("window_start_ms", BigInteger, nullable=False),
    Column("window_ms", Integer, nullable=False),
    Column("stages", BigInteger, nullable=False, default=0),
    Column("max_num_tasks", Integer, nullable=False, default=0),
    Column("max_slots", Integer),
    *_moments(*TEMPLATE_MOMENTS),
    # migration 0011: the template's tasks merged over its partitions (as a runtime window's; the policies read
    # these), the partitions with a task in the window and the busiest one's run time (ms)
    Column("tasks", BigInteger, nullable=False, default=0),
    Column("failed_tasks", BigInteger, nullable=False, default=0),
    *_moments(*RUNTIME_MOMENTS, extremes=True),
    *[Column(name, BigInteger, nullable=False, default=0) for name in RUNTIME_SUMS],
    Column("partitions", Integer, nullable=False, default=0),
    Column("max_vertex_run_time_ms", BigInteger, nullable=False, default=0),
    UniqueConstraint("template_id", "window_start_ms", name="uq_template_windows_template_window"),
)

batches = Table(
    "batches", metadata,
    Column("id", Integer, primary_key=True),
    Column("job_id", Integer, ForeignKey("jobs.id", ondelete="CASCADE"), nullable=False),
    Column("query_id", String(256), nullable=False),
    Column("run_id", String(256), nullable=False),
    Column("name", String(256)),
    Column("batch_id", BigInteger, nullable=False),
    Column("trigger_ms", BigInteger, nullable=False),
    Column("batch_duration_ms", BigInteger, nullable=False),
    Column("durations_ms", JSON, nullable=False),
    Column("num_input_rows", BigInteger, nullable=False),
    Column("input_rows_per_second", Float),
    Column("processed_rows_per_second", Float),
    Column("state_operators", JSON, nullable=False),
    Column("event_time", JSON, nullable=False),
    Column("observed_metrics", JSON, nullable=False),
    # the job run (``job_runs.run_id``) that reported the batch (migration 0009); NULL: reported before 0009
    Column("job_run_id", String(256)),
    UniqueConstraint("job_id", "run_id", "batch_id", name="uq_batches_job_run_batch"),
    Index("ix_batches_job_trigger", "job_id", "trigger_ms"),
)

# -- runs of a job (migration 0009) ---------------------------------------------------------------

job_runs = Table(
    "job_runs", metadata,
    Column("id", Integer, primary_key=True),
    Column("job_id", Integer, ForeignKey("jobs.id", ondelete="CASCADE"), nullable=False),
    # the Spark application id the reporter sent, else "unknown-app" (aggregators.runs)
    Column("run_id", String(256), nullable=False),
    Column("app_id", String(256)),
    Column("master", String(256)),
    Column("first_ms", BigInteger, nullable=False),  # first report of the run (control-plane clock)
    Column("last_ms", BigInteger, nullable=False),  # latest report of the run
    UniqueConstraint("job_id", "run_id", name="uq_job_runs_job_run"),
)

# -- policies, decisions, directives (migration 0002) -------------------------------------------

policy_configs = Table(
    "policy_configs", metadata,
    Column("id", Integer, primary_key=True),
    Column("job_id", Integer, ForeignKey("jobs.id", ondelete="CASCADE"), nullable=False),
    Column("policy", String(128), nullable=False),
    Column("enabled", Boolean, nullable=False),
    Column("mode", String(16), nullable=False),  # dry-run | act
    Column("config", JSON, nullable=False),
    Column("updated_ms", BigInteger, nullable=False),
    UniqueConstraint("job_id", "policy", name="uq_policy_configs_job_policy"),
)

decisions = Table(
    "decisions", metadata,
    Column("id", Integer, primary_key=True),
    Column("job_id", Integer, ForeignKey("jobs.id", ondelete="CASCADE"), nullable=False),
    Column("policy", String(128), nullable=False),
    Column("knob", String(32), nullable=False),
    Column("old_value", JSON),
    Column("new_value", JSON),
    Column("reason", Text, nullable=False),
    Column("inputs", JSON, nullable=False),
    Column("prediction", JSON, nullable=False),
    Column("mode", String(16), nullable=False),
    # recorded (dry-run) | issued | applied | failed | not_actuatable | superseded
    Column("status", String(16), nullable=False),
    Column("status_message", Text),
    Column("directive_version", Integer),
    Column("created_ms", BigInteger, nullable=False),
    Column("applied_ms", BigInteger),
    Column("outcome", JSON),
    Column("effective", Boolean),
    Column("outcome_ms", BigInteger),
    Index("ix_decisions_job_created", "job_id", "created_ms"),
)

directives = Table(
    "directives", metadata,
    Column("id", Integer, primary_key=True),
    Column("job_id", Integer, ForeignKey("jobs.id", ondelete="CASCADE"), nullable=False),
    Column("knob", String(32), nullable=False),
    Column("version", Integer, nullable=False),
    Column("value", JSON),
    Column("decision_id", Integer, ForeignKey("decisions.id", ondelete="SET NULL")),
    Column("created_ms", BigInteger, nullable=False),
    Column("applied_version", Integer),
    Column("applied_ms", BigInteger),
    Column("status", String(16), nullable=False),  # pending | applied | failed | not_actuatable
    Column("message", Text),
    UniqueConstraint("job_id", "knob", name="uq_directives_job_knob"),
)

knob_states = Table(
    "knob_states", metadata,
    Column("id", Integer, primary_key=True),
    Column("job_id", Integer, ForeignKey("jobs.id", ondelete="CASCADE"), nullable=False),
    Column("knob", String(32), nullable=False),
    Column("last_change_ms", BigInteger),
    Column("last_direction", Integer, nullable=False, default=0),
    Column("consecutive_ineffective_ups", Integer, nullable=False, default=0),
    Column("held", Boolean, nullable=False, default=False),
    UniqueConstraint("job_id", "knob", name="uq_knob_states_job_knob"),
)

events = Table(
    "events", metadata,
    Column("id", Integer, primary_key=True),
    Column("job_id", Integer, ForeignKey("jobs.id", ondelete="CASCADE")),
    Column("kind", String(32), nullable=False),  # policy_error | hold | release | ...
    Column("policy", String(128)),
    Column("message", Text, nullable=False),
    Column("created_ms", BigInteger, nullable=False),
    Index("ix_events_job_created", "job_id", "created_ms"),
)

api_tokens = Table(
    "api_tokens", metadata,
    Column("id", Integer, primary_key=True),
    Column("name", String(128), nullable=False, unique=True),
    Column("token_sha256", String(64), nullable=False, unique=True),
    Column("created_ms", BigInteger, nullable=False),
    # scopes, job patterns, origin and revocation (migration 0008; api.auth)
    Column("scopes", JSON),  # report | read | write | admin; NULL: admin (tokens older than 0008)
    Column("jobs", JSON),  # job-name patterns (fnmatch) the token is limited to; NULL: every job
    Column("source", String(16), nullable=False, server_default="config"),  # config | cli
    Column("revoked_ms", BigInteger),
)

audit_log = Table(
    "audit_log", metadata,
    Column("id", Integer, primary_key=True),
    Column("who", String(128)),
    Column("method", String(8), nullable=False),
    Column("path", String(512), nullable=False),
    Column("body", JSON),
    Column("status", Integer, nullable=False),
    Column("created_ms", BigInteger, nullable=False),
)

# -- latency constraints (migration 0003) -------------------------------------------------------

latency_constraints = Table(
    "latency_constraints", metadata,
    Column("id", Integer, primary_key=True),
    Column("job_id", Integer, ForeignKey("jobs.id", ondelete="CASCADE"), nullable=False),
    Column("name", String(128), nullable=False),
    Column("vertices", JSON),  # template keys of the sequence; NULL = the whole query
    Column("bound_ms", Float, nullable=False),  # ℓ: bound on mean record latency, milliseconds
    Column("span_s", Float, nullable=False),  # t: averaging span, seconds
    Column("event_time_metric", Boolean, nullable=False, default=True),  # use the observed event-time wait
    Column("updated_ms", BigInteger, nullable=False),
    # the SLO (migration 0013): the share of spans that must be within the bound, and the spans judged so far
    # (aggregators.slo_spans): counted once each, up to judged_until_ms (NULL: from the next pass on)
    Column("objective", Float, nullable=False, server_default="0.99"),
    Column("spans_good", BigInteger, nullable=False, server_default="0"),
    Column("spans_bad", BigInteger, nullable=False, server_default="0"),
    Column("judged_until_ms", BigInteger),
    UniqueConstraint("job_id", "name", name="uq_latency_constraints_job_name"),
)

# -- partition statistics per micro-batch (Prompt; migration 0005) ------------------------------

partition_stats = Table(
    "partition_stats", metadata,
    Column("id", Integer, primary_key=True),
    Column("job_id", Integer, ForeignKey("jobs.id", ondelete="CASCADE"), nullable=False),
    Column("received_ms", BigInteger, nullable=False),
    Column("batch_id", BigInteger),
    Column("query_id", String(256)),
    Column("algorithm", String(64), nullable=False),
    Column("source", String(32)),
    Column("partitions", Integer, nullable=False),
    Column("reduce", Integer, nullable=False),
    Column("tuples", BigInteger, nullable=False),
    Column("keys", BigInteger, nullable=False),
    Column("exact", Boolean, nullable=False),
    Column("key_counts", JSON, nullable=False),  # [[key, tuples], ...], most frequent first
    Column("other_keys", BigInteger, nullable=False),
    Column("other_tuples", BigInteger, nullable=False),
    Column("block_loads", JSON, nullable=False),  # tuples per Map block
    Column("block_cardinalities", JSON, nullable=False),  # distinct keys per Map block
    Column("bucket_loads", JSON, nullable=False),  # tuples per Reduce bucket
    Column("bsi", Float), Column("bci", Float), Column("ksr", Float), Column("mpi", Float),
    Column("max_mean_load", Float), Column("bsi_buckets", Float), Column("split_keys", Integer),
    Column("stats_ms", Float), Column("planning_ms", Float), Column("processing_ms", Float),
    Index("ix_partition_stats_job_received", "job_id", "received_ms"),
)

# -- streaming query state between micro-batches (migration 0006) ---------------------------------

query_states = Table(
    "query_states", metadata,
    Column("id", Integer, primary_key=True),
    Column("job_id", Integer, ForeignKey("jobs.id", ondelete="CASCADE"), nullable=False),
    Column("query_id", String(256), nullable=False),
    Column("run_id", String(256)),
    Column("name", String(256)),
    Column("received_ms", BigInteger, nullable=False),  # control-plane clock
    Column("observed_ms", BigInteger, nullable=False),  # driver clock, when the reporter took the state
    Column("status", String(16), nullable=False),  # running | waiting | idle | terminated
    Column("running_batch_id", BigInteger),
    Column("running_batch_start_ms", BigInteger),
    Column("last_batch_id", BigInteger),
    Column("last_batch_end_ms", BigInteger),
    Column("trigger_interval_ms", BigInteger),
    Column("last_idle_ms", BigInteger),
    Column("backlog_rows", BigInteger),  # unprocessed rows of the sources that count rows
    Column("oldest_unprocessed_ms", BigInteger),  # when the oldest of them became available
    Column("arrival_rows_per_second", Float),
    Column("sources", JSON, nullable=False),  # policies.wire.SourceStateRecord per source
    Index("ix_query_states_job_observed", "job_id", "observed_ms"),
)

# -- what the job taught about its cluster (migration 0010; aggregators.cluster_profile) ----------

executor_events = Table(
    "executor_events", metadata,
    Column("id", Integer, primary_key=True),
    Column("job_id", Integer, ForeignKey("jobs.id", ondelete="CASCADE"), nullable=False),
    Column("run_id", String(256), nullable=False),  # job_runs.run_id (the Spark application id)
    Column("executor_id", String(256), nullable=False),
    Column("added_ms", BigInteger),  # SparkListenerExecutorAdded time (driver clock, epoch ms)
    Column("removed_ms", BigInteger),  # SparkListenerExecutorRemoved time
    Column("cores", Integer),
    # the executor's first task launch and first successful task finish (migration 0011; v3 reporters send them)
    Column("first_launch_ms", BigInteger),
    Column("first_finish_ms", BigInteger),
    UniqueConstraint("job_id", "run_id", "executor_id", name="uq_executor_events_job_run_executor"),
)

# -- the span of each micro-batch's tasks (migration 0011; v3 reporters send it, policies.task_fold) ----------

task_spans = Table(
    "task_spans", metadata,
    Column("id", Integer, primary_key=True),
    Column("job_id", Integer, ForeignKey("jobs.id", ondelete="CASCADE"), nullable=False),
    Column("app_id", String(256), nullable=False, default=""),
    Column("query_id", String(256), nullable=False),
    Column("batch_id", BigInteger, nullable=False),
    Column("first_launch_ms", BigInteger, nullable=False),  # first task launch of the batch (epoch ms)
    Column("last_finish_ms", BigInteger, nullable=False),  # last task finish of the batch (epoch ms)
    UniqueConstraint("job_id", "app_id", "query_id", "batch_id", name="uq_task_spans_job_app_query_batch"),
)

cluster_profiles = Table(
    "cluster_profiles", metadata,
    Column("id", Integer, primary_key=True),
    Column("job_id", Integer, ForeignKey("jobs.id", ondelete="CASCADE"), nullable=False, unique=True),
    Column("run_id", String(256)),  # the run the profile was measured on (the job's latest)
    Column("updated_ms", BigInteger, nullable=False),
    Column("profile", JSON, nullable=False),  # aggregators.cluster_profile.ClusterProfile.to_json()
)
