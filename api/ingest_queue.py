"""Group commit of reports (issue #16): one writer thread per process stores the reports that wait in one
transaction.

The request threads of ``POST /api/v1/reports`` read, parse, validate and authorize a report as before, then
:meth:`IngestQueue.submit` a ``aggregators.ingest_batch.Pending`` and wait. The writer takes everything queued
(up to ``max_batch_reports`` reports and ``max_batch_tasks`` task records, at least one report) once the oldest
has waited ``linger_s`` seconds (the linger: more reports share the transaction, at that much more latency per
report; 0: take what waits now, so under light load a batch is one report), defers a second report of a
``reporter.id`` already in the batch to the next batch (``ingest_reports`` applies at most one report per
reporter), and runs ONE transaction: ``ingest_reports`` then ``current_directives_of`` for the batch's jobs, and
commit. Only then are the waiting requests answered, so an answer 200 means the report is committed.

Failures, per batch:

* ``BatchItemError`` (a ``ReporterConflict``): roll back, that request is answered with the conflict (403),
  the rest of the batch is applied again;
* ``IntegrityError`` (a concurrent first insert of a job by another process), a busy/locked SQLite or a
  PostgreSQL deadlock or serialization failure (``OperationalError``): the batch is retried up to ``retries``
  times with a linear backoff (``backoff_s`` × attempt, in seconds);
* a database that stays unreachable (``OperationalError``/``InterfaceError``, or a ``DBAPIError`` that
  invalidated its connection, after every retry): each waiting request gets :class:`Refused` with status 503
  and ``Retry-After`` 5 s;
* anything else (and an ``IntegrityError`` that outlives the retries): each report is applied again in a
  transaction of its own, so a report that cannot be stored fails alone (:class:`IngestFailed`: 500) and the
  others are stored and answered.

Bounds: at most ``max_queued_reports`` reports and ``max_queued_tasks`` task records wait per process (beyond
either :class:`Refused`, 503 with ``Retry-After`` 1 s; a report alone in the queue is always taken, whatever its
size: the parse already bounded it), so the memory of parsed reports waiting is bounded whatever the number of
request threads; a request waits at most ``deadline_s`` seconds for its outcome (then 503: a report the
writer had already taken may still be committed; the reporter sends it again with the same seq and gets
``duplicate: true``, the exactly-once contract of ``aggregators.ingest``).

The writer starts with the first report, is a daemon, leaves after ``idle_exit_s`` seconds without work
(started again by the next report) and stops with :meth:`IngestQueue.close` (``api.server``: gunicorn's
``worker_exit`` and ``ControlPlane.stop``), which writes what is still queued first.

Metrics (in-process, summed over gunicorn workers, docs/metrics.md): ``spark_governor_ingest_batch_reports``
(histogram of reports per committed transaction) and ``spark_governor_ingest_queued_reports`` (gauge: reports
waiting or being written).
"""
from __future__ import annotations

import logging
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Optional

from prometheus_client import CollectorRegistry, Gauge, Histogram
from sqlalchemy.engine import Engine
from sqlalchemy.exc import DBAPIError, IntegrityError, InterfaceError, OperationalError

from spark_governor.aggregators.ingest import IngestResult, ReporterConflict
from spark_governor.aggregators.ingest_batch import BatchItemError, Pending, current_directives_of, ingest_reports

log = logging.getLogger("spark_governor.ingest_queue")

PREFIX = "spark_governor"
WRITER_THREAD = "spark-governor-ingest"
#: Retry-After (seconds) of each refusal
RETRY_QUEUE_S = 1
RETRY_DATABASE_S = 5


class Refused(Exception):
    """The report was not (or not surely) stored: answer ``status`` (503) with ``Retry-After: retry_after_s``."""

    def __init__(self, message: str, retry_after_s: int, status: int = 503) -> None:
        super().__init__(message)
        self.message, self.retry_after_s, self.status = message, retry_after_s, status


class IngestFailed(Exception):
    """The report could not be stored, alone in its transaction, for a reason other than the database being
    unreachable (HTTP 500; the cause is logged by the writer)."""


class QueueMetrics:
    """The queue's in-process metrics, registered in ``registry`` (None: not registered)."""

    def __init__(self, registry: Optional[CollectorRegistry] = None) -> None:
        self.batch_reports = Histogram(
            f"{PREFIX}_ingest_batch_reports", "Reports stored per committed ingest transaction (group commit)",
            buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256), registry=registry)
        self.queued = Gauge(f"{PREFIX}_ingest_queued_reports",
                            "Reports waiting for the ingest writer or being written", registry=registry,
                            multiprocess_mode="livesum")

    @property
    def process_metrics(self) -> tuple:
        """For ``api.worker_metrics.exposition_registry``."""
        return self.batch_reports, self.queued


