"""Issue #16, faults as tests with real processes: ``spark-governor serve`` killed with SIGKILL (master and
workers at once) or stopped gracefully, and started again on the same database (SQLite file, PostgreSQL).

* Reports under load: every report answered 200 is stored exactly once; a report whose answer was lost in the
  crash is stored completely or not at all, and once (never twice) after its reporter re-sends it with the same
  ``reporter.seq`` (the control plane deduplicates by reporter and seq, ``aggregators.ingest``); a re-sent
  acknowledged report answers ``duplicate: true`` and changes nothing.
* Directives (``aggregators.directives``): a directive issued by a policy in act mode is delivered and applied
  exactly once by a real :class:`~spark_governor.collectors.reporter.Reporter` when the control plane restarts
  between issue and delivery, between delivery and acknowledgement, and after the acknowledgement; versions
  only grow across restarts, there is one directive row per (job, knob), and a repeated acknowledgement
  changes nothing.

What is counted per report (``aggregators.models``): its task rows (``tasks``, no unique key: a report stored
twice doubles them), the task counts folded into ``runtime_windows`` and the reporter's ``reports_total`` /
``tasks_total`` / ``last_seq``. Task ids encode the report's seq (``seq * TASK_ID_BASE + index``).
"""
from __future__ import annotations

import threading
import time

import pytest
import requests
from sqlalchemy import func, select

from spark_governor.aggregators.db import make_engine, upgrade
from spark_governor.aggregators.models import (decisions, directives, jobs, reporters, runtime_windows, tasks,
                                               template_vertices)
from spark_governor.api.processes import wait_for
from spark_governor.bench.reports import gz
from spark_governor.bench.reports import make_report as _make_report


def make_report(*args, **kwargs):
    """The v1 report of whole task rows: its cases count and shape the rows (v3: tests/integration/test_edge_fold.py)."""
    return _make_report(*args, **{"schema_version": 1, **kwargs})
from tests.serve_process import ServeProcess

REPORT_SECRET = "fault-report-secret-1"
OPS_SECRET = "fault-ops-secret-12"
TOKENS = {"reporter": f"report={REPORT_SECRET}", "ops": f"write={OPS_SECRET}"}
REPORT_HEADERS = {"Content-Encoding": "gzip", "Authorization": f"Bearer {REPORT_SECRET}"}
OPS_HEADERS = {"Authorization": f"Bearer {OPS_SECRET}"}
TASK_ID_BASE = 100_000
N_REPORTERS = 4
N_TASKS = 120  # tasks per report: a commit takes long enough for the kill to land in some


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db_url(request, sqlite_url):
    """A migrated database: a fresh SQLite file, or a fresh database of the session's PostgreSQL server."""
    url = sqlite_url if request.param == "sqlite" else request.getfixturevalue("fresh_postgres_db")
    upgrade(url)
    return url


@pytest.fixture
def engine(db_url):
    eng = make_engine(db_url)
    yield eng
    eng.dispose()


@pytest.fixture
def serve(db_url, tmp_path):
    """``serve`` on ``db_url`` (not started): evaluations every 0.5 s, two workers (the default)."""
    server = ServeProcess(db_url, tmp_path, TOKENS, ("--evaluation-seconds", "0.5"))
    yield server
    server.close()


# -- reports under load ---------------------------------------------------------------------------
def _report_body(i: int, seq: int, base_ms: int) -> bytes:
    """Reporter ``i``'s report ``seq``, the same bytes every time it is sent (job ``fault-<i>``)."""
    rep = make_report(job=f"fault-{i}", n_tasks=N_TASKS, seq=seq, reporter_id=f"rep-{i}", seed=seq,
                      start_ms=base_ms + seq * 1000)
    for k, task in enumerate(rep["tasks"]):
        task["task_id"] = seq * TASK_ID_BASE + k
    return gz(rep)


