"""The non-blocking reporter: bounded queues, one background thread, batched gzip JSON POSTs.

Guarantees towards the Spark job (issue #2):

* ``offer`` never blocks and never raises: it appends to a bounded ``deque``; when full the
  oldest item is dropped and ``dropped`` is incremented.
* One daemon thread converts raw listener events into wire records (calling Spark's
  ``JsonProtocol`` over py4j *here*, not on Spark's listener-bus thread), and POSTs batches of
  records every ``flush_interval_s`` seconds to ``{endpoint}/api/v1/reports``.
* A batch that failed (connection refused, timeout, 5xx) is retried unchanged (same ``seq``, so
  ingest is idempotent) with exponential backoff; meanwhile new records keep queueing and the
  oldest are dropped when the outbox is full. A batch the server refuses with 4xx is discarded
  and counted in ``rejected``.
* Cumulative counters (``dropped_total``, ``orphaned_total``) travel in every report, so drops
  that happened while the control plane was down are reported as soon as it is back.
* Every report carries the state of each streaming query (``collectors.query_state``: the running
  batch and its age, liveness, source offsets and backlog), and while a query is known and not
  terminated a report goes out at least every ``state_interval_s`` (1 s), also when there is
  nothing else to send, so the control plane sees a batch that runs long before it completes.
  ``query_status`` (optional, called from this thread every ``state_interval_s``) polls the
  active queries' status; listener callbacks only queue their events (``offer``).
"""
from __future__ import annotations

import gzip
import json
import logging
import threading
import time
import uuid
from collections import deque
from typing import Any, Callable, Optional

import requests

from spark_governor.collectors.events import EventTranslator, batch_record, decode_json_events
from spark_governor.collectors.query_state import QueryTracker
from spark_governor.policies.wire import MAX_PARTITION_RECORDS, SCHEMA_VERSION, validate_job_name

log = logging.getLogger("spark_governor.reporter")