@dataclass(eq=False)
class _Ticket:
    pending: Pending
    tasks: int
    done: threading.Event = field(default_factory=threading.Event)
    taken: bool = False  # the writer has it (it may be committed even if its request gave up)
    arrived: float = field(default_factory=time.monotonic)  # when it was queued (time.monotonic, s)
    result: Optional[IngestResult] = None
    directives: list = field(default_factory=list)
    error: Optional[Exception] = None

    def resolve(self, result: Optional[IngestResult] = None, directives: Optional[list] = None,
                error: Optional[Exception] = None) -> None:
        self.result, self.directives, self.error = result, directives or [], error
        self.done.set()


def _unreachable(exc: BaseException) -> bool:
    """The database cannot be reached or dropped the connection."""
    return isinstance(exc, (OperationalError, InterfaceError)) or (
        isinstance(exc, DBAPIError) and exc.connection_invalidated)


class IngestQueue:
    """The reports waiting to be stored in this process, and the writer thread that stores them in batches.
    ``window_ms``: statistics window in milliseconds; ``deadline_s``, ``backoff_s``, ``idle_exit_s`` in
    seconds."""

    def __init__(self, engine: Engine, window_ms: int, *, max_queued_reports: int = 512,
                 max_queued_tasks: int = 200_000, max_batch_reports: int = 64, max_batch_tasks: int = 20_000,
                 deadline_s: float = 30.0, retries: int = 5, backoff_s: float = 0.05, idle_exit_s: float = 10.0,
                 linger_s: float = 0.0,
                 metrics: Optional[QueueMetrics] = None) -> None:
        if (max_queued_reports < 1 or max_queued_tasks < 1 or max_batch_reports < 1 or max_batch_tasks < 1
                or deadline_s <= 0):
            raise ValueError("max_queued_reports, max_queued_tasks, max_batch_reports, max_batch_tasks and "
                             "deadline_s must be positive")
        self.max_queued_tasks = max_queued_tasks
        if not 0 <= linger_s < deadline_s:
            raise ValueError("linger_s must be at least 0 and below deadline_s")
        self.linger_s = linger_s
        self.engine, self.window_ms = engine, window_ms
        self.max_queued_reports, self.max_batch_reports = max_queued_reports, max_batch_reports
        self.max_batch_tasks, self.deadline_s = max_batch_tasks, deadline_s
        self.retries, self.backoff_s, self.idle_exit_s = max(1, retries), backoff_s, idle_exit_s
        self.metrics = metrics or QueueMetrics(None)
        self._cond = threading.Condition()
        self._queue: deque[_Ticket] = deque()
        self._writing = 0  # reports of the batch being written
        self._thread: Optional[threading.Thread] = None
        self._closed = False

    # -- request side -------------------------------------------------------------------------
    def submit(self, pending: Pending) -> tuple[IngestResult, list[dict]]:
        """Store ``pending`` with the next batch and return its ``IngestResult`` and its job's directives
        (``{"knob", "version", "value"}``) once committed. Raises :class:`Refused` (queue full, deadline passed,
        database unreachable, shutting down), ``ReporterConflict`` (403) or :class:`IngestFailed` (500)."""
        ticket = _Ticket(pending, len(pending.report.tasks))
        with self._cond:
            if self._closed:
                raise Refused("server: shutting down, retry later", RETRY_QUEUE_S)
            if len(self._queue) >= self.max_queued_reports:
                raise Refused(f"server: {self.max_queued_reports} reports already wait to be stored, retry later",
                              RETRY_QUEUE_S)
            if self._queue and sum(t.tasks for t in self._queue) + ticket.tasks > self.max_queued_tasks:
                raise Refused(f"server: more than {self.max_queued_tasks} task records would wait to be stored, "
                              "retry later", RETRY_QUEUE_S)
            self._queue.append(ticket)
            self._gauge()
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=WRITER_THREAD, daemon=True)
                self._thread.start()
            self._cond.notify()
        if not ticket.done.wait(self.deadline_s):
            with self._cond:
                if not ticket.done.is_set():
                    if not ticket.taken:  # never written: take it out
                        self._queue.remove(ticket)
                        self._gauge()
                    raise Refused(f"server: report not stored within {self.deadline_s:g} s, retry later",
                                  RETRY_QUEUE_S)
        if ticket.error is not None:
            raise ticket.error
        return ticket.result, ticket.directives

    @property
    def depth(self) -> int:
        """Reports waiting or being written."""
        with self._cond:
            return len(self._queue) + self._writing

    @property
    def writing(self) -> int:
        """Reports of the batch being written (taken from the queue, not yet committed)."""
        with self._cond:
            return self._writing

    @property
    def running(self) -> bool:
        """The writer thread is alive (it starts with a report and leaves when idle or closed)."""
        with self._cond:
            return self._thread is not None and self._thread.is_alive()

    def close(self, timeout_s: float = 10.0) -> None:
        """Refuse new reports, write the queued ones and stop the writer (waits up to ``timeout_s`` seconds)."""
        with self._cond:
            self._closed = True
            thread = self._thread
            self._cond.notify_all()
        if thread is not None:
            thread.join(timeout_s)
        with self._cond:  # the writer did not finish in time: nothing more will be written
            while self._queue:
                self._queue.popleft().resolve(error=Refused("server: shutting down, retry later", RETRY_QUEUE_S))
            self._gauge()

    # -- writer side --------------------------------------------------------------------------
    def _gauge(self) -> None:
        self.metrics.queued.set(len(self._queue) + self._writing)

    def _take(self) -> list[_Ticket]:
        """The next batch, in arrival order (called with the lock held, the queue not empty): at most one
        report per reporter, at most ``max_batch_reports`` reports and ``max_batch_tasks`` tasks (the first
        report always)."""
        batch, deferred, reporters, tasks = [], [], set(), 0
        while self._queue and len(batch) < self.max_batch_reports:
            t = self._queue[0]
            rid = t.pending.report.reporter.id
            if rid in reporters:
                deferred.append(self._queue.popleft())
                continue
            if batch and tasks + t.tasks > self.max_batch_tasks:
                break
            self._queue.popleft()
            t.taken = True
            batch.append(t)
            reporters.add(rid)
            tasks += t.tasks
        self._queue.extendleft(reversed(deferred))
        self._writing = len(batch)
        self._gauge()
        return batch

    def _run(self) -> None:
        while True:
            with self._cond:
                idle_since = time.monotonic()
                while not self._queue:
                    if self._closed or time.monotonic() - idle_since >= self.idle_exit_s:
                        self._thread = None
                        return
                    self._cond.wait(max(0.0, self.idle_exit_s - (time.monotonic() - idle_since)))
                # the linger: let more reports join until the oldest has waited linger_s (a full batch or a
                # close ends it early)
                while (self.linger_s > 0 and self._queue and not self._closed
                       and len(self._queue) < self.max_batch_reports):
                    left = self._queue[0].arrived + self.linger_s - time.monotonic()
                    if left <= 0:
                        break
                    self._cond.wait(left)
                if not self._queue:  # a request that gave up took its report out while we lingered
                    continue
                batch = self._take()
            try:
                self._write(batch, split=True)
            except BaseException as exc:  # pragma: no cover - a bug here must not leave requests waiting
                log.exception("ingest writer: unexpected error")
                for t in batch:
                    if not t.done.is_set():
                        t.resolve(error=IngestFailed(f"server: report not stored ({exc.__class__.__name__})"))
            finally:
                with self._cond:
                    self._writing = 0
                    self._gauge()

    def _transaction(self, items: list[_Ticket]) -> tuple[list[IngestResult], dict[int, list[dict]]]:
        with self.engine.begin() as conn:
            if conn.dialect.name == "sqlite":  # take the write lock now, not on the first write
                conn.exec_driver_sql("BEGIN IMMEDIATE")
            results = ingest_reports(conn, [t.pending for t in items], self.window_ms)
            directives = current_directives_of(conn, [r.job_id for r in results])
        return results, directives

    def _write(self, items: list[_Ticket], split: bool) -> None:
        """Store ``items`` in one transaction and answer each (see the module's docstring for failures);
        ``split``: on an error that is not the database's, apply each report in a transaction of its own."""
        attempt, last = 0, None
        while items:
            try:
                results, directives = self._transaction(items)
            except BatchItemError as exc:
                bad = items.pop(exc.index)
                cause = exc.cause if isinstance(exc.cause, ReporterConflict) else IngestFailed(str(exc.cause))
                bad.resolve(error=cause)
                continue
            except (IntegrityError, OperationalError, InterfaceError) as exc:
                last, attempt = exc, attempt + 1
                if attempt >= self.retries:
                    break
                time.sleep(self.backoff_s * attempt)
                continue
            except Exception as exc:
                last = exc
                break
            self.metrics.batch_reports.observe(len(items))
            for t, result in zip(items, results):
                t.resolve(result, [{"knob": d["knob"], "version": d["version"], "value": d["value"]}
                                   for d in directives.get(result.job_id, [])])
            return
        if not items:
            return
        if _unreachable(last):
            log.warning("ingest: database unavailable (%s); %d reports refused", last.__class__.__name__, len(items))
            for t in items:
                t.resolve(error=Refused("database: unavailable, retry later", RETRY_DATABASE_S))
            return
        if split and len(items) > 1:
            log.warning("ingest: a batch of %d reports failed (%s); storing each alone", len(items),
                        last.__class__.__name__)
            for t in items:
                self._write([t], split=False)
            return
        for t in items:
            log.error("ingest: report of job %r (reporter %r, seq %d) not stored", t.pending.report.job,
                      t.pending.report.reporter.id, t.pending.report.reporter.seq, exc_info=last)
            t.resolve(error=IngestFailed(f"server: report not stored ({last.__class__.__name__})"))
