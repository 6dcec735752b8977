"""Issue #16, faults: the database goes away under load and comes back.

* ``serve`` (a real gunicorn process, two workers) on a private PostgreSQL cluster that the test stops
  (``pg_ctl stop -m fast``) for 20 s and starts again on the same data directory and port, while a
  real local Spark streaming job reports to it through ``attach()`` and a poster thread sends reports
  five times a second. During the outage reports get 503 with ``Retry-After`` (never 500), ``/healthz``
  says unhealthy without naming the database; afterwards the same server (not restarted) stores
  reports and evaluates policies again; every evaluation skipped meanwhile is counted once on
  ``/metrics`` (``spark_governor_evaluations_skipped_total``, ``api.scheduler``). The Spark job's batch
  durations during the outage stay within noise of before, and its reporter retries and drops with
  counters instead of blocking.
* The scheduler alone against a database that refuses connections: every run is skipped and counted,
  the scheduler keeps running.
"""
from __future__ import annotations

import glob
import json
import os
import re
import shutil
import statistics
import subprocess
import tempfile
import threading
import time
from datetime import datetime

import pytest
import requests
from sqlalchemy import text

from spark_governor.aggregators.db import make_engine, upgrade
from spark_governor.api.processes import free_port, new_secret, start_serve, stop_process, wait_for
from spark_governor.bench.reports import gz
from spark_governor.bench.reports import make_report as _make_report


def make_report(*args, **kwargs):
    """The v1 report of whole task rows: its cases count and shape the rows (v3: tests/integration/test_edge_fold.py)."""
    return _make_report(*args, **{"schema_version": 1, **kwargs})
from tests.conftest import require

OUTAGE_S = 20.0
EVALUATION_S = 1.0
JOB = "pg-outage"  # the Spark job
LOAD_JOB = "pg-load"  # the poster thread's job


class PgCluster:
    """A private PostgreSQL cluster (initdb, pg_ctl) on a free port of 127.0.0.1, stopped and started
    by the test on the same data directory and port (as ``tests/conftest.py``'s ``postgres_url``)."""

    def __init__(self) -> None:
        found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
        require(bool(found), "PostgreSQL server (Debian package postgresql)")
        self.bindir = os.path.dirname(found[-1])
        self.root = tempfile.mkdtemp(prefix="sg-pg-outage-")
        self.as_user: list[str] = []
        if os.geteuid() == 0:  # initdb refuses to run as root
            shutil.chown(self.root, "postgres")
            self.as_user = ["runuser", "-u", "postgres", "--"]
        self.data, self.port = os.path.join(self.root, "data"), free_port()
        subprocess.run(self.as_user + [f"{self.bindir}/initdb", "-D", self.data, "-A", "trust", "-U", "postgres"],
                       check=True, capture_output=True)
        self.url = f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    def _ctl(self, *args: str, check: bool = True) -> None:
        subprocess.run(self.as_user + [f"{self.bindir}/pg_ctl", "-D", self.data, "-l",
                                       os.path.join(self.root, "log"), *args], check=check, capture_output=True)

    def start(self) -> None:
        self._ctl("-w", "-o", f"-h 127.0.0.1 -p {self.port} -k {self.root}", "start")

    def stop(self) -> None:
        self._ctl("-w", "-m", "fast", "stop")

    def destroy(self) -> None:
        self._ctl("-m", "immediate", "stop", check=False)
        shutil.rmtree(self.root, ignore_errors=True)


@pytest.fixture
def pg_cluster():
    cluster = PgCluster()
    cluster.start()
    yield cluster
    cluster.destroy()


def metric(text_: str, name: str, **labels: str) -> float:
    """The sum of the samples of ``name`` whose labels include ``labels`` (0 when there are none)."""
    total = 0.0
    for m in re.finditer(rf"^{name}(?:\{{([^}}]*)\}})? (\S+)$", text_, re.M):
        have = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1) or ""))
        if all(have.get(k) == v for k, v in labels.items()):
            total += float(m.group(2))
    return total


