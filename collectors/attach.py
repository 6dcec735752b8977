"""One call that attaches spark-governor's reporters to a running SparkSession.

::

    from collectors import attach
    handle = attach(spark, job="clicks-agg", endpoint="http://127.0.0.1:8787")
    ...
    handle.detach()          # optional; also runs at interpreter exit

It registers

* a ``SparkListener`` implemented in Python over py4j
  (``org.apache.spark.scheduler.SparkListenerInterface``; the py4j callback server is started
  with ``pyspark.java_gateway.ensure_callback_server_started``). Its callbacks only append the
  event *reference* to the reporter's bounded queue and return: Spark's listener bus never waits
  for JSON conversion or HTTP. Callbacks we do not use are answered by a generic no-op.
* a ``StreamingQueryListener`` whose ``onQueryProgress`` queues the progress JSON.

Classic (py4j) PySpark only: Spark Connect has no driver-side listener API for Python.
"""
from __future__ import annotations

import atexit
import logging
from dataclasses import dataclass
from typing import Any, Callable

from collectors.events import EventTranslator
from collectors.reporter import Reporter

log = logging.getLogger("spark_governor.attach")

_FORWARDED = ("onJobStart", "onStageSubmitted", "onStageCompleted", "onTaskEnd", "onExecutorAdded", "onExecutorRemoved")


def _noop(*_args: Any) -> None:
    return None


class PySparkListener:
    """py4j proxy for ``SparkListenerInterface``; forwards selected events to the reporter."""

    class Java:
        implements = ["org.apache.spark.scheduler.SparkListenerInterface"]

    def __init__(self, reporter: Reporter) -> None:
        self._reporter = reporter

    def _forward(self, event: Any) -> None:
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


def jvm_event_to_json(gateway, conf) -> Callable[[Any], str]:
    """A function turning a py4j ``SparkListenerEvent`` into Spark's event-log JSON.

    ``JsonProtocol.writeSparkEventToJson`` writes into one reused JVM ``StringWriter`` (through
    one Jackson generator; values after the first are preceded by Jackson's root separator, a
    space), and the buffer is read back in chunks: 4 + ⌈length/2600⌉ py4j calls, about 1–3 ms per
    task event instead of ~44 ms for one large string answer. Internal task-metric accumulators
    are left out (``spark.eventLog.includeTaskMetricsAccumulators=false``): the same values are in
    the "Task Metrics" object. Not thread-safe: only the reporter thread calls it.
    """
    jvm = gateway.jvm
    protocol = jvm.org.apache.spark.util.JsonProtocol
    conf = conf.clone().set("spark.eventLog.includeTaskMetricsAccumulators", "false")
    options = jvm.org.apache.spark.util.JsonProtocolOptions(conf)
    writer = jvm.java.io.StringWriter()
    generator = jvm.com.fasterxml.jackson.core.JsonFactory().createGenerator(writer)
    buf = writer.getBuffer()

    def convert(event: Any) -> str:
        protocol.writeSparkEventToJson(event, generator, options)
        generator.flush()
        n = buf.length()
        try:
            if n <= _CHUNK_CHARS:
                return buf.toString()
            return "".join(buf.substring(i, min(n, i + _CHUNK_CHARS)) for i in range(0, n, _CHUNK_CHARS))
        finally:
            buf.setLength(0)

    return convert


def _query_listener_class():
    from pyspark.sql.streaming.listener import StreamingQueryListener

    class ProgressListener(StreamingQueryListener):
        """Queues each micro-batch's progress JSON; never raises into Spark."""

        def __init__(self, reporter: Reporter) -> None:
            self._reporter = reporter

        def onQueryStarted(self, event) -> None:
            pass

        def onQueryProgress(self, event) -> None:
            try:
                self._reporter.offer("progress", event.progress.json)
            except Exception:
                pass

        def onQueryIdle(self, event) -> None:
            pass

        def onQueryTerminated(self, event) -> None:
            pass

    return ProgressListener


@dataclass
class Attachment:
    """What ``attach`` registered; ``detach()`` removes the listeners and flushes the reporter."""

    spark: Any
    reporter: Reporter
    spark_listener: PySparkListener
    query_listener: Any
    detached: bool = False

    def detach(self, flush_timeout_s: float = 5.0) -> None:
        if self.detached:
            return
        self.detached = True
        try:  # let Spark deliver the events already posted (bounded wait)
            self.spark.sparkContext._jsc.sc().listenerBus().waitUntilEmpty(int(flush_timeout_s * 1000))
        except Exception as exc:
            log.debug("waitUntilEmpty: %r", exc)
        try:
            self.spark.sparkContext._jsc.sc().removeSparkListener(self.spark_listener)
        except Exception as exc:  # the context may already be stopped
            log.debug("removeSparkListener: %r", exc)
        try:
            self.spark.streams.removeListener(self.query_listener)
        except Exception as exc:
            log.debug("removeListener: %r", exc)
        self.reporter.stop(flush_timeout_s)


def attach(spark, job: str, endpoint: str = "http://127.0.0.1:8787", **reporter_options: Any) -> Attachment:
    """Attach spark-governor's reporters to ``spark`` and report under job name ``job``.

    ``reporter_options`` are passed to :class:`collectors.reporter.Reporter` (``max_queue``,
    ``flush_interval_s``, timeouts, ...).
    """
    from pyspark.java_gateway import ensure_callback_server_started

    sc = spark.sparkContext
    gateway = sc._gateway
    ensure_callback_server_started(gateway)
    task_cpus = int(sc.getConf().get("spark.task.cpus", "1"))
    translator = EventTranslator(slots=sc.defaultParallelism // max(1, task_cpus), task_cpus=task_cpus)
    reporter = Reporter(job, endpoint, event_to_json=jvm_event_to_json(gateway, sc._jsc.sc().conf()),
                        translator=translator, app_id=sc.applicationId, master=sc.master,
                        **reporter_options).start()
    listener = PySparkListener(reporter)
    sc._jsc.sc().addSparkListener(listener)
    query_listener = _query_listener_class()(reporter)
    spark.streams.addListener(query_listener)
    handle = Attachment(spark, reporter, listener, query_listener)
    atexit.register(handle.detach, 2.0)
    return handle
