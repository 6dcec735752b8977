"""One call that attaches spark-governor's reporters to a running SparkSession.

::

    from spark_governor.collectors import attach
    handle = attach(spark, job="clicks-agg", endpoint="http://127.0.0.1:8787")
    ...
    handle.detach()          # optional; also runs at interpreter exit

It registers

* a ``SparkListener`` implemented in Python over py4j
  (``org.apache.spark.scheduler.SparkListenerInterface``; the py4j callback server is started
  with ``pyspark.java_gateway.ensure_callback_server_started``). Its callbacks only append the
  event *reference* to the reporter's bounded queue and return: Spark's listener bus never waits
  for JSON conversion or HTTP. Callbacks we do not use are answered by a generic no-op.
* a ``StreamingQueryListener`` (through Spark's Python listener wrapper) whose
  ``onQueryProgress`` queues the JVM event; the reporter thread renders its JSON. ``onQueryStarted``,
  ``onQueryIdle`` (a trigger found no new data) and ``onQueryTerminated`` are queued the same way
  for the queries' liveness (``collectors.query_state``);
* a poll of the active queries' status and trigger (``query_status_poller``), which the reporter
  thread calls once a second, so a micro-batch that has not started a Spark job yet is seen running.

Reports carry a reporter token (a control-plane token with the ``report`` scope; issue #16), found as the
listener jar finds it (``reporter_token``): ``attach(..., token=...)``, else the Spark conf
``spark.governor.token``, else the file named by ``spark.governor.tokenFile`` (e.g. a mounted Kubernetes
Secret), else the driver's ``SPARK_GOVERNOR_TOKEN`` environment variable. It is never logged.

Classic (py4j) PySpark only: Spark Connect has no driver-side listener API for Python.
"""
from __future__ import annotations

import atexit
import json
import logging
import os
import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional, Sequence

from spark_governor.collectors.appliers import ExecutorApplier
from spark_governor.collectors.events import EventTranslator, parse_concatenated
from spark_governor.collectors.executor_warmup import DEFAULT_MODULES, ExecutorWarmer
from spark_governor.collectors.reporter import Reporter, check_token
from spark_governor.policies.task_fold import DEFAULT_TASK_DETAIL, TASK_DETAIL_MODES

log = logging.getLogger("spark_governor.attach")

_FORWARDED = ("onJobStart", "onStageSubmitted", "onStageCompleted", "onTaskEnd", "onExecutorAdded", "onExecutorRemoved")


def _noop(*_args: Any) -> None:
    return None


class PySparkListener:
    """py4j proxy for ``SparkListenerInterface``; forwards selected events to the reporter, and counts the tasks
    it saw start and end (``detach`` waits until every task started has ended: :meth:`Attachment.detach`)."""

    class Java:
        implements = ["org.apache.spark.scheduler.SparkListenerInterface"]

    def __init__(self, reporter: Reporter) -> None:
        self._reporter = reporter
        self.tasks_started = 0
        self.tasks_ended = 0

    def _forward(self, event: Any) -> None:
        self._reporter.offer("spark", event)

    def onTaskStart(self, _event: Any) -> None:  # Spark calls every method of the proxy: counting is free
        self.tasks_started += 1

    def onTaskEnd(self, event: Any) -> None:
        self.tasks_ended += 1
        self._reporter.offer("spark", event)

    def __getattr__(self, name: str):
        if name in _FORWARDED:
            return self._forward
        if name.startswith("on"):
            return _noop
        raise AttributeError(name)


#: characters fetched per py4j call. A py4j answer larger than the JVM's 8 KiB writer buffer
#: stalls ~40 ms on loopback (Nagle meets Python's delayed ACK), so JSON is read in chunks that
#: stay below 8 KiB even for 3-byte UTF-8 characters.
_CHUNK_CHARS = 2600


def read_jvm_text(buffer) -> str:
    """Read a JVM ``StringBuffer``/``StringBuilder`` in chunks of ``_CHUNK_CHARS`` characters."""
    n = buffer.length()
    if n <= _CHUNK_CHARS:
        return buffer.toString()
    return "".join(buffer.substring(i, min(n, i + _CHUNK_CHARS)) for i in range(0, n, _CHUNK_CHARS))


