"""The cluster profile measured from SQL (aggregators.cluster_profile) on constructed rows in a real
SQLite store: provisioning delay, executor warm-up, driver overhead, prediction error; its API
(GET /api/v1/jobs/<job>/cluster) and /metrics gauges."""
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from sqlalchemy import insert, select

from spark_governor.aggregators import cluster_profile, db
from spark_governor.aggregators.models import (batches, cluster_profiles, decisions, job_runs, jobs,
                                               runtime_vertices, tasks, template_vertices)
from spark_governor.api.cluster_metrics import ClusterProfileCollector
from spark_governor.api.governor import prediction_error

T0 = 1_700_000_000_000
APP = "app-1"
GAP = 4000  # a batch every 4 s


def trigger(k):
    return T0 + 1000 + GAP * k


@pytest.fixture
def store(sqlite_url):
    db.upgrade(sqlite_url)
    eng = db.make_engine(sqlite_url)
    yield eng
    eng.dispose()


def _task(job_id, tpl, rv, batch, tid, executor, launch, run_ms, records=100):
    return dict(job_id=job_id, template_id=tpl, runtime_vertex_id=rv, app_id=APP, query_id="q", batch_id=batch,
                stage_id=batch, stage_attempt=0, task_id=tid, partition=0, attempt=0, executor_id=executor,
                launch_ms=launch, finish_ms=launch + run_ms, run_time_ms=run_ms, cpu_time_ns=0, gc_time_ms=0,
                deserialize_ms=0, result_serialize_ms=0, input_records=records, input_bytes=0, output_records=0,
                output_bytes=0, shuffle_read_records=0, shuffle_read_bytes=0, shuffle_fetch_wait_ms=0,
                shuffle_write_records=0, shuffle_write_bytes=0, shuffle_write_time_ns=0, successful=True,
                speculative=False)


def build(conn, executor_events=True, n_batches=40, joins_at=14, stray=None, crowded=1000, added_ms=T0 + 52_000):
    """One run: executor 1 from the start takes 2 tasks of 1 s (100 records) per batch; a scale-out
    decision at T0 + 40 s; executor 2 registers at T0 + 52 s and takes one of the two tasks from batch
    ``joins_at`` (triggered T0 + 57 s) on; its first 3 tasks take 3 s. Every batch lasts its tasks'
    span + 1.5 s. Executor 1's tasks of the batches executor 2 is slow in take ``crowded`` ms."""
    job_id = conn.execute(insert(jobs).values(name="cp", created_ms=T0, last_report_ms=T0 + 200_000, executors=2,
                                              slots=2)).inserted_primary_key[0]
    conn.execute(insert(job_runs).values(job_id=job_id, run_id=APP, app_id=APP, first_ms=T0, last_ms=T0 + 200_000))
    tpl = conn.execute(insert(template_vertices).values(job_id=job_id, key="t", name="t", first_ms=T0,
                                                        last_ms=T0)).inserted_primary_key[0]
    rv = conn.execute(insert(runtime_vertices).values(template_id=tpl, partition=0)).inserted_primary_key[0]
    rows, tid, e2 = [], 0, 0
    for k in range(n_batches):
        t = trigger(k)
        launch = t + 500
        runs = [("1", 1000)]
        if k >= joins_at:
            runs.append(("2", 3000 if e2 < 3 or e2 == stray else 1000))
            e2 += 1
            if k < joins_at + 3:
                runs[0] = ("1", crowded)
        else:
            runs.append(("1", 1000))
        for ex, ms in runs:
            rows.append(_task(job_id, tpl, rv, k, tid, ex, launch, ms))
            tid += 1
        span = max(ms for _, ms in runs)
        conn.execute(insert(batches).values(job_id=job_id, query_id="q", run_id="r", batch_id=k, trigger_ms=t,
                                            batch_duration_ms=span + 1500, durations_ms={}, num_input_rows=200,
                                            state_operators=[], event_time={}, observed_metrics={}, job_run_id=APP))
    conn.execute(insert(tasks), rows)
    conn.execute(insert(decisions).values(job_id=job_id, policy="kingman", knob="executors", old_value=1, new_value=2,
                                          reason="r", inputs={}, prediction={}, mode="act", status="applied",
                                          created_ms=T0 + 40_000, applied_ms=T0 + 41_000))
    # a scale-in later: not a provisioning sample
    conn.execute(insert(decisions).values(job_id=job_id, policy="kingman", knob="executors", old_value=2, new_value=1,
                                          reason="r", inputs={}, prediction={}, mode="act", status="applied",
                                          created_ms=T0 + 150_000))
    if executor_events:
        cluster_profile.record_executor_events(conn, job_id, APP, [{"executor_id": "1", "added_ms": T0 - 5000},
                                                                  {"executor_id": "2", "added_ms": added_ms}])
        cluster_profile.record_executor_events(conn, job_id, APP, [{"executor_id": "2", "cores": 1}])
    return job_id