class Poster(threading.Thread):
    """Posts a small report every ``period_s`` seconds as one reporter would (a refused report is sent
    again with the same seq); records (time, status, Retry-After) of every answer."""

    def __init__(self, url: str, token: str, period_s: float = 0.2, n_tasks: int = 8) -> None:
        super().__init__(daemon=True)
        self.url, self.token, self.period_s, self.n_tasks = url, token, period_s, n_tasks
        self.answers: list[tuple[float, int, str | None]] = []
        self.acked: set[int] = set()
        self.errors: list[str] = []
        self.stop_event = threading.Event()

    def run(self) -> None:
        session, seq = requests.Session(), 1
        headers = {"Content-Encoding": "gzip", "Authorization": f"Bearer {self.token}"}
        while not self.stop_event.wait(self.period_s):
            body = gz(make_report(job=LOAD_JOB, n_tasks=self.n_tasks, seq=seq, reporter_id="poster",
                                  start_ms=int(time.time() * 1000) - 2000, seed=seq))
            try:
                r = session.post(self.url + "/api/v1/reports", data=body, headers=headers, timeout=10)
            except requests.RequestException as exc:
                self.errors.append(repr(exc))
                continue
            self.answers.append((time.time(), r.status_code, r.headers.get("Retry-After")))
            if r.status_code == 200:
                self.acked.add(seq)
                seq += 1
        session.close()


def trigger_s(progress: dict) -> float:
    return datetime.fromisoformat(progress["timestamp"].replace("Z", "+00:00")).timestamp()


