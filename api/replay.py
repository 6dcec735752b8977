"""Import a Spark event log into the control plane as a job, and optionally run a policy over it (what-if).

One idea: turn a recorded run into the same statistics a live run produces, on the log's own clock.

* Events are read by ``collectors.event_log`` (streamed, bounded memory) and translated by the very
  code the live listener uses (``collectors.events.EventTranslator`` and ``batch_record``), folded as the
  reporters fold them (``policies.task_fold``: report schema v3, task rows only as detail), then shipped
  as wire reports (``policies.wire.Report``, built as ``collectors.reporter`` builds them) to
  ``aggregators.ingest.ingest_report`` in process. So a replayed run and the live run of the same job
  give the same task, stage and batch statistics (windows are placed by the tasks' finish times and
  batches by their trigger times, both from the log).
* Each report is ingested in its own transaction (``engine.begin()``): a report is stored whole or not
  at all; a report the store refuses is counted (``reports_failed``, its records in ``records_lost``)
  and the import goes on.
* A log without any streaming query (no ``QueryStartedEvent`` / ``QueryProgressEvent``) is imported as
  a **batch application**: every Spark job's stages and tasks, under one pseudo query id
  (``BATCH_QUERY_ID``), since the live listener only follows jobs of streaming queries.
* Health on the log's clock: the run's verdict at the log's end and its timeline of verdicts
  (``aggregators.health_timeline``, the rules and window of a live job's verdict), in ``health`` and ``timeline``.
* What-if (``policy``): the policy is stored for the job in ``dry-run`` mode and evaluated by the
  governor (``api.governor.Governor.evaluate_job``, the code the scheduler runs) at every evaluation
  point of the log's timeline: every ``evaluation_interval_s`` seconds of log time from the first event,
  once everything logged up to that point has been ingested. Its decisions are stored with their
  predictions, as a live passive run stores them. When the replay ends the policy is disabled for the
  job (its decisions stay), so a control plane's scheduler never evaluates the replayed job.

Clocks: everything uses the log's milliseconds since the epoch: what is placed in time (task windows,
batches, evaluation points, decisions' ``created_ms``) and the bookkeeping columns that ``ingest_report``
stamps for live reports with the control plane's clock (report arrival, reporter and run first/last
report, template first/last seen): each report is ingested with ``now_ms`` = the latest event time read, and
each query state is stamped as received when it was observed.

Speed: events are read lean (``EventLogReader.events(lean=True)``: only the events used are parsed, without
the parts the translation never reads) and the cyclic garbage collector runs less often while a replay
runs (:func:`_fewer_collections`); see ``docs/benchmarks.md`` (replay of event logs).

Units: executor-seconds are the ``executors`` knob's unit (executors, or task slots in local mode —
``policies.base.JobView.local_slots``) times seconds of log time.
"""
from __future__ import annotations

import gc
import math
import os
import threading
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from sqlalchemy import insert, select, update
from sqlalchemy.engine import Engine

from spark_governor.aggregators import constraints as constraint_store
from spark_governor.aggregators.ingest import DEFAULT_WINDOW_MS, ingest_report
from spark_governor.aggregators.health import DEFAULT_WINDOW_S as HEALTH_WINDOW_S
from spark_governor.aggregators.health_timeline import end_instant, health_timeline, verdict_at
from spark_governor.aggregators.models import (decisions, job_runs, jobs, latency_constraints, policy_configs,
                                               query_states)
from spark_governor.aggregators.runs import run_spans
from spark_governor.api.governor import Governor
from spark_governor.collectors.event_log import EventLogReader
from spark_governor.collectors.query_state import QueryTracker
from spark_governor.collectors.reporter import STATE_INTERVAL_S
from spark_governor.collectors.trigger_inference import TriggerInference
from spark_governor.collectors.events import (BATCH_ID, QUERY_ID, EventTranslator, batch_record, complete_progress,
                                              parse_time_ms, report_body)
from spark_governor.policies.registry import get_policy, validate_config
from spark_governor.policies.task_fold import TaskFold
from spark_governor.policies.wire import SCHEMA_VERSION, Report, validate_job_name

