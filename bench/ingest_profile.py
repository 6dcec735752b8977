"""The cost of one report at the control plane, by phase: ``python -m spark_governor.bench.ingest_profile --db URL``.

Reports shaped like ``bench load``'s (``bench.load.job_report``, i.e. ``bench.reports.make_report``: a second of
40 tasks of two stages folded at the edge (report schema v3), both stage records, one micro-batch, current
timestamps) of ``--jobs`` jobs, ``--rounds`` each, are applied as ``POST
/api/v1/reports`` applies them, without HTTP: ``parse_report`` (JSON parse and validation), then one
transaction of ``ingest_report`` and the directives read, committed. Printed per report: CPU milliseconds of
this process for parsing and for the transaction (SQLAlchemy, the driver, the Welford merges, and for SQLite the
database itself), wall milliseconds, the statements sent (driver calls; an ``executemany`` counted once per
row on PostgreSQL, where the driver sends one statement per row), and for a PostgreSQL on this machine the
CPU milliseconds of its processes (all of them, and the sessions of this run alone: a shared server serves
others meanwhile). ``--profile`` adds cProfile's top functions.

``--batch N``: group commit (``aggregators.ingest_batch``): N reports (of N different jobs) per transaction
through ``ingest_reports`` and one ``current_directives_of``, as ``api.ingest_queue`` applies them; the
figures are still per report. Without it, one report per transaction through ``ingest_report``.

``--through flask``: the whole request path instead, in process: gzip bodies posted with a report token
through the Flask test client to ``POST /api/v1/reports`` (token check, body read and gunzip, parse,
transaction, JSON answer); printed: CPU and wall milliseconds per report. What ``serve`` adds beyond that
(gunicorn's HTTP parsing, threads, the scheduler) is what ``bench load`` measures as server CPU per report.
"""
from __future__ import annotations

import argparse
import cProfile
import gzip
import json
import os
import pstats
import random
import sys
import time

from sqlalchemy import event

from spark_governor.aggregators.db import make_engine, upgrade
from spark_governor.aggregators.directives import current_directives
from spark_governor.aggregators.ingest import ingest_report
from spark_governor.aggregators.ingest_batch import Pending, current_directives_of, ingest_reports
from spark_governor.bench.load import _cpu_seconds, _postmaster_pid, job_report
from spark_governor.policies.wire import parse_report


def profile(db_url: str, jobs: int = 20, rounds: int = 10, tasks: int = 40, top: int = 0, out=print,
            batch: int | None = None) -> dict:
    if batch is not None and not 1 <= batch <= jobs:
        raise ValueError(f"--batch: between 1 and --jobs ({jobs}), one report per job in a batch")
    upgrade(db_url)
    engine = make_engine(db_url)
    statements = [0]
    pg = engine.dialect.name == "postgresql"

    @event.listens_for(engine, "before_cursor_execute")
    def _count(conn, cursor, statement, parameters, context, executemany):
        # a list of rows sent by executemany is one statement per row on PostgreSQL; SQLAlchemy's
        # "insertmanyvalues" hands over one dict of parameters for one multi-row statement
        statements[0] += len(parameters) if executemany and pg and isinstance(parameters, (list, tuple)) else 1

    backends: set[int] = set()  # this run's PostgreSQL sessions (the server may serve others meanwhile)
    if pg:
        @event.listens_for(engine, "connect")
        def _backend(dbapi_conn, _record):
            backends.add(dbapi_conn.info.backend_pid)

    rng = random.Random(0)
    run = f"prof{int(time.time()) % 100000}-"

    def body(j: int, seq: int) -> bytes:
        return json.dumps(job_report(f"{run}{j}", f"{run}{j}", seq, tasks, int(time.time() * 1000), rng)).encode()

    def apply_one(raws: list[bytes], clock: list) -> None:
        for raw in raws:
            t0 = time.process_time()
            report = parse_report(raw)
            t1 = time.process_time()
            with engine.begin() as conn:
                if conn.dialect.name == "sqlite":
                    conn.exec_driver_sql("BEGIN IMMEDIATE")
                result = ingest_report(conn, report, 5000, None)
                current_directives(conn, result.job_id)
            clock[0] += t1 - t0
            clock[1] += time.process_time() - t1

    def apply_batch(raws: list[bytes], clock: list) -> None:
        t0 = time.process_time()
        items = [Pending(parse_report(raw)) for raw in raws]
        t1 = time.process_time()
        with engine.begin() as conn:
            if conn.dialect.name == "sqlite":
                conn.exec_driver_sql("BEGIN IMMEDIATE")
            results = ingest_reports(conn, items, 5000)
            current_directives_of(conn, [r.job_id for r in results])
        if any(r.duplicate for r in results):
            raise RuntimeError("a profiled report was not stored (duplicate)")
        clock[0] += t1 - t0
        clock[1] += time.process_time() - t1

    size = batch or 1
    apply = apply_one if batch is None else apply_batch

    def run_all(raws: list[bytes], clock: list) -> None:
        for k in range(0, len(raws), size):
            apply(raws[k:k + size], clock)

    warm = [0.0, 0.0]
    # first reports create jobs, reporters and vertices: not the steady state
    run_all([body(j, 1) for j in range(jobs)], warm)
    bodies = [body(j, 2 + r) for r in range(rounds) for j in range(jobs)]  # consecutive: different jobs
    postmaster = _postmaster_pid(db_url)
    db0 = _cpu_seconds(postmaster) if postmaster else None
    own0 = _sessions_cpu(backends) if postmaster else None
    statements[0] = 0
    clock = [0.0, 0.0]
    prof = cProfile.Profile() if top else None
    wall0 = time.perf_counter()
    if prof:
        prof.enable()
    run_all(bodies, clock)
    if prof:
        prof.disable()
    n = len(bodies)
    res = {"db": engine.dialect.name, "reports": n, "tasks": tasks, "batch": batch,
           "parse_cpu_ms": 1000 * clock[0] / n, "transaction_cpu_ms": 1000 * clock[1] / n,
           "wall_ms": 1000 * (time.perf_counter() - wall0) / n, "statements": statements[0] / n,
           "database_cpu_ms": 1000 * (_cpu_seconds(postmaster) - db0) / n if postmaster else None,
           "sessions_cpu_ms": 1000 * (_sessions_cpu(backends) - own0) / n if postmaster else None,
           "profiled": bool(prof)}
    engine.dispose()
    out(f"{res['db']}: {n} reports of {tasks} tasks"
        + (f", {batch} per transaction (ingest_reports)" if batch is not None else "")
        + f": parse {res['parse_cpu_ms']:.2f} ms CPU, transaction {res['transaction_cpu_ms']:.2f} ms CPU,"
        f" {res['wall_ms']:.2f} ms wall, {res['statements']:.1f} statements"
        + (f", database {res['database_cpu_ms']:.2f} ms CPU (its sessions {res['sessions_cpu_ms']:.2f})"
           if res["database_cpu_ms"] is not None else "")
        + " per report" + (" (under cProfile)" if prof else ""))
    if prof:
        pstats.Stats(prof, stream=sys.stdout).sort_stats("cumulative").print_stats(top)
    return res


