"""Synthetic, well-formed reports for the ingest benchmark and the API tests."""
from __future__ import annotations

import gzip
import json
import random
import uuid


def make_report(job="job-a", n_tasks=10, seq=1, reporter_id=None, templates=("t-map", "t-reduce"),
                partitions=4, start_ms=1_700_000_000_000, seed=0, batches=0, dropped=0) -> dict:
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
    return {
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


def gz(report: dict) -> bytes:
    return gzip.compress(json.dumps(report).encode())
