"""Latency constraints of a job: storage and the measured latency per averaging span.

A constraint (Lohrmann thesis §4.2, digest 004 §1.3) is a sequence of template vertices (NULL:
the whole query), a bound ℓ on the mean latency of the records in milliseconds, and an averaging
span t in seconds (default 5 s as in the thesis). Measurement:

* whole query: mean record latency per span (``aggregators.latency``), from the observed
  event-time wait when the job reports it (source ``event-time``), else estimated from trigger
  times (source ``estimated``);
* a sequence of stages: the sum over its stages of the mean task latency (finish − stage
  submission, so slot waiting is included) of the tasks that finished within the span, merged
  exactly over the statistics windows of the span (source ``stage-latency``); record wait before
  the batch is not part of a stage sequence.

A whole-query span in which **no micro-batch completed** has no measured latency; it used to be
left out, which flatters an overloaded job (a batch that runs for several spans is judged only in
the span it completes in). Such a span is now counted as **violated** (source ``in-flight``) when,
at some query state reported within it (``aggregators.liveness``), the running batch's age or the
oldest unprocessed record's age already exceeded the bound: those records will certainly leave
later than the bound. Its ``latency_ms`` is that lower bound. A span without a completed batch in
which nothing in flight exceeded the bound yet (or the query was idle) stays out: nothing left it,
and nothing is known to be late.

Each span also carries the latest model prediction made before the span ended: decisions store
``prediction["constraints"][name]`` (predicted mean latency, seconds).

:func:`judged_spans` judges the spans of any range; the API's view (:func:`measure`, the last spans before an
instant) and the SLO's counters (``aggregators.slo_spans``, each span once) both use it, so they agree.
"""
from __future__ import annotations

import math
from typing import Optional

from sqlalchemy import func, select
from sqlalchemy.engine import Connection

from spark_governor.aggregators import liveness, queries
from spark_governor.aggregators.latency import BatchLatency, span_latencies
from spark_governor.aggregators.models import batches, decisions, latency_constraints

DEFAULT_SPAN_S = 5.0


#: the share of spans that must be within the bound when the constraint does not say (the SLO's objective)
DEFAULT_OBJECTIVE = 0.99


def constraint_json(row) -> dict:
    return {"name": row.name, "vertices": row.vertices, "bound_ms": row.bound_ms, "span_s": row.span_s,
            "use_event_time": row.event_time_metric, "objective": row.objective, "updated_ms": row.updated_ms,
            "slo": {"spans_good": row.spans_good, "spans_bad": row.spans_bad,
                    "judged_until_ms": row.judged_until_ms}}


def list_constraints(conn: Connection, job_id: int) -> list:
    return conn.execute(select(latency_constraints).where(latency_constraints.c.job_id == job_id)
                        .order_by(latency_constraints.c.name)).all()


#: a batch's predecessor older than this (ms) is not looked for: its wait is not estimated (``aggregators.latency``)
LOOKBACK_MS = 3_600_000
#: batches that ended this long (ms) before a range may still end in it by ``durationMs.triggerExecution``
END_SLACK_MS = 60_000


def _query_spans(conn: Connection, job_id: int, c, since_ms: int) -> list[dict]:
    """Whole-query spans from ``since_ms`` on: the batches that end from then on and, per run, the trigger of the
    batch before the first of them (its wait estimate needs it), at most ``LOOKBACK_MS`` earlier."""
    rows = conn.execute(select(batches).where(
        batches.c.job_id == job_id, batches.c.trigger_ms >= since_ms - LOOKBACK_MS,
        batches.c.trigger_ms + batches.c.batch_duration_ms >= since_ms - END_SLACK_MS)
        .order_by(batches.c.trigger_ms)).mappings().all()
    items, first = [], {}
    for r in rows:
        first.setdefault(r["run_id"], r["trigger_ms"])
    for run_id, t in first.items():
        prev = conn.execute(select(func.max(batches.c.trigger_ms)).where(
            batches.c.job_id == job_id, batches.c.run_id == run_id, batches.c.trigger_ms < t,
            batches.c.trigger_ms >= since_ms - LOOKBACK_MS)).scalar()
        if prev is not None:  # only its trigger matters: no rows, so it is in no span
            items.append(BatchLatency(run_id, prev, 0.0, 0, None))
    for r in rows:
        _, wait_s = queries._event_time(r["observed_metrics"] or {})
        processing_ms = (r["durations_ms"] or {}).get("triggerExecution", r["batch_duration_ms"])
        items.append(BatchLatency(r["run_id"], r["trigger_ms"], processing_ms / 1000.0, r["num_input_rows"], wait_s))
    return [{"start_ms": s.start_ms, "batches": s.batches, "records": s.records, "latency_s": s.latency_s,
             "wait_s": s.wait_s, "source": s.source} for s in span_latencies(items, c.span_s, c.event_time_metric)]


def _stage_spans(conn: Connection, job: str, c, since_ms: int, n_windows: int) -> list[dict]:
    span_ms = int(round(c.span_s * 1000))
    by_key = {t["key"]: t for t in queries.template_stats(conn, job, windows=min(1000, n_windows))}
    per_span: dict[int, dict[str, list]] = {}
    for key in c.vertices:
        t = by_key.get(key)
        for w in (t["windows"] if t else []):
            end = w["window_start_ms"] + w["window_ms"]
            if end <= since_ms or not w["latency"]["count"]:
                continue
            start = (end - 1) - (end - 1) % span_ms
            acc = per_span.setdefault(start, {}).setdefault(key, [0, 0.0])
            acc[0] += w["latency"]["count"]
            acc[1] += w["latency"]["mean"] * w["latency"]["count"]
    out = []
    for start, stages in sorted(per_span.items()):
        if set(stages) != set(c.vertices):
            continue  # a span in which some stage of the sequence did not run has no sequence latency
        out.append({"start_ms": start, "batches": None, "records": None, "source": "stage-latency", "wait_s": 0.0,
                    "latency_s": sum(total / n for n, total in stages.values())})
    return out


