"""The non-blocking reporter: bounded queues, one background thread, batched gzip JSON POSTs.

Guarantees towards the Spark job (issue #2):

* ``offer`` never blocks and never raises: it appends to a bounded ``deque``; when full the
  oldest item is dropped and ``dropped`` is incremented.
* One daemon thread converts raw listener events into wire records (calling Spark's
  ``JsonProtocol`` over py4j *here*, not on Spark's listener-bus thread), and POSTs batches of
  records every ``flush_interval_s`` seconds to ``{endpoint}/api/v1/reports``.
* Each POST has a total deadline (``post_deadline_s``, 10 s; ``collectors.http_post``): a server that
  accepts and never answers, or answers a byte every few seconds, costs the sending thread at most
  that long, and the post counts as failed (``failed_posts``, ``last_error``).
* A batch that failed (connection refused, deadline, 5xx, 429) is retried unchanged (same ``seq``, so
  ingest is idempotent) with exponential backoff (a ``Retry-After`` of 429/503 is honoured, at most
  ``backoff_max_s``), at most ``max_retries`` times (5); then it is dropped (its records counted in
  ``dropped``, the report in ``dropped_reports``) and what is queued behind it is sent, so one report
  the server cannot store never stops a job's reporting (issue #16). Meanwhile new records keep
  queueing and the oldest are dropped when the outbox is full. A batch the server refuses with
  another 4xx is discarded and counted in ``rejected``; 401/403 (missing, invalid or insufficient
  token) also in ``unauthorized``, logged once.
* The reporter token (``token=``, a control-plane token with the ``report`` scope) is sent as
  ``Authorization: Bearer <token>``; it is never logged and not part of ``repr``/``stats``.
* A report holds at most the wire's per-report maxima (``policies.wire``: ``MAX_TASKS_PER_REPORT`` tasks,
  ``MAX_ITEMS_PER_REPORT`` stages/batches, ``MAX_PARTITION_RECORDS`` partition records); more queued
  records go out in further reports straight away.
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

import email.utils
import gzip
import json
import logging
import threading
import time
import uuid
from collections import Counter, deque
from typing import Any, Callable, Optional

from spark_governor.collectors.events import EventTranslator, batch_record, decode_json_events, report_body
from spark_governor.collectors.http_post import DeadlinePoster, PostError
from spark_governor.collectors.query_state import QueryTracker
from spark_governor.policies.task_fold import DEFAULT_TASK_DETAIL, TaskFold
from spark_governor.policies.wire import (MAX_ITEMS_PER_REPORT, MAX_PARTITION_RECORDS, MAX_TASKS_PER_REPORT,
                                          MAX_WINDOW_MS, MIN_WINDOW_MS, SCHEMA_VERSION, validate_job_name)

#: seconds between the query states a reporter sends while a query is active (``state_interval_s``'s default)
STATE_INTERVAL_S = 1.0

log = logging.getLogger("spark_governor.reporter")

#: statuses after which a report is sent again (bounded by ``max_retries``); other 4xx discard it
RETRY_STATUSES = frozenset({429}) | frozenset(range(500, 600))


class Secret:
    """A secret string that does not show itself: ``repr``/``str`` give ``'***'``; ``reveal()`` the value."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "'***'"

    __str__ = __repr__


def check_token(token: Optional[str]) -> Optional[str]:
    """The token stripped, None when empty; ValueError (naming ``token``, not showing it) when it cannot be sent
    in an HTTP header."""
    if token is None:
        return None
    if not isinstance(token, str):
        raise ValueError(f"token: expected a string (got {type(token).__name__})")
    token = token.strip()
    if not token:
        return None
    if any(c.isspace() or ord(c) < 0x21 or ord(c) > 0x7e for c in token):
        raise ValueError("token: contains whitespace or characters that cannot be sent in an HTTP header")
    return token


