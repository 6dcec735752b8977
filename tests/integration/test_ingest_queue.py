"""Group commit (``api.ingest_queue``): the reports that wait are stored in one transaction, over real SQLite and
PostgreSQL, through the Flask app (requests in threads, as a threaded server runs them).

To make reports wait for the writer, a test holds the database's write lock from another connection (SQLite:
``BEGIN IMMEDIATE``; PostgreSQL: ``LOCK TABLE jobs``, which every ingest reads first): the writer's current
transaction blocks, the next requests queue up behind it, and when the lock is released they go in one batch.
"""
from __future__ import annotations

import contextlib
import threading
import time

import pytest
from sqlalchemy import event, func, select

from spark_governor.aggregators import directives as repo
from spark_governor.aggregators.models import jobs, reporters, tasks
from spark_governor.api.app import Settings, create_app
from spark_governor.api.ingest_queue import WRITER_THREAD
from spark_governor.bench.reports import gz
from spark_governor.bench.reports import make_report as _make_report


def make_report(*args, **kwargs):
    """The v1 report of whole task rows (its cases count them); a v3 report goes through the same writer in
    tests/integration/test_edge_fold.py."""
    return _make_report(*args, **{"schema_version": 1, **kwargs})

N_TASKS = 8
# the tests that count batches take the writer without its linger (serve's default is 25 ms), so that a
# blocking report is taken alone; the linger has its own test at the end


@pytest.fixture
def engine(both_databases):
    return both_databases


@contextlib.contextmanager
def writer_blocked(engine):
    """Hold the database's write lock (see the module's docstring) until the block ends."""
    with engine.connect() as conn:
        if conn.dialect.name == "sqlite":
            conn.exec_driver_sql("BEGIN IMMEDIATE")
        else:
            conn.exec_driver_sql("LOCK TABLE jobs IN ACCESS EXCLUSIVE MODE")
        try:
            yield
        finally:
            conn.rollback()


@contextlib.contextmanager
def commits_of_the_writer(engine):
    """A list that counts the transactions the ingest writer commits while the block runs."""
    seen: list[int] = []

    def on_commit(_conn):
        if threading.current_thread().name == WRITER_THREAD:
            seen.append(1)

    event.listen(engine, "commit", on_commit)
    try:
        yield seen
    finally:
        event.remove(engine, "commit", on_commit)


class Poster:
    """POSTs reports from threads of their own; ``answers[key]`` is ``(status, json, Retry-After)``."""

    def __init__(self, app) -> None:
        self.app, self.threads, self.answers = app, [], {}

    def post(self, key, report: dict) -> None:
        def run():
            r = post_now(self.app, report)
            self.answers[key] = (r.status_code, r.get_json(), r.headers.get("Retry-After"))

        t = threading.Thread(target=run)
        t.start()
        self.threads.append(t)

    def join(self) -> dict:
        for t in self.threads:
            t.join(60)
        assert not any(t.is_alive() for t in self.threads)
        return self.answers


GZIP = {"Content-Encoding": "gzip", "Content-Type": "application/json"}


def post_now(app, report_: dict):
    """POST ``report_`` from this thread."""
    return app.test_client().post("/api/v1/reports", data=gz(report_), headers=GZIP)


def queue_of(app):
    return app.extensions["spark_governor.ingest_queue"]


def wait_depth(app, n: int, timeout_s: float = 15.0) -> None:
    """Until ``n`` reports wait or are being written."""
    deadline = time.monotonic() + timeout_s
    while queue_of(app).depth != n:
        assert time.monotonic() < deadline, f"queue depth {queue_of(app).depth}, expected {n}"
        time.sleep(0.01)


def wait_taken(app, n: int = 1, timeout_s: float = 15.0) -> None:
    """Until the writer has taken ``n`` reports (a report that only waits in the queue can still join the
    next batch: ``depth`` alone does not tell them apart)."""
    deadline = time.monotonic() + timeout_s
    while queue_of(app).writing != n:
        assert time.monotonic() < deadline, f"{queue_of(app).writing} reports being written, expected {n}"
        time.sleep(0.01)


def batches(app) -> tuple[int, float]:
    """(committed transactions, reports in them) from ``spark_governor_ingest_batch_reports``."""
    samples = {s.name: s.value for s in queue_of(app).metrics.batch_reports.collect()[0].samples}
    return int(samples["spark_governor_ingest_batch_reports_count"]), samples["spark_governor_ingest_batch_reports_sum"]