class LoadReporter(threading.Thread):
    """Posts reporter ``i``'s reports seq 1, 2, … as fast as answered until a post fails without an answer
    (the server died): that seq is ``unanswered``. 503 (too many in flight) is retried with the same seq;
    any other answer but 200 is an error."""

    def __init__(self, url: str, i: int, base_ms: int) -> None:
        super().__init__(name=f"load-reporter-{i}", daemon=True)
        self.url, self.i, self.base_ms = url + "/api/v1/reports", i, base_ms
        self.acked: dict[int, dict] = {}  # seq -> the 200 answer
        self.unanswered: int | None = None
        self.errors: list[str] = []

    def run(self) -> None:
        session = requests.Session()
        seq = 1
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                r = session.post(self.url, data=_report_body(self.i, seq, self.base_ms), headers=REPORT_HEADERS,
                                 timeout=30)
            except requests.RequestException:
                self.unanswered = seq
                return
            if r.status_code == 200:
                self.acked[seq] = r.json()
                seq += 1
            elif r.status_code == 503:
                time.sleep(0.05)
            else:
                self.errors.append(f"seq {seq}: HTTP {r.status_code} {r.text[:300]}")
                return
        self.errors.append("the server was never killed")


def _tasks_per_seq(engine, i: int) -> dict[int, int]:
    """Stored task rows of reporter ``i`` per report seq."""
    seq = tasks.c.task_id // TASK_ID_BASE
    with engine.connect() as conn:
        rows = conn.execute(select(seq, func.count()).select_from(tasks.join(jobs, jobs.c.id == tasks.c.job_id))
                            .where(jobs.c.name == f"fault-{i}").group_by(seq)).all()
    return {int(s): n for s, n in rows}


def _window_tasks(engine, i: int) -> int:
    """Tasks folded into reporter ``i``'s runtime windows (successful + failed)."""
    w, tv = runtime_windows, template_vertices
    with engine.connect() as conn:
        return conn.execute(
            select(func.coalesce(func.sum(w.c.tasks + w.c.failed_tasks), 0))
            .select_from(w.join(tv, tv.c.id == w.c.template_id).join(jobs, jobs.c.id == tv.c.job_id))
            .where(jobs.c.name == f"fault-{i}")).scalar()


def _counters(engine, i: int) -> tuple[int, int, int]:
    """Reporter ``i``'s ``(last_seq, reports_total, tasks_total)``."""
    with engine.connect() as conn:
        return tuple(conn.execute(select(reporters.c.last_seq, reporters.c.reports_total, reporters.c.tasks_total)
                                  .where(reporters.c.id == f"rep-{i}")).one())


def _post(url: str, body: bytes) -> dict:
    r = requests.post(url + "/api/v1/reports", data=body, headers=REPORT_HEADERS, timeout=30)
    assert r.status_code == 200, r.text
    return r.json()


def test_kill_9_under_load_loses_and_doubles_no_report(serve, engine):
    """Four reporters post 120-task reports back to back; ``serve`` is killed (SIGKILL, master and workers)
    while each has one in flight, checked with the server dead, started again and sent the lost reports."""
    base_ms = int(time.time() * 1000) - 120_000
    serve.start()
    load = [LoadReporter(serve.url, i, base_ms) for i in range(N_REPORTERS)]
    for t in load:
        t.start()
    # under load: every reporter has had reports acknowledged, and each has one in flight
    wait_for(lambda: all(len(t.acked) >= 3 for t in load) or any(t.errors for t in load), 30, 0.02, "load")
    serve.kill()
    for t in load:
        t.join(30)
    assert not any(t.is_alive() for t in load)
    assert [e for t in load for e in t.errors] == []

    # with the server dead: each acknowledged report stored exactly once; an unanswered one whole or absent
    stored_unanswered = {}
    for t in load:
        assert t.unanswered == max(t.acked) + 1  # the reporter posts in order and stops at the first failure
        per_seq = _tasks_per_seq(engine, t.i)
        assert {s: per_seq.get(s) for s in t.acked} == {s: N_TASKS for s in t.acked}
        assert per_seq.get(t.unanswered, 0) in (0, N_TASKS), "a report half stored"
        assert set(per_seq) <= {*t.acked, t.unanswered}
        stored_unanswered[t.i] = t.unanswered in per_seq

    serve.start()  # the same port and database
    for t in load:
        # the unanswered report re-sent with the same seq: stored once (a duplicate if the crash came after
        # its commit)
        answer = _post(serve.url, _report_body(t.i, t.unanswered, base_ms))
        assert answer["duplicate"] is stored_unanswered[t.i]
        # an acknowledged report re-sent: a duplicate, nothing changes
        before = (_tasks_per_seq(engine, t.i), _window_tasks(engine, t.i), _counters(engine, t.i))
        for seq in (1, max(t.acked)):
            answer = _post(serve.url, _report_body(t.i, seq, base_ms))
            assert answer["duplicate"] is True and answer["accepted"] == {"tasks": 0, "stages": 0, "batches": 0}
        assert (_tasks_per_seq(engine, t.i), _window_tasks(engine, t.i), _counters(engine, t.i)) == before
        # and the reporter goes on
        answer = _post(serve.url, _report_body(t.i, t.unanswered + 1, base_ms))
        assert answer["duplicate"] is False and answer["accepted"]["tasks"] == N_TASKS

    for t in load:
        last = t.unanswered + 1
        assert _tasks_per_seq(engine, t.i) == {s: N_TASKS for s in range(1, last + 1)}
        assert _window_tasks(engine, t.i) == last * N_TASKS
        assert _counters(engine, t.i) == (last, last, last * N_TASKS)


