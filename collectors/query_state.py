"""The state of each streaming query *between* its micro-batches, for the control plane.

A micro-batch's progress (``onQueryProgress``) arrives only when the batch completes, so a batch
that runs far longer than the latency bound is invisible until it ends. :class:`QueryTracker`
keeps what the driver knows in the meantime and turns it into ``policies.wire.QueryStateRecord``
dicts, one per query, every time the reporter builds a report (at least once a second):

* the **running batch**: its id and start time from the first Spark job of the batch (the job
  properties ``sql.streaming.queryId`` and ``streaming.sql.batchId`` that MicroBatchExecution
  sets), or, when the batch has not started a job yet (e.g. ``foreachBatch`` code before its first
  action), from the query's status (trigger active with data available), first seen by a poll;
* the **latest completed batch** (its progress) and the **trigger interval** (the query's trigger,
  read by the poll: ``ProcessingTimeTrigger(ms)``);
* **liveness**: ``onQueryIdle`` (Spark 3.5+: a trigger found no new data) and the status'
  ``isDataAvailable`` after a trigger, so an idle query is reported ``idle`` rather than looking
  stuck; ``onQueryTerminated`` ends the query;
* per **source**, the processed offset (``endOffset`` of the latest completed batch) and the
  latest one, and where offsets count rows, the rows available now and the backlog: the latest
  offset's rows plus the arrival rate (rows per second between the offsets of recent batches, i.e.
  what the source offered, not what was processed) times the time since that offset was read.
  Offsets that count rows: the project's own sources (``{"rows": n, "t_ms": ...}``, where ``t_ms``
  is when the source offered them), Kafka (``{topic: {partition: offset}}``) and plain numbers.
  The oldest unprocessed row became available when the processed offset was reached:
  ``t_latest − (latest − processed) / rate``;
* per source with a **probe** (``collectors.source_probe``: the source's row counter read now, outside
  Spark's triggers), the arrival rate is the counter's growth over the last ``probe_rate_s`` seconds
  and the rows available now the latest offset's rows plus the counter's growth since that offset
  was read (``arrival_probed``: a rate step shows within a snapshot, not one completed batch late).

Pure Python over dicts (progress JSON, listener event JSON, status polls): no py4j, testable
without Spark. Not thread-safe: only the reporter thread calls it.
"""
from __future__ import annotations

import json
import re
from collections import deque
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Optional

from spark_governor.collectors.events import parse_time_ms  # noqa: F401 (also this module's API)
from spark_governor.collectors.source_probe import SourceProbe
from spark_governor.policies.wire import MAX_OFFSET_CHARS, MAX_QUERIES_PER_REPORT, MAX_SOURCES_PER_QUERY

QUERY_ID = "sql.streaming.queryId"
BATCH_ID = "streaming.sql.batchId"
#: recent (offset time, rows) points kept per source for the arrival rate
RATE_POINTS = 8
#: a terminated query is reported this many times more, then forgotten
TERMINATED_REPORTS = 3
#: probe samples kept per source (one per snapshot, at least one a second)
PROBE_POINTS = 64
#: the probed arrival rate is the counter's growth over this many seconds: one snapshot interval, so the
#: first snapshot after a step shows the new rate, not a mix with the old one (2 s read a 4× step as 2.5×)
PROBE_RATE_S = 1.0
_TRIGGER = re.compile(r"ProcessingTimeTrigger\((\d+)\)")


def trigger_interval_ms(trigger: Optional[str]) -> Optional[int]:
    """The interval of a processing-time trigger from its JVM ``toString``; None for others."""
    m = _TRIGGER.search(trigger or "")
    return int(m.group(1)) if m else None


def _offset(value: Any) -> Any:
    """An offset as JSON data (progress offsets are dicts, numbers or JSON text)."""
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def offset_rows(value: Any) -> Optional[int]:
    """Rows up to an offset, where the offset counts rows: ``{"rows": n, ...}`` (the project's
    sources), a number, or nested objects of numbers (Kafka ``{topic: {partition: offset}}``,
    summed). None for offsets that do not count rows (file names, opaque strings)."""
    value = _offset(value)
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        return int(value) if value >= 0 else None
    if isinstance(value, dict):
        if "rows" in value:
            return offset_rows(value["rows"])
        if not value:
            return None
        total = 0
        for v in value.values():
            n = offset_rows(v)
            if n is None:
                return None
            total += n
        return total
    return None


