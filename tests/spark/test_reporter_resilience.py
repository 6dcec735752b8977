"""The reporter never blocks or breaks the job: control plane down, slow, or answering errors."""
import gzip
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import requests
from werkzeug.serving import make_server
from werkzeug.wrappers import Request, Response

from spark_governor.collectors.reporter import Reporter
from spark_governor.api.processes import free_port, new_secret, wait_for

SAMPLE = Path(__file__).parent.parent / "data" / "spark_events_sample.jsonl.gz"


def sample_events():
    with gzip.open(SAMPLE, "rt") as f:
        return [line.strip() for line in f]


class PeerServer:
    """A real HTTP server on 127.0.0.1 whose behaviour the test switches: ok, slow or error."""

    def __init__(self, mode="ok", delay_s=3.0):
        self.mode, self.delay_s = mode, delay_s
        self.received = []
        self.requests = 0
        self._srv = make_server("127.0.0.1", 0, self._app, threaded=True)
        self.url = f"http://127.0.0.1:{self._srv.server_port}"
        self._t = threading.Thread(target=self._srv.serve_forever, daemon=True)
        self._t.start()

    def _app(self, environ, start_response):
        req = Request(environ)
        self.requests += 1
        if self.mode == "slow":
            time.sleep(self.delay_s)
        if self.mode == "error":
            return Response("boom", status=503)(environ, start_response)
        body = json.loads(gzip.decompress(req.get_data()))
        self.received.append(body)
        return Response(json.dumps({"directives": [], "window_ms": 5000}),  # as the control plane answers
                        content_type="application/json")(environ, start_response)

    def stop(self):
        self._srv.shutdown()
        self._srv.server_close()


def feed(reporter, events, times=1):
    started = time.perf_counter()
    for _ in range(times):
        for e in events:
            reporter.offer("spark", e)
    return time.perf_counter() - started


def test_slow_control_plane_never_blocks_offer_and_drops_are_counted():
    peer = PeerServer("slow", delay_s=2.0)
    rep = Reporter("slow-job", peer.url, max_queue=100, flush_interval_s=0.05, read_timeout_s=0.3,
                   backoff_initial_s=0.05, backoff_max_s=0.2).start()
    try:
        events = sample_events()
        elapsed = feed(rep, events, times=40)  # 3 000 events into queues of 100
        assert elapsed < 2.0, f"offer blocked: {elapsed:.2f}s for {40 * len(events)} events"
        wait_for(lambda: rep.failed_posts >= 2, 20, what="timed-out posts")
        assert rep.dropped > 0
        assert rep.sent_records == 0
    finally:
        rep.stop(0.5)
        peer.stop()


def test_error_responses_are_retried_with_the_same_seq_then_delivered():
    peer = PeerServer("error")
    rep = Reporter("err-job", peer.url, max_queue=10_000, flush_interval_s=0.05,
                   backoff_initial_s=0.05, backoff_max_s=0.1).start()
    try:
        events = sample_events()
        feed(rep, events)
        wait_for(lambda: rep.failed_posts >= 3, 20, what="failed posts")
        peer.mode = "ok"
        wait_for(lambda: rep.stats()["queued"] == 0 and rep._pending is None, 20, what="delivery")
        folded = sum(w["tasks"] + w["failed_tasks"] for body in peer.received for w in body.get("template_windows", []))
        assert folded == sum('"SparkListenerTaskEnd"' in e for e in events)
        seqs = [b["reporter"]["seq"] for b in peer.received]
        assert seqs == sorted(set(seqs)) and seqs[0] == 1  # the failed batch kept its seq
        assert rep.dropped == 0
    finally:
        rep.stop(0.5)
        peer.stop()


def test_invalid_job_name_is_refused_at_attach_time():
    with pytest.raises(ValueError, match="job"):
        Reporter("not a valid job name", "http://127.0.0.1:1")


