"""Collect: build the read-only ``JobView`` a policy evaluates, from the statistics store."""
from __future__ import annotations

import math
import time
from typing import Optional

from sqlalchemy import func, select
from sqlalchemy.engine import Connection

from spark_governor.aggregators import cluster_profile, constraints, liveness, queries
from spark_governor.aggregators.directives import current_directives
from spark_governor.aggregators.partitions import recent_partition_stats, view_stats
from spark_governor.aggregators.models import batches, decisions
from spark_governor.policies.base import BatchStats, ConstraintStats, DirectiveState, StageStats
from spark_governor.policies.cluster_inputs import ClusteredJobView, ClusterInputs


def build_view(conn: Connection, job: str, window_s: float, window_ms: int, now_ms: Optional[int] = None,
               max_batches: int = 500, max_partition_batches: int = 30,
               partition_key_batches: int = 10, span=None) -> JobView:
    """The job's stages over the last ``window_s`` seconds (whole statistics windows of
    ``window_ms``), its latest ``max_batches`` batches of the last hour, directives and executor state,
    and its latest ``max_partition_batches`` partitioned batches (key counts for the last
    ``partition_key_batches`` of them).

    ``span`` (``aggregators.runs.RunSpan``, or anything with ``lo_ms`` / ``hi_ms``, epoch ms, None: open): only
    statistics windows that start within it and batches triggered within it that completed before its end — the
    view of a past instant (``hi_ms`` = that instant + 1), as a replayed run's health timeline needs
    (``aggregators.health_timeline``). A window that straddles ``hi_ms`` counts whole (the windows' granularity)."""
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    j = queries.job_row(conn, job)
    n_windows = max(1, math.ceil(window_s * 1000 / window_ms))
    since = now_ms - int(window_s * 1000)
    stages = []
    for t in queries.template_stats(conn, job, windows=n_windows, span=span):
        wins = [w for w in t["windows"] if w["window_start_ms"] + w["window_ms"] > since]
        if not wins:
            continue
        summary = t["summary"]
        stages.append(StageStats(
            key=t["key"], name=t["name"], tasks=sum(w["tasks"] for w in wins),
            service_mean_s=summary["service"]["mean"], latency_mean_s=summary["latency"]["mean"],
            utilization=wins[-1]["utilization"], parallelism=wins[-1]["parallelism"],
            records_in_per_second=wins[-1]["records_in_per_second"],
            utilization_windows=tuple(w["utilization"] for w in wins if w["utilization"] is not None),
            service_cv=summary["service"]["cv"], arrival_cv=(summary.get("launch_interarrival") or {}).get("cv"),
            wait_mean_s=_wait(summary),
            max_tasks=max((w.get("num_tasks") or w["partitions"] or 0) for w in wins) or None,
            span_s=sum(w["window_ms"] for w in wins) / 1000.0,
            busy_slots=sum(w["busy_seconds"] for w in wins) / (sum(w["window_ms"] for w in wins) / 1000.0),
            ordinal=t["ordinal"], utilization_max=_utilization_max(wins), last_seen_ms=t["last_ms"]))
    # the latest batches, also those triggered before the span that completed within it
    rows = list(reversed(conn.execute(  # the columns BatchStats reads (a batch row's other JSON is not decoded)
        select(batches.c.batch_id, batches.c.trigger_ms, batches.c.durations_ms, batches.c.batch_duration_ms,
               batches.c.num_input_rows, batches.c.input_rows_per_second, batches.c.processed_rows_per_second,
               batches.c.query_id)
        .where(batches.c.job_id == j.id, batches.c.trigger_ms >= now_ms - 3_600_000,
               *queries.span_conditions(batches.c.trigger_ms, span))
        .order_by(batches.c.trigger_ms.desc()).limit(max_batches)).mappings().all()))
    if span is not None and span.hi_ms is not None:  # completed before the span's end
        rows = [r for r in rows if r["trigger_ms"] + _trigger_execution_ms(r) < span.hi_ms]
    batch_stats = tuple(BatchStats(
        batch_id=r["batch_id"], trigger_ms=r["trigger_ms"], processing_s=_trigger_execution_ms(r) / 1000.0,
        num_input_rows=r["num_input_rows"], input_rows_per_second=r["input_rows_per_second"],
        processed_rows_per_second=r["processed_rows_per_second"],
        interval_s=_ms_to_s((r["durations_ms"] or {}).get("batchInterval")),
        queueing_s=_ms_to_s((r["durations_ms"] or {}).get("batchQueueing")), query_id=r["query_id"]) for r in rows)
    dirs = {d["knob"]: DirectiveState(d["knob"], d["version"], d["value"], d["applied_version"], d["status"],
                                      d["message"]) for d in current_directives(conn, j.id)}
    last = {r.knob: r.last_ms for r in conn.execute(select(decisions.c.knob, func.max(decisions.c.created_ms).label("last_ms"))
                                               .where(decisions.c.job_id == j.id).group_by(decisions.c.knob))}
    return ClusteredJobView(job=job, now_ms=now_ms, window_s=window_s, stages=tuple(stages), batches=batch_stats,
                   directives=dirs, executors=j.executors, slots=j.slots,
                   not_actuatable=dict(j.not_actuatable or {}), last_decision_ms=last,
                   constraints=_constraints(conn, job, j.id, window_s, window_ms, now_ms,
                                            cut=span is not None and span.hi_ms is not None),
                   knob_state=dict(j.knob_state or {}),
                   partition_stats=view_stats(recent_partition_stats(conn, j.id, max_partition_batches,
                                                                        partition_key_batches)),
                   live=liveness.live_stats(conn, j.id, now_ms, window_s),
                   cluster=_cluster(conn, j.id))


