"""The reporter against real servers on 127.0.0.1 (no Spark): its token, bounded retries, the total deadline per
post, ``stop()``'s bound and reports split at the wire's maxima (issue #16).

``RawServer`` is a real TCP server speaking just enough HTTP/1.1 to misbehave on purpose (accept and never answer,
drip one byte every 2 s, 5xx for one report); the token tests run against the real control plane (SQLite).
"""
import gzip
import json
import logging
import socket
import threading
import time
from pathlib import Path

import pytest
import requests

from spark_governor.api.processes import wait_for
from spark_governor.collectors.attach import reporter_token
from spark_governor.collectors.reporter import Reporter, retry_after_s
from spark_governor.policies.wire import MAX_TASKS_PER_REPORT

SAMPLE = Path(__file__).parent.parent / "data" / "spark_events_sample.jsonl.gz"
SECRET = "sg_reporter-secret-4711"


def sample_events():
    with gzip.open(SAMPLE, "rt") as f:
        return [line.strip() for line in f]


N_TASKS = sum('"SparkListenerTaskEnd"' in e for e in sample_events())


def feed(reporter, events=None):
    for e in events or sample_events():
        reporter.offer("spark", e)


class RawServer:
    """A TCP server on 127.0.0.1 reading HTTP/1.1 requests (headers, Content-Length body) and answering per
    ``mode``: ``ok`` (200, JSON), ``hang`` (never), ``drip`` (one byte every ``drip_s``), or ``status(seq)`` ->
    (code, headers) to choose an error for some reports. Bodies of answered reports are kept in ``stored``."""

    def __init__(self, mode="ok", drip_s=2.0):
        self.mode, self.drip_s = mode, drip_s
        self.status = lambda seq: (200, {})
        self.stored: list[dict] = []
        self.attempts: list[tuple[int, float]] = []  # (seq, monotonic time) of every request
        self.auth: list = []
        self._sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._sock.getsockname()[1]}"
        self._stop = threading.Event()
        self._conns: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            self._conns.append(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn):
        f = conn.makefile("rb")
        try:
            while not self._stop.is_set():
                line = f.readline()
                if not line:
                    return
                headers = {}
                while (h := f.readline()) not in (b"\r\n", b"\n", b""):
                    k, _, v = h.decode().partition(":")
                    headers[k.strip().lower()] = v.strip()
                body = f.read(int(headers.get("content-length", 0)))
                report = json.loads(gzip.decompress(body))
                seq = report["reporter"]["seq"]
                self.attempts.append((seq, time.monotonic()))
                self.auth.append(headers.get("authorization"))
                mode = self.mode
                if mode == "hang":
                    self._stop.wait()
                    return
                if mode == "drip":
                    for byte in b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}":
                        if self._stop.wait(self.drip_s):
                            return
                        conn.sendall(bytes([byte]))
                    return
                code, extra = self.status(seq)
                out = json.dumps({"directives": [], "window_ms": 5000} if code == 200 else {"error": f"report {seq}: failed"}).encode()
                if code == 200:
                    self.stored.append(report)
                head = "".join(f"{k}: {v}\r\n" for k, v in extra.items())
                conn.sendall(f"HTTP/1.1 {code} X\r\nContent-Type: application/json\r\nContent-Length: {len(out)}\r\n"
                             f"{head}\r\n".encode() + out)
        except OSError:
            return
        finally:
            conn.close()

    def stored_tasks(self):
        """The tasks the stored reports account for: folded into their runtime windows (schema v3)."""
        return [w for r in self.stored for w in r.get("runtime_windows", []) for _ in range(w["tasks"] + w["failed_tasks"])]

    def stop(self):
        self._stop.set()
        self._sock.close()
        for c in self._conns:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


@pytest.fixture
def raw_server():
    servers = []

    def start(*args, **kwargs):
        servers.append(RawServer(*args, **kwargs))
        return servers[-1]

    yield start
    for s in servers:
        s.stop()


def fast(url, **kw):
    opts = dict(flush_interval_s=0.05, backoff_initial_s=0.05, backoff_max_s=0.2, heartbeat_s=60)
    return Reporter("delivery-job", url, **{**opts, **kw})