def test_provisioning_warmup_and_driver_overhead_from_sql(store):
    with store.begin() as conn:
        job_id = build(conn)
        p = cluster_profile.measure(conn, "cp", job_id)
    assert p.run_id == APP
    # directive sent T0+40 s → ExecutorAdded T0+52 s → first task finished T0+57.5+3 s
    assert p.provisioning == {"samples": 1, "register_s": {"median": 12.0, "p90": 12.0},
                              "first_task_s": {"median": 8.5, "p90": 8.5}, "register_source": "executor_added"}
    assert p.provisioning_delay_s == pytest.approx(20.5)
    # steady 10 ms per record; executor 2's first 10 tasks: 3 × 3 + 7 × 1 → factor 1.6; slow for 3 tasks,
    # from its first launch (T0+57.5 s) to its third task's end (batch 16: T0+65.5+3 s)
    assert p.warmup["samples"] == 1 and p.warmup["factor"] == pytest.approx(1.6)
    assert p.warmup["tasks"] == 3 and p.warmup["duration_s"] == pytest.approx(11.0)
    # weighed by time over the 3 slow tasks (the same records each): 3 × slower while it warmed up
    assert p.warmup["work_factor"] == pytest.approx(3.0)
    # its start-up window: first launch → the end of its slow tasks; executor 1 ran at its steady speed then
    assert p.warmup["startup_s"] == pytest.approx(11.0) and p.warmup["contention_factor"] == pytest.approx(1.0)
    # it registered 5.5 s before its first task: idle, not one that took a waiting task at once
    assert p.warmup["cold_samples"] == 0 and p.warmup["cold_work_factor"] is None and p.warmup["cold_tasks"] is None
    assert p.warmup["idle_work_factor"] == pytest.approx(3.0)
    # every batch: duration = task span + 1.5 s
    assert p.driver_overhead["samples"] == 40
    assert p.driver_overhead["mean_s"] == pytest.approx(1.5) and p.driver_overhead["p90_s"] == pytest.approx(1.5)
    assert p.prediction_error == {"samples": 0, "mean_abs_rel": None, "last": None}


def test_an_executor_whose_first_task_launched_as_it_registered_is_a_cold_one(store):
    """Executor 2 registered 0.8 s before its first launch (T0 + 57.5 s): it took a waiting task, so its
    work factor and slow tasks are also the cold executors' (``collectors.executor_warmup`` warms only the
    idle ones)."""
    with store.begin() as conn:
        p = cluster_profile.measure(conn, "cp", build(conn, added_ms=T0 + 56_700))
    assert p.warmup["cold_samples"] == 1 and p.warmup["cold_work_factor"] == pytest.approx(3.0)
    assert p.warmup["cold_tasks"] == 3 and p.warmup["work_factor"] == pytest.approx(3.0)
    assert p.warmup["idle_work_factor"] is None


def test_a_stray_slow_task_later_does_not_extend_the_warm_up(store):
    with store.begin() as conn:
        p = cluster_profile.measure(conn, "cp", build(conn, stray=15))  # executor 2's 16th task is slow too
    assert p.warmup["tasks"] == 3 and p.warmup["duration_s"] == pytest.approx(11.0)
    assert p.warmup["factor"] == pytest.approx(1.6)  # the first 10 tasks
    assert p.warmup["work_factor"] == pytest.approx(3.0)  # the 3 slow ones


