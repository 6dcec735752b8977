"""Issue #16, group commit: ``aggregators.ingest_batch.ingest_reports`` applies a batch of reports in one
transaction with the statements of about one report, and must leave the database exactly as
``aggregators.ingest.ingest_report`` applied to each report in order would (the oracle): every table, ids
included, moments to 1e-9 relative (the Chan merges run in another order). On SQLite and on a real PostgreSQL.
"""
from __future__ import annotations

import copy
import json
import math
import random
import time

import pytest
from sqlalchemy import create_engine, event, select, text

from spark_governor.aggregators import db
from spark_governor.aggregators import directives as repo
from spark_governor.aggregators.ingest import ingest_report
from spark_governor.aggregators.ingest_batch import BatchItemError, Pending, current_directives_of, ingest_reports
from spark_governor.aggregators.models import jobs, metadata
from spark_governor.policies.wire import parse_report
from tests.legacy_reports import job_report

T0 = 1_764_000_000_000
#: tables ingest does not write
SKIP = {"api_tokens", "audit_log", "alembic_version", "leader", "leaders"}


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def two_databases(request, tmp_path):
    """Two fresh migrated databases of one kind: (a) for one-by-one ingest, (b) for batches."""
    if request.param == "sqlite":
        urls = [f"sqlite:///{tmp_path / 'a.db'}", f"sqlite:///{tmp_path / 'b.db'}"]
        admin = None
    else:
        base = request.getfixturevalue("postgres_url")
        admin = create_engine(base, isolation_level="AUTOCOMMIT")
        names = [f"sg_batch_{k}_{int(time.time() * 1000) % 10**9}" for k in "ab"]
        with admin.connect() as conn:
            for name in names:
                conn.execute(text(f"CREATE DATABASE {name}"))
        urls = [base.rsplit("/", 1)[0] + "/" + name for name in names]
    engines = []
    for url in urls:
        db.upgrade(url)
        engines.append(db.make_engine(url))
    yield engines
    for eng in engines:
        eng.dispose()
    if admin is not None:
        with admin.connect() as conn:
            for url in urls:
                conn.execute(text(f"DROP DATABASE IF EXISTS {url.rsplit('/', 1)[1]} WITH (FORCE)"))
        admin.dispose()


JOBS = ("bj-a", "bj-b", "bj-c")
#: (job, reporter id, app id, token) — three reporters and two runs for job a (ra3 is a second reporter of ra1's
#: application: their stages share ids, so a stage one completes can get tasks from the other, later in the
#: same batch), a token-bound reporter for job b
REPORTERS = (("bj-a", "ra1", "app-a1", None), ("bj-a", "ra2", "app-a2", None), ("bj-b", "rb1", "app-b1", "team-b"),
             ("bj-c", "rc1", None, None), ("bj-c", "rc2", "app-c2", None), ("bj-a", "ra3", "app-a1", None),
             ("bj-d", "rd1", "app-d1", None), ("bj-e", "re1", "app-e1", None))  # d, e: jobs new in mid-stream


