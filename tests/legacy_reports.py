"""Reports of whole task rows (schema v1, deprecated since v3 folds tasks at the edge): the fixed input of the tests
of the control plane's own fold (``aggregators.ingest`` for v1/v2 reports). ``bench.reports.make_report`` builds
what reporters send today."""
from __future__ import annotations

import random


def job_report(job: str, reporter_id: str, seq: int, tasks: int, now_ms: int, rng: random.Random) -> dict:
    """One second of a streaming job as a v1 reporter sent it (whole task rows): a micro-batch of two stages."""
    per_stage = max(1, tasks // 2)
    batch_id = seq
    stage_base = seq * 2
    records, stages = [], []
    for s, key in enumerate(("t-map", "t-reduce")):
        sub = now_ms - 900 + s * 400
        finish_max = sub
        for p in range(per_stage):
            launch = sub + rng.randint(0, 20)
            run = rng.randint(20, 300)
            finish = launch + run + rng.randint(0, 10)
            finish_max = max(finish_max, finish)
            records.append({
                "template_key": key, "query_id": "q1", "batch_id": batch_id, "stage_id": stage_base + s,
                "stage_attempt": 0, "task_id": seq * tasks + s * per_stage + p, "partition": p, "attempt": 0,
                "executor_id": str(1 + p % 4), "host": "10.0.0.%d" % (1 + p % 4), "stage_submission_ms": sub,
                "launch_ms": launch, "finish_ms": finish, "run_time_ms": run, "cpu_time_ns": run * 800_000,
                "gc_time_ms": rng.randint(0, 5), "deserialize_ms": 1, "result_serialize_ms": 0,
                "input_records": rng.randint(500, 1500) if s == 0 else 0, "input_bytes": 0,
                "output_records": 0, "output_bytes": 0,
                "shuffle_read_records": rng.randint(100, 500) if s else 0, "shuffle_read_bytes": rng.randint(0, 9999),
                "shuffle_fetch_wait_ms": 0, "shuffle_write_records": rng.randint(100, 500) if s == 0 else 0,
                "shuffle_write_bytes": rng.randint(0, 9999), "shuffle_write_time_ns": 1000,
                "successful": True, "speculative": False, "failure_reason": None})
        stages.append({"template_key": key, "query_id": "q1", "batch_id": batch_id, "stage_id": stage_base + s,
                       "attempt": 0, "num_tasks": per_stage, "submission_ms": sub, "completion_ms": finish_max,
                       "failure_reason": None, "slots": 8})
    return {
        "schema_version": 1, "job": job,
        "reporter": {"id": reporter_id, "seq": seq, "dropped_total": 0, "orphaned_total": 0, "app_id": f"app-{job}",
                     "master": "spark://10.0.0.1:7077", "slots": 8, "executors": 4},
        "templates": [{"key": "t-map", "name": "s0 map", "ordinal": 0, "operators": ["Scan", "Project"], "parents": []},
                      {"key": "t-reduce", "name": "s1 agg", "ordinal": 1, "operators": ["HashAggregate"],
                       "parents": ["t-map"]}],
        "stages": stages, "tasks": records,
        "batches": [{"query_id": "q1", "run_id": "r1", "name": job, "batch_id": batch_id, "trigger_ms": now_ms - 950,
                     "batch_duration_ms": 900, "durations_ms": {"triggerExecution": 900, "addBatch": 800},
                     "num_input_rows": 1000, "input_rows_per_second": 1000.0, "processed_rows_per_second": 1100.0,
                     "state_operators": [], "event_time": {}, "observed_metrics": {}}],
    }