def retry_after_s(value: Optional[str], now: Optional[float] = None) -> Optional[float]:
    """Seconds to wait from a ``Retry-After`` header (delta-seconds or an HTTP date); None when absent or invalid."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when is None or when.tzinfo is None:
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


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
        max_retries: int = 5,
        post_deadline_s: float = 10.0,
        token: Optional[str] = None,
        ssl_context: Any = None,
        max_tasks_per_report: int = MAX_TASKS_PER_REPORT,
        decode_events: Optional[Callable[[list], list]] = None,
        decode_progress: Optional[Callable[[list], list]] = None,
        translator: Optional[EventTranslator] = None,
        app_id: Optional[str] = None,
        master: Optional[str] = None,
        appliers: Optional[dict[str, Callable[[Any], tuple[str, Optional[str]]]]] = None,
        live_state: Optional[Callable[[], dict]] = None,
        query_status: Optional[Callable[[], list]] = None,
        decode_query: Optional[Callable[[list], list]] = None,
        state_interval_s: float = STATE_INTERVAL_S,
        source_probes: Optional[list] = None,
        on_executor_added: Optional[Callable[[dict], None]] = None,
        task_detail: str = DEFAULT_TASK_DETAIL,
        window_ms: Optional[int] = None,
    ) -> None:
        self.job = validate_job_name(job)
        # the edge fold (report schema v3, policies.task_fold): tasks and stages are held until the control plane's
        # window length is known (``window_ms``, else the answer to the first report gives it)
        self.fold = TaskFold(task_detail)
        self.window_ms = check_window_ms(window_ms)
        self.url = endpoint.rstrip("/") + "/api/v1/reports"
        if max_retries < 0:
            raise ValueError(f"max_retries: expected 0 or more (got {max_retries})")
        if not post_deadline_s > 0:
            raise ValueError(f"post_deadline_s: expected seconds > 0 (got {post_deadline_s})")
        self.max_batch = max_batch
        self.flush_interval_s = flush_interval_s
        self.heartbeat_s = heartbeat_s
        self.timeout = (connect_timeout_s, read_timeout_s)
        self.backoff_initial_s = backoff_initial_s
        self.backoff_max_s = backoff_max_s
        self.max_retries = max_retries  # sends of one report after its first, before it is dropped
        self.post_deadline_s = post_deadline_s  # seconds, the whole of one POST
        token = check_token(token)
        self._token: Optional[Secret] = Secret(token) if token else None
        self._poster = DeadlinePoster(self.url, deadline_s=post_deadline_s, connect_timeout_s=connect_timeout_s,
                                      read_timeout_s=read_timeout_s, ssl_context=ssl_context)
        # per-report maxima of the wire (the server rejects larger reports with 400)
        self._limits = {"task": max(1, min(max_tasks_per_report, MAX_TASKS_PER_REPORT)),
                        "stage": MAX_ITEMS_PER_REPORT, "batch": MAX_ITEMS_PER_REPORT,
                        "partition": MAX_PARTITION_RECORDS, "executor": MAX_ITEMS_PER_REPORT}
        self._more = False  # the last report was cut at a per-report maximum: send the next one at once
        self.decode_events = decode_events or decode_json_events
        self.decode_progress = decode_progress or decode_json_events
        self.decode_query = decode_query or decode_query_events
        self.query_status = query_status  # () -> [{"id", "run_id", "name", "trigger", status fields}]
        self.state_interval_s = state_interval_s
        self.queries = QueryTracker(source_probes)  # collectors.source_probe.SourceProbe list
        self.translator = translator or EventTranslator()
        self.app_id, self.master = app_id, master
        self.id = uuid.uuid4().hex
        self._raw: deque = deque(maxlen=max_queue)
        self._outbox: deque = deque(maxlen=max_queue)
        self._pending: Optional[tuple[int, bytes, int, list]] = None  # (seq, gzip body, records, acks)
        self._attempts = 0  # failed sends of the pending report
        self._outage = False  # the last send failed (logged once per outage)
        self._seq = 0
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: Optional[threading.Thread] = None
        # counters (monotonic)
        self.dropped = 0
        self.sent_records = 0
        self.sent_reports = 0
        self.failed_posts = 0
        self.rejected = 0
        self.unauthorized = 0  # of rejected: 401/403 (missing, invalid or insufficient token)
        self.dropped_reports = 0  # reports given up after max_retries (their records are in dropped)
        self._auth_logged = False
        self.conversion_errors = 0
        self.last_error: Optional[str] = None
        self.directives: list = []  # latest directives returned by the control plane
        self.appliers = dict(appliers or {})  # knob -> applier(value) -> (status, message)
        self.live_state = live_state  # () -> {"slots": int, "executors": int}, read in this thread
        # (SparkListenerExecutorAdded event dict) -> None, called in this thread; must return at once
        # (collectors.executor_warmup.ExecutorWarmer)
        self.on_executor_added = on_executor_added
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

    def offer_executors_present(self, executor_ids: list[str], at_ms: int, cores: Optional[int] = None) -> None:
        """Queue the executors registered before the listener was (``attach()`` calls it once): each as
        registered at ``at_ms`` (epoch ms), so the control plane counts it in the run's executor-seconds."""
        try:
            for executor_id in executor_ids:
                if len(self._outbox) == self._outbox.maxlen:
                    self.dropped += 1
                self._outbox.append(("executor", {"executor_id": str(executor_id), "added_ms": int(at_ms),
                                                  "cores": cores}))
            self._wake.set()
        except Exception:  # never let reporting fail the job
            pass

    # -- lifecycle -------------------------------------------------------------------------
    def start(self) -> "Reporter":
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=f"spark-governor-reporter-{self.job}", daemon=True)
            self._thread.start()
        return self

    def stop(self, flush_timeout_s: float = 5.0) -> None:
        """Stop the thread after one last conversion and send attempts, within ``flush_timeout_s`` seconds
        plus at most 1 s: the last posts get only the time left, and a post still running at the end is
        aborted (its socket shut down). Afterwards the thread is gone (unless it is stuck in a py4j call
        into a dead JVM, which no Python code can interrupt)."""
        if self._thread is None:
            return
        end = time.monotonic() + max(0.0, flush_timeout_s)
        self._final_deadline = end
        self._stop.set()
        self._wake.set()
        self._thread.join(max(0.0, end - time.monotonic()))
        if self._thread.is_alive():
            self._poster.abort()
            self._thread.join(1.0)
        self._poster.close()
        self._thread = None

    def __repr__(self) -> str:
        return (f"Reporter(job={self.job!r}, url={self.url!r}, id={self.id!r}, "
                f"token={'set' if self._token else 'none'})")

    def stats(self) -> dict:
        return {
            "queued": len(self._raw) + len(self._outbox),
            "dropped": self.dropped,
            "orphaned": self.translator.orphaned,
            "sent_records": self.sent_records,
            "sent_reports": self.sent_reports,
            "failed_posts": self.failed_posts,
            "rejected": self.rejected,
            "unauthorized": self.unauthorized,
            "dropped_reports": self.dropped_reports,
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
                deadline_s = self.post_deadline_s
                if stopping:
                    deadline_s = min(deadline_s, getattr(self, "_final_deadline", now) - now)
                ok, wait_s = self._send_once(deadline_s)
                now = time.monotonic()
                if ok:
                    last_ack = now
                    backoff = self.backoff_initial_s
                    # keep sending while a full batch is waiting
                    full = self._more or len(self._outbox) >= self.max_batch
                    next_send = now if full else now + self._interval()
                    if stopping and (self._outbox or self._raw or self._more):
                        continue
                elif self._pending is None:  # given up after max_retries: what is queued behind goes next
                    backoff = self.backoff_initial_s
                    next_send = now + (backoff if wait_s is None else min(wait_s, self.backoff_max_s))
                else:
                    next_send = now + (backoff if wait_s is None else min(wait_s, self.backoff_max_s))
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
        """Feed the query tracker and the executor-added hook; their failure never costs the event's own
        records."""
        try:
            if kind == "spark":
                if event.get("Event") == "SparkListenerJobStart":
                    self.queries.on_job_start(event)
                elif event.get("Event") == "SparkListenerExecutorAdded" and self.on_executor_added is not None:
                    try:
                        self.on_executor_added(event)
                    except Exception as exc:
                        self.last_error = f"executor-added hook: {exc!r}"[:500]
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

    def _take(self) -> list:
        """Records for the next report, in queue order: at most ``max_batch``, cut before the first record whose
        kind has reached its per-report maximum (that one and the rest go in the next report, at once). While the
        window length is unknown, tasks and stages stay queued (they are folded with it)."""
        items: list = []
        held: list = []
        counts: Counter = Counter()
        self._more = False
        while self._outbox and len(items) < self.max_batch:
            kind = self._outbox[0][0]
            if self.window_ms is None and kind in ("task", "stage"):
                held.append(self._outbox.popleft())
                continue
            if counts[kind] >= self._limits.get(kind, self.max_batch):
                self._more = True
                break
            items.append(self._outbox.popleft())
            counts[kind] += 1
        self._outbox.extendleft(reversed(held))
        return items

    def _build_pending(self) -> None:
        items = self._take()
        # stopping: every runtime window still open goes with this report (policies.task_fold)
        body = report_body(items, self.translator.known_templates, self.fold if self.window_ms else None,
                           self.window_ms, int(time.time() * 1000), self._stop.is_set())
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
                         "applied": acks, "knob_state": knob_state, "task_detail": self.fold.task_detail},
            **body,
        }
        if self.window_ms is not None:
            report["window_ms"] = self.window_ms
        raw = json.dumps(report, separators=(",", ":")).encode()
        self._pending = (self._seq, gzip.compress(raw, compresslevel=1), len(items), acks)

    def _headers(self) -> dict:
        headers = {"Content-Type": "application/json", "Content-Encoding": "gzip"}
        if self._token is not None:
            headers["Authorization"] = "Bearer " + self._token.reveal()
        return headers

    def _send_once(self, deadline_s: Optional[float] = None) -> tuple[bool, Optional[float]]:
        """POST the pending report (built if needed) within ``deadline_s`` seconds (default ``post_deadline_s``).
        ``(True, None)`` when the report is done with (stored or rejected), ``(False, wait)`` when it failed:
        ``wait`` the seconds a ``Retry-After`` asked for, else None."""
        if self._pending is None:
            self._build_pending()
        seq, payload, n, _acks = self._pending
        try:
            answer = self._poster.post(payload, self._headers(), self.post_deadline_s if deadline_s is None
                                       else max(0.0, deadline_s))
        except PostError as exc:
            self._failed(exc.reason)
            return False, None
        status = answer.status
        if status in RETRY_STATUSES:
            wait = retry_after_s(answer.headers.get("retry-after")) if status in (429, 503) else None
            self._failed(f"post: HTTP {status} {_error_text(answer.body)}".rstrip())
            return False, wait
        self._pending, self._attempts = None, 0
        self._learn_window(answer.body)
        if self._outage:
            self._outage = False
            log.info("spark-governor: control plane at %s reachable again", self.url)
        if status >= 400:
            self._rejected(status, _error_text(answer.body))
            return True, None
        if status >= 300:  # a redirect is not followed: the report is not stored
            self._rejected(status, "redirects are not followed; give attach() the control plane's final URL")
            return True, None
        self.sent_records += n
        self.sent_reports += 1
        try:
            directives = json.loads(answer.body).get("directives", [])
            self.directives = directives if isinstance(directives, list) else []
        except (ValueError, AttributeError):
            self.directives = []
        self._apply(self.directives)
        return True, None

    def _learn_window(self, body: bytes) -> None:
        """The control plane's window length from its answer (``window_ms``; also in the 400 that refuses a report
        folded with another one), used for the reports built from now on."""
        try:
            value = json.loads(body).get("window_ms")
        except (ValueError, AttributeError):
            return
        if isinstance(value, int) and not isinstance(value, bool) and MIN_WINDOW_MS <= value <= MAX_WINDOW_MS:
            self.window_ms = value

    def _rejected(self, status: int, text: str) -> None:
        """Count a refused report (discarded, not sent again). 401/403 are logged once: every later report of
        this reporter would be refused for the same reason."""
        self.rejected += 1
        if status in (401, 403):
            self.unauthorized += 1
            if status == 401 and self._token is None:
                cause = ("no token was sent and the control plane requires one: give attach() token=..., "
                         "spark.governor.token / spark.governor.tokenFile or SPARK_GOVERNOR_TOKEN (a token with "
                         "the report scope)")
            elif status == 401:
                cause = "the token is invalid, revoked or unknown to this control plane"
            else:
                cause = "the token lacks the report scope or is not allowed for this job"
            self.last_error = f"rejected: HTTP {status}: {cause} ({text})"[:500]
            if not self._auth_logged:
                self._auth_logged = True
                log.warning("spark-governor: reports of job %s are refused; %s", self.job, self.last_error)
            return
        self.last_error = f"rejected: HTTP {status} {text}"[:500]
        if self.rejected <= 5 or self.rejected % 100 == 0:
            log.warning("spark-governor rejected a report (%d so far): %s", self.rejected, self.last_error)

    def _failed(self, reason: str) -> None:
        """Count a failed send of the pending report; after ``max_retries`` failed resends drop it (its records
        counted in ``dropped``, its directive acknowledgements kept for the next report)."""
        self.failed_posts += 1
        self.last_error = reason
        self._attempts += 1
        if not self._outage:
            self._outage = True
            log.warning("spark-governor: cannot report to %s (%s); a report is sent at most %d more times, "
                        "then dropped", self.url, reason, self.max_retries)
        if self._attempts > self.max_retries and self._pending is not None:
            seq, _payload, n, acks = self._pending
            self._pending, self._attempts = None, 0
            self.dropped += n
            self.dropped_reports += 1
            self._acks = list(acks) + self._acks
            self.last_error = (f"{reason}; report seq {seq} ({n} records) dropped after "
                               f"{self.max_retries + 1} attempts")[:500]
            if self.dropped_reports <= 5 or self.dropped_reports % 100 == 0:
                log.warning("spark-governor: %s", self.last_error)

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


def check_window_ms(window_ms: Optional[int]) -> Optional[int]:
    """``window_ms`` if None or a window length the wire accepts (ms), else ValueError naming it."""
    if window_ms is None:
        return None
    if isinstance(window_ms, bool) or not isinstance(window_ms, int) or not MIN_WINDOW_MS <= window_ms <= MAX_WINDOW_MS:
        raise ValueError(f"window_ms: expected milliseconds in [{MIN_WINDOW_MS}, {MAX_WINDOW_MS}] (got {window_ms!r})")
    return window_ms


def _error_text(body: bytes) -> str:
    """The control plane's error message (``{"error": ...}``) or the start of the body, for ``last_error``."""
    try:
        err = json.loads(body).get("error")
        if isinstance(err, str):
            return err[:300]
    except (ValueError, AttributeError):
        pass
    return body[:300].decode("utf-8", "replace")


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
