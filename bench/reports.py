"""Synthetic, well-formed reports for the ingest benchmark, the load generator and the API tests."""
from __future__ import annotations

import gzip
import json
import random
import uuid

from spark_governor.policies.task_fold import WARMUP_TASKS, TaskFold
from spark_governor.policies.wire import SCHEMA_VERSION

#: the statistics window the reports are folded with (the control plane's default, ms)
WINDOW_MS = 5_000


def make_report(job="job-a", n_tasks=10, seq=1, reporter_id=None, templates=("t-map", "t-reduce"),
                partitions=4, start_ms=1_700_000_000_000, seed=0, batches=0, dropped=0,
                schema_version=SCHEMA_VERSION, task_detail="failed", window_ms=WINDOW_MS) -> dict:
    """The report a reporter sends for a second of a job in which ``n_tasks`` tasks finished (stages of
    ``len(templates)`` templates × ``partitions`` tasks per micro-batch, a micro-batch a second from ``start_ms``)
    and ``batches`` micro-batches completed.

    ``schema_version`` 3 (the default): as a reporter that has run for a while sends it — the tasks folded at the
    edge (``policies.task_fold``, windows of ``window_ms``), the executor's warm-up long past, so the rows that
    travel are the uniform sample (and failed tasks); each micro-batch's stages completed. 1 or 2: every task as a
    row (the deprecated whole-task reports), no stage records."""
    rng = random.Random(seed)
    tasks = []
    for i in range(n_tasks):
        key = templates[i % len(templates)]
        sub = start_ms + (i // (len(templates) * partitions)) * 1000
        launch = sub + rng.randint(0, 50)
        run = rng.randint(5, 400)
        tasks.append({
            "template_key": key, "query_id": "q1", "batch_id": i // (len(templates) * partitions),
            "stage_id": (i // partitions), "stage_attempt": 0, "task_id": i, "partition": (i // len(templates)) % partitions,
            "attempt": 0, "executor_id": "driver", "host": "127.0.0.1", "stage_submission_ms": sub,
            "launch_ms": launch, "finish_ms": launch + run + rng.randint(0, 20), "run_time_ms": run,
            "cpu_time_ns": run * 900_000, "gc_time_ms": rng.randint(0, 5), "deserialize_ms": 1,
            "result_serialize_ms": 0, "input_records": rng.randint(0, 1000) if key == templates[0] else 0,
            "input_bytes": 0, "output_records": 0, "output_bytes": 0,
            "shuffle_read_records": rng.randint(0, 500) if key != templates[0] else 0,
            "shuffle_read_bytes": rng.randint(0, 10_000), "shuffle_fetch_wait_ms": 0,
            "shuffle_write_records": rng.randint(0, 500), "shuffle_write_bytes": rng.randint(0, 10_000),
            "shuffle_write_time_ns": 1000, "successful": True, "speculative": False, "failure_reason": None,
        })
    report = {
        "schema_version": 1, "job": job,
        "reporter": {"id": reporter_id or uuid.uuid4().hex, "seq": seq, "dropped_total": dropped,
                     "orphaned_total": 0, "app_id": "local-1", "master": "local[2]", "slots": 2},
        "templates": [{"key": k, "name": f"s{i} {k}", "ordinal": i, "operators": [k], "parents": []}
                      for i, k in enumerate(templates)],
        "stages": [], "tasks": tasks,
        "batches": [{"query_id": "q1", "run_id": "r1", "name": None, "batch_id": b, "trigger_ms": start_ms + b * 1000,
                     "batch_duration_ms": 400 + b, "durations_ms": {"triggerExecution": 400 + b},
                     "num_input_rows": 100 * b, "input_rows_per_second": 100.0, "processed_rows_per_second": 250.0,
                     "state_operators": [], "event_time": {}, "observed_metrics": {}} for b in range(batches)],
    }
    if schema_version < 3:
        report["schema_version"] = schema_version
        return report
    stages = {}
    for t in tasks:
        s = stages.setdefault(t["stage_id"], {
            "template_key": t["template_key"], "query_id": "q1", "batch_id": t["batch_id"], "stage_id": t["stage_id"],
            "attempt": 0, "num_tasks": 0, "submission_ms": t["stage_submission_ms"], "completion_ms": 0,
            "failure_reason": None, "slots": 2})
        s["num_tasks"] += 1
        s["completion_ms"] = max(s["completion_ms"], t["finish_ms"])
    fold = TaskFold(task_detail)
    # the executor's first tasks went with the reports of its first seconds
    fold.fold([dict(tasks[0], task_id=-1 - i, launch_ms=start_ms - 60_000, finish_ms=start_ms - 59_000)
               for i in range(WARMUP_TASKS)], [], window_ms)
    folded = fold.fold(tasks, list(stages.values()), window_ms)
    report.update(schema_version=SCHEMA_VERSION, window_ms=window_ms, stages=list(stages.values()),
                  tasks=folded["tasks"], runtime_windows=folded["runtime_windows"],
                  template_windows=folded["template_windows"], task_spans=folded["task_spans"])
    report["reporter"]["task_detail"] = task_detail
    return report


def gz(report: dict) -> bytes:
    return gzip.compress(json.dumps(report).encode())