def offset_time_ms(value: Any) -> Optional[int]:
    """When the source offered the rows up to this offset (the project's sources' ``t_ms``)."""
    value = _offset(value)
    if isinstance(value, dict) and isinstance(value.get("t_ms"), (int, float)) and not isinstance(value["t_ms"], bool):
        return int(value["t_ms"])
    return None


def _offset_text(value: Any) -> Optional[str]:
    if value is None:
        return None
    text = value if isinstance(value, str) else json.dumps(value, separators=(",", ":"), sort_keys=True)
    return text if len(text) <= MAX_OFFSET_CHARS else None


def _nonneg_float(x: Any) -> Optional[float]:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v if v >= 0 and v == v and v != float("inf") else None


@dataclass
class SourceState:
    description: Optional[str] = None
    processed_offset: Any = None
    latest_offset: Any = None
    processed_rows: Optional[int] = None
    latest_rows: Optional[int] = None
    latest_ms: Optional[int] = None  # when the latest offset's rows were available
    points: deque = field(default_factory=lambda: deque(maxlen=RATE_POINTS))  # (ms, rows) of latest offsets
    reported_rate: Optional[float] = None  # the progress' inputRowsPerSecond (fallback)
    metrics: dict = field(default_factory=dict)
    probe: Optional[SourceProbe] = None  # resolved once per source (None: no probe matches)
    probe_resolved: bool = False
    probe_points: deque = field(default_factory=lambda: deque(maxlen=PROBE_POINTS))  # (ms, counter rows)

    def sample(self, probe: Optional[SourceProbe], now_ms: int) -> None:
        """Read ``probe``'s row counter at ``now_ms`` (epoch ms); a failing probe or ``None`` clears
        the samples (the record falls back to the offsets)."""
        if probe is None:
            return
        try:
            rows = probe.rows(now_ms / 1000.0)
            rows = None if rows is None else float(rows)
        except Exception:  # a probe never breaks the reporter
            rows = None
        if rows is None or rows != rows or rows in (float("inf"), float("-inf")):
            self.probe_points.clear()
            return
        pts = self.probe_points
        if pts and (now_ms < pts[-1][0] or rows < pts[-1][1]):
            pts.clear()  # the counter went back (a restarted producer): start over
        if pts and now_ms == pts[-1][0]:
            pts[-1] = (now_ms, rows)
        else:
            pts.append((now_ms, rows))

    def _counter_at(self, ms: float) -> Optional[float]:
        """The probe's counter at ``ms``, linear between samples; None before the first sample."""
        pts = self.probe_points
        if not pts or ms < pts[0][0]:
            return None
        prev = pts[0]
        for p in pts:
            if p[0] >= ms:
                if p[0] == prev[0]:
                    return p[1]
                return prev[1] + (p[1] - prev[1]) * (ms - prev[0]) / (p[0] - prev[0])
            prev = p
        return pts[-1][1]

    def probed(self, now_ms: int, rate_s: float) -> Optional[tuple[float, Optional[float]]]:
        """``(rate, growth)`` from the probe as of ``now_ms``: rows per second over the last ``rate_s``
        seconds (or the samples' span, when shorter), and the counter's growth since the latest
        offset was read (None when that is before the first sample). None without two samples, the
        latest taken at ``now_ms``."""
        pts = self.probe_points
        if len(pts) < 2 or pts[-1][0] != now_ms:
            return None
        start = max(pts[0][0], now_ms - rate_s * 1000.0)
        if now_ms <= start:
            return None
        rate = (pts[-1][1] - self._counter_at(start)) * 1000.0 / (now_ms - start)
        since = None if self.latest_ms is None else self._counter_at(self.latest_ms)
        return rate, None if since is None else pts[-1][1] - since

    def arrival_rate(self) -> Optional[float]:
        """Rows per second the source offered over its recent offsets (None when unknown)."""
        pts = list(self.points)
        if len(pts) >= 2 and pts[-1][0] > pts[0][0] and pts[-1][1] >= pts[0][1]:
            return (pts[-1][1] - pts[0][1]) * 1000.0 / (pts[-1][0] - pts[0][0])
        return self.reported_rate

    def record(self, now_ms: int, idle_since_ms: Optional[int], probe_rate_s: float = PROBE_RATE_S,
               extrapolate: bool = True) -> dict:
        """The wire record at ``now_ms``; with ``idle_since_ms`` the source had nothing new then. With
        probe samples (:meth:`sample` at ``now_ms``) the rate and the rows available are the probe's. Without
        ``extrapolate`` (a replay: only what the log shows) no arrival rate and no rows beyond the latest offset."""
        out: dict[str, Any] = {
            "description": (self.description or None) and str(self.description)[:256],
            "processed_offset": _offset_text(self.processed_offset),
            "latest_offset": _offset_text(self.latest_offset),
            "processed_rows": self.processed_rows,
            "min_offsets_behind_latest": _nonneg_float(self.metrics.get("minOffsetsBehindLatest")),
            "avg_offsets_behind_latest": _nonneg_float(self.metrics.get("avgOffsetsBehindLatest")),
            "max_offsets_behind_latest": _nonneg_float(self.metrics.get("maxOffsetsBehindLatest")),
        }
        probed = self.probed(now_ms, probe_rate_s)
        rate = probed[0] if probed is not None else self.arrival_rate() if extrapolate else None
        out["arrival_rows_per_second"] = rate
        if probed is not None:
            out["arrival_probed"] = True
        if self.processed_rows is None or self.latest_rows is None or self.latest_ms is None:
            return out
        latest_rows, latest_ms = max(self.latest_rows, self.processed_rows), self.latest_ms
        if probed is not None and probed[1] is not None:
            available = latest_rows + probed[1]  # what the source offered since the latest offset
        elif probed is None and idle_since_ms is not None and idle_since_ms >= latest_ms \
                and latest_rows <= self.processed_rows:
            available = float(latest_rows)  # the last trigger found nothing new: no extrapolation
            rate = 0.0
        else:
            available = latest_rows + (rate or 0.0) * max(0, now_ms - latest_ms) / 1000.0
        backlog = max(0, int(available) - self.processed_rows)
        out.update(available_rows=int(available), backlog_rows=backlog)
        if backlog > 0:
            behind = latest_rows - self.processed_rows
            if behind > 0 and rate:
                oldest = latest_ms - behind * 1000.0 / rate
            else:  # the first row after the latest offset
                oldest = latest_ms
            out["oldest_unprocessed_ms"] = max(0, int(oldest))
        return out


