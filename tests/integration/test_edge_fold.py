"""Issue #42: the reporters fold finished tasks at the edge (report schema v3, ``policies.task_fold``) and the
statistics do not change — windows, cluster profile, health verdict, the policies' view and decisions — whether a
job's tasks were folded at the edge or sent whole (v2, folded by the control plane), to 1e-9: on a replayed event
log, on a real local job and on a job on the standalone cluster. Old reports are accepted and counted the same;
folded statistics that cannot be are refused with 400 naming the field, and nothing is stored."""
import gzip
import json
import math
from pathlib import Path

import pytest
import requests
from sqlalchemy import func, select

from spark_governor.aggregators import db
from spark_governor.aggregators.models import reporters, runtime_windows, tasks
from spark_governor.api.processes import wait_for
from spark_governor.api.replay import replay
from spark_governor.bench.reports import gz, make_report
from spark_governor.policies.task_fold import SAMPLE_ONE_IN, TaskFold, sampled
from tests.edge_fold_support import CapturingReporter, assert_close, assert_same_statistics, ingest_all, statistics

DATA = Path(__file__).parent.parent / "data"


def fresh(tmp_path, name):
    url = f"sqlite:///{tmp_path / name}.db"
    db.upgrade(url)
    return db.make_engine(url)


def count(engine, table):
    with engine.connect() as conn:
        return conn.execute(select(func.count()).select_from(table)).scalar()


@pytest.mark.parametrize("log", ["spark_events_sample.jsonl.gz", "replay_template.jsonl.gz"])
def test_a_replayed_log_has_the_same_statistics_folded_or_whole(tmp_path, log):
    folded, whole = fresh(tmp_path, "folded"), fresh(tmp_path, "whole")
    path = tmp_path / "eventlog"
    path.write_bytes(gzip.decompress((DATA / log).read_bytes()))
    a = replay(folded, str(path), job="j", fold=True)
    b = replay(whole, str(path), job="j", fold=False)
    assert a.tasks == b.tasks > 0 and a.batches == b.batches and a.reports >= b.reports  # + open windows at the end
    stats = assert_same_statistics(folded, whole, "j", a.last_ms, 5000)
    assert sum(w["tasks"] + w["failed_tasks"] for k, w in stats["windows"].items() if k[0] == "runtime") == a.tasks
    assert count(folded, tasks) <= count(whole, tasks) == b.tasks  # rows: the profile's and the detail only


def _report_pair(n_tasks=40, failed=(3, 17)):
    """A v2 report of ``n_tasks`` tasks (some failed) and its v3 fold."""
    v2 = make_report(n_tasks=n_tasks, seed=7, schema_version=2)
    for i in failed:
        v2["tasks"][i].update(successful=False, failure_reason="ExceptionFailure: boom")
    v3 = dict(v2, schema_version=3, window_ms=5000, **TaskFold().fold(v2["tasks"], v2["stages"], 5000, 0, final=True))
    v3["reporter"] = dict(v2["reporter"], task_detail="failed")
    return v2, v3


def _counted_the_same(tmp_path, v2: dict, v3: dict) -> tuple[int, int]:
    """``v3`` folded at the edge and ``v2`` folded by the control plane, each into a store of its own: the same
    statistics; (the tasks the reporter is counted for, the failed tasks in the windows), the same in both."""
    folded, whole = fresh(tmp_path, "folded"), fresh(tmp_path, "whole")
    now = 1_700_000_100_000
    ingest_all(folded, [(v3, now)], 5000)
    ingest_all(whole, [(v2, now)], 5000)
    assert_same_statistics(folded, whole, "job-a", now, 5000)
    counts = []
    for engine in (folded, whole):
        with engine.connect() as conn:
            counts.append((conn.execute(select(reporters.c.tasks_total)).scalar(),
                           conn.execute(select(func.sum(runtime_windows.c.failed_tasks))).scalar()))
    assert counts[0] == counts[1]
    return counts[0]


def test_an_old_version_report_is_accepted_and_counted_the_same(tmp_path):
    v2, v3 = _report_pair()
    assert _counted_the_same(tmp_path, v2, v3) == (40, 2)
    # the failed tasks and the warm-up rows travel; every row is detail of a folded task
    assert {t["detail"] for t in v3["tasks"]} <= {"warmup", "sample", "failed"}
    assert sum(1 for t in v3["tasks"] if not t["successful"]) == 2


