"""Event translation on a recorded Spark event stream (JsonProtocol JSON of a real local query)."""
import gzip
import json
from collections import defaultdict
from pathlib import Path

from spark_governor.collectors.events import EventTranslator, batch_record
from spark_governor.collectors.templates import TemplateRegistry
from spark_governor.policies.wire import BatchRecord, StageRecord, TaskRecord

SAMPLE = Path(__file__).parent.parent / "data" / "spark_events_sample.jsonl.gz"


def events():
    with gzip.open(SAMPLE, "rt") as f:
        return [json.loads(line) for line in f]


def test_every_task_becomes_one_valid_record():
    evs = events()
    tr = EventTranslator(slots=2)
    out = [r for ev in evs for r in tr.handle(ev)]
    tasks = [r for k, r in out if k == "task"]
    stages = [r for k, r in out if k == "stage"]
    assert len(tasks) == sum(e["Event"] == "SparkListenerTaskEnd" for e in evs)
    assert len(stages) == sum(e["Event"] == "SparkListenerStageCompleted" for e in evs)
    for t in tasks:
        TaskRecord.model_validate(t)
        assert t["stage_submission_ms"] <= t["launch_ms"] <= t["finish_ms"]
    for s in stages:
        StageRecord.model_validate(s)
    assert tr.orphaned == 0
    # the Python source's rows are counted from the input accumulators
    assert sum(t["input_records"] for t in tasks) > 0


def test_template_keys_are_stable_across_batches():
    tr = EventTranslator()
    per_batch = defaultdict(set)
    for ev in events():
        for kind, rec in tr.handle(ev):
            if kind == "task":
                per_batch[rec["batch_id"]].add(rec["template_key"])
    assert len(per_batch) >= 3
    key_sets = list(per_batch.values())
    assert all(ks == key_sets[0] for ks in key_sets)
    assert len(key_sets[0]) == 2  # scan+partial aggregate, then state store stage
    names = sorted(t.name for t in tr.known_templates.values())
    assert names[0].startswith("s0 MicroBatchScan") and names[1].startswith("s1 Exchange")
    parents = {t.name: t.parents for t in tr.known_templates.values()}
    s0 = next(t for t in tr.known_templates.values() if t.ordinal == 0)
    assert parents[names[1]] == (s0.key,)


def test_tasks_of_an_unseen_stage_are_orphaned_not_reported():
    tr = EventTranslator()
    task_end = next(e for e in events() if e["Event"] == "SparkListenerTaskEnd")
    assert tr.handle(task_end) == []
    assert tr.orphaned == 1


def test_non_streaming_jobs_are_ignored():
    tr = EventTranslator()
    job = next(e for e in events() if e["Event"] == "SparkListenerJobStart")
    plain = {**job, "Properties": {}}
    tr.handle(plain)
    task_end = next(e for e in events() if e["Event"] == "SparkListenerTaskEnd" and e["Stage ID"] in job["Stage IDs"])
    assert tr.handle(task_end) == [] and tr.orphaned == 0


def test_different_queries_get_different_keys():
    job = next(e for e in events() if e["Event"] == "SparkListenerJobStart")
    a = TemplateRegistry().templates_for_job("query-a", 0, job["Stage Infos"])
    b = TemplateRegistry().templates_for_job("query-b", 0, job["Stage Infos"])
    assert {t.key for t in a.values()}.isdisjoint({t.key for t in b.values()})


def test_batch_record_from_progress():
    progress = {"id": "q", "runId": "r", "name": None, "timestamp": "2026-11-22T04:17:42.000Z", "batchId": 4,
                "batchDuration": 783, "numInputRows": 1921, "inputRowsPerSecond": 2001.0,
                "processedRowsPerSecond": "NaN", "durationMs": {"addBatch": 637, "triggerExecution": 783},
                "stateOperators": [{"operatorName": "stateStoreSave", "numRowsTotal": 100}], "sources": []}
    rec = batch_record(progress)
    BatchRecord.model_validate(rec)
    assert rec["trigger_ms"] == 1795321062000 and rec["processed_rows_per_second"] is None
    assert rec["durations_ms"]["addBatch"] == 637


def test_parse_concatenated_values_and_truncated_tail():
    from spark_governor.collectors.events import parse_concatenated

    assert parse_concatenated('{"a": 1} {"b": [2, 3]}\n {"c": "x y"}') == [{"a": 1}, {"b": [2, 3]}, {"c": "x y"}]
    assert parse_concatenated('{"a": 1} {"b": ') == [{"a": 1}]
    assert parse_concatenated("   ") == []


def test_executor_registration_and_removal_times_are_records():
    """ExecutorAdded/Removed become ``executor`` records with the event's time (the provisioning delay's
    registration, aggregators.cluster_profile); the driver is not an executor."""
    from spark_governor.collectors.events import EventTranslator, report_body

    t = EventTranslator()
    added = t.handle({"Event": "SparkListenerExecutorAdded", "Timestamp": 1_700_000_000_123, "Executor ID": "3",
                      "Executor Info": {"Host": "h", "Total Cores": 2}})
    removed = t.handle({"Event": "SparkListenerExecutorRemoved", "Timestamp": 1_700_000_060_000, "Executor ID": "3",
                        "Removed Reason": "idle"})
    driver = t.handle({"Event": "SparkListenerExecutorAdded", "Timestamp": 1, "Executor ID": "driver",
                       "Executor Info": {"Total Cores": 4}})
    assert added == [("executor", {"executor_id": "3", "added_ms": 1_700_000_000_123, "cores": 2})]
    assert removed == [("executor", {"executor_id": "3", "removed_ms": 1_700_000_060_000})]
    assert driver == []
    assert report_body(added + removed, {})["executors"] == [added[0][1], removed[0][1]]
