"""The job between its micro-batches: running batch, oldest unprocessed record, backlog.

Reporters send the state of each streaming query at least once a second
(``policies.wire.QueryStateRecord``, built by ``collectors.query_state``); every state is kept as
a row of ``query_states`` (pruned by retention). From them, at any time ``now``:

* **running batch age** = now − start of the micro-batch in flight (the first Spark job of the
  batch); no batch in flight: none;
* **oldest record age** = now − when the oldest unprocessed row became available, from the
  sources' offsets (source ``"source"``); where no source counts rows, the running batch's age is
  the lower bound (source ``"running-batch"``: its records arrived before it started);
* **backlog** in rows = the latest state's unprocessed rows plus the arrival rate times the time
  since that state (for a query that is neither idle nor terminated), and in **seconds of work**
  = rows / the recent processing rate (Σ input rows / Σ processing time of the query's latest
  completed batches with rows, i.e. rows per second of batch processing);
* **backlog growth** (rows/s): least-squares slope of the backlog right after each completed
  batch (at the batch's end: the first state after it, less what arrived since the end; :func:`troughs`)
  over the window, a query run's first batch left out; right after a batch the backlog holds only what
  arrived while it ran, so the slope is not fooled by the saw-tooth within a batch and rises only
  when the job falls behind;
* a query whose latest state says ``idle`` (its last trigger found no new data) has neither age
  nor backlog, and neither has a terminated one: an idle query is not a stuck one.

States older than ``LIVE_STALE_MS`` are not current (the reporter stopped sending): no live stats.
Clocks: ages are taken on the driver's clock at the state's ``observed_ms`` and carried forward on
the control plane's by the time since the state was received, so the two clocks need not agree;
spans are the driver's (as for completed batches, by their trigger times).

For latency constraints (``aggregators.constraints``) :func:`in_flight_by_span` gives, per
averaging span, the largest in-flight lower bound seen during the span: the larger of the
running batch's and the oldest record's age at each state observed within it.
"""
from __future__ import annotations

import math
import time
from collections import defaultdict
from typing import Any, Optional

from sqlalchemy import func, insert, select
from sqlalchemy.engine import Connection

from spark_governor.aggregators.models import batches, query_states
from spark_governor.policies.base import LiveStats
from spark_governor.policies.wire import Report

#: a query state older than this (ms) is not current
LIVE_STALE_MS = 30_000
#: a driver clock this far (ms) behind the control plane's still has its probed rates read every second
#: (:func:`probed_arrival_rates` reads the states by the ``(job_id, observed_ms)`` index, observed on the
#: driver's clock, and keeps those received recently on the control plane's)
CLOCK_SKEW_MS = 600_000
#: the backlog trend looks back at least this far (s)
MIN_TREND_WINDOW_S = 30.0
#: batches that give a query's processing rate: its latest ones with rows, within this lookback
RATE_BATCHES = 20
RATE_LOOKBACK_MS = 600_000

_FIELDS = ("query_id", "run_id", "name", "observed_ms", "status", "running_batch_id", "running_batch_start_ms",
           "last_batch_id", "last_batch_end_ms", "trigger_interval_ms", "last_idle_ms", "backlog_rows",
           "oldest_unprocessed_ms", "arrival_rows_per_second")


def query_state_rows(job_id: int, report: Report, now_ms: int) -> list[dict]:
    """The ``query_states`` rows of the report's query states (one each)."""
    return [dict(job_id=job_id, received_ms=now_ms, **{f: getattr(q, f) for f in _FIELDS},
                 sources=[s.model_dump(exclude_none=True) for s in q.sources]) for q in report.queries]


def store_query_states(conn: Connection, job_id: int, report: Report, now_ms: int) -> int:
    """One ``query_states`` row per query state of the report."""
    if not report.queries:
        return 0
    rows = query_state_rows(job_id, report, now_ms)
    conn.execute(insert(query_states), rows)
    return len(rows)


def _states(conn: Connection, job_id: int, since_ms: int, until_ms: Optional[int] = None) -> list:
    q = select(query_states).where(query_states.c.job_id == job_id, query_states.c.observed_ms >= since_ms)
    if until_ms is not None:
        q = q.where(query_states.c.observed_ms < until_ms)
    return conn.execute(q.order_by(query_states.c.observed_ms, query_states.c.id)).mappings().all()


def latest_states(conn: Connection, job_id: int, now_ms: int, max_age_ms: int = LIVE_STALE_MS) -> list:
    """The latest state of each query received within ``max_age_ms`` up to ``now_ms`` (control-plane clock; a
    replay's is the log's), by query id."""
    latest: dict[str, dict] = {}
    for r in conn.execute(select(query_states).where(query_states.c.job_id == job_id,
                                                     query_states.c.received_ms >= now_ms - max_age_ms,
                                                     query_states.c.received_ms <= now_ms)
                          .order_by(query_states.c.observed_ms, query_states.c.id)).mappings():
        latest[r["query_id"]] = r
    return [latest[k] for k in sorted(latest)]


