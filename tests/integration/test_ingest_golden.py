"""Issue #16, cheap ingest: making ingest cheaper must not change what it stores. A fixed set of varied
reports (two jobs, an anonymous and a token-bound reporter, a retried report, failed tasks and stages,
tasks without a stage submission or without records, a renamed template, knob state, attachment, query
states, executor events) is stored with ``ingest_report`` on a fresh database, with a fixed clock; every
row of every table it writes (floats to 9 significant digits) must equal the rows the ingest of
2026-11-25 (before the session-22 speed-ups) stored, on SQLite and on a real PostgreSQL.

Surrogate ids are compared by what they stand for (a job by its name, a template by its job and key, a
runtime vertex by its template and partition): which id a new row gets depends on statement order, the
set iteration order of the process and PostgreSQL's sequences, not on what ingest computed. The
reference digests are in ``tests/data/ingest_golden.json``, per dialect. After an intended change of
what is stored, rewrite them with ``INGEST_GOLDEN_WRITE=1`` and say why in the commit."""
from __future__ import annotations

import copy
import hashlib
import json
import os
import random
from pathlib import Path

import pytest
from sqlalchemy import select

from spark_governor.aggregators.ingest import ingest_report
from spark_governor.aggregators.models import metadata
from spark_governor.policies.wire import parse_report
from tests.legacy_reports import job_report

GOLDEN = Path(__file__).resolve().parents[1] / "data" / "ingest_golden.json"
T0 = 1_764_000_000_000
#: tables ingest does not write (or writes with the wall clock)
SKIP = {"api_tokens", "audit_log", "alembic_version", "leader", "leaders"}


def _reports() -> list[tuple[dict, str | None]]:
    """(report, token name) in arrival order."""
    rng = random.Random(16)
    out: list[tuple[dict, str | None]] = []
    for seq in range(1, 9):  # job A, anonymous: 8 one-second reports of 24 tasks
        r = job_report("golden-a", "rep-a", seq, 24, T0 + seq * 1000, rng)
        r["reporter"]["dropped_total"] = seq // 3
        tasks = r["tasks"]
        tasks[0].update(successful=False, failure_reason="ExecutorLostFailure")
        tasks[1]["stage_submission_ms"] = None
        tasks[2].update(input_records=0, shuffle_read_records=0)
        tasks[3]["partition"] = 40 + seq % 3  # runtime vertices appearing over time
        if seq == 5:
            r["templates"][0]["name"] = "s0 map renamed"
            r["stages"][1]["failure_reason"] = "FetchFailed"
            r["reporter"]["knob_state"] = {"batch_interval": {"ms": 2000}}
            r["reporter"]["attachment"] = {"kind": "attach", "version": "1", "can_apply": ["batch_interval"]}
        if seq == 6:
            r["executors"] = [{"executor_id": "5", "added_ms": T0 + 5900, "cores": 2},
                              {"executor_id": "2", "removed_ms": T0 + 5950}]
        out.append((r, None))
    out.append((copy.deepcopy(out[3][0]), None))  # a retried report: a duplicate, nothing stored again
    for seq in range(1, 5):  # job B, bound to a token, with query states
        r = job_report("golden-b", "rep-b", seq, 10, T0 + 500 + seq * 1000, rng)
        r["schema_version"] = 2
        r["queries"] = [{"query_id": "q1", "run_id": "r1", "name": "golden-b", "observed_ms": T0 + seq * 1000 + 700,
                         "status": "waiting", "last_batch_id": seq, "last_batch_end_ms": T0 + seq * 1000 + 600,
                         "trigger_interval_ms": 1000, "backlog_rows": 10 * seq, "arrival_rows_per_second": 1000.0}]
        out.append((r, "team-b"))
    return out


def _norm(v):
    if isinstance(v, float):
        return float(f"{v:.9g}")
    if isinstance(v, (dict, list)):
        return json.loads(json.dumps(v, sort_keys=True))
    return v