class Reporter:
    """Queues listener events and ships them to the control plane from a background thread."""

    def __init__(
        self,
        job: str,
        endpoint: str = "http://127.0.0.1:8787",
        *,
        max_queue: int = 20_000,
        max_batch: int = 5_000,
        flush_interval_s: float = 1.0,
        heartbeat_s: float = 5.0,
        connect_timeout_s: float = 1.0,
        read_timeout_s: float = 5.0,
        backoff_initial_s: float = 0.5,
        backoff_max_s: float = 30.0,
        decode_events: Optional[Callable[[list], list]] = None,
        decode_progress: Optional[Callable[[list], list]] = None,
        translator: Optional[EventTranslator] = None,
        app_id: Optional[str] = None,
        master: Optional[str] = None,
        appliers: Optional[dict[str, Callable[[Any], tuple[str, Optional[str]]]]] = None,
        live_state: Optional[Callable[[], dict]] = None,
        query_status: Optional[Callable[[], list]] = None,
        decode_query: Optional[Callable[[list], list]] = None,
        state_interval_s: float = 1.0,
    ) -> None:
        self.job = validate_job_name(job)
        self.url = endpoint.rstrip("/") + "/api/v1/reports"
        self.max_batch = max_batch
        self.flush_interval_s = flush_interval_s
        self.heartbeat_s = heartbeat_s
        self.timeout = (connect_timeout_s, read_timeout_s)
        self.backoff_initial_s = backoff_initial_s
        self.backoff_max_s = backoff_max_s
        self.decode_events = decode_events or decode_json_events
        self.decode_progress = decode_progress or decode_json_events
        self.decode_query = decode_query or decode_query_events
        self.query_status = query_status  # () -> [{"id", "run_id", "name", "trigger", status fields}]
        self.state_interval_s = state_interval_s
        self.queries = QueryTracker()
        self.translator = translator or EventTranslator()
        self.app_id, self.master = app_id, master
        self.id = uuid.uuid4().hex
        self._raw: deque = deque(maxlen=max_queue)
        self._outbox: deque = deque(maxlen=max_queue)
        self._pending: Optional[tuple[int, bytes, int]] = None  # (seq, gzip body, records)
        self._seq = 0
        self._session = requests.Session()
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: Optional[threading.Thread] = None
        # counters (monotonic)
        self.dropped = 0
        self.sent_records = 0
        self.sent_reports = 0
        self.failed_posts = 0
        self.rejected = 0
        self.conversion_errors = 0
        self.last_error: Optional[str] = None
        self.directives: list = []  # latest directives returned by the control plane
        self.appliers = dict(appliers or {})  # knob -> applier(value) -> (status, message)
        self.live_state = live_state  # () -> {"slots": int, "executors": int}, read in this thread
        self.applied_versions: dict[str, int] = {}
        self._acks: list[dict] = []  # directive acknowledgements not yet delivered
        self.apply_log: list[dict] = []  # every ack, for the job's own inspection

    # -- producer side (Spark's threads) ---------------------------------------------------
    def offer(self, kind: str, item: Any) -> None:
        """Queue a raw item: ``("spark", py4j event or JSON)``, ``("progress", JSON str)`` or
        ``("query", (event kind, py4j event or dict))`` with kind ``started``/``idle``/``terminated``."""
        try:
            if len(self._raw) == self._raw.maxlen:
                self.dropped += 1
            self._raw.append((kind, item))
        except Exception:  # never let anything escape into Spark
            pass

    def offer_partition_stats(self, record: dict) -> None:
        """Queue one batch's partition statistics (``policies.wire.PartitionStatsRecord`` fields;
        ``collectors.partition_plan.partition_record``). Called from the job's ``foreachBatch``."""
        try:
            if len(self._outbox) == self._outbox.maxlen:
                self.dropped += 1
            self._outbox.append(("partition", record))
            self._wake.set()
        except Exception:  # never let reporting fail the batch
            pass

    # -- lifecycle -------------------------------------------------------------------------
    def start(self) -> "Reporter":
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=f"spark-governor-reporter-{self.job}", daemon=True)
            self._thread.start()
        return self

    def stop(self, flush_timeout_s: float = 5.0) -> None:
        """Stop the thread after one last conversion and send attempt (bounded by the timeout)."""
        if self._thread is None:
            return
        self._final_deadline = time.monotonic() + flush_timeout_s
        self._stop.set()
        self._wake.set()
        self._thread.join(flush_timeout_s + sum(self.timeout) + 1)
        self._thread = None

    def stats(self) -> dict:
        return {
            "queued": len(self._raw) + len(self._outbox),
            "dropped": self.dropped,
            "orphaned": self.translator.orphaned,
            "sent_records": self.sent_records,
            "sent_reports": self.sent_reports,
            "failed_posts": self.failed_posts,
            "rejected": self.rejected,
            "conversion_errors": self.conversion_errors,
            "last_error": self.last_error,
        }

    # -- background thread ------------------------------------------------------------------
    def _interval(self) -> float:
        """Seconds until the next send attempt: the flush interval, at most ``state_interval_s`` while a
        query is known (its state goes out even when nothing else does)."""
        if self.queries.active():
            return min(self.flush_interval_s, self.state_interval_s)
        return self.flush_interval_s

    def _poll(self) -> None:
        if self.query_status is None:
            return
        try:
            polls = self.query_status()
        except Exception as exc:  # the context may be stopping; the events still tell the story
            self.last_error = f"query status: {exc!r}"[:500]
            return
        self.queries.on_status(list(polls or []), int(time.time() * 1000))

    def _run(self) -> None:
        next_send = time.monotonic() + self.flush_interval_s
        next_poll = time.monotonic()
        last_ack = time.monotonic()
        backoff = self.backoff_initial_s
        while True:
            stopping = self._stop.is_set()
            self._drain()
            now = time.monotonic()
            if not stopping and now >= next_poll:
                self._poll()
                next_poll = now + self.state_interval_s
            due = now >= next_send
            if stopping:
                due = now < getattr(self, "_final_deadline", now)
            state_due = self.queries.active() and now - last_ack >= self.state_interval_s
            if due and (self._pending or self._outbox or self._acks or now - last_ack >= self.heartbeat_s
                        or state_due or stopping):
                ok = self._send_once()
                if ok:
                    last_ack = time.monotonic()
                    backoff = self.backoff_initial_s
                    # keep sending while a full batch is waiting
                    next_send = now if len(self._outbox) >= self.max_batch else now + self._interval()
                    if stopping and (self._outbox or self._raw):
                        continue
                else:
                    next_send = now + backoff
                    backoff = min(self.backoff_max_s, backoff * 2)
            elif due:
                next_send = now + self._interval()
            if stopping:
                return
            self._wake.wait(min(0.05, max(0.0, min(next_send, next_poll) - time.monotonic())) or 0.01)
            self._wake.clear()

    def _drain(self, limit: int = 2_000) -> None:
        """Convert up to ``limit`` queued items into wire records, in arrival order."""
        items = []
        for _ in range(limit):
            try:
                items.append(self._raw.popleft())
            except IndexError:
                break
        if not items:
            return
        decoded = {kind: iter(self._decode(decoder, [item for k, item in items if k == kind]))
                   for kind, decoder in (("spark", self.decode_events), ("progress", self.decode_progress),
                                         ("query", self.decode_query))}
        for kind, _item in items:
            try:
                event = next(decoded[kind])
                if event is None:
                    self.conversion_errors += 1
                    continue
                self._track(kind, event)
                if kind == "spark":
                    records = self.translator.handle(event)
                elif kind == "query":
                    records = []
                else:
                    records = [("batch", batch_record(event))]
            except Exception as exc:  # a malformed event must not stop reporting
                self.conversion_errors += 1
                self.last_error = f"conversion: {exc!r}"[:500]
                continue
            for rec in records:
                if len(self._outbox) == self._outbox.maxlen:
                    self.dropped += 1
                self._outbox.append(rec)
        if len(self._raw):
            self._wake.set()

    def _track(self, kind: str, event) -> None:
        """Feed the query tracker; its failure never costs the event's own records."""
        try:
            if kind == "spark":
                if event.get("Event") == "SparkListenerJobStart":
                    self.queries.on_job_start(event)
            elif kind == "query":
                self.queries.on_query_event(event[0], event[1], int(time.time() * 1000))
            else:
                self.queries.on_progress(event)
        except Exception as exc:
            self.last_error = f"query state: {exc!r}"[:500]

    def _decode(self, decoder: Callable[[list], list], raw: list) -> list:
        if not raw:
            return []
        try:
            return decoder(raw)
        except Exception as exc:
            self.last_error = f"conversion: {exc!r}"[:500]
            return [None] * len(raw)

    def _build_pending(self) -> None:
        items = [self._outbox.popleft() for _ in range(min(self.max_batch, len(self._outbox)))]
        body: dict[str, Any] = {"templates": [], "stages": [], "tasks": [], "batches": []}
        plural = {"stage": "stages", "task": "tasks", "batch": "batches", "partition": "partitions"}
        keys = set()
        for kind, rec in items:
            body.setdefault(plural[kind], []).append(rec)
            if "template_key" in rec:
                keys.add(rec["template_key"])
        extra = body.get("partitions", [])[MAX_PARTITION_RECORDS:]
        if extra:  # the rest waits for the next report (the wire bounds partition records per report)
            del body["partitions"][MAX_PARTITION_RECORDS:]
            self._outbox.extendleft(("partition", rec) for rec in reversed(extra))
        for key in sorted(keys):
            t = self.translator.known_templates.get(key)
            if t is not None:
                body["templates"].append({"key": t.key, "name": t.name, "ordinal": t.ordinal,
                                          "operators": list(t.operators), "parents": list(t.parents)})
        self._seq += 1
        live = {}
        if self.live_state is not None:
            try:
                live = self.live_state()
            except Exception:  # the context may be stopping
                live = {}
        if live.get("slots") is not None:
            self.translator.live_slots = live["slots"]
        not_actuatable, knob_state = {}, {}
        for knob, applier in self.appliers.items():
            reason = getattr(applier, "not_actuatable", lambda: None)()
            if reason:
                not_actuatable[knob] = reason
            try:
                state = getattr(applier, "state", lambda: None)()
            except Exception as exc:  # an applier's report must never stop reporting
                state, self.last_error = None, f"state: {exc!r}"[:500]
            if state is not None:
                knob_state[knob] = state
        for applier in self.appliers.values():  # converge towards applied targets (e.g. idle kills)
            try:
                getattr(applier, "reconcile", lambda: None)()
            except Exception as exc:
                self.last_error = f"reconcile: {exc!r}"[:500]
        acks, self._acks = self._acks, []
        queries = self.queries.snapshot(int(time.time() * 1000))
        if queries:
            body["queries"] = queries
        report = {
            "schema_version": SCHEMA_VERSION,
            "job": self.job,
            "reporter": {"id": self.id, "seq": self._seq, "dropped_total": self.dropped,
                         "orphaned_total": self.translator.orphaned, "app_id": self.app_id,
                         "master": self.master, "slots": self.translator.slots,
                         "executors": live.get("executors"), "not_actuatable": not_actuatable,
                         "applied": acks, "knob_state": knob_state},
            **body,
        }
        raw = json.dumps(report, separators=(",", ":")).encode()
        self._pending = (self._seq, gzip.compress(raw, compresslevel=1), len(items))

    def _send_once(self) -> bool:
        if self._pending is None:
            self._build_pending()
        seq, payload, n = self._pending
        try:
            resp = self._session.post(self.url, data=payload, timeout=self.timeout, headers={
                "Content-Type": "application/json", "Content-Encoding": "gzip"})
        except requests.RequestException as exc:
            self.failed_posts += 1
            self.last_error = f"post: {exc.__class__.__name__}"
            return False
        if resp.status_code >= 500:
            self.failed_posts += 1
            self.last_error = f"post: HTTP {resp.status_code}"
            return False
        self._pending = None
        if resp.status_code >= 400:
            self.rejected += 1
            self.last_error = f"rejected: HTTP {resp.status_code} {resp.text[:300]}"
            log.warning("spark-governor rejected a report: %s", self.last_error)
            return True
        self.sent_records += n
        self.sent_reports += 1
        try:
            self.directives = resp.json().get("directives", [])
        except ValueError:
            self.directives = []
        self._apply(self.directives)
        return True

    def _apply(self, directives: list) -> None:
        """Apply each directive whose version is newer than the one applied; queue the acks."""
        for d in directives:
            try:
                knob, version, value = d["knob"], int(d["version"]), d.get("value")
            except (KeyError, TypeError, ValueError):
                continue
            if version <= self.applied_versions.get(knob, 0):
                continue
            applier = self.appliers.get(knob)
            if applier is None:
                status, message = "not_actuatable", f"not actuatable: this job has no applier for {knob}"
            else:
                try:
                    status, message = applier(value)
                except Exception as exc:
                    status, message = "failed", f"{exc.__class__.__name__}: {exc}"[:500]
            self.applied_versions[knob] = version
            ack = {"knob": knob, "version": version, "status": status, "message": message}
            self._acks.append(ack)
            self.apply_log.append({**ack, "value": value, "at": time.time()})
            self._wake.set()


def decode_query_events(items: list) -> list:
    """Default decoder of ``("query", (kind, event))`` items: the event's JSON as a dict (py4j
    listener events have ``json()``; dicts and JSON text pass through)."""
    out = []
    for kind, event in items:
        try:
            if isinstance(event, dict):
                out.append((kind, event))
            else:
                out.append((kind, json.loads(event if isinstance(event, (str, bytes)) else event.json())))
        except Exception:
            out.append(None)
    return out
