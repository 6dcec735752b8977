"""Issue #16, production server: ``serve`` on gunicorn with several workers answers /metrics the same from any
worker; the scheduler runs in exactly one process (PostgreSQL advisory lock, SQLite file lock), and a follower
takes over within one evaluation interval when the leader dies."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

import pytest
import requests

from spark_governor.aggregators.db import make_engine, upgrade
from spark_governor.api.leader import Leader
from spark_governor.api.processes import free_port, wait_for
from spark_governor.bench.reports import gz, make_report

SECRET = "prod-report-secret"


def _serve(db_url: str, tmp_path, *extra: str) -> tuple[subprocess.Popen, str]:
    port = free_port()
    log = open(tmp_path / f"serve-{port}.log", "w")
    proc = subprocess.Popen([sys.executable, "-m", "spark_governor", "serve", "--port", str(port), "--db", db_url,
                             "--workers", "2", "--threads", "4", "--token", f"rep:report+read={SECRET}", *extra],
                            stdout=log, stderr=log, env={**os.environ, "PROMETHEUS_MULTIPROC_DIR": ""})
    url = f"http://127.0.0.1:{port}"

    def up():
        if proc.poll() is not None:
            raise AssertionError((tmp_path / f"serve-{port}.log").read_text()[-3000:])
        try:
            return requests.get(url + "/healthz", timeout=1).status_code == 200
        except requests.RequestException:
            return False

    wait_for(up, 90, 0.2, "serve healthy")
    return proc, url


def _stop(proc: subprocess.Popen) -> int:
    proc.send_signal(signal.SIGTERM)
    return proc.wait(30)


def _reports_total(text: str) -> float:
    return sum(float(v) for v in re.findall(r'^spark_governor_reports_total\{outcome="accepted"\} (\S+)$', text, re.M))


def test_serve_on_gunicorn_sums_counters_over_workers(sqlite_url, tmp_path):
    proc, url = _serve(sqlite_url, tmp_path)
    try:
        session = requests.Session()
        for seq in range(1, 21):  # new connections spread the reports over both workers
            r = requests.post(url + "/api/v1/reports", data=gz(make_report(n_tasks=4, seq=seq, reporter_id="r1")),
                              headers={"Content-Encoding": "gzip", "Authorization": f"Bearer {SECRET}"}, timeout=10)
            assert r.status_code == 200, r.text
        seen = {_reports_total(requests.get(url + "/metrics", timeout=10).text) for _ in range(8)}
        assert seen == {20.0}
        session.close()
    finally:
        assert _stop(proc) == 0


def _leaders(leaders: list[Leader]) -> list[bool]:
    return [x.is_leader() for x in leaders]


def _exactly_one_leader_and_takeover(url: str) -> None:
    engines = [make_engine(url) for _ in range(3)]
    leaders = [Leader(e, poll_s=0.2, name=f"l{i}").start() for i, e in enumerate(engines)]
    try:
        wait_for(lambda: sum(_leaders(leaders)) == 1, 10, 0.05, "one leader")
        time.sleep(0.6)  # several election rounds: still exactly one
        assert sum(_leaders(leaders)) == 1
        first = _leaders(leaders).index(True)
        leaders[first].stop()  # the leader goes away
        t0 = time.monotonic()
        wait_for(lambda: sum(_leaders(leaders)) == 1 and not leaders[first].is_leader(), 10, 0.02, "takeover")
        assert time.monotonic() - t0 < 1.0  # within the poll interval (plus scheduling noise)
    finally:
        for x in leaders:
            x.stop()
        for e in engines:
            e.dispose()


def test_exactly_one_leader_on_sqlite_and_takeover(sqlite_url):
    upgrade(sqlite_url)
    _exactly_one_leader_and_takeover(sqlite_url)


@pytest.mark.postgres
def test_exactly_one_leader_on_postgres_and_takeover(fresh_postgres_db):
    _exactly_one_leader_and_takeover(fresh_postgres_db)


@pytest.mark.postgres
def test_a_killed_leader_process_is_replaced(fresh_postgres_db, tmp_path):
    """Two serve processes on one PostgreSQL: the first leads; kill -9 it (master and workers); the second
    leads within one evaluation interval (the advisory lock goes with the dead session)."""
    from sqlalchemy import text

    from spark_governor.api.leader import LOCK_KEY

    upgrade(fresh_postgres_db)
    eng = make_engine(fresh_postgres_db)

    def holder():
        with eng.connect() as conn:
            return conn.execute(text("SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted AND "
                                     "objid::bigint = (:k & 4294967295)"), {"k": LOCK_KEY}).scalar()

    first, _ = _serve(fresh_postgres_db, tmp_path, "--evaluation-seconds", "2")
    second = None
    try:
        wait_for(lambda: holder() is not None, 20, 0.1, "a leader")
        backend = holder()
        second, _ = _serve(fresh_postgres_db, tmp_path, "--evaluation-seconds", "2")
        time.sleep(2)
        assert holder() == backend  # the first keeps leading
        for pid in _family(first.pid):
            os.kill(pid, signal.SIGKILL)
        first.wait(10)
        t0 = time.monotonic()
        wait_for(lambda: holder() not in (None, backend), 15, 0.05, "takeover")
        assert time.monotonic() - t0 <= 2.0  # within one evaluation interval
    finally:
        for p in (first, second):
            if p is not None and p.poll() is None:
                _stop(p)
        eng.dispose()


def _family(pid: int) -> set[int]:
    out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True, text=True).stdout
    return {pid, *(int(x) for x in out.split())}
