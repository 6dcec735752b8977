"""Issue #16, cheap ingest: the one-statement upserts (windows merged inside the database with Chan's merge,
``aggregators.welford.sql_merge``) store exactly what folding every task and stage of many reports at once
gives, on SQLite and a real PostgreSQL; retried reports and stages already stored change nothing."""
from __future__ import annotations

import json
import random
from collections import defaultdict

import pytest
from sqlalchemy import func, select

from spark_governor.aggregators.models import (batches, runtime_vertices, runtime_windows, stage_runs, tasks,
                                               template_vertices, template_windows)
from spark_governor.policies.moments import Moments
from spark_governor.api.app import Settings, create_app
from tests.legacy_reports import job_report

WINDOW_MS = 5000
T0 = 1_764_000_000_000


@pytest.fixture
def engine(both_databases):
    return both_databases


def _reports() -> list[dict]:
    """12 one-second reports of one job (each window of 5 s absorbs several), plus a retried one."""
    rng = random.Random(7)
    reps = [job_report("job-bulk", "rep-bulk", seq, 24, T0 + seq * 1000, rng) for seq in range(1, 13)]
    return reps + [reps[4]]


def test_windows_merged_in_the_database_equal_folding_everything_at_once(engine):
    client = create_app(engine, Settings(window_ms=WINDOW_MS)).test_client()
    reps = _reports()
    answers = [client.post("/api/v1/reports", data=json.dumps(r), headers={"Content-Type": "application/json"})
               for r in reps]
    assert [a.status_code for a in answers] == [200] * len(reps)
    assert [a.json["duplicate"] for a in answers] == [False] * 12 + [True]
    applied = reps[:12]

    # the oracle: every task and stage of the applied reports, folded at once
    service, sums = defaultdict(list), defaultdict(lambda: defaultdict(int))
    for r in applied:
        for t in r["tasks"]:
            key = (t["template_key"], t["partition"], t["finish_ms"] - t["finish_ms"] % WINDOW_MS)
            service[key].append(t["run_time_ms"] / 1000)
            sums[key]["tasks"] += 1
            sums[key]["run_time_ms"] += t["run_time_ms"]
            sums[key]["records_in"] += t["input_records"] + t["shuffle_read_records"]
    makespan, stage_count, launches = defaultdict(list), defaultdict(int), defaultdict(list)
    for r in applied:
        for t in r["tasks"]:
            launches[t["stage_id"]].append(t["launch_ms"])
    launch_gaps = defaultdict(list)
    for r in applied:
        for s in r["stages"]:
            key = (s["template_key"], s["completion_ms"] - s["completion_ms"] % WINDOW_MS)
            makespan[key].append((s["completion_ms"] - s["submission_ms"]) / 1000)
            stage_count[key] += 1
            ls = sorted(launches[s["stage_id"]])
            launch_gaps[key] += [(b - a) / 1000 for a, b in zip(ls, ls[1:])]

    with engine.connect() as conn:
        rw = conn.execute(select(template_vertices.c.key, runtime_vertices.c.partition, runtime_windows)
                          .join(runtime_vertices, runtime_vertices.c.id == runtime_windows.c.runtime_vertex_id)
                          .join(template_vertices, template_vertices.c.id == runtime_windows.c.template_id)).all()
        tw = conn.execute(select(template_vertices.c.key, template_windows)
                          .join(template_vertices, template_vertices.c.id == template_windows.c.template_id)).all()
        counts = {t.name: conn.execute(select(func.count()).select_from(t)).scalar()
                  for t in (tasks, stage_runs, batches)}
    assert counts == {"tasks": 12 * 24, "stage_runs": 12 * 2, "batches": 12}

    assert {(r.key, r.partition, r.window_start_ms) for r in rw} == set(service)
    for r in rw:
        key = (r.key, r.partition, r.window_start_ms)
        m = Moments.of(service[key])
        assert (r.tasks, r.run_time_ms, r.records_in) == (sums[key]["tasks"], sums[key]["run_time_ms"],
                                                         sums[key]["records_in"])
        assert r.service_n == m.n
        assert r.service_mean == pytest.approx(m.mean, rel=1e-12)
        assert r.service_m2 == pytest.approx(m.m2, rel=1e-9, abs=1e-12)

    assert {(r.key, r.window_start_ms) for r in tw} == set(makespan)
    assert any(n > 1 for n in stage_count.values())  # some windows really merged several reports
    for r in tw:
        key = (r.key, r.window_start_ms)
        m, g = Moments.of(makespan[key]), Moments.of(launch_gaps[key])
        assert r.stages == stage_count[key] and r.max_num_tasks == 12 and r.max_slots == 8
        assert (r.makespan_n, r.launch_interarrival_n) == (m.n, g.n)
        assert r.makespan_mean == pytest.approx(m.mean, rel=1e-12)
        assert r.makespan_m2 == pytest.approx(m.m2, rel=1e-9, abs=1e-12)
        assert r.launch_interarrival_mean == pytest.approx(g.mean, rel=1e-12)
        assert r.launch_interarrival_m2 == pytest.approx(g.m2, rel=1e-9, abs=1e-12)


def test_window_sums_saturate_in_the_database(engine):
    """A stored window near the BIGINT limit absorbs more without failing: the sum stops at 2**63 - 1."""
    client = create_app(engine, Settings(window_ms=WINDOW_MS)).test_client()
    rng = random.Random(1)
    for seq in (1, 2):
        rep = job_report("job-sat", "rep-sat", seq, 2, T0 + 1000, rng)
        for t in rep["tasks"]:
            t["input_records"] = 2**63 - 1
        assert client.post("/api/v1/reports", json=rep).status_code == 200
    with engine.connect() as conn:
        values = conn.execute(select(runtime_windows.c.input_records, runtime_windows.c.tasks)).all()
    assert values and all(v.input_records == 2**63 - 1 for v in values)
    assert sum(v.tasks for v in values) == 4
