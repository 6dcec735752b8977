"""End to end on real local Spark: a streaming query → reporters → control plane → SQL, API,
/metrics and a real Prometheus evaluating every dashboard panel."""

import pytest
import requests
from sqlalchemy import func, select

from spark_governor.aggregators.models import stage_runs, tasks, template_vertices
from spark_governor.policies.moments import Moments
from spark_governor.collectors.demo_job import DemoConfig, run_demo_job
from spark_governor.dashboards import load_all, panel_queries, render_expr
from spark_governor.api.processes import wait_for
from tests.conftest import PromQL

pytestmark = pytest.mark.spark
JOB = "pipeline-test"


def spark_task_count(spark, run_id: str) -> int:
    """Tasks Spark completed successfully for the query's jobs (its status tracker, not our listener)."""
    tracker = spark.sparkContext.statusTracker()
    total = 0
    for job_id in tracker.getJobIdsForGroup(run_id):
        info = tracker.getJobInfo(job_id)
        for stage_id in info.stageIds:
            st = tracker.getStageInfo(stage_id)
            if st is not None:
                total += st.numCompletedTasks
    return total


@pytest.fixture(scope="module")
def fed(spark, tmp_path_factory):
    """Run the Zipf job for ~25 s against a control plane; yields (plane, result, spark task count)."""
    from spark_governor.api.app import Settings
    from spark_governor.api.server import ControlPlane

    url = f"sqlite:///{tmp_path_factory.mktemp('pipeline') / 'sg.db'}"
    plane = ControlPlane(db_url=url, port=0, settings=Settings(window_ms=5000), tokens={"ops": "pipeline"}).start()
    # a whole-query latency constraint, so that the dashboards' constraint panels have data
    r = requests.put(f"{plane.url}/api/v1/jobs/{JOB}/constraints/e2e?register=true", json={"bound_ms": 10_000, "span_s": 5},
                     headers={"Authorization": "Bearer pipeline"}, timeout=10)
    assert r.status_code == 200, r.text
    # task_detail "all": every task row is stored besides the statistics the reporter folds, so the tests below check
    # the folded statistics against the tasks themselves
    cfg = DemoConfig(job=JOB, endpoint=plane.url, seconds=25, rows_per_second=3000, keys=500, skew=1.2,
                     reporter_options={"task_detail": "all"})
    result = run_demo_job(cfg, spark=spark)
    expected = spark_task_count(spark, result.run_id)
    yield plane, result, expected
    plane.stop()


def stored_tasks(plane, successful=True) -> int:
    with plane.engine.connect() as conn:
        return conn.execute(select(func.count()).select_from(tasks).where(tasks.c.successful == successful)).scalar()


def test_every_task_spark_ran_is_stored_once(fed):
    plane, result, expected = fed
    assert result.batches >= 10
    assert expected > 0
    wait_for(lambda: stored_tasks(plane) >= expected, 30, what="all tasks stored")
    assert stored_tasks(plane) == expected
    # the only unsuccessful tasks are those killed when the query stopped mid-batch
    with plane.engine.connect() as conn:
        failed = conn.execute(select(tasks.c.batch_id, tasks.c.failure_reason).where(~tasks.c.successful)).all()
        last_batch = conn.execute(select(func.max(tasks.c.batch_id))).scalar()
    assert all(r.failure_reason.startswith("TaskKilled") and r.batch_id == last_batch for r in failed), failed
    assert result.reporter_stats["dropped"] == 0 and result.reporter_stats["orphaned"] == 0


def test_input_records_equal_rows_the_source_produced(fed):
    plane, result, _ = fed
    batches = requests.get(f"{plane.url}/api/v1/jobs/{JOB}/batches?limit=10000").json()["batches"]
    assert sum(b["num_input_rows"] for b in batches) == result.input_rows > 0
    ids = [b["batch_id"] for b in batches]
    with plane.engine.connect() as conn:
        records = conn.execute(select(func.sum(tasks.c.input_records)).where(tasks.c.batch_id.in_(ids))).scalar()
    assert records == result.input_rows


def test_record_interarrival_from_event_time(fed):
    """The source spreads 3000 rows/s evenly in event time: the mean gap is 1/3000 s."""
    plane, _, _ = fed
    b = requests.get(f"{plane.url}/api/v1/jobs/{JOB}/batches?limit=10000").json()
    assert b["record_interarrival"]["mean"] == pytest.approx(1 / 3000, rel=0.1)
    timed = [x for x in b["batches"] if x["record_interarrival_s"] is not None]
    assert len(timed) >= len(b["batches"]) - 2
    assert all(x["record_wait_s"] > 0 for x in timed)


def test_template_keys_are_stable_across_batches(fed):
    plane, result, _ = fed
    with plane.engine.connect() as conn:
        templates = conn.execute(select(template_vertices.c.id, template_vertices.c.name,
                                        template_vertices.c.key, template_vertices.c.ordinal,
                                        template_vertices.c.operators)).all()
        per_batch = {}
        for r in conn.execute(select(stage_runs.c.batch_id, stage_runs.c.template_id)):
            per_batch.setdefault(r.batch_id, set()).add(r.template_id)
    assert len(templates) == 2, templates
    # every template is described: its position in the batch, plan operators and a readable name
    assert sorted(t.ordinal for t in templates) == [0, 1]
    assert all(t.operators and t.name != t.key and t.name.startswith(f"s{t.ordinal} ") for t in templates)
    assert len(per_batch) >= result.batches - 1
    assert all(v == {t.id for t in templates} for v in per_batch.values())