def processing_rates(conn: Connection, job_id: int, now_ms: int) -> dict[str, float]:
    """Rows per second of batch processing time (``triggerExecution``) per query, over its latest
    ``RATE_BATCHES`` completed batches with rows in the last ``RATE_LOOKBACK_MS``."""
    rows = conn.execute(select(batches.c.query_id, batches.c.num_input_rows, batches.c.batch_duration_ms,
                               batches.c.durations_ms)
                        .where(batches.c.job_id == job_id, batches.c.trigger_ms >= now_ms - RATE_LOOKBACK_MS,
                               batches.c.num_input_rows > 0)
                        .order_by(batches.c.trigger_ms.desc()).limit(20 * RATE_BATCHES)).all()
    acc: dict[str, list] = defaultdict(lambda: [0, 0.0, 0])
    for r in rows:
        a = acc[r.query_id]
        if a[2] >= RATE_BATCHES:
            continue
        a[0] += r.num_input_rows
        a[1] += (r.durations_ms or {}).get("triggerExecution", r.batch_duration_ms) / 1000.0
        a[2] += 1
    return {q: n / s for q, (n, s, _) in acc.items() if s > 0}


def _completed(conn: Connection, job_id: int, since_ms: int, now_ms: int) -> int:
    rows = conn.execute(select(batches.c.trigger_ms, batches.c.batch_duration_ms).where(
        batches.c.job_id == job_id, batches.c.trigger_ms >= since_ms - 3_600_000)).all()
    return sum(1 for r in rows if since_ms < r.trigger_ms + r.batch_duration_ms <= now_ms)


def slope(points: list[tuple[float, float]]) -> Optional[float]:
    """Least-squares slope of ``(x, y)`` points; None with fewer than 3 or no spread in x."""
    if len(points) < 3:
        return None
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    if sxx <= 0:
        return None
    return sum((x - mx) * (y - my) for x, y in points) / sxx


def first_batches(conn: Connection, job_id: int, run_ids) -> dict[str, int]:
    """The first micro-batch id stored for each of the query runs ``run_ids`` (one indexed read)."""
    run_ids = sorted({r for r in run_ids if r is not None})
    if not run_ids:
        return {}
    rows = conn.execute(select(batches.c.run_id, func.min(batches.c.batch_id)).where(
        batches.c.job_id == job_id, batches.c.run_id.in_(run_ids)).group_by(batches.c.run_id)).all()
    return {r[0]: r[1] for r in rows}


def troughs(states: list, first: Optional[dict] = None) -> list[tuple[float, float]]:
    """``(s, backlog rows)`` right after each completed batch (one query's states, oldest first), on the
    driver's clock. A state is observed up to a reporter interval after the batch it names ended, and
    its backlog holds what arrived meanwhile (at 16 000 rows/s up to 16 000 rows, a different amount
    after each batch: noise in the trend). So the backlog at the batch's end is the earliest state
    observed at or after ``last_batch_end_ms`` less its arrival rate × the time since that end (never
    below 0), at the end's time; without the end or a rate, the smallest backlog of the states naming
    the batch, at its state's time (before 2026-11-27, every trough). Not after the first batch of a
    query run (``first``: run id → its first batch id, :func:`first_batches`): a new run's first batch
    starts with nothing waiting, or with all that waited while the query was down, so its trough says
    nothing of the trend (on the standalone cluster a fresh run's 0 followed by ~6 000 rows read as a
    growing backlog and scaled a job out 3.7 s after its policy was enabled)."""
    at_end: dict = {}  # (run, batch) -> (observed ms, end s, rows at the end): the earliest state after the end
    smallest: dict = {}  # (run, batch) -> (observed s, rows): the smallest backlog, the fallback
    for r in states:
        if r["backlog_rows"] is None or r["last_batch_id"] is None or r["status"] in ("idle", "terminated"):
            continue
        if first and first.get(r["run_id"]) == r["last_batch_id"]:
            continue
        key = (r["run_id"], r["last_batch_id"])
        rows = float(r["backlog_rows"])
        if key not in smallest or rows < smallest[key][1]:
            smallest[key] = (r["observed_ms"] / 1000.0, rows)
        end, rate = r.get("last_batch_end_ms"), r.get("arrival_rows_per_second")
        if end is not None and rate is not None and r["observed_ms"] >= end and \
                (key not in at_end or r["observed_ms"] < at_end[key][0]):
            at_end[key] = (r["observed_ms"], end / 1000.0, max(0.0, rows - rate * (r["observed_ms"] - end) / 1000.0))
    return sorted((at_end[k][1], at_end[k][2]) if k in at_end else smallest[k] for k in smallest)