def _stream(seed: int, n: int = 60) -> list[tuple[dict, str | None, int]]:
    """(report, token, now_ms) in arrival order: varied reports of several jobs and reporters, with retried
    seqs (duplicates), stages whose tasks arrive over two reports and complete in the second, overlapping
    micro-batches, query states, acknowledgements, executor events, failed tasks and a template renamed
    and templates new in mid-stream."""
    rng = random.Random(seed)
    seqs = {r[1]: 0 for r in REPORTERS}
    held: dict[str, dict] = {}  # per reporter: a stage whose second half of tasks comes in its next report
    sent: list[tuple[dict, str | None, int]] = []
    now = T0
    extra = 0
    for i in range(n):
        now += rng.choice((150, 400, 1200, 2500))
        if sent and rng.random() < 0.12:  # a retry of an earlier report: a duplicate
            r, tok, _ = sent[rng.randrange(len(sent))]
            sent.append((copy.deepcopy(r), tok, now))
            continue
        job, rid, app, tok = REPORTERS[rng.randrange(len(REPORTERS))]
        seqs[rid] += rng.choice((1, 1, 1, 3))
        seq = seqs[rid]
        r = job_report(job, rid, seq, rng.choice((4, 6, 8)), now, rng)
        r["reporter"]["app_id"] = app
        r["reporter"]["dropped_total"] = rng.randint(0, 3) * seq
        r["schema_version"] = 2
        for t in r["tasks"]:
            t["partition"] = rng.randint(0, 5)
            t["stage_id"] += 1000 * seqs[rid]  # distinct per reporter and seq
        for s in r["stages"]:
            s["stage_id"] += 1000 * seqs[rid]
        if rng.random() < 0.3:
            r["tasks"][0].update(successful=False, failure_reason="ExecutorLostFailure")
        if rng.random() < 0.3:
            r["tasks"][-1]["stage_submission_ms"] = None
        if rng.random() < 0.2:
            r["tasks"][1].update(input_records=0, shuffle_read_records=0)
        if rid in held:  # the rest of a stage from this reporter's previous report, completed now
            prev = held.pop(rid)
            r["tasks"] += prev["tasks"]
            r["stages"].append(prev["stage"])
        if rng.random() < 0.3:  # the reduce stage completes in the next report, half its tasks come then
            stage = r["stages"].pop()
            late = [t for t in r["tasks"] if t["stage_id"] == stage["stage_id"]][::2]
            r["tasks"] = [t for t in r["tasks"] if t not in late]
            for t in late:
                t["launch_ms"] += 50
                t["finish_ms"] += 300
            stage = dict(stage, completion_ms=stage["completion_ms"] + 400)
            held[rid] = {"tasks": late, "stage": stage}
            if rng.random() < 0.5:  # seen running: its stage run is stored now, the completion never folded
                r["stages"].append(dict(stage, completion_ms=None))
        if rng.random() < 0.2:
            extra += 1
            key = f"t-extra-{extra % 3}"
            r["templates"].append({"key": key, "name": f"extra {extra}", "ordinal": 2 + extra % 3,
                                   "operators": ["Sink"], "parents": ["t-reduce"]})
            r["tasks"][-1]["template_key"] = key
        if rng.random() < 0.15:
            r["templates"][0]["name"] = rng.choice(("s0 map", "s0 map renamed"))
        if rng.random() < 0.3:  # an earlier micro-batch again (overlap) and a new one
            b = dict(r["batches"][0], batch_id=max(1, r["batches"][0]["batch_id"] - 1))
            r["batches"].append(b)
        if rng.random() < 0.5:
            r["queries"] = [{"query_id": "q1", "run_id": "r1", "name": job, "observed_ms": now - 100,
                             "status": rng.choice(("running", "waiting", "idle")), "last_batch_id": seq,
                             "last_batch_end_ms": now - 200, "trigger_interval_ms": 1000,
                             "backlog_rows": rng.randint(0, 100), "arrival_rows_per_second": 100.0}]
            if r["queries"][0]["status"] == "running":
                r["queries"][0]["running_batch_start_ms"] = now - 150
        if rng.random() < 0.25:
            r["reporter"]["applied"] = [{"knob": "executors", "version": rng.choice((1, 2)),
                                         "status": rng.choice(("applied", "failed")), "message": f"m{i}"}]
        if rng.random() < 0.1:
            r["reporter"]["knob_state"] = {"batch_interval": {"ms": rng.choice((1000, 2000))}}
        if rng.random() < 0.1:
            r["reporter"]["attachment"] = {"kind": "attach", "version": str(i), "can_apply": ["batch_interval"]}
        if rng.random() < 0.1:
            r["reporter"]["not_actuatable"] = {"executors": "local mode"}
        if rng.random() < 0.1:
            r["executors"] = [{"executor_id": str(rng.randint(1, 3)), "added_ms": now - 500, "cores": 2}]
        if rng.random() < 0.2:
            r["reporter"]["slots"] = None
        sent.append((r, tok, now))
    return sent