#: how a surrogate id is named in the digests: (table, its natural key columns, in order)
NATURAL = (("jobs", ("name",)), ("template_vertices", ("job_id", "key")), ("runtime_vertices", ("template_id", "partition")))


def stored_digests(engine) -> dict[str, list]:
    """{table: [rows, sha256 of its rows]} after storing ``_reports()``."""
    for report, token in _reports():
        with engine.begin() as conn:
            ingest_report(conn, parse_report(json.dumps(report)), 5000, token,
                          now_ms=T0 + report["reporter"]["seq"] * 1000 + 990)
    out = {}
    with engine.connect() as conn:
        natural: dict[str, dict] = {}

        def row_of(table, r) -> dict:
            row = {}
            for col in table.columns:
                v = r._mapping[col.name]
                targets = [fk.column.table.name for fk in col.foreign_keys]
                if col.primary_key and col.name == "id" and isinstance(v, int):  # a surrogate id
                    continue
                if targets and targets[0] in natural and v is not None:
                    v = natural[targets[0]][v]
                row[col.name] = _norm(v)
            return row

        for name, key in NATURAL:
            table = metadata.tables[name]
            natural[name] = {}
            for r in conn.execute(select(table)):
                natural[name][r.id] = "/".join(str(row_of(table, r)[k]) for k in key)
        for table in metadata.sorted_tables:
            if table.name in SKIP:
                continue
            rows = sorted(json.dumps(row_of(table, r), sort_keys=True, default=str)
                          for r in conn.execute(select(table)))
            if rows:
                out[table.name] = [len(rows), hashlib.sha256("\n".join(rows).encode()).hexdigest()]
    return out


def test_ingest_stores_the_same_rows_as_the_reference(both_databases):
    engine = both_databases
    got = stored_digests(engine)
    dialect = engine.dialect.name
    golden = json.loads(GOLDEN.read_text()) if GOLDEN.exists() else {}
    if os.environ.get("INGEST_GOLDEN_WRITE"):
        golden[dialect] = got
        GOLDEN.write_text(json.dumps(golden, indent=1, sort_keys=True) + "\n")
    assert {"tasks", "runtime_windows", "template_windows", "stage_runs", "batches", "reporters", "jobs"} <= set(got)
    assert got["tasks"][0] == 8 * 24 + 4 * 10  # the retried report stored nothing
    assert got == golden[dialect]


@pytest.mark.postgres
def test_postgres_staging_table_survives_a_rolled_back_first_use(fresh_postgres_db):
    """``aggregators.bulk`` stages upserted rows in a temporary table created once per session: when the
    transaction that created it rolls back, the table is gone, and the next report on the same
    connection must create it again (one pooled connection, so it is the same session)."""
    from spark_governor.aggregators.db import make_engine, upgrade
    from spark_governor.aggregators.models import runtime_windows

    upgrade(fresh_postgres_db)
    engine = make_engine(fresh_postgres_db, pool_size=1, max_overflow=0)
    report, _ = _reports()[0]
    try:
        with engine.connect() as conn:
            tx = conn.begin()
            ingest_report(conn, parse_report(json.dumps(report)), 5000, None, now_ms=T0)
            staged = conn.exec_driver_sql("SELECT count(*) FROM pg_tables WHERE tablename LIKE 'sg_stage_%%'").scalar()
            assert staged >= 1  # the staged path ran
            tx.rollback()
        for seq in (1, 2):  # the first use again, then a use of the committed table
            r = dict(report, reporter={**report["reporter"], "seq": seq})
            with engine.begin() as conn:
                ingest_report(conn, parse_report(json.dumps(r)), 5000, None, now_ms=T0 + seq)
        with engine.connect() as conn:
            assert conn.execute(select(runtime_windows.c.tasks)).first() is not None
            assert conn.exec_driver_sql("SELECT count(*) FROM pg_tables WHERE tablename LIKE 'sg_stage_%%'").scalar() >= 1
    finally:
        engine.dispose()
