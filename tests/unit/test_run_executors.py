"""A run's executor-seconds and peak from its executors' registration and removal (``aggregators.runs.executor_usage``,
``GET /api/v1/jobs/<job>/runs``): brute force over a 1 ms grid on random instances, and the edges (still registered,
registered before the run's first report, none reported). SQLite."""
import random

import pytest
from sqlalchemy import insert

from spark_governor.aggregators.cluster_profile import record_executor_events
from spark_governor.aggregators.models import jobs
from spark_governor.aggregators.runs import RunSpan, executor_usage
from tests.unit.test_liveness import engine  # noqa: F401 (the migrated SQLite engine fixture)


def _job(conn) -> int:
    return conn.execute(insert(jobs).values(name="runs-job", created_ms=0)).inserted_primary_key[0]


def _span(first_ms: int, last_ms: int, run_id: str = "app-1") -> RunSpan:
    return RunSpan(run_id, run_id, "spark://x", first_ms, last_ms, True, None, None)


def test_executor_seconds_and_peak_equal_brute_force(engine):
    rng = random.Random(7)
    with engine.begin() as conn:
        job_id = _job(conn)
        for k in range(40):
            run = f"app-{k}"
            first, last = rng.randint(0, 200), rng.randint(300, 600)
            evs = []
            for e in range(rng.randint(0, 6)):
                added = rng.randint(0, 650)
                removed = rng.choice([None, added + rng.randint(0, 300)])
                evs.append({"executor_id": str(e), "added_ms": added, "removed_ms": removed})
            record_executor_events(conn, job_id, run, evs)
            seconds, peak = executor_usage(conn, job_id, _span(first, last, run))
            if not evs:
                assert (seconds, peak) == (None, None)
                continue
            alive = [sum(1 for ev in evs if ev["added_ms"] <= t < min(ev["removed_ms"] if ev["removed_ms"] is not None
                                                                       else last, last))
                     for t in range(first, last)]
            assert seconds == pytest.approx(sum(alive) / 1000.0)
            assert peak == max(alive, default=0)


def test_an_executor_seen_at_attach_and_by_its_own_event_counts_from_the_earlier(engine):
    with engine.begin() as conn:
        job_id = _job(conn)
        record_executor_events(conn, job_id, "app-1", [{"executor_id": "1", "added_ms": 5_000}])  # its event
        record_executor_events(conn, job_id, "app-1", [{"executor_id": "1", "added_ms": 6_000}])  # attach()'s snapshot
        record_executor_events(conn, job_id, "app-1", [{"executor_id": "1", "removed_ms": 9_000}])
        assert executor_usage(conn, job_id, _span(1_000, 20_000)) == (4.0, 1)