def _setup(engine, batched: bool) -> None:
    """Jobs a, b, c, created by a first report each (one by one, or in one batch: three new jobs, their
    templates and vertices in one statement per table), with a directive (version 1) to acknowledge."""
    with engine.begin() as conn:
        first = [parse_report(json.dumps(job_report(job, f"{rid}-first", 1, 4, T0, random.Random(k))))
                 for k, (job, rid, app, tok) in enumerate(REPORTERS[:5:2])]
        if batched:
            ingest_reports(conn, [Pending(r, None, T0) for r in first])
        else:
            for r in first:
                ingest_report(conn, r, 5000, None, now_ms=T0)
        for job in JOBS:
            job_id = conn.execute(select(jobs.c.id).where(jobs.c.name == job)).scalar()
            d = repo.record_decision(conn, job_id=job_id, policy="threshold", knob="executors", old_value=2,
                                     new_value=3, reason="t", inputs={}, prediction={}, mode="act", status="issued",
                                     directive_version=1, created_ms=T0)
            repo.issue_directive(conn, job_id, "executors", 3, d, T0)


def _issue_again(engine) -> None:
    """A second directive version for every job (a sync point of both streams)."""
    with engine.begin() as conn:
        for job in JOBS:
            job_id = conn.execute(select(jobs.c.id).where(jobs.c.name == job)).scalar()
            d = repo.record_decision(conn, job_id=job_id, policy="threshold", knob="executors", old_value=3,
                                     new_value=4, reason="t", inputs={}, prediction={}, mode="act", status="issued",
                                     directive_version=2, created_ms=T0 + 1)
            repo.issue_directive(conn, job_id, "executors", 4, d, T0 + 1)


def _batches(stream: list, rng: random.Random) -> list[list]:
    """The stream cut into consecutive batches of random size (1–12), at most one report per reporter each."""
    out, cur, size = [], [], rng.randint(1, 12)
    for entry in stream:
        if len(cur) >= size or entry[0]["reporter"]["id"] in {e[0]["reporter"]["id"] for e in cur}:
            out.append(cur)
            cur, size = [], rng.randint(1, 12)
        cur.append(entry)
    if cur:
        out.append(cur)
    return out


#: windows are compared by their natural key, not their id: a batch upserts each window once, in key order
#: (the lock order of concurrent transactions), where one by one upserts it once per report, each report's in
#: key order — and PostgreSQL draws a sequence value for every row an upsert sends, updated or inserted, so
#: the ids of new windows differ by design. Nothing refers to a window's id.
WINDOW_KEYS = {"runtime_windows": ("runtime_vertex_id", "window_start_ms"),
               "template_windows": ("template_id", "window_start_ms")}


def _table_rows(engine) -> dict[str, list[tuple]]:
    out = {}
    with engine.connect() as conn:
        for table in metadata.sorted_tables:
            if table.name in SKIP:
                continue
            if table.name in WINDOW_KEYS:
                cols = [c for c in table.c if c.name != "id"]
                query = select(*cols).order_by(*[table.c[k] for k in WINDOW_KEYS[table.name]])
            else:
                query = select(table).order_by(*([table.c.id] if "id" in table.c else table.primary_key.columns))
            out[table.name] = [tuple(r) for r in conn.execute(query)]
    return out


def _same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)
    return a == b


def assert_same_tables(one_by_one, batched) -> None:
    a, b = _table_rows(one_by_one), _table_rows(batched)
    assert set(a) == set(b)
    for name in a:
        assert len(a[name]) == len(b[name]), name
        for ra, rb in zip(a[name], b[name]):
            assert len(ra) == len(rb) and all(_same(x, y) for x, y in zip(ra, rb)), (name, ra, rb)