class JvmEventDecoder:
    """Turns a list of py4j ``SparkListenerEvent`` objects into Spark's event-log JSON dicts.

    ``JsonProtocol.writeSparkEventToJson`` writes every event of the list through one Jackson
    generator into one JVM ``StringWriter`` (root values separated by spaces); the buffer is then
    read back in chunks and split with ``parse_concatenated``. That is one py4j call per event
    plus ~4 + size/2600 per list, instead of ~44 ms for a single large string answer. Internal
    task-metric accumulators are left out (``spark.eventLog.includeTaskMetricsAccumulators=false``):
    the same values are in the "Task Metrics" object. An event the JVM cannot serialize decodes to
    None. Not thread-safe: only the reporter thread calls it.
    """

    def __init__(self, gateway, conf) -> None:
        jvm = gateway.jvm
        self._jvm = jvm
        self._protocol = jvm.org.apache.spark.util.JsonProtocol
        conf = conf.clone().set("spark.eventLog.includeTaskMetricsAccumulators", "false")
        self._options = jvm.org.apache.spark.util.JsonProtocolOptions(conf)
        self._factory = jvm.com.fasterxml.jackson.core.JsonFactory()
        self._reset()

    def _reset(self) -> None:
        self._writer = self._jvm.java.io.StringWriter()
        self._generator = self._factory.createGenerator(self._writer)
        self._buffer = self._writer.getBuffer()

    def _read(self) -> str:
        self._generator.flush()
        try:
            return read_jvm_text(self._buffer)
        finally:
            self._buffer.setLength(0)

    def _collect(self, written: list[int], out: list) -> None:
        if not written:
            return
        try:
            values = parse_concatenated(self._read())
        except Exception:  # the writer itself failed: lose these events, start afresh
            self._reset()
            return
        for index, value in zip(written, values):
            out[index] = value

    def __call__(self, events: list) -> list:
        out: list = [None] * len(events)
        written: list[int] = []
        for i, event in enumerate(events):
            try:
                self._protocol.writeSparkEventToJson(event, self._generator, self._options)
                written.append(i)
            except Exception:  # keep what was written before this event, then restart the writer
                self._collect(written, out)
                written = []
                self._reset()
        self._collect(written, out)
        return out


def jvm_progress_decoder(gateway) -> Callable[[list], list]:
    """Decoder for ``QueryProgressEvent`` JVM objects: their progress JSON as dicts.

    ``StringBuilder.append(progress)`` renders the progress (its ``toString`` is the JSON)
    inside the JVM, so the text comes back in small chunks (about 6 py4j calls per batch instead
    of PySpark's field-by-field ``StreamingQueryProgress.fromJObject``).
    """
    jvm = gateway.jvm

    def decode(events: list) -> list:
        out = []
        for event in events:
            try:
                text = read_jvm_text(jvm.java.lang.StringBuilder().append(event.progress()))
                out.append(json.loads(text))
            except Exception:
                out.append(None)
        return out

    return decode


class ProgressListener:
    """py4j proxy for ``org.apache.spark.sql.streaming.PythonStreamingQueryListener``.

    Registered through Spark's ``PythonStreamingQueryListenerWrapper`` (as PySpark's own
    ``StreamingQueryListener`` is), but it only queues the JVM event: the progress is rendered
    later by the reporter thread."""

    class Java:
        implements = ["org.apache.spark.sql.streaming.PythonStreamingQueryListener"]

    def __init__(self, reporter: Reporter) -> None:
        self._reporter = reporter

    def onQueryProgress(self, event) -> None:
        self._reporter.offer("progress", event)

    def onQueryStarted(self, event) -> None:
        self._reporter.offer("query", ("started", event))

    def onQueryIdle(self, event) -> None:
        self._reporter.offer("query", ("idle", event))

    def onQueryTerminated(self, event) -> None:
        self._reporter.offer("query", ("terminated", event))


def query_status_poller(jspark) -> Callable[[], list]:
    """``() -> [{"id", "run_id", "name", "trigger", "message", "isDataAvailable", "isTriggerActive"}]``
    for every active streaming query of the JVM session ``jspark``, over py4j (a few small calls per
    query; the trigger is read once per run). Called from the reporter thread only."""
    triggers: dict[str, Optional[str]] = {}

    def poll() -> list:
        out = []
        for q in jspark.streams().active():
            run_id = q.runId().toString()
            if run_id not in triggers:
                try:
                    triggers[run_id] = str(q.streamingQuery().trigger().toString())
                except Exception:  # not a micro-batch query, or an API change
                    triggers[run_id] = None
                if len(triggers) > 256:
                    triggers.pop(next(iter(triggers)))
            status = json.loads(q.status().json())
            out.append({"id": q.id().toString(), "run_id": run_id, "name": q.name(),
                        "trigger": triggers[run_id], **status})
        return out

    return poll


def jvm_proxy(gateway, obj: Any):
    """The JVM-side py4j proxy of the Python object ``obj``, created once and kept as a ``JavaObject``.

    py4j makes a new JVM proxy each time a Python object is passed to the JVM, so
    ``removeSparkListener(obj)`` would look for a proxy that was never added, find nothing, and leave
    the listener on the bus (where it fails with ``Connection refused`` once Python has exited).
    Passing the object through a JVM list once gives a reference to one proxy, which is then both
    added and removed."""
    holder = gateway.jvm.java.util.ArrayList()
    holder.add(obj)
    return holder.get(0)