@pytest.mark.spark
@pytest.mark.postgres
def test_postgres_stopped_20s_under_load(spark, pg_cluster, tmp_path, monkeypatch):
    from spark_governor.api.auth import create_token
    from spark_governor.collectors import attach
    from spark_governor.collectors.demo_job import DemoConfig, start_query

    db = pg_cluster.url
    upgrade(db)
    engine = make_engine(db)
    monkeypatch.setenv("SPARK_GOVERNOR_EVALUATION_SECONDS", str(EVALUATION_S))
    monkeypatch.setenv("SPARK_GOVERNOR_WORKERS", "2")
    monkeypatch.setenv("SPARK_GOVERNOR_THREADS", "4")
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", "")  # serve makes its own
    port, token = free_port(), new_secret()
    url = f"http://127.0.0.1:{port}"
    log = open(tmp_path / "serve.log", "wb")
    serve = start_serve(db, port, report_token=token, stderr=log)
    poster = Poster(url, token)
    handle = query = None
    try:
        writer = create_token(engine, "ops", ["write"])
        time.sleep(1.5)  # serve re-reads its tokens every second
        r = requests.put(f"{url}/api/v1/jobs/{JOB}/policies/threshold?register=true", timeout=10,
                         json={"config": {"trigger_interval_s": 2.0}},
                         headers={"Authorization": f"Bearer {writer}"})
        assert r.status_code in (200, 201), r.text
        handle = attach(spark, job=JOB, endpoint=url, token=token, max_queue=50, flush_interval_s=0.5,
                        connect_timeout_s=0.5, read_timeout_s=2.0, backoff_initial_s=0.2, backoff_max_s=1.0)
        query = start_query(spark, DemoConfig(job=JOB, rows_per_second=1000, keys=200), str(tmp_path / "ckpt"))
        poster.start()

        def profiled_ms() -> int:  # the governor stores the job's cluster profile when it evaluates its policies
            with engine.connect() as conn:
                return conn.execute(text("SELECT max(updated_ms) FROM cluster_profiles")).scalar() or 0

        wait_for(lambda: len(query.recentProgress) >= 8 and profiled_ms() > 0, 90, 0.5, "batches and evaluations")
        posts_before = handle.reporter.stats()
        assert posts_before["sent_reports"] > 0 and posts_before["rejected"] == 0, posts_before
        skipped_before = metric(requests.get(url + "/metrics", timeout=10).text,
                                "spark_governor_evaluations_skipped_total")

        # -- the outage --------------------------------------------------------------------------
        t_down = time.time()
        pg_cluster.stop()
        health = None
        while time.time() < t_down + OUTAGE_S:
            health = requests.get(url + "/healthz", timeout=5)
            assert health.status_code == 503 and health.headers.get("Retry-After"), health.text
            assert str(pg_cluster.port) not in health.text and "127.0.0.1" not in health.text, health.text
            assert "postgres" not in health.text.lower(), health.text
            time.sleep(2)
        during_reporter = handle.reporter.stats()
        pg_cluster.start()
        t_up = time.time()

        # -- recovery, without restarting serve ----------------------------------------------------
        wait_for(lambda: any(t > t_up and s == 200 for t, s, _ in poster.answers), 20, 0.2, "reports stored again")

        def evaluation_runs():  # the leader's completed policy evaluation runs (a skipped run is not one)
            r = requests.get(url + "/metrics", timeout=10)
            return (metric(r.text, "spark_governor_evaluation_run_seconds_count"),) if r.status_code == 200 else None

        (runs_up,) = wait_for(evaluation_runs, 20, 0.2, "/metrics answered again")
        wait_for(lambda: (evaluation_runs() or (0.0,))[0] > runs_up, 30, 0.5, "policies evaluated again")

        def spark_reports_after() -> int:
            r = requests.get(f"{url}/api/v1/jobs/{JOB}/batches?limit=1000", timeout=10)
            return r.status_code == 200 and sum(b["trigger_ms"] / 1000 > t_up + 1 for b in r.json()["batches"])

        wait_for(lambda: spark_reports_after() >= 3, 30, 0.5, "the Spark job's reports stored again")

        def dropped_reported() -> bool:  # the reporter's drops reach the control plane with its next reports
            r = requests.get(f"{url}/api/v1/jobs/{JOB}", timeout=10)
            return r.status_code == 200 and r.json()["reporter_dropped_total"] == handle.reporter.dropped > 0

        wait_for(dropped_reported, 20, 0.5, "the reporter's drops counted on the control plane")
        assert serve.poll() is None
        exposition = requests.get(url + "/metrics", timeout=10)
        assert exposition.status_code == 200
        skipped = metric(exposition.text, "spark_governor_evaluations_skipped_total",
                         reason="database_unavailable") - skipped_before
        # one per evaluation interval of the outage, counted by the leader only (two workers: not twice)
        expected = OUTAGE_S / EVALUATION_S
        assert 0.5 * expected <= skipped <= 1.3 * expected + 3, (skipped, expected)
        assert "spark_governor_retention_runs_skipped_total" in exposition.text
    finally:
        poster.stop_event.set()
        poster.join(15)
        if query is not None:
            query.stop()
        if handle is not None:
            handle.detach(10)
        stop_process(serve)
        log.close()
        engine.dispose()

    # -- the poster: 503 + Retry-After during the outage, never a 500; nothing acknowledged lost ----
    statuses = {s for _, s, _ in poster.answers}
    assert statuses <= {200, 503}, (statuses, (tmp_path / "serve.log").read_text()[-3000:])
    refused = [(t, ra) for t, s, ra in poster.answers if s == 503]
    assert refused and all(ra for _, ra in refused), refused[:5]
    assert all(t_down - 1 <= t <= t_up + 10 for t, _ in refused), "503 outside the outage"
    assert sum(t_down + 1 < t < t_up for t, _ in refused) >= OUTAGE_S / 2, "too few posts answered in the outage"
    assert not poster.errors, poster.errors[:3]
    engine = make_engine(db)
    try:
        with engine.connect() as conn:
            stored = conn.execute(text("SELECT count(*) FROM tasks t JOIN jobs j ON j.id = t.job_id "
                                       "WHERE j.name = :job"), {"job": LOAD_JOB}).scalar()
        assert stored == len(poster.acked) * poster.n_tasks  # every acknowledged report stored exactly once
    finally:
        engine.dispose()

    # -- the Spark job: batch durations within noise of before; the reporter retried and dropped ---
    progress = [json.loads(p.json) for p in query.recentProgress]
    before = [p["batchDuration"] for p in progress if trigger_s(p) < t_down and p["batchId"] > 2]
    during = [p["batchDuration"] for p in progress if t_down + 1 < trigger_s(p) < t_up]
    assert len(before) >= 5 and len(during) >= 8, (len(before), len(during))
    med_before, med_during = statistics.median(before), statistics.median(during)
    assert med_during <= 1.5 * med_before + 500, (before, during)
    assert during_reporter["failed_posts"] > posts_before["failed_posts"], during_reporter
    final = handle.reporter.stats()
    assert final["rejected"] == 0 and final["sent_reports"] > during_reporter["sent_reports"], final
    print(f"\noutage {OUTAGE_S:.0f} s: skipped evaluations {skipped:.0f}; batch median before {med_before} ms, "
          f"during {med_during} ms; reporter failed posts {during_reporter['failed_posts']}, "
          f"dropped {final['dropped']}; poster 503s {len(refused)}, acked {len(poster.acked)}")