PROGRESS = "org.apache.spark.sql.streaming.StreamingQueryListener$QueryProgressEvent"
STARTED = "org.apache.spark.sql.streaming.StreamingQueryListener$QueryStartedEvent"
TERMINATED = "org.apache.spark.sql.streaming.StreamingQueryListener$QueryTerminatedEvent"
IDLE = "org.apache.spark.sql.streaming.StreamingQueryListener$QueryIdleEvent"
APP_START = "SparkListenerApplicationStart"
APP_END = "SparkListenerApplicationEnd"
ENV = "SparkListenerEnvironmentUpdate"
TRANSLATED = ("SparkListenerJobStart", "SparkListenerStageSubmitted", "SparkListenerStageCompleted",
              "SparkListenerTaskEnd", "SparkListenerExecutorAdded", "SparkListenerExecutorRemoved")
_TRANSLATED = frozenset(TRANSLATED)
WANTED = frozenset((*TRANSLATED, PROGRESS, STARTED, IDLE, TERMINATED, APP_START, APP_END, ENV))
_QUERY_EVENTS = {STARTED: "started", IDLE: "idle", TERMINATED: "terminated"}
#: the pseudo streaming-query id under which a batch application's Spark jobs are imported
BATCH_QUERY_ID = "batch-application"
DEFAULT_CONSTRAINT_NAME = "replay"
#: query states a report carries at most (``policies.wire.Report.queries`` allows 256)
MAX_STATES_PER_REPORT = 240
#: the constraint a replay judges the run by when the what-if brings none (``Replay._slo``)
SLO_CONSTRAINT_NAME = "slo"


class ReplayError(ValueError):
    """Bad input to a replay (the message names the field: ``path``, ``job``, ``policy``, ``config``)."""


@dataclass
class ReplayResult:
    job: str
    app_id: Optional[str] = None
    app_name: Optional[str] = None
    master: Optional[str] = None
    streaming: bool = False
    queries: list = field(default_factory=list)
    first_ms: Optional[int] = None
    last_ms: Optional[int] = None
    tasks: int = 0
    stages: int = 0
    batches: int = 0
    rows: int = 0  # numInputRows summed over the imported batches
    reports: int = 0
    reports_failed: int = 0
    records_lost: int = 0
    orphaned_tasks: int = 0
    failures: list = field(default_factory=list)  # why reports were refused (first 10)
    read: dict = field(default_factory=dict)  # collectors.event_log.ReadStats.to_json()
    evaluations: int = 0
    what_if: Optional[dict] = None
    #: the verdict at the log's end (``aggregators.health.Verdict`` fields) and the timeline's segments
    #: (``aggregators.health_timeline``); None / empty when nothing was imported
    health: Optional[dict] = None
    timeline: list = field(default_factory=list)
    #: the latency SLO the run was judged by (``Replay._slo``): bound, where it came from, attainment; None: none
    slo: Optional[dict] = None
    #: executor-seconds the run used (task-slot-seconds in local mode; module docstring), log time
    executor_seconds: Optional[float] = None

    def to_json(self) -> dict:
        return dict(self.__dict__)


def event_time_ms(ev: dict) -> Optional[int]:
    """When ``ev`` happened, in ms since the epoch, from its own fields (None if it carries no time)."""
    kind = ev.get("Event")
    if kind == "SparkListenerTaskEnd":
        return (ev.get("Task Info") or {}).get("Finish Time")
    if kind in ("SparkListenerStageCompleted", "SparkListenerStageSubmitted"):
        info = ev.get("Stage Info") or {}
        return info.get("Completion Time") if kind == "SparkListenerStageCompleted" else info.get("Submission Time")
    if kind == "SparkListenerJobStart":
        return ev.get("Submission Time")
    if kind == PROGRESS:
        p = ev.get("progress") or {}
        start = parse_time_ms(p.get("timestamp"))
        return None if start is None else start + int(p.get("batchDuration") or 0)
    if kind in (STARTED, TERMINATED):
        return parse_time_ms(ev.get("timestamp"))
    t = ev.get("Timestamp")
    return t if isinstance(t, int) else None