def reporter_token(token: Optional[str], conf_get: Callable[[str, Optional[str]], Optional[str]],
                   environ: Mapping[str, str] = os.environ) -> Optional[str]:
    """The reporter token, in the listener jar's order: ``token``, else the conf ``spark.governor.token``, else the
    content of the file named by ``spark.governor.tokenFile`` (surrounding whitespace removed), else
    ``environ["SPARK_GOVERNOR_TOKEN"]``; None when none is set. ``conf_get(key, default)`` reads the Spark conf
    (``SparkConf.get``). ValueError naming the setting when the file cannot be read or the token is unusable; the
    token itself is never part of a message."""
    found = check_token(token)
    if found is None:
        found = check_token(conf_get("spark.governor.token", None) or None)
    if found is None:
        path = (conf_get("spark.governor.tokenFile", None) or "").strip()
        if path:
            try:
                with open(path, encoding="utf-8") as f:
                    found = check_token(f.read())
            except OSError as exc:
                raise ValueError(f"spark.governor.tokenFile: cannot read {path}: {exc.strerror or exc}") from None
            if found is None:
                raise ValueError(f"spark.governor.tokenFile: {path} is empty")
    if found is None:
        found = check_token(environ.get("SPARK_GOVERNOR_TOKEN") or None)
    return found


@dataclass
class Attachment:
    """What ``attach`` registered; ``detach()`` removes the listeners and flushes the reporter."""

    spark: Any
    reporter: Reporter
    spark_listener: Any  # the JVM proxy (``jvm_proxy``) of a PySparkListener
    query_listener: Any  # the JVM PythonStreamingQueryListenerWrapper around a ProgressListener
    warmer: Optional[ExecutorWarmer] = None  # warms executors added while the job runs (None: off)
    python_listener: Optional[PySparkListener] = None  # the Python side of ``spark_listener``
    detached: bool = False

    def add_applier(self, knob: str, applier: Any) -> None:
        """Apply directives of ``knob`` with ``applier(value) -> (status, message)`` (see
        ``collectors.appliers``); replaces the knob's previous applier. Thread-safe enough: the
        reporter thread reads the mapping once per cycle."""
        self.reporter.appliers[knob] = applier

    def detach(self, flush_timeout_s: float = 5.0) -> None:
        """Remove the listeners and flush the reporter, waiting at most about ``flush_timeout_s`` seconds
        (twice at worst: once for Spark's events, once for the reporter's last posts).

        When no streaming query is active any more (the job is ending), it first waits, within the same
        bound, until every task the listener saw start has ended: a stopped query's cancelled tasks are killed
        after ``StreamingQuery.stop()`` returns, and Spark posts their task ends later still (after the
        executors' running-task counts already fell to 0), so they would reach the event log but not the control
        plane (2 of 30 tasks in CI, twice, 2026-12-07)."""
        if self.detached:
            return
        self.detached = True
        deadline = time.monotonic() + flush_timeout_s
        listener = self.python_listener
        try:
            if listener is not None and not self.spark.streams.active:
                while time.monotonic() < deadline and listener.tasks_ended < listener.tasks_started:
                    time.sleep(0.05)
        except Exception as exc:  # the context may already be stopped
            log.debug("running tasks: %r", exc)
        try:  # let Spark deliver the events already posted (bounded wait)
            self.spark.sparkContext._jsc.sc().listenerBus().waitUntilEmpty(int(flush_timeout_s * 1000))
        except Exception as exc:
            log.debug("waitUntilEmpty: %r", exc)
        try:
            self.spark.sparkContext._jsc.sc().removeSparkListener(self.spark_listener)
        except Exception as exc:  # the context may already be stopped
            log.debug("removeSparkListener: %r", exc)
        try:
            self.spark._jsparkSession.streams().removeListener(self.query_listener)
        except Exception as exc:
            log.debug("removeListener: %r", exc)
        self.reporter.stop(flush_timeout_s)


def live_slots(default_parallelism: int, executors: int, executor_cores: Optional[str], task_cpus: int,
               master: str) -> int:
    """Task slots of the application now. On a cluster with ``spark.executor.cores`` set: executors ×
    cores / ``spark.task.cpus``; else ``defaultParallelism`` / ``spark.task.cpus`` — which a cluster
    backend reports as max(total cores, 2), so one 1-core executor read as 2 slots and Kingman, taking
    2 slots per executor, planned half the executors it needed (the standalone cluster, 2026-11-26)."""
    cpus = max(1, task_cpus)
    if executor_cores and not str(master).startswith("local"):
        try:
            return executors * int(executor_cores) // cpus
        except ValueError:
            pass
    return default_parallelism // cpus