def test_a_steady_report_carries_the_sample_and_the_failures_only():
    fold = TaskFold()
    warm = make_report(n_tasks=200, seed=1, schema_version=1)["tasks"]
    fold.fold(warm, [], 5000, 1_700_000_500_000)  # the executor's first tasks went with an earlier report
    later = make_report(n_tasks=400, seed=2, start_ms=1_700_000_600_000, schema_version=1)["tasks"]
    for t in later:
        t["task_id"] += 10_000
    later[5].update(successful=False)
    out = fold.fold(later, [], 5000, 1_700_000_700_000, final=True)
    kinds = {t["detail"] for t in out["tasks"]}
    assert kinds <= {"sample", "failed"} and "failed" in kinds
    picked = sum(sampled(t["task_id"]) for t in later)
    assert abs(picked - 400 / SAMPLE_ONE_IN) < 15  # a uniform sample of about one in 16
    assert sum(w["tasks"] + w["failed_tasks"] for w in out["runtime_windows"]) == 400
    first = {t["task_id"] for t in sorted(later, key=lambda t: t["launch_ms"])[:32]}
    assert {t["task_id"] for t in TaskFold("none").fold(later, [], 5000, 0)["tasks"]} == (  # its warm-up and the sample
        first | {t["task_id"] for t in later if sampled(t["task_id"])})
    assert len(TaskFold("all").fold(later, [], 5000, 0)["tasks"]) == 400
    with pytest.raises(ValueError, match="task_detail"):
        TaskFold("some")


def _bad(v3, path, value):
    bad = json.loads(json.dumps(v3))
    node = bad
    *parents, last = path
    for p in parents:
        node = node[p]
    node[last] = value
    return bad


BAD = [
    ("negative count", ("runtime_windows", 0, "service", "n"), -1, "runtime_windows.0.service.n"),
    ("negative M2", ("runtime_windows", 0, "latency", "m2"), -0.5, "runtime_windows.0.latency.m2"),
    ("NaN mean", ("runtime_windows", 0, "service", "mean"), "NaN", "runtime_windows.0.service.mean"),
    ("count beyond tasks", ("runtime_windows", 0, "tasks"), 0, "runtime_windows.0"),
    ("window not aligned", ("runtime_windows", 0, "window_start_ms"), 1_700_000_001_234, "window_start_ms"),
    ("min above max", ("runtime_windows", 0, "service", "min"), 99.0, "runtime_windows.0.service"),
    ("span backwards", ("task_spans", 0, "last_finish_ms"), 1, "task_spans.0"),
    ("another window length", ("window_ms",), 8000, "window_ms"),
]


@pytest.mark.parametrize("name,path,value,field", BAD, ids=[b[0] for b in BAD])
def test_folded_statistics_that_cannot_be_are_refused_naming_the_field(control_plane, name, path, value, field):
    _v2, v3 = _report_pair()
    body = json.dumps(_bad(v3, path, value)).replace('"NaN"', "NaN").encode()
    r = requests.post(f"{control_plane.url}/api/v1/reports", data=gzip.compress(body),
                      headers={"Content-Encoding": "gzip", "Content-Type": "application/json"}, timeout=10)
    assert r.status_code == 400, r.text
    assert field in r.json()["error"], r.json()
    assert requests.get(f"{control_plane.url}/api/v1/jobs", timeout=10).json()["jobs"] == []  # nothing stored
    if name == "another window length":
        assert r.json()["window_ms"] == 5000  # the reporter learns the window from it
    ok = requests.post(f"{control_plane.url}/api/v1/reports", data=gz(v3), headers={"Content-Encoding": "gzip"},
                       timeout=10)
    assert ok.status_code == 200 and ok.json()["accepted"]["tasks"] == 40 and ok.json()["window_ms"] == 5000