def _cluster(conn: Connection, job_id: int) -> Optional[ClusterInputs]:
    """The job's cluster profile as stored at its latest evaluation (``aggregators.cluster_profile``),
    None when there is none."""
    p = cluster_profile.stored(conn, job_id)
    if p is None:
        return None
    return ClusterInputs(provisioning_delay_s=p.provisioning_delay_s, register_s=p.register_s,
                         warmup_factor=p.warmup.get("factor"),
                         warmup_s=p.warmup.get("duration_s"), driver_overhead_s=p.driver_overhead_s)


def _utilization_max(wins: list[dict]) -> Optional[float]:
    """ρ^max over the span (Lohrmann's per-subtask peak utilization, thesis §4.7.4): the busiest
    partition's run time per second of window, averaged over the span's windows, weighted by
    window length. Dimensionless (fraction of one task slot)."""
    known = [w for w in wins if w.get("utilization_max") is not None]
    total_ms = sum(w["window_ms"] for w in known)
    return sum(w["utilization_max"] * w["window_ms"] for w in known) / total_ms if total_ms else None


def _trigger_execution_ms(r) -> float:
    """A batch row's trigger execution time (ms): Spark's ``triggerExecution``, else the batch duration."""
    return (r["durations_ms"] or {}).get("triggerExecution", r["batch_duration_ms"])


def _ms_to_s(ms) -> Optional[float]:
    return None if ms is None else ms / 1000.0


def _wait(summary: dict) -> Optional[float]:
    """Queueing of a stage's tasks for executor slots within a micro-batch (seconds).

    A micro-batch's records become visible when the batch completes, so what slot queueing adds
    to record latency is the stage's makespan beyond one task's service: mean makespan − mean run
    time. Without makespans (no stage completion reported) it falls back to the mean slot wait of
    the tasks (mean task latency − mean run time). Never negative."""
    svc = summary["service"]["mean"]
    makespan = (summary.get("makespan") or {}).get("mean")
    lat = summary["latency"]["mean"]
    base = makespan if makespan is not None else lat
    return None if base is None or svc is None else max(0.0, base - svc)


def _constraints(conn: Connection, job: str, job_id: int, window_s: float, window_ms: int,
                 now_ms: int, cut: bool = False) -> tuple[ConstraintStats, ...]:
    """``cut``: the view ends at ``now_ms`` (``build_view(span=…)``), so the span in progress then holds all it
    will and counts as complete (a run judged at its end is judged on its last span too)."""
    out = []
    for c in constraints.list_constraints(conn, job_id):
        spans = max(1, round(window_s / c.span_s))
        at_ms = now_ms + int(round(c.span_s * 1000)) if cut else now_ms
        m = constraints.measure(conn, job, job_id, c, at_ms, spans, window_ms)
        # measured spans only: an in-flight span's latency is a lower bound, counted in attainment only
        lat = [s["latency_ms"] for s in m["spans"] if s["source"] != "in-flight"]
        out.append(ConstraintStats(
            name=c.name, vertices=tuple(c.vertices) if c.vertices else None, bound_s=c.bound_ms / 1000.0,
            span_s=c.span_s, latency_s=sum(lat) / len(lat) / 1000.0 if lat else None,
            batching_wait_s=None if m["batching_wait_ms"] is None else m["batching_wait_ms"] / 1000.0,
            attainment=m["attainment"], source=m["source"]))
    return tuple(out)