def test_contention_is_the_working_executors_slowdown_while_a_new_one_starts(store):
    """Executor 1's three tasks launched in executor 2's start-up window ran 2.5 s for the records a steady
    task runs in 1 s; its own warm-up (executor 2's slow tasks) is not counted as contention."""
    with store.begin() as conn:
        job_id = build(conn, crowded=2500)
        p = cluster_profile.measure(conn, "cp", job_id)
        cluster_profile.refresh(conn, "cp", job_id, T0 + 1)
    assert p.warmup["contention_factor"] == pytest.approx(2.5) and p.warmup["work_factor"] == pytest.approx(3.0)
    registry = CollectorRegistry()
    registry.register(ClusterProfileCollector(store, expiry_s=0))
    assert 'spark_governor_executor_startup_contention_factor{spark_job="cp"} 2.5' in generate_latest(registry).decode()
    # a profile stored before the field reads None
    old = {**p.to_json(), "warmup": {k: v for k, v in p.warmup.items() if k not in ("startup_s", "contention_factor")}}
    assert cluster_profile.from_json(old).warmup["contention_factor"] is None


def test_work_factor_compares_with_a_steady_task_of_the_same_size():
    """Steady tasks take 0.5 s + 1 ms per record: 0.6 s for 100 records (6 ms each), 1.5 s for 1 000 (1.5 ms
    each); most are small, so the median per record is 6 ms. A new executor's first task of 1 000 records
    held its slot 3 s (2.2 s of run time): twice a steady task of its size (the median per record would
    read ×0.5). With records that do not vary, the median per record is the model."""
    from types import SimpleNamespace as T

    def task(ex, run_ms, records, launch, slot_ms=None):
        return T(successful=True, template_id=1, executor_id=ex, launch_ms=launch,
                 finish_ms=launch + (slot_ms or run_ms), run_time_ms=run_ms, input_records=records,
                 shuffle_read_records=0)
    rows, t = [], 0
    for b in range(30):
        big = b % 3 == 2
        rows.append(task("1", 1500 if big else 600, 1000 if big else 100, t))
        t += 2000
    rows.append(task("2", 2200, 1000, t, slot_ms=3000))  # 0.8 s of its slot outside its run time (a cold JVM)
    t += 4000
    for b in range(12):
        rows.append(task("2", 1500, 1000, t))
        t += 2000
    w = cluster_profile.warmup(rows, run_start_ms=0)
    assert w["samples"] == 1 and w["work_factor"] == pytest.approx(2.0)
    fixed, per = cluster_profile.steady_model(rows[:30], True)
    assert (fixed, per) == (pytest.approx(0.5), pytest.approx(0.001))
    same = [task("1", 600 + 10 * k, 100, 0) for k in range(5)]
    assert cluster_profile.steady_model(same, True) == (0.0, pytest.approx(0.0062))
    assert cluster_profile.steady_model(same, False) == (pytest.approx(0.62), 0.0)


def test_an_executors_first_tasks_are_read_however_many_came_after(store):
    """The warm-up reads each executor's first tasks by launch (policies.task_fold.WARMUP_TASKS) and the latest
    ``max_tasks`` of the uniform sample: executor 2's slow first tasks count also when the sample read is small
    (reading the latest 30 tasks used to lose them)."""
    with store.begin() as conn:
        job_id = build(conn, n_batches=80)
        small = cluster_profile.measure(conn, "cp", job_id, max_tasks=30)
        rows = cluster_profile._run_tasks(conn, job_id, cluster_profile._latest_run(conn, job_id), 30)
    assert small.provisioning["samples"] == 1 and small.provisioning["first_task_s"]["median"] == 8.5
    assert small.warmup["samples"] == 1 and small.warmup["tasks"] == 3
    by_executor = {e: sum(1 for r in rows if r.executor_id == e) for e in ("1", "2")}
    assert by_executor == {"1": 32, "2": 32}  # 80 and 66 stored; their first 32 by launch read, none sampled


def test_without_executor_events_the_first_launch_bounds_registration(store):
    with store.begin() as conn:
        p = cluster_profile.measure(conn, "cp", build(conn, executor_events=False))
    assert p.provisioning["register_source"] == "first_launch"
    assert p.provisioning["register_s"]["median"] == pytest.approx(17.5)  # first launch T0+57.5 s
    assert p.provisioning["first_task_s"]["median"] == pytest.approx(3.0)


def test_no_new_executor_no_samples(store):
    with store.begin() as conn:
        p = cluster_profile.measure(conn, "cp", build(conn, executor_events=False, n_batches=10))  # no executor 2
    assert p.provisioning["samples"] == 0 and p.provisioning["register_s"] == {"median": None, "p90": None}
    assert p.warmup == cluster_profile.NO_WARMUP
    assert p.driver_overhead["samples"] == 10