@dataclass
class QueryState:
    query_id: str
    run_id: Optional[str] = None
    name: Optional[str] = None
    running_batch_id: Optional[int] = None
    running_start_ms: Optional[int] = None
    last_batch_id: Optional[int] = None
    last_trigger_ms: Optional[int] = None
    last_end_ms: Optional[int] = None
    trigger_ms: Optional[int] = None  # trigger interval
    last_idle_ms: Optional[int] = None
    no_data_ms: Optional[int] = None  # a poll saw the last trigger find no new data (since when)
    terminated_ms: Optional[int] = None
    terminated_reports: int = 0
    polled: bool = False  # a status poll has listed this query
    sources: list[SourceState] = field(default_factory=list)

    def idle_since(self) -> Optional[int]:
        """Since when the query has had no new data, if it has none now (after its last batch)."""
        if self.running_start_ms is not None:
            return None
        marks = [t for t in (self.last_idle_ms, self.no_data_ms) if t is not None]
        last = self.last_end_ms or 0
        marks = [t for t in marks if t >= last]
        return min(marks) if marks else None


class QueryTracker:
    """Running batch, completed batches, liveness and source offsets of each streaming query."""

    def __init__(self, probes: Optional[list[SourceProbe]] = None, probe_rate_s: float = PROBE_RATE_S,
                 extrapolate: bool = True) -> None:
        """``probes``: source probes (``collectors.source_probe``), the first matching a source is its
        probe; ``probe_rate_s``: the window of a probed arrival rate (seconds); ``extrapolate``: False for a
        replay (:meth:`SourceState.record`)."""
        self.extrapolate = extrapolate
        self.queries: dict[str, QueryState] = {}
        self.probes = list(probes or [])
        if not probe_rate_s > 0:
            raise ValueError(f"probe_rate_s: expected seconds > 0 (got {probe_rate_s})")
        self.probe_rate_s = probe_rate_s

    def _probe(self, q: QueryState, s: SourceState) -> Optional[SourceProbe]:
        if not s.probe_resolved:
            s.probe = next((p for p in self.probes if p.matches(q.name, s.description)), None)
            s.probe_resolved = True
        return s.probe

    def _query(self, query_id: str) -> QueryState:
        q = self.queries.get(query_id)
        if q is None:
            if len(self.queries) >= MAX_QUERIES_PER_REPORT:  # forget the oldest terminated ones first
                gone = [k for k, v in self.queries.items() if v.terminated_ms is not None] or list(self.queries)
                del self.queries[gone[0]]
            q = self.queries[query_id] = QueryState(query_id)
        return q

    def _new_run(self, q: QueryState, run_id: Optional[str]) -> None:
        if run_id and q.run_id != run_id:
            if q.run_id is not None:  # a restart: the old run's batch and liveness are gone
                q.running_batch_id = q.running_start_ms = None
                q.last_idle_ms = q.no_data_ms = None
            q.run_id = run_id
            q.terminated_ms, q.terminated_reports = None, 0

    # -- events ---------------------------------------------------------------------------------
    def on_job_start(self, ev: dict) -> None:
        """A ``SparkListenerJobStart`` (event-log JSON): a job of a micro-batch marks it running."""
        props = ev.get("Properties") or {}
        query_id, batch = props.get(QUERY_ID), props.get(BATCH_ID)
        if not query_id or batch is None or not str(batch).isdigit():
            return
        batch_id, started = int(batch), ev.get("Submission Time")
        if not isinstance(started, (int, float)) or isinstance(started, bool):
            return
        q = self._query(query_id)
        if q.terminated_ms is not None or (q.last_batch_id is not None and batch_id <= q.last_batch_id):
            return  # a late event of a batch already completed
        if q.running_batch_id == batch_id or (q.running_batch_id is None and q.running_start_ms is not None):
            q.running_start_ms = min(q.running_start_ms or int(started), int(started))
        else:
            q.running_start_ms = int(started)
        q.running_batch_id = batch_id

    def on_progress(self, progress: dict) -> None:
        """A completed micro-batch (``StreamingQueryProgress`` JSON)."""
        q = self._query(str(progress["id"]))
        self._new_run(q, progress.get("runId"))
        q.name = progress.get("name") or q.name
        batch_id = int(progress.get("batchId", 0) or 0)
        trigger = parse_time_ms(progress.get("timestamp"))
        if q.last_batch_id is not None and batch_id < q.last_batch_id:
            return
        q.last_batch_id, q.last_trigger_ms = batch_id, trigger
        duration = progress.get("batchDuration")
        if trigger is not None and isinstance(duration, (int, float)):
            q.last_end_ms = trigger + int(duration)
        if q.running_batch_id is None or q.running_batch_id <= batch_id:
            q.running_batch_id = q.running_start_ms = None
        sources = progress.get("sources") or []
        while len(q.sources) < min(len(sources), MAX_SOURCES_PER_QUERY):
            q.sources.append(SourceState())
        for s, src in zip(q.sources, sources):
            if s.description != src.get("description"):
                s.description, s.probe_resolved = src.get("description"), False
            s.processed_offset, s.latest_offset = src.get("endOffset"), src.get("latestOffset")
            s.processed_rows = offset_rows(s.processed_offset)
            latest = s.latest_offset if s.latest_offset is not None else s.processed_offset
            rows = offset_rows(latest)
            at = offset_time_ms(latest) or offset_time_ms(s.processed_offset) or trigger
            if rows is not None and at is not None:
                if s.points and (at < s.points[-1][0] or rows < s.points[-1][1]):
                    s.points.clear()  # offsets went back (a new checkpoint, a reset source)
                if not s.points or at > s.points[-1][0]:
                    s.points.append((at, rows))
                s.latest_rows, s.latest_ms = rows, at
            else:
                s.latest_rows = s.latest_ms = None
            s.reported_rate = _nonneg_float(src.get("inputRowsPerSecond"))
            s.metrics = {k: v for k, v in (src.get("metrics") or {}).items() if "OffsetsBehindLatest" in k}

    def on_query_event(self, kind: str, ev: dict, now_ms: int) -> None:
        """``started`` / ``idle`` / ``terminated`` listener events (their ``json``)."""
        query_id = ev.get("id")
        if not query_id:
            return
        q = self._query(str(query_id))
        if kind == "started":
            self._new_run(q, ev.get("runId"))
            q.name = ev.get("name") or q.name
        elif kind == "idle":
            if ev.get("runId") and q.run_id and ev["runId"] != q.run_id:
                return
            q.last_idle_ms = parse_time_ms(ev.get("timestamp")) or now_ms
            if q.running_start_ms is not None and q.running_start_ms <= q.last_idle_ms:
                q.running_batch_id = q.running_start_ms = None  # that trigger ran no batch
        elif kind == "terminated":
            if ev.get("runId") and q.run_id and ev["runId"] != q.run_id:
                return
            q.terminated_ms = now_ms
            q.running_batch_id = q.running_start_ms = None

    def on_status(self, polls: list[dict], now_ms: int) -> None:
        """What a poll of the active queries says (``id``, ``run_id``, ``name``, ``trigger``, and the
        status' ``message``, ``isDataAvailable``, ``isTriggerActive``). An active query with its
        trigger active and data available runs a batch; a query waiting whose last trigger found
        no data is idle; a query the poll no longer lists has terminated."""
        seen = set()
        for p in polls:
            query_id = p.get("id")
            if not query_id:
                continue
            seen.add(query_id)
            q = self._query(str(query_id))
            q.polled = True
            self._new_run(q, p.get("run_id"))
            q.name = p.get("name") or q.name
            if p.get("trigger") is not None:
                q.trigger_ms = trigger_interval_ms(p.get("trigger"))
            active, data = bool(p.get("isTriggerActive")), bool(p.get("isDataAvailable"))
            if active and data:
                q.no_data_ms = None
                if q.running_start_ms is None:
                    q.running_start_ms = now_ms
                    q.running_batch_id = None if q.last_batch_id is None else q.last_batch_id + 1
            elif not active:
                if q.running_start_ms is not None and q.running_start_ms < now_ms:
                    q.running_batch_id = q.running_start_ms = None  # the batch ended (progress follows)
                if data:
                    q.no_data_ms = None
                elif q.no_data_ms is None and str(p.get("message", "")).startswith("Waiting"):
                    q.no_data_ms = now_ms
        for query_id, q in self.queries.items():
            if query_id not in seen and q.terminated_ms is None and q.polled:
                q.terminated_ms = now_ms
                q.running_batch_id = q.running_start_ms = None

    # -- snapshot -------------------------------------------------------------------------------
    def active(self) -> bool:
        """Is any query known that has not terminated (or whose termination is not yet reported)?"""
        return any(q.terminated_ms is None or q.terminated_reports < TERMINATED_REPORTS for q in self.queries.values())

    def snapshot(self, now_ms: int) -> list[dict]:
        """``QueryStateRecord`` dicts of every query, as of ``now_ms``; terminated queries are
        reported a few times and then forgotten."""
        out = []
        for query_id in list(self.queries):
            q = self.queries[query_id]
            if q.terminated_ms is not None:
                if q.terminated_reports >= TERMINATED_REPORTS:
                    del self.queries[query_id]
                    continue
                q.terminated_reports += 1
            idle_since = q.idle_since()
            if q.terminated_ms is not None:
                status = "terminated"
            elif q.running_start_ms is not None:
                status = "running"
            elif idle_since is not None:
                status = "idle"
            else:
                status = "waiting"
            if q.terminated_ms is None:
                for s in q.sources:
                    s.sample(self._probe(q, s), now_ms)
            sources = [s.record(now_ms, idle_since, self.probe_rate_s, self.extrapolate) for s in q.sources]
            counted = [s for s in sources if s.get("backlog_rows") is not None]
            oldest = [s["oldest_unprocessed_ms"] for s in counted if s.get("oldest_unprocessed_ms") is not None]
            rates = [s["arrival_rows_per_second"] for s in sources if s.get("arrival_rows_per_second") is not None]
            out.append({
                "query_id": q.query_id[:256], "run_id": q.run_id, "name": q.name, "observed_ms": now_ms,
                "status": status,
                "running_batch_id": q.running_batch_id if status == "running" else None,
                "running_batch_start_ms": q.running_start_ms if status == "running" else None,
                "running_batch_age_ms": max(0, now_ms - q.running_start_ms) if status == "running" else None,
                "last_batch_id": q.last_batch_id, "last_batch_end_ms": q.last_end_ms,
                "trigger_interval_ms": q.trigger_ms, "last_idle_ms": q.last_idle_ms,
                "backlog_rows": sum(s["backlog_rows"] for s in counted) if counted else None,
                "oldest_unprocessed_ms": min(oldest) if oldest else None,
                "arrival_rows_per_second": sum(rates) if rates else None,
                "sources": sources,
            })
        return out