def _apply_one_by_one(engine, stream) -> list:
    results = []
    for report, tok, now in stream:
        with engine.begin() as conn:
            results.append(ingest_report(conn, parse_report(json.dumps(report)), 5000, tok, now))
    return results


def _apply_batches(engine, batches) -> list:
    results = []
    for batch in batches:
        with engine.begin() as conn:
            res = ingest_reports(conn, [Pending(parse_report(json.dumps(r)), tok, now) for r, tok, now in batch], 5000)
            directives = current_directives_of(conn, [x.job_id for x in res])
            for x in res:
                assert directives[x.job_id] == repo.current_directives(conn, x.job_id)
        results += res
    return results


def test_batches_store_exactly_what_one_by_one_stores(two_databases):
    one, batched = two_databases
    rng = random.Random(7)
    stream = _stream(16, 70)
    half = len(stream) // 2
    _setup(one, False)
    _setup(batched, True)
    expected = _apply_one_by_one(one, stream[:half])
    _issue_again(one)
    expected += _apply_one_by_one(one, stream[half:])
    got = _apply_batches(batched, _batches(stream[:half], rng))
    _issue_again(batched)
    got += _apply_batches(batched, _batches(stream[half:], rng))
    assert got == expected
    assert sum(r.duplicate for r in got) >= 3 and sum(r.stages for r in got) > 0 and sum(r.batches for r in got) > 0
    assert_same_tables(one, batched)
    with batched.connect() as conn:  # the stream exercised what it is meant to
        counts = {t: conn.execute(text(f"SELECT count(*) FROM {t}")).scalar()
                  for t in ("query_states", "executor_events", "job_runs", "template_vertices", "template_windows")}
        applied = conn.execute(text("SELECT count(*) FROM directives WHERE applied_version IS NOT NULL")).scalar()
    assert all(counts.values()) and applied > 0, counts


def test_a_conflicting_reporter_names_its_index_and_the_rest_is_stored_once(two_databases):
    one, batched = two_databases
    _setup(one, False)
    _setup(batched, True)
    rng = random.Random(3)
    ok = [(job_report(job, rid, 2, 6, T0 + 5000, rng), tok, T0 + 5000) for job, rid, _app, tok in REPORTERS[:3]]
    # ra1-first is bound to job bj-a (by _setup), not bj-b; rb1's token is team-b, not this one
    bad = [(job_report("bj-b", "ra1-first", 7, 6, T0 + 5000, rng), None, T0 + 5000)]
    with pytest.raises(BatchItemError) as err:
        with batched.begin() as conn:
            ingest_reports(conn, [Pending(parse_report(json.dumps(r)), tok, now) for r, tok, now in ok[:2] + bad + ok[2:]])
    assert err.value.index == 2 and "bound to another job" in str(err.value.cause)
    with batched.begin() as conn:  # the caller's retry without it
        res = ingest_reports(conn, [Pending(parse_report(json.dumps(r)), tok, now) for r, tok, now in ok])
    assert not any(r.duplicate for r in res)
    _apply_one_by_one(one, ok)
    assert_same_tables(one, batched)
    # rb1 is bound to the token team-b: the same reporter without it is refused, the report after it stored
    again = [(job_report("bj-b", "rb1", 3, 6, T0 + 6000, rng), None, T0 + 6000),
             (job_report("bj-c", "rc1", 3, 6, T0 + 6000, rng), None, T0 + 6000)]
    with pytest.raises(BatchItemError) as err:
        with batched.begin() as conn:
            ingest_reports(conn, [Pending(parse_report(json.dumps(r)), tok, now) for r, tok, now in again])
    assert err.value.index == 0 and "bound to another token" in str(err.value.cause)
    with batched.begin() as conn:
        res = ingest_reports(conn, [Pending(parse_report(json.dumps(r)), tok, now) for r, tok, now in again[1:]])
    _apply_one_by_one(one, again[1:])
    assert_same_tables(one, batched)


