"""Translate Spark listener events (as Spark's own ``JsonProtocol`` JSON) into wire records.

Pure Python over dicts: the listener hands over ``JsonProtocol.sparkEventToJsonString(event)``
parsed with ``json.loads`` (the same JSON as Spark's event log), so this module is testable on
recorded event logs and never touches py4j.

Only jobs of streaming queries (job property ``sql.streaming.queryId``) are tracked; tasks of
other jobs are ignored. A task whose stage was never seen (its JobStart was dropped from a full
queue) is counted as *orphaned* and not reported.
"""
from __future__ import annotations

import json
from collections import OrderedDict
from dataclasses import dataclass
from datetime import datetime
from decimal import ROUND_HALF_UP, Decimal
from typing import Any, Optional

from spark_governor.collectors.templates import StageTemplate, TemplateRegistry
from spark_governor.policies.task_fold import TaskFold

QUERY_ID = "sql.streaming.queryId"
BATCH_ID = "streaming.sql.batchId"
_MAX_STAGES = 4096


@dataclass
class StageContext:
    template: StageTemplate
    query_id: str
    batch_id: Optional[int]
    num_tasks: int
    submission_ms: Optional[int] = None


def _int(x: Any) -> int:
    """``x`` as a non-negative int (0 for anything that is not a number)."""
    if type(x) is int:  # the common case, without the conversion
        return x if x > 0 else 0
    try:
        return max(0, int(x))
    except (TypeError, ValueError, OverflowError):
        return 0


def _failure_reason(reason: dict) -> Optional[str]:
    kind = reason.get("Reason", "Unknown")
    if kind == "Success":
        return None
    detail = reason.get("Description") or reason.get("Class Name") or reason.get("Kill Reason") or ""
    return f"{kind}: {detail}"[:4096] if detail else kind