# -- directives across restarts -------------------------------------------------------------------
DJOB = "directed"
#: threshold in act mode; one decision per 2 s at most, and only on batches completed after the last decision
POLICY = {"mode": "act", "config": {"trigger_interval_s": 2.0, "scaling_interval_s": 2.0, "rollback": False}}


def _feeder(seq: int, ratio: float, executors: int | None = None, applied: tuple = ()) -> bytes:
    """A report of reporter ``feeder`` (job ``directed``) with three completed micro-batches whose processing
    time is ``ratio`` × the 2 s trigger interval; ``executors`` None leaves the job's executor count alone."""
    now = int(time.time() * 1000)
    batches = [{"query_id": "q", "run_id": "run", "batch_id": seq * 100 + k, "trigger_ms": now - 2000 * (3 - k),
                "batch_duration_ms": int(ratio * 2000), "durations_ms": {"triggerExecution": int(ratio * 2000)},
                "num_input_rows": 10, "state_operators": [], "event_time": {}, "observed_metrics": {}}
               for k in range(3)]
    reporter = {"id": "feeder", "seq": seq, "applied": list(applied)}
    if executors is not None:
        reporter.update(executors=executors, slots=executors)
    return gz({"schema_version": 1, "job": DJOB, "reporter": reporter, "batches": batches})


def _directives(engine) -> list[tuple]:
    """Every directive row of the job: (knob, version, value, status, applied_version, applied_ms)."""
    with engine.connect() as conn:
        return [tuple(r) for r in conn.execute(
            select(directives.c.knob, directives.c.version, directives.c.value, directives.c.status,
                   directives.c.applied_version, directives.c.applied_ms)
            .select_from(directives.join(jobs, jobs.c.id == directives.c.job_id)).where(jobs.c.name == DJOB)
            .order_by(directives.c.id))]


def _decisions(engine) -> list[tuple]:
    """Every decision of the job, oldest first: (new_value, status, directive_version)."""
    with engine.connect() as conn:
        return [tuple(r) for r in conn.execute(
            select(decisions.c.new_value, decisions.c.status, decisions.c.directive_version)
            .select_from(decisions.join(jobs, jobs.c.id == decisions.c.job_id)).where(jobs.c.name == DJOB)
            .order_by(decisions.c.id))]