def test_prediction_error_per_decision_and_running(store):
    assert prediction_error({"latency_s": 4.0}, {"latency_s": 5.0}) == {
        "predicted_latency_s": 4.0, "measured_latency_s": 5.0, "rel": pytest.approx(-0.2),
        "abs_rel": pytest.approx(0.2)}
    assert prediction_error({"utilization": 0.5}, {"latency_s": 5.0}) is None
    assert prediction_error({"latency_s": 4.0}, {"latency_s": 0.0}) is None
    with store.begin() as conn:
        job_id = build(conn)
        for i, (pred, meas) in enumerate(((4.0, 5.0), (6.0, 5.0), (5.0, 4.0))):
            outcome = {"observed": {"latency_s": meas}, "predicted": {"latency_s": pred},
                       "prediction_error": prediction_error({"latency_s": pred}, {"latency_s": meas})}
            conn.execute(insert(decisions).values(job_id=job_id, policy="kingman", knob="executors", old_value=2,
                                                  new_value=3, reason="r", inputs={}, prediction={"latency_s": pred},
                                                  mode="act", status="applied", created_ms=T0 + 60_000 + i,
                                                  outcome=outcome, outcome_ms=T0 + 90_000 + i))
        e = cluster_profile.measure(conn, "cp", job_id).prediction_error
    assert e["samples"] == 3 and e["mean_abs_rel"] == pytest.approx((0.2 + 0.2 + 0.25) / 3)
    assert e["last"]["abs_rel"] == pytest.approx(0.25) and e["last"]["predicted_latency_s"] == 5.0


def test_refresh_keeps_one_row_per_job_and_feeds_api_and_metrics(store, sqlite_url):
    from spark_governor.api.app import Settings, create_app
    from spark_governor.aggregators.view import build_view

    with store.begin() as conn:
        job_id = build(conn)
        cluster_profile.refresh(conn, "cp", job_id, T0 + 1)
        cluster_profile.refresh(conn, "cp", job_id, T0 + 2)
        assert conn.execute(select(cluster_profiles.c.updated_ms)).scalars().all() == [T0 + 2]
        cluster_profile.refresh(conn, "cp", job_id, T0 + 5000, min_interval_s=10)  # too soon: kept
        assert conn.execute(select(cluster_profiles.c.updated_ms)).scalars().all() == [T0 + 2]
        v = build_view(conn, "cp", 30.0, 5000, T0 + 200_000)
    assert v.cluster.provisioning_delay_s == pytest.approx(20.5) and v.cluster.driver_overhead_s == pytest.approx(1.5)
    assert v.cluster.warmup_factor == pytest.approx(1.6)
    registry = CollectorRegistry()
    registry.register(ClusterProfileCollector(store, expiry_s=0))  # the constructed job never reported
    text = generate_latest(registry).decode()
    assert 'spark_governor_provisioning_delay_seconds{part="register",spark_job="cp"} 12.0' in text
    assert 'spark_governor_provisioning_delay_seconds{part="first_task",spark_job="cp"} 8.5' in text
    assert 'spark_governor_executor_warmup_factor{spark_job="cp"} 1.6' in text
    assert 'spark_governor_executor_warmup_work_factor{spark_job="cp"} 3.0' in text
    assert 'spark_governor_driver_overhead_seconds{spark_job="cp"} 1.5' in text
    assert "spark_governor_prediction_error_ratio{" not in text  # no judged decision yet
    silent = CollectorRegistry()
    silent.register(ClusterProfileCollector(store))  # silent longer than the expiry: not exported
    assert 'spark_job="cp"' not in generate_latest(silent).decode()
    c = create_app(store, Settings()).test_client()
    r = c.get("/api/v1/jobs/cp/cluster")
    assert r.status_code == 200
    body = r.json
    assert body["job"] == "cp" and body["run_id"] == APP
    assert body["provisioning"]["register_s"]["median"] == 12.0 and body["warmup"]["tasks"] == 3
    assert body["driver_overhead"]["median_s"] == 1.5 and body["prediction_error"]["samples"] == 0
    r = c.get("/api/v1/jobs/nope/cluster")
    assert r.status_code == 404 and "nope" in r.json["error"]