class EventTranslator:
    """Keeps job/stage context and turns events into ``("stage"|"task", record)`` pairs."""

    def __init__(self, slots: Optional[int] = None, task_cpus: int = 1) -> None:
        self.templates = TemplateRegistry()
        self.known_templates: dict[str, StageTemplate] = {}
        self._stages: "OrderedDict[int, StageContext]" = OrderedDict()
        self._ignored_stages: "OrderedDict[int, None]" = OrderedDict()
        self._executor_cores: dict[str, int] = {}
        self._initial_slots = slots
        self.task_cpus = max(1, task_cpus)
        self.orphaned = 0
        self.live_slots: Optional[int] = None  # set by the reporter from the SparkContext

    # -- executors -------------------------------------------------------------------------
    @property
    def slots(self) -> Optional[int]:
        """Concurrent task slots: total executor cores / spark.task.cpus (None if unknown)."""
        if self.live_slots is not None:
            return self.live_slots
        if self._executor_cores:
            return sum(self._executor_cores.values()) // self.task_cpus
        return self._initial_slots

    # -- dispatch --------------------------------------------------------------------------
    def handle(self, ev: dict) -> list[tuple[str, dict]]:
        handler = _HANDLERS.get(ev.get("Event", ""))
        return handler(self, ev) if handler else []

    def _remember(self, table: OrderedDict, key: int, value) -> None:
        table[key] = value
        table.move_to_end(key)
        while len(table) > _MAX_STAGES:
            table.popitem(last=False)

    def _job_start(self, ev: dict) -> list:
        props = ev.get("Properties") or {}
        infos = ev.get("Stage Infos") or []
        query_id = props.get(QUERY_ID)
        if not query_id:
            for info in infos:
                self._remember(self._ignored_stages, info["Stage ID"], None)
            return []
        batch = props.get(BATCH_ID)
        batch_id = int(batch) if batch is not None and str(batch).isdigit() else None
        for stage_id, tmpl in self.templates.templates_for_job(query_id, batch_id or 0, infos).items():
            info = next(i for i in infos if i["Stage ID"] == stage_id)
            self.known_templates[tmpl.key] = tmpl
            self._remember(self._stages, stage_id,
                           StageContext(tmpl, query_id, batch_id, _int(info.get("Number of Tasks"))))
        return []

    def _stage_submitted(self, ev: dict) -> list:
        info = ev.get("Stage Info") or {}
        ctx = self._stages.get(info.get("Stage ID"))
        if ctx is not None and info.get("Submission Time"):
            ctx.submission_ms = _int(info["Submission Time"])
            ctx.num_tasks = _int(info.get("Number of Tasks", ctx.num_tasks))
        return []

    def _stage_completed(self, ev: dict) -> list:
        info = ev.get("Stage Info") or {}
        ctx = self._stages.get(info.get("Stage ID"))
        if ctx is None:
            return []
        submission = info.get("Submission Time") or ctx.submission_ms
        return [("stage", {
            "template_key": ctx.template.key,
            "query_id": ctx.query_id,
            "batch_id": ctx.batch_id,
            "stage_id": _int(info.get("Stage ID")),
            "attempt": _int(info.get("Stage Attempt ID")),
            "num_tasks": _int(info.get("Number of Tasks", ctx.num_tasks)),
            "submission_ms": _int(submission) if submission else None,
            "completion_ms": _int(info["Completion Time"]) if info.get("Completion Time") else None,
            "failure_reason": (info.get("Failure Reason") or None) and str(info["Failure Reason"])[:4096],
            "slots": self.slots,
        })]

    def _task_end(self, ev: dict) -> list:
        stage_id = ev.get("Stage ID")
        ctx = self._stages.get(stage_id)
        if ctx is None:
            if stage_id not in self._ignored_stages:
                self.orphaned += 1
            return []
        ti = ev.get("Task Info") or {}
        tm = ev.get("Task Metrics") or {}
        acc_records = acc_bytes = None  # the input metrics' accumulables (the last of each name)
        for a in ti.get("Accumulables", ()):
            name = a.get("Name")
            if name == "internal.metrics.input.recordsRead":
                acc_records = a.get("Update")
            elif name == "internal.metrics.input.bytesRead":
                acc_bytes = a.get("Update")
        inp = tm.get("Input Metrics") or {}
        out = tm.get("Output Metrics") or {}
        sr = tm.get("Shuffle Read Metrics") or {}
        sw = tm.get("Shuffle Write Metrics") or {}
        launch = _int(ti.get("Launch Time"))
        finish = max(launch, _int(ti.get("Finish Time")))
        submission = ctx.submission_ms if ctx.submission_ms is not None and ctx.submission_ms <= launch else None
        reason = ev.get("Task End Reason") or {"Reason": "Success"}
        return [("task", {
            "template_key": ctx.template.key,
            "query_id": ctx.query_id,
            "batch_id": ctx.batch_id,
            "stage_id": _int(stage_id),
            "stage_attempt": _int(ev.get("Stage Attempt ID")),
            "task_id": _int(ti.get("Task ID")),
            "partition": _int(ti.get("Partition ID", ti.get("Index"))),
            "attempt": _int(ti.get("Attempt")),
            "executor_id": str(ti.get("Executor ID") or "unknown")[:256],
            "host": str(ti["Host"])[:256] if ti.get("Host") else None,
            "stage_submission_ms": submission,
            "launch_ms": launch,
            "finish_ms": finish,
            "run_time_ms": _int(tm.get("Executor Run Time")),
            "cpu_time_ns": _int(tm.get("Executor CPU Time")),
            "gc_time_ms": _int(tm.get("JVM GC Time")),
            "deserialize_ms": _int(tm.get("Executor Deserialize Time")),
            "result_serialize_ms": _int(tm.get("Result Serialization Time")),
            # event logs written with accumulators may carry input counts only there
            "input_records": max(_int(inp.get("Records Read")), _int(acc_records)),
            "input_bytes": max(_int(inp.get("Bytes Read")), _int(acc_bytes)),
            "output_records": _int(out.get("Records Written")),
            "output_bytes": _int(out.get("Bytes Written")),
            "shuffle_read_records": _int(sr.get("Total Records Read")),
            "shuffle_read_bytes": _int(sr.get("Remote Bytes Read")) + _int(sr.get("Local Bytes Read")),
            "shuffle_fetch_wait_ms": _int(sr.get("Fetch Wait Time")),
            "shuffle_write_records": _int(sw.get("Shuffle Records Written")),
            "shuffle_write_bytes": _int(sw.get("Shuffle Bytes Written")),
            "shuffle_write_time_ns": _int(sw.get("Shuffle Write Time")),
            "successful": reason.get("Reason") == "Success",
            "speculative": bool(ti.get("Speculative", False)),
            "failure_reason": _failure_reason(reason),
        })]

    def _executor_added(self, ev: dict) -> list:
        """The executor's cores, and its registration time for the provisioning delay (not the driver's)."""
        info = ev.get("Executor Info") or {}
        executor_id = str(ev.get("Executor ID"))
        self._executor_cores[executor_id] = _int(info.get("Total Cores"))
        if executor_id == "driver" or not isinstance(ev.get("Timestamp"), int):
            return []
        return [("executor", {"executor_id": executor_id, "added_ms": ev["Timestamp"],
                              "cores": self._executor_cores[executor_id] or None})]

    def _executor_removed(self, ev: dict) -> list:
        executor_id = str(ev.get("Executor ID"))
        self._executor_cores.pop(executor_id, None)
        if executor_id == "driver" or not isinstance(ev.get("Timestamp"), int):
            return []
        return [("executor", {"executor_id": executor_id, "removed_ms": ev["Timestamp"]})]


