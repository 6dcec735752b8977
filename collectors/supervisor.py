"""Supervised restart of a streaming query with new settings, from the same checkpoint.

Some changes cannot be made to a running Structured Streaming query: the trigger interval, source
rate limits (``maxOffsetsPerTrigger``, ``maxFilesPerTrigger``), a new physical plan. They need
``query.stop()`` and a new ``start()`` on the same checkpoint, which costs seconds (planning,
state reload). :class:`QuerySupervisor` does that safely and generically::

    from spark_governor.collectors.supervisor import QuerySupervisor, RestartRefused

    def build(settings: dict) -> StreamingQuery:          # any settings you like
        w = (df.writeStream.foreachBatch(sink)
             .option("checkpointLocation", settings["checkpoint"]))
        if settings.get("trigger_interval_s"):
            w = w.trigger(processingTime=f"{int(settings['trigger_interval_s'] * 1000)} milliseconds")
        return w.start()

    sup = QuerySupervisor(spark, build, {"checkpoint": "/tmp/ckpt", "trigger_interval_s": 2.0},
                          min_spacing_s=30.0)
    sup.query                                   # the current StreamingQuery
    result = sup.restart(trigger_interval_s=5.0)  # -> RestartResult
    sup.stop()

``restart(**changes)``:

1. refuses with :class:`RestartRefused` (a ``RuntimeError`` whose message says how long to wait)
   when called sooner than ``min_spacing_s`` seconds after the previous restart (the first restart
   is never refused);
2. waits until no micro-batch is running (``query.status["isTriggerActive"]`` false, at most
   ``idle_timeout_s``; a batch still running then is interrupted by ``stop()`` and, because its
   offsets are already in the checkpoint's offset log, re-run with the same batch id — make a
   ``foreachBatch`` sink idempotent per batch id);
3. stops the query, calls ``build(settings | changes)`` (the merged settings become the new
   ``settings``) — ``build`` must use the same checkpoint location;
4. waits (at most ``resume_timeout_s``) for the new query's first micro-batch and checks that its
   id is the one after the last batch the old query committed. A different id raises
   :class:`RestartError`; when no batch ran in time (no new data) the result says
   ``verified=False``.

``RestartResult(previous_batch_id, resumed_batch_id, cost_s, verified, settings)``: batch ids as
Spark numbers them (None when unknown); ``cost_s`` is the wall time in seconds from the decision to
restart (after the spacing check) until the new query was started — waiting between batches, stop
and start, not the wait for the first new batch; ``verified`` as above.

Thread-safe: ``restart``, ``stop`` and ``query`` share one lock, so an applier on the reporter
thread and user code can call them concurrently (a second ``restart`` waits for the first, then
is refused by the spacing rule). ``restart`` blocks its caller for the cost of the restart.
``status()`` returns a JSON-able summary (restarts done, last result, seconds until the next
restart is allowed).
"""
from __future__ import annotations

import threading
import time
from dataclasses import asdict, dataclass
from typing import Any, Callable, Optional


class RestartRefused(RuntimeError):
    """A restart asked for sooner than ``min_spacing_s`` after the previous one."""


class RestartError(RuntimeError):
    """The restarted query did not resume at the batch after the last committed one."""


@dataclass(frozen=True)
class RestartResult:
    previous_batch_id: Optional[int]  # last batch the old query committed
    resumed_batch_id: Optional[int]  # first batch the new query ran (None: none within the timeout)
    cost_s: float  # seconds from the restart decision until the new query was started
    verified: bool  # resumed_batch_id == previous_batch_id + 1 was observed
    settings: dict


def _executed(query) -> list[int]:
    """Ids of the batches the query ran (progress with an ``addBatch`` duration; idle-trigger
    progress is left out), from ``recentProgress``."""
    out = []
    for p in query.recentProgress or []:
        if "addBatch" in (p["durationMs"] or {}):
            out.append(int(p["batchId"]))
    return out


