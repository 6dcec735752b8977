"""Prometheus exposition of the control plane (``GET /metrics``).

Naming follows Prometheus conventions: base units (seconds, bytes), ``_total`` for counters,
``_ratio`` for fractions. Labels: ``spark_job`` (the Spark job's name; not ``job``, which is the
scrape job's label in Prometheus, see ``api.job_metrics``), ``query`` on the series of one streaming
query (the latest micro-batch's gauges, the query between its batches), ``stage`` (the template
vertex's readable name) and the policy labels — never a task, partition or batch id — so
cardinality is bounded by the number of queries and stage templates. Per-stage gauges show the
most recent *complete* statistics window (the window containing "now" is still filling). The
series of a job silent for longer than the metrics expiry are not exported
(``api.job_metrics.exported_jobs``).
"""
from __future__ import annotations

import time

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from sqlalchemy import func, select
from sqlalchemy.engine import Connection, Engine

from spark_governor.aggregators import queries
from spark_governor.aggregators.job_state import STOPPED_AFTER_S
from spark_governor.aggregators.models import (
    batches,
    decisions,
    directives,
    events,
    knob_states,
    policy_configs,
)
from spark_governor.policies.moments import Moments
from spark_governor.api.job_metrics import (DEFAULT_EXPIRY_S, UP_HORIZON_S, JobCollector, exported_jobs,
                                            query_current, query_label)
from spark_governor.policies.registry import load_policies

PREFIX = "spark_governor"
#: templates without a window in this many seconds are not exported
STALE_AFTER_S = 600
#: a query's batch gauges are computed from its latest this many micro-batches
QUERY_BATCHES = 100


def batches_by_query(conn: Connection, job_id: int, now_ms: int, expiry_s: float) -> dict[str, list]:
    """``{query label: its latest QUERY_BATCHES micro-batches, oldest first}`` for every streaming query of the
    job that is current at ``now_ms`` (``api.job_metrics.query_current``)."""
    current = query_current(conn, job_id, now_ms, expiry_s)
    out = {}
    for qid in sorted(conn.execute(select(batches.c.query_id).where(batches.c.job_id == job_id).distinct()).scalars()):
        rows = conn.execute(select(batches.c.run_id, batches.c.name, batches.c.trigger_ms, batches.c.batch_duration_ms,
                                   batches.c.num_input_rows, batches.c.input_rows_per_second,
                                   batches.c.processed_rows_per_second, batches.c.durations_ms,
                                   batches.c.observed_metrics)
                            .where(batches.c.job_id == job_id, batches.c.query_id == qid)
                            .order_by(batches.c.trigger_ms.desc()).limit(QUERY_BATCHES)).all()
        if not current(qid, rows[0].trigger_ms + rows[0].batch_duration_ms):
            continue  # a query that stopped while the job goes on
        out[query_label(qid, next((r.name for r in rows if r.name), None))] = rows[::-1]
    return out


def trigger_gaps_s(rows: list) -> list[float]:
    """Seconds between consecutive triggers of the same run (``rows`` oldest first)."""
    gaps, last_by_run = [], {}
    for r in rows:
        prev = last_by_run.get(r.run_id)
        if prev is not None and r.trigger_ms > prev:
            gaps.append((r.trigger_ms - prev) / 1000.0)
        last_by_run[r.run_id] = r.trigger_ms
    return gaps