#: the events the translator reads, by name
_HANDLERS = {
    "SparkListenerJobStart": EventTranslator._job_start,
    "SparkListenerStageSubmitted": EventTranslator._stage_submitted,
    "SparkListenerStageCompleted": EventTranslator._stage_completed,
    "SparkListenerTaskEnd": EventTranslator._task_end,
    "SparkListenerExecutorAdded": EventTranslator._executor_added,
    "SparkListenerExecutorRemoved": EventTranslator._executor_removed,
}


def parse_time_ms(ts: Any) -> Optional[int]:
    """Epoch ms of Spark's ISO timestamps (``2026-11-25T06:26:24.000Z``); None when absent or bad."""
    if not ts or not isinstance(ts, str):
        return None
    try:
        return int(datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp() * 1000)
    except ValueError:
        return None


def batch_record(progress: dict) -> dict:
    """Wire record of one ``StreamingQueryProgress`` (its ``json`` parsed into a dict; from an event
    log, through :func:`complete_progress` first)."""
    trigger_ms = parse_time_ms(progress.get("timestamp")) or 0
    observed = {}
    for name, row in (progress.get("observedMetrics") or {}).items():
        observed[str(name)] = row if isinstance(row, dict) else str(row)

    def rate(x):
        try:
            v = float(x)
        except (TypeError, ValueError):
            return None
        return v if v >= 0 and v == v and v != float("inf") else None

    return {
        "query_id": progress["id"],
        "run_id": progress["runId"],
        "name": progress.get("name") or None,
        "batch_id": _int(progress.get("batchId")),
        "trigger_ms": trigger_ms,
        "batch_duration_ms": _int(progress.get("batchDuration")),
        "durations_ms": {**{str(k): _int(v) for k, v in (progress.get("durationMs") or {}).items()},
                         **paced_durations(progress)},
        "num_input_rows": _int(progress.get("numInputRows")),
        "input_rows_per_second": rate(progress.get("inputRowsPerSecond")),
        "processed_rows_per_second": rate(progress.get("processedRowsPerSecond")),
        "state_operators": list(progress.get("stateOperators") or []),
        "event_time": {str(k): str(v) for k, v in (progress.get("eventTime") or {}).items()},
        "observed_metrics": observed,
    }


def _spark_rate(x: Optional[float]) -> Optional[float]:
    """A rate as ``StreamingQueryProgress.json`` writes it: rounded half-up to one decimal (Spark's
    ``safeDoubleToJValue``); NaN and infinities are left out (None)."""
    if x is None or x != x or x in (float("inf"), float("-inf")):
        return None
    return float(Decimal(repr(x)).quantize(Decimal("0.1"), rounding=ROUND_HALF_UP))


def complete_progress(progress: dict) -> dict:
    """A ``StreamingQueryProgress`` from the event log as the live listener sees it (``progress.json``).

    The event log serializes the progress case class field by field (Jackson), the listener reads
    ``StreamingQueryProgress.json``; they differ in three ways, undone here so that ``batch_record`` gives
    the same record for a replayed and a live batch:

    * the totals Spark derives from ``sources`` are absent from the log: ``numInputRows`` (rows),
      ``inputRowsPerSecond`` and ``processedRowsPerSecond`` (rows per second), each the sum over sources;
    * ``json`` rounds those rates half-up to one decimal;
    * each state operator carries ``snapshotCustomMetricNames``, which ``json`` leaves out.
    """
    sources = [s for s in progress.get("sources") or [] if isinstance(s, dict)]
    out = dict(progress)
    if "numInputRows" not in out:
        try:
            out["numInputRows"] = sum(int(s.get("numInputRows") or 0) for s in sources)
        except (TypeError, ValueError):
            out["numInputRows"] = 0
    for name in ("inputRowsPerSecond", "processedRowsPerSecond"):
        if name not in out:
            try:
                out[name] = _spark_rate(sum(float(s.get(name)) for s in sources)) if sources else None
            except (TypeError, ValueError):
                out[name] = None
    if isinstance(out.get("stateOperators"), list):
        out["stateOperators"] = [{k: v for k, v in op.items() if k != "snapshotCustomMetricNames"}
                                 if isinstance(op, dict) else op for op in out["stateOperators"]]
    return out