# -- the token ----------------------------------------------------------------------------------------------
def test_token_found_like_the_jar(tmp_path):
    conf = {}
    get = lambda key, default=None: conf.get(key, default)  # noqa: E731 (SparkConf.get's signature)
    env = {"SPARK_GOVERNOR_TOKEN": " from-env \n"}
    assert reporter_token(None, get, {}) is None
    assert reporter_token(None, get, env) == "from-env"
    (tmp_path / "tok").write_text("from-file\n")
    conf["spark.governor.tokenFile"] = str(tmp_path / "tok")
    assert reporter_token(None, get, env) == "from-file"
    conf["spark.governor.token"] = "from-conf"
    assert reporter_token(None, get, env) == "from-conf"
    assert reporter_token("from-arg", get, env) == "from-arg"
    conf.pop("spark.governor.token")
    conf["spark.governor.tokenFile"] = str(tmp_path / "missing")
    with pytest.raises(ValueError, match="spark.governor.tokenFile: cannot read"):
        reporter_token(None, get, env)
    (tmp_path / "empty").write_text("  \n")
    conf["spark.governor.tokenFile"] = str(tmp_path / "empty")
    with pytest.raises(ValueError, match="is empty"):
        reporter_token(None, get, env)
    with pytest.raises(ValueError, match="^token: ") as err:
        reporter_token("two words", get, env)
    assert "two words" not in str(err.value)


def test_token_is_sent_as_bearer_and_never_shown(raw_server, caplog):
    srv = raw_server()
    caplog.set_level(logging.DEBUG, logger="spark_governor")
    rep = fast(srv.url, token=f" {SECRET} ").start()
    try:
        feed(rep)
        wait_for(lambda: len(srv.stored_tasks()) == N_TASKS, 20, 0.05, "delivery")
        assert set(srv.auth) == {f"Bearer {SECRET}"}
        shown = [repr(rep), str(rep), json.dumps(rep.stats()), caplog.text, repr(vars(rep))]
        assert not any(SECRET in text for text in shown)
        assert "token=set" in repr(rep)
    finally:
        rep.stop(1)


def _plane_requiring_tokens(sqlite_url):
    from spark_governor.api.app import Settings
    from spark_governor.api.auth import TokenSpec
    from spark_governor.api.server import ControlPlane

    return ControlPlane(db_url=sqlite_url, port=0, settings=Settings(require_report_token=True),
                        tokens={"reporter": TokenSpec(SECRET, ("report",)),
                                "reader": TokenSpec("sg_reader-secret-0815", ("read",))}).start()


@pytest.mark.parametrize("token, status, cause", [
    (None, 401, "no token was sent"),
    ("sg_not-a-known-token", 401, "invalid"),
    ("sg_reader-secret-0815", 403, "lacks the report scope"),
])
def test_refused_token_is_counted_named_and_logged_once(sqlite_url, caplog, token, status, cause):
    plane = _plane_requiring_tokens(sqlite_url)
    caplog.set_level(logging.WARNING, logger="spark_governor.reporter")
    rep = fast(plane.url, token=token, heartbeat_s=0.05).start()
    try:
        feed(rep)
        wait_for(lambda: rep.rejected >= 3, 20, 0.05, "refused reports")
        assert rep.unauthorized == rep.rejected and rep.sent_reports == 0
        assert rep.last_error.startswith(f"rejected: HTTP {status}: ") and cause in rep.last_error
        assert len([r for r in caplog.records if "refused" in r.getMessage()]) == 1
        assert requests.get(plane.url + "/api/v1/jobs", timeout=5).json()["jobs"] == []
    finally:
        rep.stop(1)
        plane.stop()


def test_report_token_gets_reports_stored(sqlite_url):
    plane = _plane_requiring_tokens(sqlite_url)
    rep = fast(plane.url, token=SECRET).start()
    try:
        feed(rep)
        wait_for(lambda: rep.stats()["queued"] == 0 and rep.sent_reports >= 1 and rep._pending is None, 20, 0.05,
                 "delivery")
        assert rep.rejected == 0 and rep.failed_posts == 0
        job = requests.get(plane.url + "/api/v1/jobs/delivery-job", timeout=5).json()
        assert job["reporters"] == 1
    finally:
        rep.stop(1)
        plane.stop()


# -- bounded retries ----------------------------------------------------------------------------------------------
def test_a_report_answered_500_is_dropped_after_bounded_retries_and_the_rest_delivered(raw_server):
    srv = raw_server()
    srv.status = lambda seq: (500, {}) if seq == 2 else (200, {})
    rep = fast(srv.url, max_batch=8, max_retries=3)
    feed(rep)  # queued before the thread starts: several reports of at most 8 records
    rep.start()
    try:
        wait_for(lambda: rep.dropped_reports == 1 and rep.stats()["queued"] == 0 and rep._pending is None, 30, 0.05,
                 "the poison report dropped and the rest sent")
        tries = [s for s, _ in srv.attempts if s == 2]
        assert len(tries) == 1 + 3  # the first send and max_retries resends, same seq each time
        assert rep.failed_posts == 4 and "HTTP 500" in rep.last_error and "seq 2" in rep.last_error
        stored = [r["reporter"]["seq"] for r in srv.stored]
        assert 1 in stored and 2 not in stored and max(stored) >= 3
        assert rep.dropped == 8  # the dropped report's records, reported in dropped_total from then on
        assert srv.stored[-1]["reporter"]["dropped_total"] == 8
        assert len(srv.stored_tasks()) + 8 >= N_TASKS
    finally:
        rep.stop(1)