def test_statements_per_batch_do_not_grow_with_its_size(two_databases):
    _one, engine = two_databases
    _setup(engine, True)
    pg = engine.dialect.name == "postgresql"
    count = [0]

    @event.listens_for(engine, "before_cursor_execute")
    def _count(conn, cursor, statement, parameters, context, executemany):  # as bench.ingest_profile counts
        count[0] += len(parameters) if executemany and pg and isinstance(parameters, (list, tuple)) else 1

    rng = random.Random(5)
    reporters = [(JOBS[k % 3], f"stm-{k}") for k in range(20)]
    warm = [job_report(job, rid, 1, 40, T0 + 1000, rng) for job, rid in reporters]
    with engine.begin() as conn:  # first reports: new reporters, vertices and windows
        ingest_reports(conn, [Pending(parse_report(json.dumps(r)), None, T0 + 1000) for r in warm])
    per_batch = {}
    for seq, size in ((2, 1), (3, 20)):
        reports = [job_report(job, rid, seq, 40, T0 + seq * 1000, rng) for job, rid in reporters[:size]]
        count[0] = 0
        with engine.begin() as conn:
            res = ingest_reports(conn, [Pending(parse_report(json.dumps(r)), None, T0 + seq * 1000) for r in reports])
            current_directives_of(conn, [r.job_id for r in res])
        assert not any(r.duplicate for r in res) and all(r.tasks == 40 for r in res)
        per_batch[size] = count[0]
    assert per_batch[20] <= 1.5 * per_batch[1], per_batch


def test_state_one_report_changes_is_seen_by_the_next_of_the_same_batch(two_databases):
    """Two reporters of one application (one run, the same templates and runtime vertices) in one batch,
    150 ms apart, after a 1.5 s gap: the first moves the run's and the templates' last report time (they are
    written at most once a second), the second must not (as one by one), and its interarrival times start
    from the first's launches."""
    one, batched = two_databases
    _setup(one, False)
    _setup(batched, True)
    rng = random.Random(11)
    first = [(job_report("bj-a", rid, 1, 8, T0 + 100, rng), None, T0 + 100) for rid in ("ra1", "ra3")]
    pair = [(job_report("bj-a", "ra1", 2, 8, T0 + 1600, rng), None, T0 + 1600),
            (job_report("bj-a", "ra3", 2, 8, T0 + 1750, rng), None, T0 + 1750)]
    for r, _tok, _now in first + pair:
        r["reporter"]["app_id"] = "app-a1"
    pair[1][0]["stages"][0]["stage_id"] = pair[0][0]["stages"][0]["stage_id"] + 1  # not a stage of the first
    _apply_one_by_one(one, first + pair)
    _apply_batches(batched, [first, pair])
    assert_same_tables(one, batched)
    with batched.connect() as conn:
        assert conn.execute(text("SELECT last_ms FROM job_runs WHERE run_id = 'app-a1'")).scalar() == T0 + 1600


def test_ingest_profile_measures_batches_and_stores_every_report(sqlite_url):
    """``bench.ingest_profile --batch N``: N reports per transaction through ``ingest_reports``, every one stored."""
    from spark_governor.bench.ingest_profile import profile

    lines: list[str] = []
    res = profile(sqlite_url, jobs=4, rounds=2, tasks=4, out=lines.append, batch=4)
    assert res["reports"] == 8 and res["batch"] == 4 and res["transaction_cpu_ms"] > 0
    assert "4 per transaction (ingest_reports)" in lines[0]
    engine = db.make_engine(sqlite_url)
    try:
        with engine.connect() as conn:  # 4 warm-up + 8 profiled reports of 4 tasks, folded (schema v3)
            assert conn.execute(text("SELECT sum(tasks_total) FROM reporters")).scalar() == (4 + 8) * 4
    finally:
        engine.dispose()
    with pytest.raises(ValueError, match="--batch"):
        profile(sqlite_url, jobs=2, rounds=1, tasks=4, out=lines.append, batch=3)