def test_scheduler_counts_runs_the_database_refuses_and_keeps_running():
    """A database that refuses connections (a closed port of 127.0.0.1): every evaluation and retention
    run is skipped and counted; the scheduler survives them."""
    pytest.importorskip("psycopg")
    from prometheus_client import CollectorRegistry, generate_latest

    from spark_governor.api.governor import Governor
    from spark_governor.api.scheduler import build_scheduler
    from spark_governor.api.scheduler_metrics import SchedulerMetrics

    engine = make_engine(f"postgresql+psycopg://nobody@127.0.0.1:{free_port()}/absent",
                         connect_args={"connect_timeout": 2})
    registry = CollectorRegistry()
    metrics = SchedulerMetrics(registry)
    scheduler = build_scheduler(engine, retention_s=3600, retention_interval_s=0.2,
                                governor=Governor(engine, evaluation_interval_s=0.2), metrics=metrics)
    scheduler.start()
    try:
        def counted() -> tuple[float, float]:
            text_ = generate_latest(registry).decode()
            return (metric(text_, "spark_governor_evaluations_skipped_total", reason="database_unavailable"),
                    metric(text_, "spark_governor_retention_runs_skipped_total", reason="database_unavailable"))

        wait_for(lambda: min(counted()) >= 3, 20, 0.1, "skipped runs counted")
        assert scheduler.running and {j.id for j in scheduler.get_jobs()} == {"policies", "retention", "surges", "slo"}
        text_ = generate_latest(registry).decode()
        assert metric(text_, "spark_governor_evaluations_skipped_total", reason="database_error") == 0
        assert 'spark_governor_evaluations_skipped_total{reason="database_error"} 0.0' in text_  # from the start
    finally:
        scheduler.shutdown(wait=False)
        engine.dispose()


def test_scheduler_counts_runs_skipped_while_the_database_does_not_answer():
    """A database address that accepts connections and never answers (a listening socket nobody serves):
    each run waits for the connect timeout (2 s), so the runs due meanwhile are skipped by APScheduler and
    counted as ``still_running``; the timed-out run itself as ``database_unavailable``."""
    pytest.importorskip("psycopg")
    import socket

    from prometheus_client import CollectorRegistry, generate_latest

    from spark_governor.api.governor import Governor
    from spark_governor.api.scheduler import build_scheduler
    from spark_governor.api.scheduler_metrics import SchedulerMetrics

    with socket.socket() as hole:
        hole.bind(("127.0.0.1", 0))
        hole.listen(64)  # the kernel completes the handshakes; nothing ever reads or answers
        engine = make_engine(f"postgresql+psycopg://nobody@127.0.0.1:{hole.getsockname()[1]}/absent",
                             connect_args={"connect_timeout": 2})
        registry = CollectorRegistry()
        scheduler = build_scheduler(engine, retention_s=3600, retention_interval_s=0.2,
                                    governor=Governor(engine, evaluation_interval_s=0.2),
                                    metrics=SchedulerMetrics(registry))
        started = time.monotonic()
        scheduler.start()
        try:
            def skipped(name: str, reason: str) -> float:
                return metric(generate_latest(registry).decode(), name, reason=reason)

            wait_for(lambda: skipped("spark_governor_evaluations_skipped_total", "database_unavailable") >= 1, 20,
                     0.1, "a timed-out evaluation")
            assert time.monotonic() - started >= 1.9  # it waited for the connect timeout, not refused at once
            assert skipped("spark_governor_evaluations_skipped_total", "still_running") >= 3
            assert skipped("spark_governor_retention_runs_skipped_total", "still_running") >= 3
            assert scheduler.running
        finally:
            scheduler.shutdown(wait=False)
            engine.dispose()