def scan(path: str) -> dict:
    """A first look at the log, reading event names only (JSON of the few events it needs): the
    application's name and id, the master, and whether it has a streaming query. Stops at the first
    streaming event once the application start was seen, so for a streaming log it reads little."""
    reader = EventLogReader(path)
    out: dict[str, Any] = {"app_name": None, "app_id": None, "master": None, "streaming": False}
    for ev in reader.events(wanted=(APP_START, ENV, STARTED, PROGRESS)):
        kind = ev["Event"]
        if kind == APP_START:
            out["app_name"], out["app_id"] = ev.get("App Name"), ev.get("App ID")
        elif kind == ENV:
            props = ev.get("Spark Properties") or {}
            props = dict(props) if isinstance(props, list) else props
            out["master"] = props.get("spark.master")
        else:
            out["streaming"] = True
        if out["streaming"] and out["app_name"] is not None:
            break
    return out


#: generation-0 threshold of the cyclic garbage collector while a replay runs (Python's default: 700)
GC_GEN0_THRESHOLD = 100_000
_gc_lock = threading.Lock()
_gc_users = 0
_gc_saved: tuple = ()


@contextmanager
def _fewer_collections():
    """Run the cyclic garbage collector less often while the block runs (generation 0 every
    :data:`GC_GEN0_THRESHOLD` allocations instead of 700), then restore the thresholds.

    A replay allocates a few dicts per event and frees them by reference counting (they form no
    cycles), so the collector's frequent young-generation passes over them were about 18 % of the
    import's time (``bench replay``, 50 MB log) and found nothing to collect. Collection still runs, so
    memory stays bounded. Concurrent replays share the setting (counted; the last one restores it)."""
    global _gc_users, _gc_saved
    with _gc_lock:
        if _gc_users == 0:
            _gc_saved = gc.get_threshold()
            gc.set_threshold(max(GC_GEN0_THRESHOLD, _gc_saved[0]), *_gc_saved[1:])
        _gc_users += 1
    try:
        yield
    finally:
        with _gc_lock:
            _gc_users -= 1
            if _gc_users == 0:
                gc.set_threshold(*_gc_saved)


class _Timeline:
    """A step function of the ``executors`` knob's value over log time (for executor-seconds)."""

    def __init__(self) -> None:
        self.steps: list[tuple[int, int]] = []

    def set(self, t_ms: int, value: int) -> None:
        if self.steps and self.steps[-1][1] == value:
            return
        self.steps.append((t_ms, value))

    def value_at(self, t_ms: int) -> Optional[int]:
        v = None
        for t, x in self.steps:
            if t > t_ms:
                break
            v = x
        return v

    def integral_s(self, start_ms: int, end_ms: int, override: Optional[list] = None) -> float:
        """∫ value dt over [start, end] in value·seconds; ``override``: [(t_ms, value)] replacing the value
        from each t on (the policy's decisions)."""
        points = sorted(set([start_ms, end_ms] + [t for t, _ in self.steps if start_ms < t < end_ms]
                            + [t for t, _ in (override or []) if start_ms < t < end_ms]))
        total = 0.0
        for a, b in zip(points, points[1:]):
            v = None
            for t, x in override or []:
                if t <= a:
                    v = x
            if v is None:
                v = self.value_at(a) or 0
            total += v * (b - a) / 1000.0
        return total