def attach(spark, job: str, endpoint: str = "http://127.0.0.1:8787", appliers: Optional[dict] = None,
           token: Optional[str] = None, warm_modules: Optional[Sequence[str]] = DEFAULT_MODULES,
           task_detail: Optional[str] = None, **reporter_options: Any) -> Attachment:
    """Attach spark-governor's reporters to ``spark`` and report under job name ``job``.

    ``token``: the reporter token (a control-plane token with the ``report`` scope); when None it is read
    from the conf ``spark.governor.token``, the file named by ``spark.governor.tokenFile`` or the environment
    variable ``SPARK_GOVERNOR_TOKEN`` (``reporter_token``). Without one, a control plane that requires report
    tokens refuses the reports (counted in ``reporter.unauthorized``, logged once).

    ``warm_modules``: an executor added while the job runs is warmed at once by a small job whose Python task
    imports these modules on it (:mod:`collectors.executor_warmup`: its Python worker and the modules are
    ready before the job's tasks reach it); add the modules your UDFs import. None or ``()``: no warm-up.

    ``task_detail``: the task rows sent besides the statistics, which the reporter folds itself (report schema
    v3, :mod:`policies.task_fold`): ``none``, ``failed`` (default: failed tasks and a uniform sample of one task
    in 16, what ``GET /api/v1/jobs/<job>/tasks`` shows) or ``all``; when None, the conf
    ``spark.governor.taskDetail``, else ``failed``. The rows the cluster profile needs (each executor's first
    tasks and the sample) travel in every mode.

    ``appliers`` maps further knobs (``batch_interval``, ``partition_plan``, ``exchanges``) to
    job-side appliers (``collectors.appliers``); the executor applier is always installed.

    ``reporter_options`` are passed to :class:`collectors.reporter.Reporter` (``max_queue``,
    ``flush_interval_s``, timeouts, ``source_probes`` — :mod:`collectors.source_probe`: read a source's
    rows between micro-batches, e.g. ``[RateFileProbe(path)]`` for the project's sources' ``rateFile`` —,
    ...).
    """
    from pyspark.java_gateway import ensure_callback_server_started

    sc = spark.sparkContext
    conf = sc.getConf()
    secret = reporter_token(token, conf.get)  # before anything is registered: a bad setting fails cleanly
    task_detail = task_detail if task_detail is not None else conf.get("spark.governor.taskDetail", DEFAULT_TASK_DETAIL)
    if task_detail not in TASK_DETAIL_MODES:
        raise ValueError(f"task_detail: expected one of {', '.join(TASK_DETAIL_MODES)} (got {task_detail!r})")
    warmer = ExecutorWarmer(spark, warm_modules) if warm_modules else None
    gateway = sc._gateway
    ensure_callback_server_started(gateway)
    task_cpus = int(sc.getConf().get("spark.task.cpus", "1"))
    translator = EventTranslator(slots=sc.defaultParallelism // max(1, task_cpus), task_cpus=task_cpus)
    executors = ExecutorApplier(sc)

    executor_cores = conf.get("spark.executor.cores", None)

    def live_state() -> dict:
        n = len(executors.executor_ids())
        return {"slots": live_slots(sc._jsc.sc().defaultParallelism(), n, executor_cores, task_cpus, sc.master),
                "executors": n}

    reporter = Reporter(job, endpoint, decode_events=JvmEventDecoder(gateway, sc._jsc.sc().conf()),
                        decode_progress=jvm_progress_decoder(gateway), translator=translator,
                        appliers={"executors": executors, **(appliers or {})}, live_state=live_state, app_id=sc.applicationId, master=sc.master,
                        query_status=query_status_poller(spark._jsparkSession), token=secret,
                        on_executor_added=warmer, task_detail=task_detail, **reporter_options).start()
    python_listener = PySparkListener(reporter)
    listener = jvm_proxy(gateway, python_listener)
    sc._jsc.sc().addSparkListener(listener)
    # the executors registered before the listener: from now on, for the run's executor-seconds
    reporter.offer_executors_present(executors.executor_ids(), int(time.time() * 1000),
                                     int(executor_cores) if executor_cores else None)
    query_listener = gateway.jvm.org.apache.spark.sql.streaming.PythonStreamingQueryListenerWrapper(
        ProgressListener(reporter))
    spark._jsparkSession.streams().addListener(query_listener)
    handle = Attachment(spark, reporter, listener, query_listener, warmer, python_listener)
    atexit.register(handle.detach, 2.0)
    return handle