def _committed_batch_id(query) -> Optional[int]:
    """The last batch id in the query's checkpoint commit log (classic PySpark through py4j; None
    where the JVM object is not reachable, e.g. Spark Connect). A batch that committed while
    ``stop()`` interrupted it has no progress yet, so ``recentProgress`` alone can miss it."""
    try:
        latest = query._jsq.streamingQuery().commitLog().getLatestBatchId()
        return int(latest.get()) if latest.isDefined() else None
    except Exception:  # noqa: BLE001 - not a classic JVM query: the progress is all there is
        return None


def _last_batch_id(query) -> Optional[int]:
    """The last batch the stopped query committed: the commit log where readable, else its progress."""
    ids = [i for i in (_committed_batch_id(query), max(_executed(query), default=None)) if i is not None]
    return max(ids) if ids else None


class QuerySupervisor:
    """Restarts a streaming query with changed settings from its checkpoint (module docstring)."""

    def __init__(self, spark, build: Callable[[dict], Any], settings: dict, min_spacing_s: float = 30.0,
                 idle_timeout_s: float = 120.0, resume_timeout_s: float = 60.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if min_spacing_s < 0 or idle_timeout_s <= 0 or resume_timeout_s < 0:
            raise ValueError("min_spacing_s and resume_timeout_s must be >= 0, idle_timeout_s > 0")
        self.spark = spark
        self.build = build
        self.settings = dict(settings)
        self.min_spacing_s = min_spacing_s
        self.idle_timeout_s = idle_timeout_s
        self.resume_timeout_s = resume_timeout_s
        self.clock = clock
        self._lock = threading.RLock()
        self._last_restart: Optional[float] = None
        self._known_last_batch: Optional[int] = None  # survives restarts whose new run ran no batch yet
        self.results: list[RestartResult] = []
        self._query = build(dict(self.settings))

    @property
    def query(self):
        with self._lock:
            return self._query

    def seconds_until_allowed(self) -> float:
        with self._lock:
            if self._last_restart is None:
                return 0.0
            return max(0.0, self.min_spacing_s - (self.clock() - self._last_restart))

    def _wait_between_batches(self) -> None:
        deadline = time.monotonic() + self.idle_timeout_s
        while time.monotonic() < deadline and self._query.isActive and self._query.status.get("isTriggerActive"):
            time.sleep(0.01)

    def restart(self, **changes: Any) -> RestartResult:
        with self._lock:
            wait = self.seconds_until_allowed()
            if wait > 0:
                raise RestartRefused(f"restart refused: the last restart was less than {self.min_spacing_s:g} s ago; "
                                     f"next allowed in {wait:.1f} s")
            t0 = time.monotonic()
            self._wait_between_batches()
            self._query.stop()
            previous = _last_batch_id(self._query)
            if previous is None or (self._known_last_batch is not None and previous < self._known_last_batch):
                previous = self._known_last_batch
            settings = {**self.settings, **changes}
            self._query = self.build(dict(settings))
            self.settings = settings
            cost = time.monotonic() - t0
            self._last_restart = self.clock()
            resumed = self._first_batch_id(self._query)
            verified = resumed is not None and resumed == (previous + 1 if previous is not None else 0)
            self._known_last_batch = previous
            result = RestartResult(previous, resumed, cost, verified, dict(settings))
            self.results.append(result)
            if resumed is not None and not verified:
                raise RestartError(f"query resumed at batch {resumed}, expected {previous + 1 if previous is not None else 0}")
            return result

    def _first_batch_id(self, query) -> Optional[int]:
        deadline = time.monotonic() + self.resume_timeout_s
        while True:
            ids = _executed(query)
            if ids:
                return min(ids)
            if time.monotonic() >= deadline or not query.isActive:
                return None
            time.sleep(0.05)

    def stop(self) -> None:
        with self._lock:
            self._query.stop()

    def status(self) -> dict:
        with self._lock:
            last = self.results[-1] if self.results else None
            return {"restarts": len(self.results), "settings": dict(self.settings),
                    "last": asdict(last) if last else None,
                    "next_allowed_in_s": self.seconds_until_allowed(), "active": bool(self._query.isActive)}
