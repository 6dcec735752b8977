"""Prometheus exposition of the control plane (``GET /metrics``).

Naming follows Prometheus conventions: base units (seconds, bytes), ``_total`` for counters,
``_ratio`` for fractions. Labels are ``job`` and ``stage`` (the template vertex's readable
name) only — never a task, partition or batch id — so cardinality is bounded by the number of
stage templates. Per-stage gauges show the most recent *complete* statistics window
(the window containing "now" is still filling).
"""
from __future__ import annotations

import time

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from sqlalchemy import func, select
from sqlalchemy.engine import Engine

from spark_governor.aggregators import queries
from spark_governor.aggregators.models import (
    decisions,
    directives,
    events,
    jobs,
    knob_states,
    policy_configs,
)
from spark_governor.policies.registry import load_policies

PREFIX = "spark_governor"
#: templates without a window in this many seconds are not exported
STALE_AFTER_S = 600


class StoreCollector:
    """Reads the latest statistics from SQL at scrape time."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def describe(self):
        return []

    def collect(self):
        g = {name: GaugeMetricFamily(f"{PREFIX}_{name}", doc, labels=["job", "stage"]) for name, doc in (
            ("stage_service_time_seconds", "Mean executor run time per task (service time), latest window"),
            ("stage_service_time_per_record_seconds", "Mean run time per input record, latest window"),
            ("stage_task_latency_seconds", "Mean task latency (finish - stage submission), latest window"),
            ("stage_task_interarrival_seconds", "Mean interarrival time of tasks at a partition, latest window"),
            ("stage_task_interarrival_cv", "Coefficient of variation of task interarrival times, latest window"),
            ("stage_service_time_cv", "Coefficient of variation of task service times, latest window"),
            ("stage_launch_interarrival_cv", "CV of task launch interarrival within a stage, latest window"),
            ("stage_utilization_ratio", "Busy slot time / (parallelism * window), latest window"),
            ("stage_input_records_per_second", "Records read (input + shuffle) per second, latest window"),
            ("stage_shuffle_read_bytes_per_second", "Shuffle bytes read per second, latest window"),
            ("stage_shuffle_write_bytes_per_second", "Shuffle bytes written per second, latest window"),
            ("stage_tasks", "Successful tasks in the latest window"),
        )}
        info = GaugeMetricFamily(f"{PREFIX}_stage_info", "Stage template identity", labels=["job", "stage", "template"])
        jg = {name: GaugeMetricFamily(f"{PREFIX}_{name}", doc, labels=["job"]) for name, doc in (
            ("batch_duration_seconds", "Duration of the latest micro-batch"),
            ("batch_input_rows", "Input rows of the latest micro-batch"),
            ("input_rows_per_second", "Input rate of the latest micro-batch"),
            ("processed_rows_per_second", "Processing rate of the latest micro-batch"),
            ("batch_interarrival_seconds", "Mean time between micro-batch triggers (last 100 batches)"),
            ("batch_interarrival_cv", "CV of the time between micro-batch triggers (last 100 batches)"),
            ("job_slots", "Concurrent task slots reported by the driver"),
            ("record_interarrival_seconds", "Mean interarrival of records by event time, latest batch that has it"),
            ("record_wait_seconds", "Mean wait from event time to batch start, latest batch that has it"),
            ("job_last_report_timestamp_seconds", "Time of the latest report"),
        )}
        dropped = CounterMetricFamily(f"{PREFIX}_reporter_dropped", "Records and events dropped by reporters",
                                      labels=["job"])
        orphaned = CounterMetricFamily(f"{PREFIX}_reporter_orphaned_tasks", "Task events without stage context",
                                       labels=["job"])
        ingested = CounterMetricFamily(f"{PREFIX}_tasks_ingested", "Task records ingested", labels=["job"])
        decided = CounterMetricFamily(f"{PREFIX}_decisions", "Policy decisions by outcome status",
                                      labels=["job", "policy", "knob", "status"])
        made = CounterMetricFamily(f"{PREFIX}_decisions_made",
                                   "Policy decisions made, by mode; never decreases (a decision moves between "
                                   "the statuses of spark_governor_decisions_total)",
                                   labels=["job", "policy", "knob", "mode"])
        policy_errors = CounterMetricFamily(f"{PREFIX}_policy_errors", "Policy evaluation errors", labels=["job"])
        held = GaugeMetricFamily(f"{PREFIX}_knob_held", "1 while scale-ups of a knob are held (ineffective)",
                                 labels=["job", "knob"])
        ineffective = GaugeMetricFamily(f"{PREFIX}_knob_ineffective_scale_ups",
                                        "Ineffective scale-ups in a row", labels=["job", "knob"])
        version = GaugeMetricFamily(f"{PREFIX}_directive_version", "Latest directive version", labels=["job", "knob"])
        applied = GaugeMetricFamily(f"{PREFIX}_directive_applied_version", "Directive version the driver applied",
                                    labels=["job", "knob"])
        directive_value = GaugeMetricFamily(f"{PREFIX}_directive_value",
                                            "Value of the latest directive (numeric knobs only)", labels=["job", "knob"])
        executors = GaugeMetricFamily(f"{PREFIX}_executors", "Executors registered (driver excluded)", labels=["job"])
        now_ms = int(time.time() * 1000)
        with self.engine.connect() as conn:
            names = dict(conn.execute(select(jobs.c.id, jobs.c.name)).all())
            for r in conn.execute(select(decisions.c.job_id, decisions.c.policy, decisions.c.knob, decisions.c.status,
                                         func.count().label("n"))
                                  .group_by(decisions.c.job_id, decisions.c.policy, decisions.c.knob,
                                            decisions.c.status)):
                decided.add_metric([names[r.job_id], r.policy, r.knob, r.status], r.n)
            # counters start at 0 for every configured policy, so that rate() sees the first increment
            configured = conn.execute(select(policy_configs.c.job_id, policy_configs.c.policy,
                                             policy_configs.c.mode)).all()
            n_made = {(r.job_id, r.policy, r.knob, r.mode): r.n for r in conn.execute(
                select(decisions.c.job_id, decisions.c.policy, decisions.c.knob, decisions.c.mode,
                       func.count().label("n")).group_by(decisions.c.job_id, decisions.c.policy, decisions.c.knob,
                                                         decisions.c.mode))}
            if configured:
                available = load_policies()[0]
                for pc in configured:
                    for knob in getattr(available.get(pc.policy), "knobs", ()):
                        n_made.setdefault((pc.job_id, pc.policy, knob, pc.mode), 0)
            for (job_id, policy, knob, mode), n in n_made.items():
                made.add_metric([names[job_id], policy, knob, mode], n)
            n_errors = {job_id: 0 for job_id in {pc.job_id for pc in configured}}
            n_errors.update(conn.execute(select(events.c.job_id, func.count().label("n")).where(
                events.c.kind == "policy_error", events.c.job_id.is_not(None)).group_by(events.c.job_id)).all())
            for job_id, n in n_errors.items():
                policy_errors.add_metric([names[job_id]], n)
            for r in conn.execute(select(knob_states)):
                held.add_metric([names[r.job_id], r.knob], 1 if r.held else 0)
                ineffective.add_metric([names[r.job_id], r.knob], r.consecutive_ineffective_ups)
            for r in conn.execute(select(directives)):
                version.add_metric([names[r.job_id], r.knob], r.version)
                if isinstance(r.value, (int, float)) and not isinstance(r.value, bool):
                    directive_value.add_metric([names[r.job_id], r.knob], r.value)
                if r.applied_version is not None:
                    applied.add_metric([names[r.job_id], r.knob], r.applied_version)
            for job in queries.list_jobs(conn):
                name = job["name"]
                dropped.add_metric([name], job["reporter_dropped_total"])
                orphaned.add_metric([name], job["reporter_orphaned_total"])
                ingested.add_metric([name], job["tasks_reported_total"])
                if job["slots"] is not None:
                    jg["job_slots"].add_metric([name], job["slots"])
                if job.get("executors") is not None:
                    executors.add_metric([name], job["executors"])
                if job["last_report_ms"]:
                    jg["job_last_report_timestamp_seconds"].add_metric([name], job["last_report_ms"] / 1000.0)
                seen_names: set[str] = set()
                for t in queries.template_stats(conn, name, windows=2):
                    wins = [w for w in t["windows"] if w["window_start_ms"] + w["window_ms"] <= now_ms] or t["windows"]
                    if not wins or wins[-1]["window_start_ms"] < now_ms - STALE_AFTER_S * 1000:
                        continue
                    w = wins[-1]
                    stage = t["name"] if t["name"] not in seen_names else f"{t['name']} #{t['key'][:6]}"
                    seen_names.add(stage)
                    labels = [name, stage]
                    info.add_metric([name, stage, t["key"]], 1)
                    window_s = w["window_ms"] / 1000.0
                    values = {
                        "stage_service_time_seconds": w["service"]["mean"],
                        "stage_service_time_per_record_seconds": w["service_per_record"]["mean"],
                        "stage_task_latency_seconds": w["latency"]["mean"],
                        "stage_task_interarrival_seconds": w["interarrival"]["mean"],
                        "stage_task_interarrival_cv": w["interarrival"]["cv"],
                        "stage_service_time_cv": w["service"]["cv"],
                        "stage_launch_interarrival_cv": (w.get("launch_interarrival") or {}).get("cv"),
                        "stage_utilization_ratio": w["utilization"],
                        "stage_input_records_per_second": w["records_in_per_second"],
                        "stage_shuffle_read_bytes_per_second": w["shuffle_read_bytes"] / window_s,
                        "stage_shuffle_write_bytes_per_second": w["shuffle_write_bytes"] / window_s,
                        "stage_tasks": w["tasks"],
                    }
                    for metric, value in values.items():
                        if value is not None:
                            g[metric].add_metric(labels, value)
                b = queries.batch_stats(conn, name, limit=100)
                if b["batches"]:
                    last = b["batches"][-1]
                    jg["batch_duration_seconds"].add_metric([name], last["batch_duration_ms"] / 1000.0)
                    jg["batch_input_rows"].add_metric([name], last["num_input_rows"])
                    for key in ("input_rows_per_second", "processed_rows_per_second"):
                        if last[key] is not None:
                            jg[key].add_metric([name], last[key])
                    timed = [x for x in b["batches"] if x["record_interarrival_s"] is not None]
                    if timed:
                        jg["record_interarrival_seconds"].add_metric([name], timed[-1]["record_interarrival_s"])
                        if timed[-1]["record_wait_s"] is not None:
                            jg["record_wait_seconds"].add_metric([name], timed[-1]["record_wait_s"])
                    if b["interarrival"]["mean"] is not None:
                        jg["batch_interarrival_seconds"].add_metric([name], b["interarrival"]["mean"])
                    if b["interarrival"]["cv"] is not None:
                        jg["batch_interarrival_cv"].add_metric([name], b["interarrival"]["cv"])
        yield from g.values()
        yield info
        yield from jg.values()
        yield dropped
        yield orphaned
        yield ingested
        yield from (decided, made, policy_errors, held, ineffective, version, applied, directive_value, executors)


class IngestMetrics:
    """In-process counters of the ingest endpoint."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.reports = Counter(f"{PREFIX}_reports", "Reports received, by outcome", ["outcome"], registry=registry)
        self.duration = Histogram(f"{PREFIX}_ingest_duration_seconds", "Time to validate and store one report",
                                  registry=registry)