def test_rejected_report_is_discarded_not_retried_forever(sqlite_url):
    from spark_governor.api.app import Settings
    from spark_governor.api.server import ControlPlane

    plane = ControlPlane(db_url=sqlite_url, port=0, settings=Settings(max_body_bytes=600)).start()
    rep = Reporter("too-big", plane.url, flush_interval_s=0.05).start()
    try:
        feed(rep, sample_events()[:40])
        wait_for(lambda: rep.rejected >= 1 and rep.stats()["queued"] == 0, 20, what="rejection")
        assert "413" in rep.last_error and rep.sent_records == 0
        posts = rep.rejected + rep.sent_reports
        time.sleep(0.5)
        assert rep.rejected + rep.sent_reports <= posts + 1  # no retry storm
        # the reporter's first report (no task yet: it learns the window length from its answer) is small enough to
        # be stored; every report with the tasks was refused and none of them is stored
        assert all(j["tasks_reported_total"] == 0 for j in requests.get(plane.url + "/api/v1/jobs").json()["jobs"])
    finally:
        rep.stop(0.5)
        plane.stop()


@pytest.mark.spark
def test_job_runs_unaffected_while_control_plane_is_down(spark, tmp_path):
    """Kill the control plane mid-run: batches keep their durations, drops are counted and
    reported once it is back, and reporting resumes."""
    from spark_governor.collectors import attach
    from spark_governor.collectors.demo_job import DemoConfig, start_query

    port = free_port()
    token = new_secret()  # serve requires a report token, as in production
    db_url = f"sqlite:///{tmp_path / 'sg.db'}"
    url = f"http://127.0.0.1:{port}"

    def serve():
        # After `kill -9` of gunicorn's master its workers notice the orphaning within about a second and exit,
        # releasing the port; until then a new `serve` refuses to start (as under a real supervisor, retry).
        deadline = time.time() + 60
        while True:
            proc = subprocess.Popen([sys.executable, "-m", "spark_governor", "serve", "--port", str(port), "--db",
                                     db_url], env={**os.environ, "SPARK_GOVERNOR_TOKENS": f"reporter:report={token}"},
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            while proc.poll() is None and not _healthy(url) and time.time() < deadline:
                time.sleep(0.2)
            if proc.poll() is None and _healthy(url):
                return proc
            if time.time() >= deadline:
                proc.kill()
                raise AssertionError("control plane did not come up within 60 s")
            time.sleep(1)

    plane = serve()
    handle = attach(spark, job="outage", endpoint=url, token=token, max_queue=30, flush_interval_s=0.5,
                    connect_timeout_s=0.5, backoff_initial_s=0.2, backoff_max_s=1.0)
    cfg = DemoConfig(job="outage", rows_per_second=3000, keys=200)
    query = start_query(spark, cfg, str(tmp_path / "ckpt"))
    def batches_done():
        return len(query.recentProgress)

    try:
        # enough batches before and during the outage, however fast this machine runs them
        time.sleep(10)
        wait_for(lambda: batches_done() >= 9, 180, 0.5, "batches before the outage")
        t_down = time.time()
        plane.kill()
        plane.wait()
        during_from = batches_done()
        time.sleep(10)
        wait_for(lambda: batches_done() >= during_from + 10, 180, 0.5, "batches during the outage")
        t_up = time.time()
        plane = serve()
        time.sleep(12)
        assert query.exception() is None and query.isActive
    finally:
        query.stop()
        handle.detach(10)
        progress = [json.loads(p.json) for p in query.recentProgress]
    try:
        def trig(p):
            from datetime import datetime
            return datetime.fromisoformat(p["timestamp"].replace("Z", "+00:00")).timestamp()

        before = [p["batchDuration"] for p in progress if trig(p) < t_down and p["batchId"] > 2]
        during = [p["batchDuration"] for p in progress if t_down + 1 < trig(p) < t_up]
        assert len(before) >= 5 and len(during) >= 8, (len(before), len(during))
        med_before, med_during = statistics.median(before), statistics.median(during)
        assert med_during <= max(2 * med_before, med_before + 500), (before, during)
        assert handle.reporter.dropped > 0 and handle.reporter.rejected == 0
        job = requests.get(f"{url}/api/v1/jobs/outage", timeout=5).json()
        assert job["reporter_dropped_total"] == handle.reporter.dropped
        batches = requests.get(f"{url}/api/v1/jobs/outage/batches?limit=1000", timeout=5).json()["batches"]
        after = [b for b in batches if b["trigger_ms"] / 1000 > t_up + 2]
        assert len(after) >= 3, "reporting did not resume"
    finally:
        plane.terminate()
        plane.wait(10)


def _healthy(url):
    try:
        return requests.get(url + "/healthz", timeout=1).status_code == 200
    except requests.RequestException:
        return False