def test_template_statistics_equal_direct_computation_from_tasks(fed):
    plane, _, _ = fed
    stages = requests.get(f"{plane.url}/api/v1/jobs/{JOB}/stages?windows=1000").json()["stages"]
    assert len(stages) == 2
    with plane.engine.connect() as conn:
        for s in stages:
            tid = conn.execute(select(template_vertices.c.id).where(template_vertices.c.key == s["key"])).scalar()
            rows = conn.execute(select(tasks).where(tasks.c.template_id == tid, tasks.c.successful)).all()
            for w in s["windows"]:
                lo, hi = w["window_start_ms"], w["window_start_ms"] + w["window_ms"]
                in_w = [t for t in rows if lo <= t.finish_ms < hi]
                svc = Moments.of([t.run_time_ms / 1000 for t in in_w])
                lat = Moments.of([(t.finish_ms - t.stage_submission_ms) / 1000 for t in in_w])
                assert w["tasks"] == len(in_w)
                assert w["service"]["mean"] == pytest.approx(svc.mean)
                if svc.n > 1:
                    assert w["service"]["variance"] == pytest.approx(svc.variance)
                    assert w["latency"]["variance"] == pytest.approx(lat.variance)
                assert w["latency"]["mean"] == pytest.approx(lat.mean)
                assert w["records_in"] == sum(t.input_records + t.shuffle_read_records for t in in_w)
            # runtime vertices = partitions of the stage
            parts = requests.get(f"{plane.url}/api/v1/jobs/{JOB}/stages/{s['key']}/tasks?windows=1000").json()
            assert len(parts["partitions"]) == len({t.partition for t in rows})


def test_query_states_reach_the_control_plane_every_second(fed):
    """The reporter sends the query's state between batches (collectors.query_state): running batches
    with their start, the trigger, the Zipf source's rows and backlog, and finally its termination."""
    from spark_governor.aggregators.models import query_states

    plane, result, _ = fed
    with plane.engine.connect() as conn:
        rows = conn.execute(select(query_states).order_by(query_states.c.observed_ms)).mappings().all()
    assert {r["query_id"] for r in rows} == {result.query_id}
    seen = [r for r in rows if r["status"] != "terminated"]
    gaps = [(b["observed_ms"] - a["observed_ms"]) / 1000 for a, b in zip(seen, seen[1:])]
    assert len(seen) >= 15 and max(gaps) <= 2.5, gaps  # about once a second while the query runs
    assert {"running", "waiting"} <= {r["status"] for r in seen}
    assert rows[-1]["status"] == "terminated"
    assert all(r["trigger_interval_ms"] == 1000 for r in seen if r["trigger_interval_ms"] is not None)
    running = [r for r in seen if r["status"] == "running"]
    assert all(r["running_batch_start_ms"] <= r["observed_ms"] for r in running)
    assert any(r["running_batch_id"] is not None for r in running)
    counted = [r for r in seen if r["backlog_rows"] is not None and r["last_batch_id"] is not None]
    assert counted and all(r["sources"][0]["processed_rows"] > 0 for r in counted if r["last_batch_id"] > 0)
    # at 3000 rows/s with a 1 s trigger the backlog stays within a few seconds of input
    assert max(r["backlog_rows"] for r in counted) < 3000 * 10
    live = requests.get(f"{plane.url}/api/v1/jobs/{JOB}/live", timeout=10).json()
    assert live["live"] is None or live["live"]["status"] == "terminated"


@pytest.mark.prometheus
def test_prometheus_evaluates_every_dashboard_panel(fed, prometheus_factory, tmp_path):
    from spark_governor.api import prometheus_rules

    plane, _, _ = fed
    # the shipped rules (the SLO row reads their recordings), the long windows evaluated every second, not minute
    rules = tmp_path / "rules.yml"
    rules.write_text(prometheus_rules.dump(prometheus_rules.render(slow_interval=None)))
    prom = prometheus_factory([f"127.0.0.1:{plane.port}"], rules=(rules,))

    query = PromQL(prom).query

    # wait for enough scrapes for rate() over 1m windows
    wait_for(lambda: len(query(f'count_over_time(spark_governor_job_slots{{spark_job="{JOB}"}}[1m])')) == 1
             and float(query(f'count_over_time(spark_governor_job_slots{{spark_job="{JOB}"}}[1m])')[0]["value"][1]) >= 3,
             60, what="three scrapes")
    queries = [(d["title"], title, expr) for d in load_all() if d["uid"] == "spark-governor-job-overview"
               for title, expr in panel_queries(d)]  # the decisions dashboard: tests/test_decisions_dashboard.py
    assert len(queries) >= 12
    empty = []
    for dash, title, expr in queries:
        result = query(render_expr(expr, {"job": JOB, "datasource": "prometheus"}))
        if not result:
            empty.append(f"{dash} / {title}: {expr}")
    assert not empty, "panels without data:\n" + "\n".join(empty)
    # the template variable's query works too
    assert JOB in [r["metric"]["spark_job"] for r in query("spark_governor_tasks_ingested_total")]