def _sessions_cpu(pids: set[int]) -> float:
    """User + system CPU seconds of the PostgreSQL backends ``pids`` (this process's sessions): the database's
    work for these reports alone, where the postmaster's total also counts other clients of a shared server
    and its background writers."""
    total = 0.0
    for pid in sorted(pids):
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


REPORT_TOKEN = "ingest-profile-report-token"


def profile_flask(db_url: str, jobs: int = 20, rounds: int = 10, tasks: int = 40, top: int = 0, out=print) -> dict:
    """CPU milliseconds of this process per report through ``POST /api/v1/reports`` (Flask test client)."""
    from spark_governor.api.app import Settings, create_app
    from spark_governor.api.auth import parse_token_option, store_tokens

    upgrade(db_url)
    engine = make_engine(db_url)
    store_tokens(engine, dict([parse_token_option(f"profile:report={REPORT_TOKEN}")]))
    client = create_app(engine, Settings(require_report_token=True)).test_client()
    headers = {"Content-Type": "application/json", "Content-Encoding": "gzip",
               "Authorization": f"Bearer {REPORT_TOKEN}"}
    rng = random.Random(0)
    run = f"proff{int(time.time()) % 100000}-"

    def body(j: int, seq: int) -> bytes:
        report = job_report(f"{run}{j}", f"{run}{j}", seq, tasks, int(time.time() * 1000), rng)
        return gzip.compress(json.dumps(report).encode(), 1)

    def post(raw: bytes) -> None:
        answer = client.post("/api/v1/reports", data=raw, headers=headers)
        if answer.status_code != 200 or answer.json["duplicate"]:
            raise RuntimeError(f"report not stored: {answer.status_code} {answer.get_data(as_text=True)[:200]}")

    for j in range(jobs):  # first reports create jobs, reporters and vertices: not the steady state
        post(body(j, 1))
    bodies = [body(j, 2 + r) for r in range(rounds) for j in range(jobs)]
    prof = cProfile.Profile() if top else None
    cpu0, wall0 = time.process_time(), time.perf_counter()
    if prof:
        prof.enable()
    for raw in bodies:
        post(raw)
    if prof:
        prof.disable()
    n = len(bodies)
    res = {"db": engine.dialect.name, "reports": n, "tasks": tasks, "through": "flask",
           "cpu_ms": 1000 * (time.process_time() - cpu0) / n, "wall_ms": 1000 * (time.perf_counter() - wall0) / n,
           "profiled": bool(prof)}
    engine.dispose()
    out(f"{res['db']}: {n} reports of {tasks} tasks through POST /api/v1/reports (Flask test client, report token): "
        f"{res['cpu_ms']:.2f} ms CPU, {res['wall_ms']:.2f} ms wall per report" + (" (under cProfile)" if prof else ""))
    if prof:
        pstats.Stats(prof, stream=sys.stdout).sort_stats("cumulative").print_stats(top)
    return res


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--db", required=True, help="SQLAlchemy URL (a scratch database: reports are stored)")
    ap.add_argument("--jobs", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--tasks", type=int, default=40)
    ap.add_argument("--profile", type=int, default=0, metavar="TOP", help="cProfile, print the TOP functions")
    ap.add_argument("--batch", type=int, default=None, metavar="N",
                    help="N reports per transaction through ingest_reports (group commit; N <= --jobs)")
    ap.add_argument("--through", choices=["ingest", "flask"], default="ingest",
                    help="ingest: parse + transaction only (by phase); flask: the whole POST through the Flask app")
    args = ap.parse_args(argv)
    if args.through == "flask":
        profile_flask(args.db, args.jobs, args.rounds, args.tasks, args.profile)
    else:
        if args.batch is not None and not 1 <= args.batch <= args.jobs:
            ap.error(f"--batch: between 1 and --jobs ({args.jobs}), one report per job in a batch")
        profile(args.db, args.jobs, args.rounds, args.tasks, args.profile, batch=args.batch)


if __name__ == "__main__":
    main()