@pytest.mark.parametrize("db_url,how", [
    ("sqlite", "graceful"), ("sqlite", "kill"),
    # PostgreSQL: the crash (a graceful handover of the scheduler's advisory lock: test_production_server.py)
    pytest.param("postgres", "kill", marks=pytest.mark.postgres),
], indirect=["db_url"])
def test_directives_are_applied_exactly_once_across_restarts(how, serve, engine):
    """Restarts of the control plane (``how``: SIGTERM or SIGKILL) (1) after a directive was delivered and
    applied by the job but before its acknowledgement arrived, (2) after that acknowledgement and between the
    issue and the delivery of the next version."""
    from spark_governor.collectors.reporter import Reporter

    serve.start()
    _post(serve.url, _feeder(1, ratio=0.95, executors=2))
    r = requests.put(f"{serve.url}/api/v1/jobs/{DJOB}/policies/threshold", json=POLICY, headers=OPS_HEADERS,
                     timeout=10)
    assert r.status_code == 200, r.text
    wait_for(lambda: _directives(engine), 30, 0.1, "directive v1 issued")
    assert _directives(engine) == [("executors", 1, 3, "pending", None, None)]

    # a real reporter whose applier holds on to its first directive until released, and whose report
    # building can be paused (``live_state`` runs in its sending thread)
    executors, calls = {"n": 2}, []
    delivered, release, resume, paused = (threading.Event() for _ in range(4))
    resume.set()

    def applier(value):
        calls.append(value)
        delivered.set()
        release.wait(30)
        executors["n"] = value
        return "applied", f"requested {value} executors"

    def live_state():
        if not resume.is_set():
            paused.set()
            resume.wait(30)
        return {"executors": executors["n"], "slots": executors["n"]}

    rep = Reporter(DJOB, serve.url, token=REPORT_SECRET, flush_interval_s=0.1, heartbeat_s=0.2,
                   backoff_initial_s=0.1, backoff_max_s=0.3, max_retries=1000, post_deadline_s=5.0,
                   appliers={"executors": applier}, live_state=live_state).start()
    try:
        # 1. delivered and applied by the job, the control plane gone before the acknowledgement arrives: the
        # report carrying it fails, is sent again to the new process, and the directive is applied once
        assert delivered.wait(20), rep.stats()
        serve.stop(how)
        failed = rep.failed_posts
        release.set()
        wait_for(lambda: rep.failed_posts > failed, 20, 0.05, "the acknowledging report failing")
        serve.start()
        wait_for(lambda: _directives(engine)[0][3] == "applied", 20, 0.1, "acknowledgement stored")
        (v1,) = _directives(engine)
        assert v1[:5] == ("executors", 1, 3, "applied", 1) and v1[5] is not None
        assert _decisions(engine) == [(3, "applied", 1)]
        assert calls == [3] and rep.applied_versions == {"executors": 1}

        # 2. v1 acknowledged; v2 issued while the job's reporter is paused; restart before v2's delivery
        resume.clear()
        assert paused.wait(10)
        second = _feeder(2, ratio=0.95)
        _post(serve.url, second)
        wait_for(lambda: _directives(engine)[0][1] == 2, 30, 0.1, "directive v2 issued")
        assert _directives(engine) == [("executors", 2, 4, "pending", 1, v1[5])]
        serve.restart(how)
        resume.set()
        wait_for(lambda: _directives(engine)[0][4] == 2, 20, 0.1, "v2 acknowledged")
        sent = rep.sent_reports
        wait_for(lambda: rep.sent_reports >= sent + 3, 20, 0.05, "more reports after the acknowledgement")
        # the versions went on from the stored one (2, not 1 again, which the job would take for applied); v1
        # was not applied again, v2 once; one row per (job, knob); no decision was taken again
        (v2,) = _directives(engine)
        assert v2[:5] == ("executors", 2, 4, "applied", 2)
        assert _decisions(engine) == [(3, "applied", 1), (4, "applied", 2)]
        assert calls == [3, 4] and [a["version"] for a in rep.apply_log] == [1, 2]
        assert rep.directives == [{"knob": "executors", "version": 2, "value": 4}]

        # acknowledgements are idempotent: a re-sent report is a duplicate, a repeated or stale ack changes nothing
        assert _post(serve.url, second)["duplicate"] is True
        answer = _post(serve.url, _feeder(3, ratio=0.5, applied=(
            {"knob": "executors", "version": 2, "status": "failed", "message": "late"},
            {"knob": "executors", "version": 1, "status": "failed", "message": "stale"})))
        assert answer["duplicate"] is False
        assert answer["directives"] == [{"knob": "executors", "version": 2, "value": 4}]
        assert _directives(engine) == [v2]
        assert _decisions(engine) == [(3, "applied", 1), (4, "applied", 2)]
        assert calls == [3, 4] and rep.stats()["rejected"] == 0
    finally:
        release.set()
        resume.set()
        rep.stop(1.0)
