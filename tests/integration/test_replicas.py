"""Issue #42, replicas: two ``serve`` processes on one PostgreSQL, each taking any report (reports of schema v3, as
the reporters send them today). Exactly one leads (``api.leader``); killed with SIGKILL under load (master and
workers at once), it is replaced as leader within one evaluation interval, every report answered 200 is stored
exactly once (a report whose answer was lost goes to the other replica with the same seq: stored once), and
``/metrics`` of both replicas shows each job's series once (the leading replica's, ``api.replica_metrics``)."""
from __future__ import annotations

import threading
import time

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import func, select

from spark_governor.aggregators.db import make_engine, upgrade
from spark_governor.aggregators.models import jobs, reporters, template_vertices, template_windows
from spark_governor.api.processes import wait_for
from spark_governor.bench.reports import gz, make_report
from tests.serve_process import ServeProcess

pytestmark = pytest.mark.postgres
SECRET = "replica-report-secret-1"
TOKENS = {"reporter": f"report={SECRET}"}
HEADERS = {"Content-Encoding": "gzip", "Authorization": f"Bearer {SECRET}"}
EVALUATION_S = 4.0  # followers try to take over every 2 s
N_REPORTERS, N_TASKS = 6, 40


class Reporter(threading.Thread):
    """Reporter ``i`` of job ``rep-job-<i>``: posts its reports seq 1, 2, … to the replicas in turn, a second of
    its job each; a post without an answer (its replica died) is sent again, same seq, to the next replica, as a
    load balancer does. Stops after ``stop`` is set."""

    def __init__(self, urls: list[str], i: int, stop: threading.Event) -> None:
        super().__init__(name=f"replica-reporter-{i}", daemon=True)
        self.urls, self.i, self.stop_event = urls, i, stop
        self.acked: dict[int, dict] = {}
        self.errors: list[str] = []
        self.base_ms = int(time.time() * 1000) - 600_000

    def body(self, seq: int) -> bytes:
        return gz(make_report(job=f"rep-job-{self.i}", n_tasks=N_TASKS, seq=seq, reporter_id=f"replica-rep-{self.i}",
                              partitions=N_TASKS // 2, start_ms=self.base_ms + seq * 1000, seed=seq, batches=1))

    def run(self) -> None:
        sessions = [requests.Session() for _ in self.urls]
        seq, k = 1, self.i
        body = self.body(seq)
        while not self.stop_event.is_set():
            target = k % len(self.urls)
            try:
                r = sessions[target].post(self.urls[target] + "/api/v1/reports", data=body, headers=HEADERS, timeout=10)
            except requests.RequestException:
                k += 1  # the replica is gone: the same report to the other one
                continue
            if r.status_code == 200:
                self.acked[seq] = r.json()
                seq, k = seq + 1, k + 1
                body = self.body(seq)
            elif r.status_code == 503:
                time.sleep(0.05)
            else:
                self.errors.append(f"seq {seq}: HTTP {r.status_code} {r.text[:300]}")
                return
            time.sleep(0.02)


def leading(url: str) -> dict[str, float]:
    """``{replica: 1.0 | 0.0}`` from a replica's ``spark_governor_replica_leading``."""
    text = requests.get(url + "/metrics", timeout=10).text
    return {s.labels["replica"]: s.value for f in text_string_to_metric_families(text)
            if f.name == "spark_governor_replica_leading" for s in f.samples}


def job_series(url: str) -> set[tuple]:
    """The job series a replica exports: (name, labels) of every sample with a ``spark_job`` label."""
    text = requests.get(url + "/metrics", timeout=10).text
    return {(s.name, tuple(sorted(s.labels.items()))) for f in text_string_to_metric_families(text)
            for s in f.samples if "spark_job" in s.labels}


def test_two_replicas_share_one_postgres_and_survive_the_leaders_sigkill(fresh_postgres_db, tmp_path):
    upgrade(fresh_postgres_db)
    engine = make_engine(fresh_postgres_db)
    args = ("--evaluation-seconds", str(EVALUATION_S), "--no-migrate")
    replicas = [ServeProcess(fresh_postgres_db, tmp_path / f"r{k}", TOKENS, args) for k in range(2)]
    stop = threading.Event()
    try:
        for r in replicas:
            r.start()
        # one leader across both
        views = wait_for(lambda: (lambda v: v if sum(v.values()) == 1 else None)(
            {**leading(replicas[0].url), **leading(replicas[1].url)}), 30, 0.2, "one leading replica")
        leader_name = next(name for name, v in views.items() if v == 1)
        leader = next(r for r in replicas if leading(r.url).get(leader_name) == 1)
        follower = next(r for r in replicas if r is not leader)
        load = [Reporter([r.url for r in replicas], i, stop) for i in range(N_REPORTERS)]
        for t in load:
            t.start()
        wait_for(lambda: all(len(t.acked) >= 5 for t in load) or any(t.errors for t in load), 60, 0.05, "load")
        killed_at = time.monotonic()
        leader.kill()  # SIGKILL, master and workers, under load
        wait_for(lambda: leading(follower.url).get(next(iter(leading(follower.url)))) == 1, EVALUATION_S + 5, 0.05,
                 "the follower leads")
        takeover_s = time.monotonic() - killed_at
        assert takeover_s <= EVALUATION_S, f"takeover took {takeover_s:.2f} s"
        acked_before = {t.i: len(t.acked) for t in load}
        wait_for(lambda: all(len(t.acked) >= acked_before[t.i] + 3 for t in load), 60, 0.05, "load after the kill")
        stop.set()
        for t in load:
            t.join(30)
        assert [e for t in load for e in t.errors] == []

        # every acknowledged report stored exactly once: each reporter's seqs 1..n, every task counted once
        with engine.connect() as conn:
            for t in load:
                n = max(t.acked)
                assert sorted(t.acked) == list(range(1, n + 1))
                last_seq, reports_total, tasks_total = conn.execute(
                    select(reporters.c.last_seq, reporters.c.reports_total, reporters.c.tasks_total)
                    .where(reporters.c.id == f"replica-rep-{t.i}")).one()
                assert (last_seq, reports_total, tasks_total) == (n, n, n * N_TASKS)
                folded = conn.execute(
                    select(func.sum(template_windows.c.tasks + template_windows.c.failed_tasks))
                    .select_from(template_windows.join(template_vertices,
                                                       template_vertices.c.id == template_windows.c.template_id)
                                 .join(jobs, jobs.c.id == template_vertices.c.job_id))
                    .where(jobs.c.name == f"rep-job-{t.i}")).scalar()
                assert folded == n * N_TASKS

        # the killed replica back as a follower: /metrics of both show each job's series once
        leader.start()
        wait_for(lambda: leading(leader.url).get(next(iter(leading(leader.url)))) == 0.0, 10, 0.2, "a follower")
        a, b = job_series(follower.url), job_series(leader.url)
        assert a and not b  # the jobs' series from the leading replica only
        assert {name for name, _ in a} >= {"spark_governor_job_up", "spark_governor_reporter_dropped_total"}
    finally:
        stop.set()
        for r in replicas:
            r.close()
        engine.dispose()