@pytest.mark.spark
def test_a_real_local_job_has_the_same_statistics_folded_or_whole(spark, control_plane, tmp_path, monkeypatch):
    """The job reports live (v3) to a real control plane; every report it built is also kept as the v2 report of the
    same records, and both lists are stored in fresh databases at the same times."""
    import tempfile

    import importlib

    attach_module = importlib.import_module("spark_governor.collectors.attach")
    from spark_governor.collectors.sources.zipf import register_zipf_source

    monkeypatch.setattr(attach_module, "Reporter", CapturingReporter)
    register_zipf_source(spark)
    handle = attach_module.attach(spark, job="fold-local", endpoint=control_plane.url, flush_interval_s=0.5,
                                  warm_modules=None)
    src = (spark.readStream.format("zipf").option("rowsPerSecond", 2000).option("keys", 50)
           .option("numPartitions", 2).load())
    q = (src.groupBy("key").count().writeStream.outputMode("update").format("noop")
         .option("checkpointLocation", tempfile.mkdtemp(prefix="sg-fold-")).trigger(processingTime="1 second").start())
    try:
        wait_for(lambda: len([p for p in q.recentProgress if p.numInputRows > 0]) >= 8, 120, 0.5, "8 batches")
    finally:
        q.stop()
        handle.detach(5)
    rep = handle.reporter
    assert rep.rejected == 0 and rep.dropped == 0
    captured = rep.captured
    assert sum(1 for v3, _v2, _t in captured if v3.get("template_windows")) >= 3
    assert captured[-1][0].get("runtime_windows")  # the windows still open went with the last report
    now = captured[-1][2]
    folded, whole = fresh(tmp_path, "folded"), fresh(tmp_path, "whole")
    ingest_all(folded, [(v3, t) for v3, _v2, t in captured], 5000)
    ingest_all(whole, [(v2, t) for _v3, v2, t in captured], 5000)
    stats = assert_same_statistics(folded, whole, "fold-local", now, 5000)
    assert stats["view"]["stages"] and stats["view"]["batches"]
    # the live control plane (HTTP, group commit) stored the same windows
    assert_close(statistics(control_plane.engine, "fold-local", now, 5000)["windows"], stats["windows"], "live")
    assert count(folded, tasks) < count(whole, tasks)
    # the tasks endpoint says what the store holds of the job's tasks
    key = stats["view"]["stages"][0]["key"]
    answer = requests.get(f"{control_plane.url}/api/v1/jobs/fold-local/stages/{key}/tasks?limit=1000", timeout=10).json()
    assert answer["task_detail"]["mode"] == "failed" and "sample" in answer["task_detail"]["holds"]
    assert answer["task_rows"] and {r["detail"] for r in answer["task_rows"]} <= {"warmup", "sample", "failed"}
    assert answer["partitions"]  # the windows of the job's last report went out when it stopped


def test_retention_purges_the_folded_statistics(tmp_path):
    from spark_governor.aggregators.models import task_spans, template_windows
    from spark_governor.aggregators.retention import purge_older_than

    engine = fresh(tmp_path, "folded")
    _v2, v3 = _report_pair()
    ingest_all(engine, [(v3, 1_700_000_100_000)], 5000)
    assert count(engine, task_spans) and count(engine, template_windows) and count(engine, runtime_windows)
    deleted = purge_older_than(engine, horizon_s=60, now_ms=1_700_000_000_000 + 3_600_000)
    assert deleted["task_spans"] > 0 and deleted["template_windows"] > 0 and deleted["runtime_windows"] > 0
    assert count(engine, task_spans) == count(engine, template_windows) == count(engine, runtime_windows) == 0


def test_a_killed_task_counts_in_no_window_and_never_travels(tmp_path):
    """A task Spark killed (a stopped query's, a cancelled stage's) neither failed nor ran: it counts in no window,
    so no verdict calls its run unhealthy for it, and it travels as no row — folded at the edge or by the control
    plane alike; nor is it among the tasks the report accounts for."""
    v2 = make_report(n_tasks=40, seed=7, schema_version=2)
    v2["tasks"][3].update(successful=False, failure_reason="ExceptionFailure: boom")
    v2["tasks"][17].update(successful=False, failure_reason="TaskKilled: Stage cancelled: Query was stopped")
    fold = TaskFold("all").fold(v2["tasks"], v2["stages"], 5000, 0, final=True)
    v3 = dict(v2, schema_version=3, window_ms=5000, **fold)
    v3["reporter"] = dict(v2["reporter"], task_detail="all")
    assert v2["tasks"][17]["task_id"] not in {t["task_id"] for t in v3["tasks"]} and len(v3["tasks"]) == 39
    assert sum(w["failed_tasks"] for w in v3["runtime_windows"]) == 1
    assert sum(w["tasks"] for w in v3["runtime_windows"]) == 38
    assert _counted_the_same(tmp_path, v2, v3) == (39, 1)