QUERY_STATES = ("running", "waiting", "idle", "terminated")


class LiveCollector:
    """The job between its micro-batches (``aggregators.liveness``), from the latest query states
    reported within ``STALE_AFTER_S``: ages of the running batch and of the oldest unprocessed
    record (0 when nothing is in flight: no batch runs, the query is idle or terminated), the
    backlog in rows and in seconds of work (0 when idle or terminated; absent where no source
    counts rows), and the number of queries per state."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def describe(self):
        return []

    def collect(self):
        from spark_governor.aggregators import liveness

        g = {name: GaugeMetricFamily(f"{PREFIX}_{name}", doc, labels=["job"]) for name, doc in (
            ("running_batch_age_seconds", "Age of the micro-batch in flight (0 when none runs)"),
            ("oldest_record_age_seconds", "Age of the oldest unprocessed record (0 when none waits)"),
            ("backlog_rows", "Rows available at the sources but not yet processed"),
            ("backlog_seconds", "The backlog in seconds of work at the recent processing rate"),
        )}
        states = GaugeMetricFamily(f"{PREFIX}_queries", "Streaming queries of the job by state",
                                   labels=["job", "state"])
        now_ms = int(time.time() * 1000)
        with self.engine.connect() as conn:
            for job_id, name in conn.execute(select(jobs.c.id, jobs.c.name)).all():
                live = liveness.live(conn, job_id, now_ms, max_age_ms=STALE_AFTER_S * 1000)
                if live is None:
                    continue
                quiet = live["status"] in ("idle", "terminated")
                g["running_batch_age_seconds"].add_metric([name], live["running_batch_age_s"] or 0.0)
                g["oldest_record_age_seconds"].add_metric([name], live["oldest_record_age_s"] or 0.0)
                for metric, key in (("backlog_rows", "backlog_rows"), ("backlog_seconds", "backlog_s")):
                    value = 0.0 if quiet else live[key]
                    if value is not None:
                        g[metric].add_metric([name], value)
                counts = {s: 0 for s in QUERY_STATES}
                for q in live["queries"]:
                    counts[q["status"]] += 1
                for state, n in counts.items():
                    states.add_metric([name, state], n)
        yield from g.values()
        yield states


def build_registry(engine: Engine, window_ms: int = 5000) -> tuple[CollectorRegistry, IngestMetrics]:
    from spark_governor.api.batch_interval_metrics import BatchIntervalCollector
    from spark_governor.api.constraint_metrics import ConstraintCollector
    from spark_governor.api.partition_metrics import PartitionCollector

    registry = CollectorRegistry()
    registry.register(StoreCollector(engine))
    registry.register(LiveCollector(engine))
    registry.register(ConstraintCollector(engine, window_ms))
    registry.register(PartitionCollector(engine))
    registry.register(BatchIntervalCollector(engine))
    return registry, IngestMetrics(registry)