def test_retry_after_of_503_is_honoured_within_the_bound(raw_server):
    srv = raw_server()
    srv.status = lambda seq: (503, {"Retry-After": "1"}) if seq == 1 else (200, {})
    rep = fast(srv.url, max_retries=2, backoff_max_s=5).start()
    try:
        feed(rep)
        wait_for(lambda: rep.dropped_reports == 1 and srv.stored, 30, 0.05, "drop after retries")
        times = [t for s, t in srv.attempts if s == 1]
        assert len(times) == 3
        assert all(b - a >= 0.95 for a, b in zip(times, times[1:])), times  # not the 0.05 s backoff
    finally:
        rep.stop(1)
    assert retry_after_s("7") == 7 and retry_after_s("soon") is None
    assert retry_after_s("Wed, 21 Oct 2015 07:28:00 GMT", now=1445412470) == 10


# -- the total deadline per post ---------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["hang", "drip"])
def test_a_silent_or_dripping_server_costs_at_most_the_deadline_then_reports_flow(raw_server, mode):
    srv = raw_server(mode, drip_s=2.0)
    rep = fast(srv.url, post_deadline_s=3.0, read_timeout_s=5.0, max_retries=10)
    feed(rep)
    t0 = time.monotonic()
    rep.start()
    try:
        wait_for(lambda: rep.failed_posts >= 1, 10, 0.02, "the first post to fail")
        elapsed = time.monotonic() - t0
        assert 2.9 <= elapsed <= 4.0, elapsed  # deadline 3 s (+ the 0.05 s flush interval); a drip never times out
        assert "within the 3 s deadline" in rep.last_error
        assert rep.sent_reports == 0
        srv.mode = "ok"
        wait_for(lambda: len(srv.stored_tasks()) == N_TASKS, 15, 0.05, "reports once the server answers")
        assert rep.dropped == 0 and srv.stored[0]["reporter"]["seq"] == 1  # the failed report, resent
    finally:
        rep.stop(1)


def test_stop_returns_within_its_bound_while_a_post_hangs(raw_server):
    srv = raw_server("hang")
    rep = fast(srv.url, post_deadline_s=30.0, read_timeout_s=30.0)
    feed(rep)
    rep.start()
    wait_for(lambda: srv.attempts, 10, 0.02, "a post in flight")
    thread = rep._thread
    t0 = time.monotonic()
    rep.stop(0.5)
    took = time.monotonic() - t0
    assert took <= 0.5 + 1.0, took
    assert not thread.is_alive()
    assert rep.failed_posts == 1 and "aborted" in rep.last_error


# -- reports within the wire's maxima ------------------------------------------------------------------------------
def test_more_tasks_than_a_report_may_hold_are_split_into_several_reports(raw_server):
    srv = raw_server()
    rep = fast(srv.url, max_batch=100_000, max_tasks_per_report=7, flush_interval_s=2.0)
    feed(rep)
    rep.start()
    try:
        wait_for(lambda: len(srv.stored_tasks()) == N_TASKS, 10, 0.05, "every task")
        per_report = [sum(w["tasks"] + w["failed_tasks"] for w in r.get("runtime_windows", [])) for r in srv.stored]
        assert max(per_report) == 7 and len([n for n in per_report if n]) >= N_TASKS // 7
        assert srv.attempts[-1][1] - srv.attempts[0][1] < 2.0  # sent back to back, not one per flush interval
    finally:
        rep.stop(1)
    assert Reporter("x", "http://127.0.0.1:9", max_tasks_per_report=10**9)._limits["task"] == MAX_TASKS_PER_REPORT


def test_the_executor_added_hook_sees_each_added_executor_and_its_failure_costs_no_record(raw_server):
    """attach() warms added executors from this hook (collectors.executor_warmup); a hook that raises loses
    neither the event's own executor record nor the reporting."""
    srv = raw_server()
    seen = []

    def hook(event):
        seen.append(event["Executor ID"])
        if len(seen) == 1:
            raise RuntimeError("a failing hook")

    rep = fast(srv.url, on_executor_added=hook)
    for executor in ("7", "8"):
        rep.offer("spark", json.dumps({"Event": "SparkListenerExecutorAdded", "Timestamp": 1_700_000_000_000,
                                       "Executor ID": executor, "Executor Info": {"Host": "127.0.0.1",
                                                                                  "Total Cores": 1}}))
    feed(rep)
    rep.start()
    try:
        wait_for(lambda: len(srv.stored_tasks()) == N_TASKS, 10, 0.05, "every task")
        executors = [e["executor_id"] for r in srv.stored for e in r.get("executors", [])]
        assert seen == ["7", "8"] and {"7", "8"} <= set(executors)
        assert "executor-added hook" in (rep.last_error or "") and "a failing hook" in rep.last_error
    finally:
        rep.stop(1)