class StoreCollector:
    """Reads the latest statistics from SQL at scrape time (jobs silent for more than ``expiry_s`` seconds
    are left out; 0: none is)."""

    def __init__(self, engine: Engine, expiry_s: float = DEFAULT_EXPIRY_S) -> None:
        self.engine, self.expiry_s = engine, expiry_s

    def describe(self):
        return []

    def collect(self):
        g = {name: GaugeMetricFamily(f"{PREFIX}_{name}", doc, labels=["spark_job", "stage"]) for name, doc in (
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
        info = GaugeMetricFamily(f"{PREFIX}_stage_info", "Stage template identity",
                                 labels=["spark_job", "stage", "template"])
        qg = {name: GaugeMetricFamily(f"{PREFIX}_{name}", doc, labels=["spark_job", "query"]) for name, doc in (
            ("batch_duration_seconds", "Duration of the query's latest micro-batch"),
            ("batch_input_rows", "Input rows of the query's latest micro-batch"),
            ("input_rows_per_second", "Input rate of the query's latest micro-batch"),
            ("processed_rows_per_second", "Processing rate of the query's latest micro-batch"),
            ("batch_interarrival_seconds", "Mean time between the query's micro-batch triggers (last 100 batches)"),
            ("batch_interarrival_cv", "CV of the time between the query's micro-batch triggers (last 100 batches)"),
            ("record_interarrival_seconds", "Mean interarrival of records by event time, latest batch that has it"),
            ("record_wait_seconds", "Mean wait from event time to batch start, latest batch that has it"),
        )}
        jg = {name: GaugeMetricFamily(f"{PREFIX}_{name}", doc, labels=["spark_job"]) for name, doc in (
            ("job_slots", "Concurrent task slots reported by the driver"),
            ("job_last_report_timestamp_seconds", "Time of the latest report"),
        )}
        dropped = CounterMetricFamily(f"{PREFIX}_reporter_dropped", "Records and events dropped by reporters",
                                      labels=["spark_job"])
        orphaned = CounterMetricFamily(f"{PREFIX}_reporter_orphaned_tasks", "Task events without stage context",
                                       labels=["spark_job"])
        ingested = CounterMetricFamily(f"{PREFIX}_tasks_ingested", "Task records ingested", labels=["spark_job"])
        decided = CounterMetricFamily(f"{PREFIX}_decisions", "Policy decisions by outcome status",
                                      labels=["spark_job", "policy", "knob", "status"])
        made = CounterMetricFamily(f"{PREFIX}_decisions_made",
                                   "Policy decisions made, by mode; never decreases (a decision moves between "
                                   "the statuses of spark_governor_decisions_total)",
                                   labels=["spark_job", "policy", "knob", "mode"])
        policy_errors = CounterMetricFamily(f"{PREFIX}_policy_errors", "Policy evaluation errors", labels=["spark_job"])
        verified = GaugeMetricFamily(f"{PREFIX}_decision_verifications",
                                     "Judged decisions by verification: the job's health after the change vs before "
                                     "(verified, ineffective, rolled-back, harmful)",
                                     labels=["spark_job", "policy", "verification"])
        held = GaugeMetricFamily(f"{PREFIX}_knob_held", "1 while scale-ups of a knob are held (ineffective)",
                                 labels=["spark_job", "knob"])
        ineffective = GaugeMetricFamily(f"{PREFIX}_knob_ineffective_scale_ups",
                                        "Ineffective scale-ups in a row", labels=["spark_job", "knob"])
        version = GaugeMetricFamily(f"{PREFIX}_directive_version", "Latest directive version",
                                    labels=["spark_job", "knob"])
        applied = GaugeMetricFamily(f"{PREFIX}_directive_applied_version", "Directive version the driver applied",
                                    labels=["spark_job", "knob"])
        directive_value = GaugeMetricFamily(f"{PREFIX}_directive_value",
                                            "Value of the latest directive (numeric knobs only)",
                                            labels=["spark_job", "knob"])
        executors = GaugeMetricFamily(f"{PREFIX}_executors", "Executors registered (driver excluded)",
                                      labels=["spark_job"])
        now_ms = int(time.time() * 1000)
        with self.engine.connect() as conn:
            names = exported_jobs(conn, now_ms, self.expiry_s)
            for r in conn.execute(select(decisions.c.job_id, decisions.c.policy, decisions.c.knob, decisions.c.status,
                                         func.count().label("n"))
                                  .group_by(decisions.c.job_id, decisions.c.policy, decisions.c.knob,
                                            decisions.c.status)):
                if r.job_id not in names:
                    continue
                decided.add_metric([names[r.job_id], r.policy, r.knob, r.status], r.n)
            # counters start at 0 for every configured policy, so that rate() sees the first increment
            configured = [pc for pc in conn.execute(select(policy_configs.c.job_id, policy_configs.c.policy,
                                                           policy_configs.c.mode)).all() if pc.job_id in names]
            n_made = {(r.job_id, r.policy, r.knob, r.mode): r.n for r in conn.execute(
                select(decisions.c.job_id, decisions.c.policy, decisions.c.knob, decisions.c.mode,
                       func.count().label("n")).group_by(decisions.c.job_id, decisions.c.policy, decisions.c.knob,
                                                         decisions.c.mode)) if r.job_id in names}
            if configured:
                available = load_policies()[0]
                for pc in configured:
                    for knob in getattr(available.get(pc.policy), "knobs", ()):
                        n_made.setdefault((pc.job_id, pc.policy, knob, pc.mode), 0)
            for (job_id, policy, knob, mode), n in n_made.items():
                made.add_metric([names[job_id], policy, knob, mode], n)
            n_verified: dict = {}
            for r in conn.execute(select(decisions.c.job_id, decisions.c.policy, decisions.c.outcome)
                                  .where(decisions.c.outcome_ms.is_not(None))):
                word = (r.outcome or {}).get("verification")
                if r.job_id in names and word:
                    key = (names[r.job_id], r.policy, word)
                    n_verified[key] = n_verified.get(key, 0) + 1
            for key, n in sorted(n_verified.items()):
                verified.add_metric(list(key), n)
            n_errors = {job_id: 0 for job_id in {pc.job_id for pc in configured}}
            n_errors.update(conn.execute(select(events.c.job_id, func.count().label("n")).where(
                events.c.kind == "policy_error", events.c.job_id.is_not(None)).group_by(events.c.job_id)).all())
            for job_id, n in n_errors.items():
                if job_id in names:
                    policy_errors.add_metric([names[job_id]], n)
            for r in conn.execute(select(knob_states)):
                if r.job_id not in names:
                    continue
                held.add_metric([names[r.job_id], r.knob], 1 if r.held else 0)
                ineffective.add_metric([names[r.job_id], r.knob], r.consecutive_ineffective_ups)
            for r in conn.execute(select(directives)):
                if r.job_id not in names:
                    continue
                version.add_metric([names[r.job_id], r.knob], r.version)
                if isinstance(r.value, (int, float)) and not isinstance(r.value, bool):
                    directive_value.add_metric([names[r.job_id], r.knob], r.value)
                if r.applied_version is not None:
                    applied.add_metric([names[r.job_id], r.knob], r.applied_version)
            exported = set(names.values())
            ids = {name: job_id for job_id, name in names.items()}
            for job in queries.list_jobs(conn, now_ms):
                name = job["name"]
                if name not in exported:
                    continue
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
                for query, rows in batches_by_query(conn, ids[name], now_ms, self.expiry_s).items():
                    labels = [name, query]
                    last = rows[-1]
                    qg["batch_duration_seconds"].add_metric(labels, last.batch_duration_ms / 1000.0)
                    qg["batch_input_rows"].add_metric(labels, last.num_input_rows)
                    for key in ("input_rows_per_second", "processed_rows_per_second"):
                        if getattr(last, key) is not None:
                            qg[key].add_metric(labels, getattr(last, key))
                    timed = [t for t in (queries._event_time(r.observed_metrics or {}) for r in rows)
                             if t[0] is not None]
                    if timed:
                        qg["record_interarrival_seconds"].add_metric(labels, timed[-1][0])
                        if timed[-1][1] is not None:
                            qg["record_wait_seconds"].add_metric(labels, timed[-1][1])
                    gaps = Moments.of(trigger_gaps_s(rows))
                    if gaps.n:
                        qg["batch_interarrival_seconds"].add_metric(labels, gaps.mean)
                    if gaps.cv is not None:
                        qg["batch_interarrival_cv"].add_metric(labels, gaps.cv)
        yield from g.values()
        yield info
        yield from qg.values()
        yield from jg.values()
        yield dropped
        yield orphaned
        yield ingested
        yield from (decided, made, policy_errors, verified, held, ineffective, version, applied, directive_value, executors)


class IngestMetrics:
    """In-process counters of the ingest endpoint."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.reports = Counter(f"{PREFIX}_reports", "Reports received, by outcome", ["outcome"], registry=registry)
        self.duration = Histogram(f"{PREFIX}_ingest_duration_seconds", "Time to validate and store one report",
                                  registry=registry)


QUERY_STATES = ("running", "waiting", "idle", "terminated")


class LiveCollector:
    """Each streaming query between its micro-batches (``aggregators.liveness``), from its latest state
    reported within ``STALE_AFTER_S`` (label ``query``, ``api.job_metrics.query_label``): ages of its
    running batch and of its oldest unprocessed record (0 when nothing is in flight: no batch runs,
    the query is idle or terminated), its backlog in rows and in seconds of work (0 when idle or
    terminated; absent where no source counts rows); and per job the number of queries per state.
    Jobs silent for more than ``expiry_s`` seconds are left out (0: none is)."""

    def __init__(self, engine: Engine, expiry_s: float = DEFAULT_EXPIRY_S) -> None:
        self.engine, self.expiry_s = engine, expiry_s

    def describe(self):
        return []

    def collect(self):
        from spark_governor.aggregators import liveness

        g = {name: GaugeMetricFamily(f"{PREFIX}_{name}", doc, labels=["spark_job", "query"]) for name, doc in (
            ("running_batch_age_seconds", "Age of the query's micro-batch in flight (0 when none runs)"),
            ("oldest_record_age_seconds", "Age of the query's oldest unprocessed record (0 when none waits)"),
            ("backlog_rows", "Rows available at the query's sources but not yet processed"),
            ("backlog_seconds", "The query's backlog in seconds of work at its recent processing rate"),
        )}
        states = GaugeMetricFamily(f"{PREFIX}_queries", "Streaming queries of the job by state",
                                   labels=["spark_job", "state"])
        now_ms = int(time.time() * 1000)
        with self.engine.connect() as conn:
            for job_id, name in exported_jobs(conn, now_ms, self.expiry_s).items():
                live = liveness.live(conn, job_id, now_ms, max_age_ms=STALE_AFTER_S * 1000)
                if live is None:
                    continue
                counts = {s: 0 for s in QUERY_STATES}
                for q in live["queries"]:
                    counts[q["status"]] += 1
                    labels = [name, query_label(q["query_id"], q["name"])]
                    quiet = q["status"] in ("idle", "terminated")
                    g["running_batch_age_seconds"].add_metric(labels, q["running_batch_age_s"] or 0.0)
                    g["oldest_record_age_seconds"].add_metric(labels, q["oldest_record_age_s"] or 0.0)
                    for metric, key in (("backlog_rows", "backlog_rows"), ("backlog_seconds", "backlog_s")):
                        value = 0.0 if quiet else q[key]
                        if value is not None:
                            g[metric].add_metric(labels, value)
                for state, n in counts.items():
                    states.add_metric([name, state], n)
        yield from g.values()
        yield states


def build_registry(engine: Engine, window_ms: int = 5000, expiry_s: float = DEFAULT_EXPIRY_S,
                   stopped_after_s: float = STOPPED_AFTER_S,
                   up_horizon_s: float = UP_HORIZON_S) -> tuple[CollectorRegistry, IngestMetrics]:
    """The ``/metrics`` registry: statistics windows of ``window_ms`` milliseconds; a job's series disappear
    once it has been silent for ``expiry_s`` seconds (0: never), except ``job_up`` and the report age, which
    stay until ``max(expiry_s, up_horizon_s)`` (``api.job_metrics``); a job is stopped (``job_up`` 0) after
    ``stopped_after_s`` seconds without a report (``aggregators.job_state``)."""
    from spark_governor.api.batch_interval_metrics import BatchIntervalCollector
    from spark_governor.api.cluster_metrics import ClusterProfileCollector
    from spark_governor.api.constraint_metrics import ConstraintCollector
    from spark_governor.api.health_metrics import HealthCollector
    from spark_governor.api.partition_metrics import PartitionCollector

    from spark_governor.api.replica_metrics import LeadingReplicaOnly

    registry = CollectorRegistry()
    # the jobs' series, computed from the shared database: from the leading replica only (api.replica_metrics)
    registry.register(LeadingReplicaOnly(engine, (
        JobCollector(engine, expiry_s, stopped_after_s, up_horizon_s), StoreCollector(engine, expiry_s),
        LiveCollector(engine, expiry_s), ConstraintCollector(engine, window_ms, expiry_s),
        PartitionCollector(engine, expiry_s), BatchIntervalCollector(engine, expiry_s),
        HealthCollector(engine, window_ms, expiry_s), ClusterProfileCollector(engine, expiry_s))))
    return registry, IngestMetrics(registry)