def _in_flight_spans(conn: Connection, job_id: int, c, since_ms: int, until_ms: int, measured: list[dict]) -> list[dict]:
    """Violated spans without a completed batch: the in-flight lower bound exceeded the bound."""
    span_ms = int(round(c.span_s * 1000))
    done = {m["start_ms"] for m in measured}
    out = []
    for start, lower_s in sorted(liveness.in_flight_by_span(conn, job_id, since_ms, until_ms, span_ms).items()):
        if start in done or lower_s * 1000.0 <= c.bound_ms:
            continue
        out.append({"start_ms": start, "batches": 0, "records": None, "latency_s": lower_s, "wait_s": None,
                    "source": "in-flight"})
    return out


def _model_history(conn: Connection, job_id: int, name: str, since_ms: int):
    """``([(created_ms, predicted latency s)], feasible)`` from the decisions that modelled this
    constraint: predictions oldest first, and whether the latest one found the bound feasible."""
    predictions, feasible = [], None
    for r in conn.execute(select(decisions.c.created_ms, decisions.c.prediction, decisions.c.inputs).where(
            decisions.c.job_id == job_id, decisions.c.created_ms >= since_ms - 3_600_000)
            .order_by(decisions.c.created_ms)):
        value = ((r.prediction or {}).get("constraints") or {}).get(name)
        if isinstance(value, (int, float)):
            predictions.append((r.created_ms, float(value)))
        planned = (((r.inputs or {}).get("plan") or {}).get("constraints") or {}).get(name)
        if isinstance(planned, dict) and "feasible" in planned:
            feasible = planned["feasible"]
    return predictions, feasible


def judged_spans(conn: Connection, job: str, job_id: int, c, since_ms: int, until_ms: int,
                 window_ms: int = 5000, predictions: Optional[list] = None,
                 now_ms: Optional[int] = None) -> list[dict]:
    """The constraint's judged spans that start in ``[since_ms, until_ms)`` (milliseconds, on span boundaries),
    oldest first: measured latency (ms), the bound, ``attained`` and the prediction in force (from ``predictions``,
    ``[(created ms, predicted latency s)]`` oldest first; None: none). A span nobody can judge (no record left it
    and nothing in flight was late) is absent. ``now_ms`` (default ``until_ms``): a stage sequence reads the
    statistics windows from ``since_ms`` to then."""
    span_ms = int(round(c.span_s * 1000))
    latest_ms = max(until_ms + span_ms, now_ms or 0)
    measured = (_query_spans(conn, job_id, c, since_ms) if c.vertices is None
                else _stage_spans(conn, job, c, since_ms, math.ceil((latest_ms - since_ms) / window_ms) + 2))
    measured = [m for m in measured if since_ms <= m["start_ms"] < until_ms]
    if c.vertices is None:
        measured = sorted(measured + _in_flight_spans(conn, job_id, c, since_ms, until_ms, measured),
                          key=lambda m: m["start_ms"])
    out = []
    for m in measured:
        end = m["start_ms"] + span_ms
        before = [p for t, p in predictions or () if t < end]
        latency_ms = m["latency_s"] * 1000.0
        out.append({"start_ms": m["start_ms"], "batches": m["batches"], "records": m["records"],
                    "latency_ms": latency_ms, "bound_ms": c.bound_ms, "attained": latency_ms <= c.bound_ms,
                    "predicted_latency_ms": before[-1] * 1000.0 if before else None, "source": m["source"],
                    "wait_ms": None if m["wait_s"] is None else m["wait_s"] * 1000.0})
    return out


def measure(conn: Connection, job: str, job_id: int, c, now_ms: int, spans: int = 12,
            window_ms: int = 5000, until_ms: Optional[int] = None) -> dict:
    """The constraint with its last ``spans`` complete spans before ``until_ms`` (default: before the span
    containing ``now_ms``): measured latency, bound, attainment and the prediction in force (milliseconds in the
    answer, as the bound), and its SLO counters (``aggregators.slo_spans``)."""
    span_ms = int(round(c.span_s * 1000))
    end = now_ms if until_ms is None else min(until_ms, now_ms)
    current_start = end - end % span_ms
    since_ms = current_start - spans * span_ms
    predictions, feasible = _model_history(conn, job_id, c.name, since_ms)
    out = judged_spans(conn, job, job_id, c, since_ms, current_start, window_ms, predictions, now_ms)
    waits = [s.pop("wait_ms") for s in out]
    waits = [w for w in waits if w is not None]
    attained = [s["attained"] for s in out]
    return {**constraint_json(c), "spans": out,
            "attainment": sum(attained) / len(attained) if attained else None,
            "latest": out[-1] if out else None,
            "source": out[-1]["source"] if out else None,
            "batching_wait_ms": sum(waits) / len(waits) if waits else None,
            "feasible": feasible}


def find(conn: Connection, job_id: int, name: str) -> Optional[object]:
    return conn.execute(select(latency_constraints).where(latency_constraints.c.job_id == job_id,
                                                          latency_constraints.c.name == name)).first()