def query_live(r, now_ms: int, rate: Optional[float]) -> dict:
    """Running batch age, oldest record age and backlog of one query from its latest state ``r``, as
    of ``now_ms`` (control-plane clock; see the module docstring on clocks)."""
    status = r["status"]
    since_s = max(0, now_ms - r["received_ms"]) / 1000.0  # since the state arrived
    out = {"query_id": r["query_id"], "run_id": r["run_id"], "name": r["name"], "status": status,
           "observed_ms": r["observed_ms"], "running_batch_id": r["running_batch_id"],
           "running_batch_start_ms": r["running_batch_start_ms"], "last_batch_id": r["last_batch_id"],
           "last_batch_end_ms": r["last_batch_end_ms"],
           "trigger_interval_s": None if r["trigger_interval_ms"] is None else r["trigger_interval_ms"] / 1000.0,
           "last_idle_ms": r["last_idle_ms"], "running_batch_age_s": None, "oldest_record_age_s": None,
           "oldest_record_source": None, "backlog_rows": None, "backlog_s": None,
           "arrival_rows_per_second": r["arrival_rows_per_second"], "processing_rows_per_second": rate,
           "sources": list(r["sources"] or [])}
    rated = [s for s in out["sources"] if s.get("arrival_rows_per_second") is not None]
    out["arrival_probed"] = bool(rated) and all(s.get("arrival_probed") for s in rated)
    if status in ("idle", "terminated"):
        if status == "idle" and r["backlog_rows"] is not None:
            out.update(backlog_rows=0.0, backlog_s=0.0)
        return out
    if status == "running" and r["running_batch_start_ms"] is not None:
        out["running_batch_age_s"] = max(0.0, (r["observed_ms"] - r["running_batch_start_ms"]) / 1000.0) + since_s
    if r["oldest_unprocessed_ms"] is not None:
        out.update(oldest_record_age_s=max(0.0, (r["observed_ms"] - r["oldest_unprocessed_ms"]) / 1000.0) + since_s,
                   oldest_record_source="source")
    elif r["backlog_rows"] is None and out["running_batch_age_s"] is not None:
        out.update(oldest_record_age_s=out["running_batch_age_s"], oldest_record_source="running-batch")
    if r["backlog_rows"] is not None:
        rows = float(r["backlog_rows"]) + (r["arrival_rows_per_second"] or 0.0) * since_s
        out["backlog_rows"] = rows
        out["backlog_s"] = rows / rate if rate else None
    return out


def _job_status(statuses: list[str]) -> str:
    for s in ("running", "waiting", "idle"):
        if s in statuses:
            return s
    return "terminated"


def live(conn: Connection, job_id: int, now_ms: Optional[int] = None, window_s: float = 30.0,
         max_age_ms: int = LIVE_STALE_MS) -> Optional[dict]:
    """The job's live state as a dict (the API's ``/live``): job-level figures and each query's;
    None when no reporter sent a query state in the last ``max_age_ms``."""
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    latest = latest_states(conn, job_id, now_ms, max_age_ms)
    if not latest:
        return None
    rates = processing_rates(conn, job_id, now_ms)
    queries = [query_live(r, now_ms, rates.get(r["query_id"])) for r in latest]
    trend_s = max(window_s, MIN_TREND_WINDOW_S)
    by_query: dict[str, list] = defaultdict(list)
    for r in _states(conn, job_id, now_ms - int(trend_s * 1000)):
        by_query[r["query_id"]].append(r)
    first = first_batches(conn, job_id, (r["run_id"] for rs in by_query.values() for r in rs))
    for q in queries:  # each query's backlog trend (None when idle, terminated or too few batches)
        q["backlog_growth_rows_per_second"] = (None if q["status"] in ("idle", "terminated")
                                               else slope(troughs(by_query.get(q["query_id"], []), first)))
    growth = [q["backlog_growth_rows_per_second"] for q in queries if q["backlog_growth_rows_per_second"] is not None]
    running = [q for q in queries if q["running_batch_age_s"] is not None]
    oldest = max((q for q in queries if q["oldest_record_age_s"] is not None),
                 key=lambda q: q["oldest_record_age_s"], default=None)
    oldest_run = max(running, key=lambda q: q["running_batch_age_s"], default=None)
    backlog = [q["backlog_rows"] for q in queries if q["backlog_rows"] is not None]
    backlog_s = [q["backlog_s"] for q in queries if q["backlog_s"] is not None]
    triggers = [q["trigger_interval_s"] for q in queries if q["trigger_interval_s"] is not None]
    live_rates = [q["processing_rows_per_second"] for q in queries if q["processing_rows_per_second"]]
    arrivals = [q["arrival_rows_per_second"] for q in queries if q["arrival_rows_per_second"] is not None]
    return {
        "status": _job_status([q["status"] for q in queries]),
        "observed_ms": max(q["observed_ms"] for q in queries),
        "running_batch_id": oldest_run["running_batch_id"] if oldest_run else None,
        "running_batch_age_s": oldest_run["running_batch_age_s"] if oldest_run else None,
        "oldest_record_age_s": oldest["oldest_record_age_s"] if oldest else None,
        "oldest_record_source": oldest["oldest_record_source"] if oldest else None,
        "backlog_rows": sum(backlog) if backlog else None,
        "backlog_s": sum(backlog_s) if backlog_s else None,
        "processing_rows_per_second": sum(live_rates) if live_rates else None,
        "arrival_rows_per_second": sum(arrivals) if arrivals else None,
        "arrival_probed": bool(arrivals) and all(q["arrival_probed"] for q in queries
                                                  if q["arrival_rows_per_second"] is not None),
        "backlog_growth_rows_per_second": sum(growth) if growth else None,
        "trigger_interval_s": min(triggers) if triggers else None,
        "completed_batches": _completed(conn, job_id, now_ms - int(window_s * 1000), now_ms),
        "queries": queries,
    }