class Replay:
    """Import one event log (see the module docstring). ``progress(bytes_read)`` is called as it reads."""

    def __init__(self, engine: Engine, path: str, job: Optional[str] = None, *, window_ms: int = DEFAULT_WINDOW_MS,
                 evaluation_interval_s: float = 10.0, policy: Optional[str] = None,
                 policy_config: Optional[dict] = None, max_records: int = 5_000,
                 progress: Optional[Callable[[int], None]] = None, fold: bool = True,
                 health_window_s: float = HEALTH_WINDOW_S, slo_bound_ms: Optional[float] = None,
                 slo_from_trigger: bool = False, slo_span_s: float = constraint_store.DEFAULT_SPAN_S,
                 timeline: bool = True) -> None:
        self.engine, self.path = engine, path
        if slo_bound_ms is not None and not (isinstance(slo_bound_ms, (int, float)) and slo_bound_ms > 0):
            raise ReplayError("bound_ms: must be a positive number of milliseconds")
        if not slo_span_s > 0:
            raise ReplayError("span_s: must be a positive number of seconds")
        self.slo_bound_ms, self.slo_from_trigger, self.slo_span_s = slo_bound_ms, slo_from_trigger, slo_span_s
        self.timeline = timeline  # judge the run over its life too (up to 120 verdicts), not only at its end
        self.window_ms, self.evaluation_interval_s = window_ms, evaluation_interval_s
        self.health_window_s = health_window_s
        self.max_records = max_records
        self.progress = progress
        self.reader = EventLogReader(path)  # path errors surface here (EventLogError names the path)
        info = scan(path)
        name = job or info["app_name"]
        if not name:
            raise ReplayError("job: the log has no SparkListenerApplicationStart with an app name; pass --job")
        try:
            self.job = validate_job_name(name)
        except ValueError as exc:
            raise ReplayError(f"{exc}{'' if job else ' (the app name of the log); pass --job'}") from None
        self.result = ReplayResult(job=self.job, app_id=info["app_id"], app_name=info["app_name"],
                                   master=info["master"], streaming=info["streaming"])
        self.local = bool(info["master"] and str(info["master"]).startswith("local"))
        self.policy_name, self.constraint = None, None
        self.policy_cfg = None
        if policy:
            self._check_policy(policy, dict(policy_config or {}))
        with engine.connect() as conn:
            if conn.execute(select(jobs.c.id).where(jobs.c.name == self.job)).first() is not None:
                raise ReplayError(f"job: {self.job!r} already exists; replay into a new job name (--job)")
        self.translator = EventTranslator()
        # the queries' states as the reporter keeps them, from what the log shows (no status polls, no probe:
        # no arrival rate extrapolated beyond the offsets)
        self.tracker = QueryTracker(extrapolate=False)
        self.triggers: dict[str, TriggerInference] = {}  # query id → its trigger interval read back
        self._pending_states = 0  # query states in ``pending``
        # the reporters' edge fold (report schema v3, policies.task_fold), so a replayed log costs the store what a
        # live job does; ``fold=False`` sends whole task rows (schema v2, deprecated), the same statistics
        self.fold = TaskFold() if fold else None
        self.reporter_id = uuid.uuid4().hex
        self.seq = 0
        self.pending: list[tuple[str, dict]] = []
        self.executors: dict[str, int] = {}  # executor id -> cores (driver included)
        self.knob = _Timeline()
        self.queries: dict[str, str] = {}
        self.job_id: Optional[int] = None

    # -- what-if setup -----------------------------------------------------------------------
    def _check_policy(self, name: str, raw: dict) -> None:
        from spark_governor.policies.registry import InvalidConfig, PolicyNotFound

        constraint = raw.pop("constraint", None)
        try:
            cls = get_policy(name)
            cfg = validate_config(cls, raw)
        except PolicyNotFound as exc:
            raise ReplayError(f"policy: {exc}") from None
        except InvalidConfig as exc:
            raise ReplayError(str(exc)) from None
        if constraint is not None:
            if not isinstance(constraint, dict):
                raise ReplayError("config.constraint: must be an object {bound_ms, span_s, name, vertices}")
            bound = constraint.get("bound_ms")
            span = constraint.get("span_s", constraint_store.DEFAULT_SPAN_S)
            if not isinstance(bound, (int, float)) or isinstance(bound, bool) or bound <= 0:
                raise ReplayError("config.constraint.bound_ms: must be a positive number of milliseconds")
            if not isinstance(span, (int, float)) or isinstance(span, bool) or span <= 0:
                raise ReplayError("config.constraint.span_s: must be a positive number of seconds")
            vertices = constraint.get("vertices")
            if vertices is not None and not (isinstance(vertices, list) and all(isinstance(v, str) for v in vertices)):
                raise ReplayError("config.constraint.vertices: must be a list of template keys or null")
            cname = constraint.get("name", DEFAULT_CONSTRAINT_NAME)
            if not isinstance(cname, str) or not 0 < len(cname) <= 128:
                raise ReplayError("config.constraint.name: must be a string of 1 to 128 characters")
            extra = set(constraint) - {"bound_ms", "span_s", "vertices", "name"}
            if extra:
                raise ReplayError(f"config.constraint.{sorted(extra)[0]}: unknown field")
            self.constraint = {"name": cname, "bound_ms": float(bound), "span_s": float(span), "vertices": vertices}
        self.policy_name, self.policy_cfg = cls.name, cfg

    def _install_policy(self, now_ms: int) -> None:
        with self.engine.begin() as conn:
            conn.execute(insert(policy_configs).values(job_id=self.job_id, policy=self.policy_name, enabled=True,
                                                       mode="dry-run", config=self.policy_cfg.model_dump(mode="json"),
                                                       updated_ms=now_ms))
            if self.constraint:
                c = self.constraint
                conn.execute(insert(latency_constraints).values(
                    job_id=self.job_id, name=c["name"], vertices=c["vertices"], bound_ms=c["bound_ms"],
                    span_s=c["span_s"], event_time_metric=True, updated_ms=now_ms))

    # -- reports -------------------------------------------------------------------------------
    def _slots(self) -> Optional[int]:
        return self.translator.slots

    def _executor_count(self) -> int:
        return sum(1 for e in self.executors if e != "driver")

    def _flush(self, final: bool = False) -> None:
        """Ship what is pending as one report; ``final``: the last one, with every runtime window still open."""
        if not self.pending and not (final and self.fold is not None and self.fold.open and self.job_id is not None):
            return  # an empty report would create the job with nothing in it
        items, self.pending, self._pending_states = self.pending, [], 0
        body = report_body(items, self.translator.known_templates, self.fold, self.window_ms, self._now, final)
        self.seq += 1
        slots = self._slots()
        report = {
            "schema_version": SCHEMA_VERSION if self.fold else 2, "job": self.job,
            "reporter": {"id": self.reporter_id, "seq": self.seq, "dropped_total": 0,
                         "orphaned_total": self.translator.orphaned, "app_id": self.result.app_id,
                         "master": self.result.master, "slots": slots,
                         "executors": 0 if self.local else self._executor_count(),
                         "not_actuatable": {"executors": "local mode"} if self.local else {}},
            **body,
        }
        if self.fold is not None:
            report["window_ms"] = self.window_ms
            report["reporter"]["task_detail"] = self.fold.task_detail
        try:
            parsed = Report.model_validate(report)
            with self.engine.begin() as conn:
                res = ingest_report(conn, parsed, self.window_ms, now_ms=self._now or None)
                if parsed.queries:  # a state arrives when the reporter takes it: on the log's clock, when observed
                    conn.execute(update(query_states).where(query_states.c.job_id == res.job_id,
                                                            query_states.c.received_ms == self._now)
                                 .values(received_ms=query_states.c.observed_ms))
        except Exception as exc:  # the report is not stored at all (one transaction); go on with the next
            self.result.reports_failed += 1
            self.result.records_lost += len(items)
            if len(self.result.failures) < 10:
                self.result.failures.append(f"report {self.seq}: {exc.__class__.__name__}: {str(exc)[:300]}")
            return
        self.job_id = res.job_id
        self.result.reports += 1
        self.result.tasks += res.tasks
        self.result.stages += res.stages
        self.result.batches += res.batches
        self.result.rows += sum(b.num_input_rows for b in parsed.batches) if res.batches else 0

    # -- the replay ----------------------------------------------------------------------------
    def _on_event(self, ev: dict) -> None:
        kind = ev["Event"]
        if kind == "SparkListenerExecutorAdded":
            self.executors[str(ev.get("Executor ID"))] = int((ev.get("Executor Info") or {}).get("Total Cores") or 0)
        elif kind == "SparkListenerExecutorRemoved":
            self.executors.pop(str(ev.get("Executor ID")), None)
        if kind == STARTED:
            self.queries[str(ev.get("id"))] = ev.get("name") or ""
        if kind in _QUERY_EVENTS:
            self.tracker.on_query_event(_QUERY_EVENTS[kind], ev, self._now)
            if kind == IDLE and ev.get("id"):
                at = parse_time_ms(ev.get("timestamp"))
                if at is not None:
                    self._trigger(str(ev["id"])).idle(at)
        elif kind == "SparkListenerJobStart":
            self.tracker.on_job_start(ev)
        if kind == PROGRESS:
            progress = complete_progress(ev.get("progress") or {})
            self.queries.setdefault(str(progress.get("id")), progress.get("name") or "")
            self.tracker.on_progress(progress)
            start = parse_time_ms(progress.get("timestamp"))
            execution = (progress.get("durationMs") or {}).get("triggerExecution")
            if start is not None and isinstance(execution, (int, float)):
                self._trigger(str(progress.get("id"))).batch(start, execution)
            self.pending.append(("batch", batch_record(progress)))
        elif kind in _TRANSLATED:
            if kind == "SparkListenerJobStart" and not self.result.streaming:
                props = dict(ev.get("Properties") or {})
                props.setdefault(QUERY_ID, BATCH_QUERY_ID)
                props.pop(BATCH_ID, None)
                ev = {**ev, "Properties": props}
            self.pending.extend(self.translator.handle(ev))
        if kind.startswith("SparkListenerExecutor"):
            self.knob.set(self._now, self._knob_value())

    def _trigger(self, query_id: str) -> TriggerInference:
        """The query's trigger interval as read so far."""
        t = self.triggers.get(query_id)
        if t is None:
            t = self.triggers[query_id] = TriggerInference()
        return t

    def _states(self, at_ms: int) -> None:
        """The queries' states at ``at_ms`` (log time), as the reporter sends them every ``STATE_INTERVAL_S``:
        running batch and its age, backlog from the sources' offsets, idle, terminated
        (``collectors.query_state``, fed with the log's job starts, progress and query events), with the trigger
        interval read back from the log (``collectors.trigger_inference``)."""
        if self.tracker.queries:
            for query_id, t in self.triggers.items():  # as the reporter reads it from the query itself
                q = self.tracker.queries.get(query_id)
                if q is not None and t.interval_ms is not None:
                    q.trigger_ms = t.interval_ms
            states = self.tracker.snapshot(at_ms)
            if self._pending_states + len(states) > MAX_STATES_PER_REPORT:
                self._flush()
            self.pending.extend(("query", rec) for rec in states)
            self._pending_states += len(states)

    def _knob_value(self) -> int:
        """The ``executors`` knob as the policies count it: task slots in local mode, else executors."""
        return (self._slots() or 0) if self.local else self._executor_count()

    def _evaluate(self, governor: Governor, at_ms: int) -> None:
        self._flush()
        if self.job_id is None:
            return
        governor.evaluate_job(self.job_id, now_ms=at_ms)
        self.result.evaluations += 1

    def run(self) -> ReplayResult:
        with _fewer_collections():
            return self._run()

    def _run(self) -> ReplayResult:
        governor = Governor(self.engine, self.evaluation_interval_s, self.window_ms) if self.policy_name else None
        interval_ms = int(self.evaluation_interval_s * 1000)
        next_eval: Optional[int] = None
        self._now = 0
        last_progress = 0
        installed = False
        state_ms = int(STATE_INTERVAL_S * 1000)
        next_state: Optional[int] = None
        for ev in self.reader.events(wanted=WANTED, lean=True):
            t = event_time_ms(ev)
            if isinstance(t, int) and t > 0:
                if self.result.first_ms is None:
                    self.result.first_ms = t
                    next_eval = t + interval_ms
                    next_state = t + state_ms
                self._now = max(self._now, t)
            while next_state is not None and next_state <= self._now:  # the reporter's state cadence
                self._states(next_state)
                next_state += state_ms
            if governor is not None and next_eval is not None and self._now > next_eval:
                if not installed:
                    self._flush()  # creates the job
                    if self.job_id is not None:
                        self._install_policy(self.result.first_ms)
                        installed = True
                while self._now > next_eval:  # before the job has data there is nothing to evaluate
                    if installed:
                        self._evaluate(governor, next_eval)
                    next_eval += interval_ms
            self._on_event(ev)
            if len(self.pending) >= self.max_records:
                self._flush()
            if self.progress is not None and self.reader.stats.bytes_read - last_progress >= 1 << 16:
                self.progress(self.reader.stats.bytes_read - last_progress)
                last_progress = self.reader.stats.bytes_read
        if self._now:
            self._states(self._now)
        self._flush()
        self._flush(final=True)
        if self.progress is not None:
            self.progress(self.reader.stats.bytes_read - last_progress)
        self.result.last_ms = self._now or None
        if self.result.first_ms is not None and self.result.last_ms is not None:
            self.result.executor_seconds = self.knob.integral_s(self.result.first_ms, self.result.last_ms)
        if governor is not None and self.job_id is not None:
            if not installed:
                self._install_policy(self.result.first_ms or 0)
            if next_eval is not None and next_eval <= self._now:
                self._evaluate(governor, next_eval)
            self.result.what_if = self._what_if()
            with self.engine.begin() as conn:  # done: a control plane's scheduler must not evaluate it on
                conn.execute(update(policy_configs).where(policy_configs.c.job_id == self.job_id)
                             .values(enabled=False, updated_ms=self._now))
        if self.job_id is not None:  # a replayed job: /metrics exports it from the import on (api.job_metrics)
            with self.engine.begin() as conn:
                conn.execute(update(jobs).where(jobs.c.id == self.job_id).values(attachment={
                    "kind": "replay", "imported_ms": int(time.time() * 1000), "log": os.path.basename(self.path)}))
                # the run spans the log, from its first event to its last (ingest stamps a run's reports: the
                # first flush, and the last at most once a second)
                conn.execute(update(job_runs).where(job_runs.c.job_id == self.job_id).values(
                    first_ms=min(self.result.first_ms or self._now, self._now), last_ms=self._now))
            self._slo()
            self._judge()
        self.result.orphaned_tasks = self.translator.orphaned
        self.result.queries = [{"id": q, "name": n} for q, n in sorted(self.queries.items())]
        self.result.read = self.reader.stats.to_json()
        return self.result

    # -- the run's SLO -----------------------------------------------------------------------------
    def _slo(self) -> None:
        """The run's latency SLO: the what-if's constraint, else one of ``slo_bound_ms`` or, with
        ``slo_from_trigger``, 2 × the trigger interval read back from the log (``collectors.trigger_inference``), stored
        as the job's constraint :data:`SLO_CONSTRAINT_NAME` (so the verdict and the API judge the run by it) and
        measured over the whole run into ``result.slo``."""
        source = None
        if not self.result.streaming:  # a batch application has no micro-batches to hold to a latency bound
            return
        found = [t.interval_ms for t in self.triggers.values() if t.interval_ms is not None]
        trigger_ms = max(found) if found else None
        with self.engine.begin() as conn:
            c = constraint_store.find(conn, self.job_id, self.constraint["name"]) if self.constraint else None
            if c is not None:
                source = "--config"
            else:
                bound, trigger = self.slo_bound_ms, None
                if bound is not None:
                    source = "--bound-ms"
                elif self.slo_from_trigger:
                    trigger = trigger_ms
                    if trigger is not None:
                        bound, source = 2.0 * trigger, f"2 x the trigger interval ({trigger} ms)"
                if bound is None:
                    if self.slo_from_trigger and self.result.streaming:
                        self.result.slo = {"bound_ms": None, "source": "no trigger interval seen (batches ran back "
                                                                       "to back): give --bound-ms"}
                    return
                conn.execute(insert(latency_constraints).values(
                    job_id=self.job_id, name=SLO_CONSTRAINT_NAME, vertices=None, bound_ms=float(bound),
                    span_s=self.slo_span_s, event_time_metric=True, updated_ms=self._now))
                c = constraint_store.find(conn, self.job_id, SLO_CONSTRAINT_NAME)
            start, end = self.result.first_ms or 0, self.result.last_ms or 0
            span_ms = int(c.span_s * 1000)
            spans = max(1, math.ceil((end - start) / span_ms) + 1)
            m = constraint_store.measure(conn, self.job, self.job_id, c, end + span_ms, spans, self.window_ms)
            self.result.slo = {"name": c.name, "bound_ms": c.bound_ms, "span_s": c.span_s, "source": source,
                               "spans": len(m["spans"]), "attainment": m["attainment"], "trigger_ms": trigger_ms}

    # -- health on the log's clock ---------------------------------------------------------------
    def _judge(self) -> None:
        """The run's verdict at its end and its timeline (``aggregators.health_timeline``: just before its queries'
        final termination, else at the log's last event)."""
        with self.engine.connect() as conn:
            run = next((r for r in run_spans(conn, self.job_id) if r.latest), None)
            if run is None:
                return
            end = end_instant(conn, self.job_id, run)
            v = verdict_at(conn, self.job, run, end, self.health_window_s, self.window_ms)
            self.result.health = {"state": v.state, "reason": v.reason, "evaluated_ms": v.evaluated_ms,
                                  "window_s": self.health_window_s, "numbers": v.numbers,
                                  "recommended_executors": v.recommended_executors,
                                  "recommendation": v.recommendation}
            if self.timeline:
                self.result.timeline = health_timeline(conn, self.job, run, run.first_ms, end,
                                                       self.health_window_s, self.window_ms)

    # -- what-if summary -------------------------------------------------------------------------
    def _what_if(self) -> dict:
        start, end = self.result.first_ms, self.result.last_ms
        with self.engine.connect() as conn:
            rows = conn.execute(select(decisions).where(decisions.c.job_id == self.job_id)
                                .order_by(decisions.c.created_ms, decisions.c.id)).all()
            summary: dict[str, Any] = {
                "policy": self.policy_name, "mode": "dry-run", "evaluation_interval_s": self.evaluation_interval_s,
                "evaluations": self.result.evaluations, "actions": len(rows),
                "actions_by_knob": {}, "unit": "task slots" if self.local else "executors",
                "decisions": [{"created_ms": r.created_ms, "knob": r.knob, "old_value": r.old_value,
                               "new_value": r.new_value, "status": r.status, "prediction": r.prediction}
                              for r in rows[:50]],
            }
            for r in rows:
                summary["actions_by_knob"][r.knob] = summary["actions_by_knob"].get(r.knob, 0) + 1
            overrides = [(r.created_ms, int(r.new_value)) for r in rows
                         if r.knob == "executors" and isinstance(r.new_value, (int, float))]
            if start is not None and end is not None and end > start:
                summary["actual_executor_seconds"] = self.knob.integral_s(start, end)
                summary["predicted_executor_seconds"] = self.knob.integral_s(start, end, overrides)
            if self.constraint:
                c = constraint_store.find(conn, self.job_id, self.constraint["name"])
                span_ms = int(c.span_s * 1000)
                spans = max(1, math.ceil(((end or 0) - (start or 0)) / span_ms) + 1)
                m = constraint_store.measure(conn, self.job, self.job_id, c, (end or 0) + span_ms, spans,
                                             self.window_ms)
                predicted = [s for s in m["spans"] if s["predicted_latency_ms"] is not None]
                summary["constraint"] = {
                    "name": c.name, "bound_ms": c.bound_ms, "span_s": c.span_s, "spans": len(m["spans"]),
                    "actual_attainment": m["attainment"],
                    "predicted_attainment": (sum(s["predicted_latency_ms"] <= c.bound_ms for s in predicted)
                                             / len(predicted)) if predicted else None,
                    "predicted_spans": len(predicted)}
        return summary


def replay(engine: Engine, path: str, job: Optional[str] = None, **options) -> ReplayResult:
    """Import ``path`` into ``engine`` as job ``job`` (default: the log's app name); see :class:`Replay`."""
    return Replay(engine, path, job, **options).run()

