"""A job whose probed arrival rate jumps is evaluated at once (``api.surge_watch``), on SQLite and
PostgreSQL, and through the real scheduler of an in-process control plane."""
import time

import requests
from sqlalchemy import func, select

from spark_governor.aggregators.models import events
from spark_governor.api.surge_watch import SurgeWatch
from spark_governor.bench.reports import gz

from test_policy_api import AUTH, TOKEN, app, client, engine, governor, job_id, put_policy  # noqa: F401 (fixtures)


def report(job, seq, now_ms, rates, probed=True):
    """Query states of one query per rate (rows/s), each with one source, probed or not."""
    probes = probed if isinstance(probed, (list, tuple)) else [probed] * len(rates)
    queries = [{"query_id": f"q{i}", "run_id": "run", "name": f"q{i}", "observed_ms": now_ms, "status": "waiting",
                "arrival_rows_per_second": r,
                "sources": [{"description": "zipf", "arrival_rows_per_second": r,
                             **({"arrival_probed": True} if p else {})}]}
               for i, (r, p) in enumerate(zip(rates, probes))]
    return {"schema_version": 2, "job": job, "reporter": {"id": f"r-{job}", "seq": seq, "executors": 2, "slots": 2},
            "queries": queries}


def post(client, rep):
    r = client.post("/api/v1/reports", data=gz(rep), headers={"Content-Encoding": "gzip"})
    assert r.status_code == 200, r.json


def test_a_probed_rate_step_evaluates_its_job_at_once(app, client, engine):
    watch = SurgeWatch(engine, governor(app), surge_ratio=0.25, min_gap_s=1.0)
    for job in ("probed", "offsets", "mixed"):
        assert put_policy(client, job=job).status_code == 200
    seq = 0

    def step(rates):  # reports received now (the watch reads the states of the last 3 s)
        nonlocal seq
        seq += 1
        at = int(time.time() * 1000)
        post(client, report("probed", seq, at, rates))
        post(client, report("offsets", seq, at, rates, probed=False))
        post(client, report("mixed", seq, at, rates * 2, probed=[True, False]))
        return watch.check(at)

    assert step([1000.0]) == []  # the baseline
    assert step([1100.0]) == []  # +10 %: noise
    assert step([900.0]) == []  # lower: the baseline follows it down
    assert step([1200.0]) == []  # +33 % on 900, but still rising (+33 % on the previous look)
    assert step([1250.0]) == [job_id(engine, "probed")]  # settled
    assert watch.evaluations == 1
    assert step([1700.0]) == [] and step([1700.0]) == []  # +36 %: rising, then within 1 s of the last surge
    time.sleep(1.05)
    assert step([1700.0]) == [job_id(engine, "probed")]
    # the evaluation ran the job's policy (a decision or not, the evaluation is on record: no policy error)
    with engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(events).where(events.c.kind == "policy_error")).scalar() == 0
    # a job whose sources are not (all) probed: its live rate moves with completed batches, the interval follows it
    assert set(watch.baseline) == {job_id(engine, "probed")}


def test_the_scheduler_runs_the_surge_watch(start_plane):
    plane = start_plane(TOKEN, window_ms=1000, evaluation_interval_s=600.0)  # no interval evaluation in the test
    r = requests.put(f"{plane.url}/api/v1/jobs/surging/policies/threshold?register=true", headers=AUTH,
                     json={"config": {"trigger_interval_s": 2.0}}, timeout=10)
    assert r.status_code == 200, r.text

    def send(seq, rate):
        rep = report("surging", seq, int(time.time() * 1000), [rate])
        r = requests.post(f"{plane.url}/api/v1/reports", data=gz(rep),
                          headers={"Content-Encoding": "gzip", **AUTH}, timeout=10)
        assert r.status_code == 200, r.text

    def surges() -> float:
        text = requests.get(f"{plane.url}/metrics", timeout=10).text
        line = next(x for x in text.splitlines() if x.startswith("spark_governor_surge_evaluations_total "))
        return float(line.split()[-1])

    for seq in range(1, 4):  # a steady rate: the baseline, no surge
        send(seq, 1000.0)
        time.sleep(0.7)
    assert surges() == 0
    started = time.time()
    seq = 4
    while surges() == 0 and time.time() - started < 10:
        send(seq, 4000.0)
        seq += 1
        time.sleep(0.3)
    assert surges() == 1 and time.time() - started < 5
    for _ in range(6):  # the new rate held: no second surge
        send(seq, 4000.0)
        seq += 1
        time.sleep(0.5)
    assert surges() == 1