def paced_durations(progress: dict) -> dict:
    """``batchInterval`` / ``batchQueueing`` (ms) of a batch cut by a paced source
    (``collectors.sources.paced``), read from the ``interval_ms`` / ``queueing_ms`` fields of its
    end offset; empty for other sources."""
    for source in progress.get("sources") or []:
        end = source.get("endOffset")
        if isinstance(end, str):
            try:
                end = json.loads(end)
            except ValueError:
                continue
        if isinstance(end, dict) and "interval_ms" in end:
            out = {"batchInterval": _int(end.get("interval_ms"))}
            if end.get("queueing_ms") is not None:
                out["batchQueueing"] = _int(end.get("queueing_ms"))
            return out
    return {}


#: wire report field of each record kind (``policies.wire.Report``)
_PLURAL = {"stage": "stages", "task": "tasks", "batch": "batches", "partition": "partitions", "executor": "executors",
           "query": "queries"}


def report_body(items: list, templates: dict[str, StageTemplate], fold: Optional[TaskFold] = None,
                window_ms: Optional[int] = None, now_ms: Optional[int] = None, final: bool = False) -> dict[str, list]:
    """The record lists of one wire report (``policies.wire.Report``), as the reporter and a replay
    send them: ``items``, ``(kind, record)`` pairs (kind ``stage``, ``task``, ``batch``, ``partition``, ``executor``
    or ``query``: a query state, ``collectors.query_state``,
    records as :class:`EventTranslator` and :func:`batch_record` make them), grouped by kind in their
    order, and a description of every template a record refers to (``templates``: key → template,
    :attr:`EventTranslator.known_templates`), in key order.

    With ``fold`` (schema v3, ``policies.task_fold``) the tasks and completed stages are folded into
    ``template_windows`` and ``task_spans`` of ``window_ms`` windows, the runtime windows that ended before
    ``now_ms`` (epoch ms; every open one when ``final``) join as ``runtime_windows``, executors' first tasks join
    ``executors``, and ``tasks`` keeps the rows that travel as detail; without it (v2) every task travels."""
    body: dict[str, list] = {"templates": [], "stages": [], "tasks": [], "batches": []}
    for kind, rec in items:
        body.setdefault(_PLURAL[kind], []).append(rec)
    if fold is not None:
        if window_ms is None or now_ms is None:
            raise ValueError("window_ms, now_ms: required to fold tasks")
        folded = fold.fold(body["tasks"], body["stages"], window_ms, now_ms, final)
        body["tasks"] = folded["tasks"]
        for name in ("runtime_windows", "template_windows", "task_spans"):
            if folded[name]:
                body[name] = folded[name]
        if folded["executors"]:
            body["executors"] = body.get("executors", []) + folded["executors"]
    keys = set()
    for name in ("stages", "tasks", "runtime_windows", "template_windows"):
        for rec in body.get(name, ()):
            keys.add(rec["template_key"])
    for key in sorted(keys):
        t = templates.get(key)
        if t is not None:
            body["templates"].append({"key": t.key, "name": t.name, "ordinal": t.ordinal,
                                      "operators": list(t.operators), "parents": list(t.parents)})
    return body


_DECODER = json.JSONDecoder()


def parse_concatenated(text: str) -> list:
    """JSON values written one after another (separated by optional whitespace), in order.

    Stops at the first value that does not parse (a truncated tail)."""
    values, i, n = [], 0, len(text)
    while True:
        while i < n and text[i] in " \t\r\n":
            i += 1
        if i >= n:
            return values
        try:
            value, i = _DECODER.raw_decode(text, i)
        except ValueError:
            return values
        values.append(value)


def decode_json_events(events: list) -> list:
    """Default decoder for already-serialized events (JSON strings) or dicts."""
    return [json.loads(e) if isinstance(e, (str, bytes)) else e for e in events]