def live_stats(conn: Connection, job_id: int, now_ms: int, window_s: float) -> Optional[LiveStats]:
    """:func:`live` as the policies' :class:`policies.base.LiveStats` (None without current states)."""
    d = live(conn, job_id, now_ms, window_s)
    if d is None:
        return None
    return LiveStats(queries=len(d["queries"]), **{k: v for k, v in d.items() if k != "queries"})


def in_flight_lower_bound_s(r) -> Optional[float]:
    """At the time a state was observed: the larger of the running batch's age and the oldest
    record's age (seconds), a lower bound on the latency of the records in flight; None for idle
    and terminated queries and when nothing is in flight."""
    if r["status"] in ("idle", "terminated"):
        return None
    ages = []
    if r["status"] == "running" and r["running_batch_start_ms"] is not None:
        ages.append((r["observed_ms"] - r["running_batch_start_ms"]) / 1000.0)
    if r["oldest_unprocessed_ms"] is not None:
        ages.append((r["observed_ms"] - r["oldest_unprocessed_ms"]) / 1000.0)
    return max(0.0, max(ages)) if ages else None


def in_flight_by_span(conn: Connection, job_id: int, since_ms: int, until_ms: int, span_ms: int) -> dict[int, float]:
    """Per averaging span (aligned on the epoch) within [since, until): the largest in-flight lower
    bound on record latency (seconds, :func:`in_flight_lower_bound_s`) among the states observed in
    it. Spans without states, or only idle ones, are absent."""
    out: dict[int, float] = {}
    for r in _states(conn, job_id, since_ms, until_ms):
        lb = in_flight_lower_bound_s(r)
        if lb is None or not math.isfinite(lb):
            continue
        start = r["observed_ms"] - r["observed_ms"] % span_ms
        out[start] = max(out.get(start, 0.0), lb)
    return out


def probed_arrival_rates(conn: Connection, job_ids: list[int], now_ms: int, max_age_ms: int = 3000) -> dict[int, float]:
    """Per job of ``job_ids``: the arrival rate (rows per second) its reporters' latest query states
    (received within ``max_age_ms``) read from *probed* sources (``collectors.source_probe``), summed
    over its running or waiting queries; a job with a query whose rate is not probed is left out (its
    live rate shows a step only once a batch completes). Drivers whose clock is more than
    ``CLOCK_SKEW_MS`` behind are left out (read through the index, not the job's whole history)."""
    if not job_ids:
        return {}
    rows = conn.execute(select(query_states.c.job_id, query_states.c.query_id, query_states.c.status,
                               query_states.c.arrival_rows_per_second, query_states.c.sources)
                        .where(query_states.c.job_id.in_(job_ids), query_states.c.received_ms >= now_ms - max_age_ms,
                               # the index's range (job, observed): driver clocks within CLOCK_SKEW_MS of ours
                               query_states.c.observed_ms >= now_ms - max_age_ms - CLOCK_SKEW_MS)
                        .order_by(query_states.c.observed_ms, query_states.c.id)).all()
    latest: dict[tuple[int, str], Any] = {}
    for r in rows:
        latest[(r.job_id, r.query_id)] = r
    out: dict[int, float] = {}
    blind: set[int] = set()
    for (job_id, _), r in latest.items():
        if r.status in ("idle", "terminated"):
            continue
        rated = [s for s in (r.sources or []) if s.get("arrival_rows_per_second") is not None]
        if r.arrival_rows_per_second is None or not rated or not all(s.get("arrival_probed") for s in rated):
            blind.add(job_id)
            continue
        out[job_id] = out.get(job_id, 0.0) + float(r.arrival_rows_per_second)
    return {j: v for j, v in out.items() if j not in blind}