def test_profile_is_measured_often_only_while_a_new_executor_warms_up(store):
    """Executor 2 registers at T0 + 52 s (``build``): for a minute after, the profile is measured every 10 s;
    later, and for a job whose reports carry no executor events, every 60 s."""
    with store.begin() as conn:
        job_id = build(conn)
        assert cluster_profile.refresh_interval_s(conn, job_id, T0 + 60_000) == cluster_profile.REFRESH_AFTER_SCALE_S
        assert cluster_profile.refresh_interval_s(conn, job_id, T0 + 200_000) == cluster_profile.REFRESH_STEADY_S
        assert cluster_profile.REFRESH_AFTER_SCALE_S < cluster_profile.REFRESH_STEADY_S
        # a job without executor events (no listener jar events, or static executors)
        assert cluster_profile.refresh_interval_s(conn, job_id + 1, T0 + 60_000) == cluster_profile.REFRESH_STEADY_S


def test_work_factor_weighs_the_slow_tasks_by_their_time():
    """A new executor's first batch: its scan task (2 s steady for 1 000 records) ran 2×, its stateful task
    (0.1 s steady for 10 records) 10×. The per-task mean of the first tasks reads the cheap task as much
    as the long one; the executor's work took (4 + 1) / (2 + 0.1) = 2.38× the steady time."""
    from types import SimpleNamespace as T

    def task(i, ex, tpl, run_ms, records, launch):
        return T(successful=True, template_id=tpl, executor_id=ex, launch_ms=launch, finish_ms=launch + run_ms,
                 run_time_ms=run_ms, input_records=records if tpl == 1 else 0,
                 shuffle_read_records=records if tpl == 2 else 0)
    rows, t = [], 0
    for b in range(12):  # executor "1" from the start: steady tasks
        rows += [task(len(rows), "1", 1, 2000, 1000, t), task(len(rows) + 1, "1", 2, 100, 10, t + 2000)]
        t += 3000
    rows += [task(len(rows), "2", 1, 4000, 1000, t), task(len(rows) + 1, "2", 2, 1000, 10, t + 4000)]
    t += 6000
    for b in range(12):  # then steady on executor "2" too
        rows += [task(len(rows), "2", 1, 2000, 1000, t), task(len(rows) + 1, "2", 2, 100, 10, t + 2000)]
        t += 3000
    w = cluster_profile.warmup(rows, run_start_ms=0)
    assert w["samples"] == 1 and w["tasks"] == 2
    assert w["work_factor"] == pytest.approx(5.0 / 2.1)
    assert w["factor"] == pytest.approx((2 + 10 + 8 * 1) / 10)  # the first 10 tasks' mean ratio


def test_work_factor_runs_through_the_first_task_of_the_heaviest_template():
    """A new executor registered idle whose first task is a cheap stateful one (0.1 s steady for 10 records)
    that took 4 s (its Python worker and classes start then), and whose next, a scan (2 s steady), took
    2.6 s, then steady: the stateful task alone reads ×40; through the scan the executor took
    (4 + 2.6) / (0.1 + 2) = 3.14× the steady time."""
    from types import SimpleNamespace as T

    def task(ex, tpl, run_ms, records, launch):
        return T(successful=True, template_id=tpl, executor_id=ex, launch_ms=launch, finish_ms=launch + run_ms,
                 run_time_ms=run_ms, input_records=records if tpl == 1 else 0,
                 shuffle_read_records=records if tpl == 2 else 0)
    rows, t = [], 0
    for b in range(12):
        rows += [task("1", 1, 2000, 1000, t), task("1", 2, 100, 10, t + 2000)]
        t += 3000
    rows += [task("2", 2, 4000, 10, t), task("2", 1, 2600, 1000, t + 4000)]
    t += 7000
    for b in range(12):
        rows += [task("2", 1, 2000, 1000, t), task("2", 2, 100, 10, t + 2000)]
        t += 3000
    w = cluster_profile.warmup(rows, run_start_ms=0, registered={"2": rows[24].launch_ms - 5000})
    assert w["samples"] == 1 and w["tasks"] == 1  # only the stateful task was slow by the ratio
    assert w["work_factor"] == pytest.approx(6.6 / 2.1) and w["idle_work_factor"] == pytest.approx(6.6 / 2.1)