def stored_tasks(engine, job: str) -> int:
    with engine.connect() as conn:
        return conn.execute(select(func.count()).select_from(tasks).join(jobs, jobs.c.id == tasks.c.job_id)
                            .where(jobs.c.name == job)).scalar()


def report(job: str, reporter: str, seq: int = 1, seed: int = 0) -> dict:
    return make_report(job=job, n_tasks=N_TASKS, seq=seq, reporter_id=reporter, seed=seed)


def issue(engine, job: str, executors: int) -> None:
    with engine.begin() as conn:
        job_id = conn.execute(select(jobs.c.id).where(jobs.c.name == job)).scalar()
        d = repo.record_decision(conn, job_id=job_id, policy="kingman", knob="executors", mode="act", status="issued",
                                 old_value=2, new_value=executors, inputs={}, prediction={}, reason="test",
                                 created_ms=1_700_000_000_000, directive_version=1)
        repo.issue_directive(conn, job_id, "executors", executors, d, 1_700_000_000_000)


def test_waiting_reports_share_one_transaction_and_get_their_directives(engine):
    app = create_app(engine, Settings(window_ms=5000, batch_linger_s=0.0))
    for job in ("job-a", "job-b"):  # the jobs exist, each with a directive
        assert post_now(app, report(job, f"first-{job}")).status_code == 200
    issue(engine, "job-a", 3)
    issue(engine, "job-b", 5)
    n = 12
    poster = Poster(app)
    with commits_of_the_writer(engine) as commits:
        before = batches(app)
        with writer_blocked(engine):
            poster.post("blocker", report("job-a", "blocker"))
            wait_taken(app)  # taken by the writer, which waits for the lock
            for i in range(n):
                poster.post(i, report("job-a" if i % 2 else "job-b", f"r{i}", seed=i))
            wait_depth(app, 1 + n)
        answers = poster.join()
    assert len(commits) == 2, commits  # the blocker alone, then the n that waited, together
    count, reports_ = batches(app)
    assert (count - before[0], reports_ - before[1]) == (2, 1 + n)
    for key, (status, body, _) in answers.items():
        assert status == 200, (key, body)
        assert body["duplicate"] is False and body["accepted"]["tasks"] == N_TASKS
        executors = 3 if key == "blocker" or key % 2 else 5
        assert body["directives"] == [{"knob": "executors", "version": 1, "value": executors}], (key, body)
    # each stored once
    assert stored_tasks(engine, "job-a") == N_TASKS * (1 + 1 + n // 2)
    assert stored_tasks(engine, "job-b") == N_TASKS * (1 + n // 2)
    with engine.connect() as conn:
        rows = conn.execute(select(reporters.c.id, reporters.c.reports_total, reporters.c.last_seq)).all()
    assert len(rows) == 2 + 1 + n and all(r.reports_total == 1 and r.last_seq == 1 for r in rows)


def test_a_reporter_conflict_inside_a_batch_fails_alone(engine):
    app = create_app(engine, Settings(window_ms=5000, batch_linger_s=0.0))
    assert post_now(app, report("job-a", "bound")).status_code == 200
    poster = Poster(app)
    before = batches(app)
    with writer_blocked(engine):
        poster.post("blocker", report("job-a", "blocker"))
        wait_taken(app)
        poster.post("good-0", report("job-c", "g0"))
        wait_depth(app, 2)
        poster.post("conflict", report("job-b", "bound", seq=2))  # bound to job-a: 403 as one by one
        wait_depth(app, 3)
        for i in (1, 2, 3):
            poster.post(f"good-{i}", report("job-c", f"g{i}", seed=i))
        wait_depth(app, 6)
    answers = poster.join()
    status, body, _ = answers.pop("conflict")
    assert status == 403 and body["error"].startswith("reporter.id: 'bound' is bound to another"), body
    assert all(a[0] == 200 and a[1]["accepted"]["tasks"] == N_TASKS for a in answers.values()), answers
    count, reports_ = batches(app)
    assert (count - before[0], reports_ - before[1]) == (2, 5)  # the batch went through without the conflict
    assert stored_tasks(engine, "job-c") == 4 * N_TASKS and stored_tasks(engine, "job-b") == 0
    with engine.connect() as conn:
        assert conn.execute(select(jobs.c.id).where(jobs.c.name == "job-b")).first() is None  # rolled back
        assert conn.execute(select(reporters.c.last_seq).where(reporters.c.id == "bound")).scalar() == 1


def test_a_report_that_cannot_be_stored_fails_alone(engine, monkeypatch):
    """Fault injection: storing any batch that holds job ``poison`` raises after its rows were written (a
    failure inside the transaction, not a database one); the batch is rolled back and each report is then
    stored alone, so the others are stored once and answered 200, and only the poison report gets 500."""
    import spark_governor.api.ingest_queue as ingest_queue

    real = ingest_queue.ingest_reports

    def failing(conn, items, window_ms):
        results = real(conn, items, window_ms)
        if any(it.report.job == "poison" for it in items):
            raise RuntimeError("injected fault for job poison")
        return results

    monkeypatch.setattr(ingest_queue, "ingest_reports", failing)
    app = create_app(engine, Settings(window_ms=5000, batch_linger_s=0.0))
    poster = Poster(app)
    before = batches(app)
    with writer_blocked(engine):
        poster.post("blocker", report("job-a", "blocker"))
        wait_taken(app)
        for i in range(4):
            poster.post(i, report("poison" if i == 1 else "job-a", f"r{i}", seed=i))
        wait_depth(app, 5)
    answers = poster.join()
    status, body, _ = answers.pop(1)
    assert status == 500 and "not stored" in body["error"], body
    assert all(a[0] == 200 and a[1]["duplicate"] is False for a in answers.values()), answers
    count, reports_ = batches(app)
    assert (count - before[0], reports_ - before[1]) == (4, 4)  # the blocker, then the 3 good ones one by one
    assert stored_tasks(engine, "job-a") == 4 * N_TASKS and stored_tasks(engine, "poison") == 0
    metrics = app.test_client().get("/metrics").get_data(as_text=True)
    assert 'spark_governor_reports_total{outcome="error"} 1.0' in metrics
    assert 'spark_governor_reports_total{outcome="accepted"} 4.0' in metrics


def test_two_reports_of_one_reporter_go_in_separate_batches_in_order(engine):
    app = create_app(engine, Settings(window_ms=5000, batch_linger_s=0.0))
    poster = Poster(app)
    before = batches(app)
    with writer_blocked(engine):
        poster.post("blocker", report("job-a", "blocker"))
        wait_taken(app)
        poster.post(1, report("job-a", "same", seq=1))
        wait_depth(app, 2)
        poster.post(2, report("job-a", "same", seq=2, seed=2))
        wait_depth(app, 3)
        poster.post("other", report("job-a", "other"))
        wait_depth(app, 4)
    answers = poster.join()
    assert all(a[0] == 200 and a[1]["duplicate"] is False for a in answers.values()), answers
    count, reports_ = batches(app)
    assert (count - before[0], reports_ - before[1]) == (3, 4)  # blocker; seq 1 + other; seq 2
    assert stored_tasks(engine, "job-a") == 4 * N_TASKS


def fill_then_refused(app, poster, job: str, why: str) -> None:
    """With the writer blocked: one report taken by the writer, two queued behind it (``poster``), then a
    fourth refused at once with 503 + Retry-After and ``why`` in its error."""
    poster.post("taken", report(job, "taken"))
    wait_taken(app)  # being written: not counted against the bound
    poster.post("queued-1", report(job, "q1"))
    poster.post("queued-2", report(job, "q2"))
    wait_depth(app, 3)
    r = post_now(app, report(job, "over"))
    assert r.status_code == 503 and r.headers["Retry-After"] == "1", r.get_json()
    assert why in r.get_json()["error"]


def test_a_full_queue_and_a_passed_deadline_get_503_with_retry_after(sqlite_url):
    from spark_governor.aggregators import db

    db.upgrade(sqlite_url)
    engine = db.make_engine(sqlite_url)
    try:
        app = create_app(engine, Settings(window_ms=5000, batch_linger_s=0.0, max_queued_reports=2,
                                          queue_deadline_s=1.5))
        poster = Poster(app)
        with writer_blocked(engine):
            fill_then_refused(app, poster, "job-a", "2 reports already wait")
            answers = poster.join()  # the writer is still blocked: every request passes its deadline
            assert queue_of(app).depth == 1  # the two never taken left the queue
        assert {k: (a[0], a[2]) for k, a in answers.items()} == {k: (503, "1") for k in answers}
        assert all("not stored within 1.5 s" in a[1]["error"] for a in answers.values())
        wait_depth(app, 0)
        # the report the writer had taken was committed after its request gave up; the reporter re-sends it
        client = app.test_client()
        r = post_now(app, report("job-a", "taken"))
        assert r.status_code == 200 and r.get_json()["duplicate"] is True
        r = post_now(app, report("job-a", "q1"))  # never stored: stored now
        assert r.status_code == 200 and r.get_json()["duplicate"] is False
        assert stored_tasks(engine, "job-a") == 2 * N_TASKS
        metrics = client.get("/metrics").get_data(as_text=True)
        assert 'spark_governor_reports_total{outcome="error"} 4.0' in metrics
        assert "spark_governor_ingest_queued_reports 0.0" in metrics
    finally:
        engine.dispose()


def test_close_writes_what_waits_stops_the_writer_and_refuses_later_reports(sqlite_url):
    from spark_governor.aggregators import db

    db.upgrade(sqlite_url)
    engine = db.make_engine(sqlite_url)
    try:
        app = create_app(engine, Settings(window_ms=5000, batch_linger_s=0.0))
        poster = Poster(app)
        with writer_blocked(engine):
            poster.post("a", report("job-a", "a"))
            poster.post("b", report("job-a", "b"))
            wait_depth(app, 2)
            closer = threading.Thread(target=queue_of(app).close)
            closer.start()
        closer.join(30)
        assert not closer.is_alive()
        assert {k: a[0] for k, a in poster.join().items()} == {"a": 200, "b": 200}
        assert not queue_of(app).running
        r = post_now(app, report("job-a", "c"))
        assert r.status_code == 503 and r.headers["Retry-After"] == "1" and "shutting down" in r.get_json()["error"]
        assert stored_tasks(engine, "job-a") == 2 * N_TASKS
    finally:
        engine.dispose()


def test_an_unreachable_database_gets_503_with_retry_after():
    """A PostgreSQL URL where nothing listens (connection refused): the batch is retried, then refused."""
    from spark_governor.api.processes import free_port

    from spark_governor.aggregators.db import make_engine

    engine = make_engine(f"postgresql+psycopg://postgres@127.0.0.1:{free_port()}/none")
    try:
        app = create_app(engine, Settings(window_ms=5000, batch_linger_s=0.0))
        client = app.test_client()
        started = time.monotonic()
        r = post_now(app, report("job-a", "a"))
        assert r.status_code == 503 and r.headers["Retry-After"] == "5", r.get_json()
        assert r.get_json() == {"error": "database: unavailable, retry later"}
        assert time.monotonic() - started < 10
        assert queue_of(app).depth == 0
        assert batches(app) == (0, 0)  # nothing committed
        assert client.get("/healthz").status_code == 503
    finally:
        engine.dispose()


def test_task_records_waiting_are_bounded_and_a_lingering_writer_batches_more(sqlite_url):
    """``max_queued_tasks`` bounds the parsed task records waiting (503 + Retry-After beyond it, a report alone is
    always taken); with ``batch_linger_s`` the writer waits for reports to share a transaction."""
    from spark_governor.aggregators import db

    db.upgrade(sqlite_url)
    engine = db.make_engine(sqlite_url)
    try:
        app = create_app(engine, Settings(window_ms=5000, batch_linger_s=0.0, max_queued_tasks=2 * N_TASKS,
                                          queue_deadline_s=5.0))
        poster = Poster(app)
        with writer_blocked(engine):
            fill_then_refused(app, poster, "job-t", f"more than {2 * N_TASKS} task records")
        answers = poster.join()
        assert {k: a[0] for k, a in answers.items()} == {"taken": 200, "queued-1": 200, "queued-2": 200}
        assert stored_tasks(engine, "job-t") == 3 * N_TASKS
    finally:
        engine.dispose()
    engine = db.make_engine(sqlite_url)
    commits = []
    event.listen(engine, "commit", lambda conn: commits.append(threading.current_thread().name))
    try:
        app = create_app(engine, Settings(window_ms=5000, batch_linger_s=0.5))
        poster = Poster(app)
        for i in range(6):  # arrive within the linger of the first: one transaction
            poster.post(f"l{i}", report(f"job-l{i}", f"l{i}"))
        answers = poster.join()
        assert {a[0] for a in answers.values()} == {200}
        assert commits.count(WRITER_THREAD) == 1, commits
    finally:
        engine.dispose()
