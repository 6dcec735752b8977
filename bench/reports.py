"""Synthetic, well-formed reports for the ingest benchmark, the load generator and the API tests."""
from __future__ import annotations

import gzip
import json
import random
import uuid
from collections import OrderedDict

from spark_governor.policies.task_fold import WARMUP_TASKS, TaskFold
from spark_governor.policies.wire import SCHEMA_VERSION

#: the statistics window the reports are folded with (the control plane's default, ms)
WINDOW_MS = 5_000


#: the fold of each reporter make_report was called for, ``(job, reporter id) → (last seq, TaskFold)`` (bounded)
_FOLDS: "OrderedDict[tuple[str, str], tuple[int, TaskFold]]" = OrderedDict()
MAX_FOLDS = 20_000


def _fold_of(job: str, reporter_id: str, seq: int, task_detail: str, window_ms: int, start_ms: int) -> TaskFold:
    """The reporter's fold as its report ``seq - 1`` left it; a new one (its executors past their warm-up) for a
    reporter not seen, or seen at this ``seq`` or later (a test starting over)."""
    key = (job, reporter_id)
    known = _FOLDS.pop(key, None)
    if known is not None and known[0] < seq and known[1].task_detail == task_detail:
        fold = known[1]
    else:
        fold = TaskFold(task_detail)
        for e in ("1", "2", "3", "4"):  # the executors' first tasks went with the reports of their first seconds
            fold.fold([{**_WARM, "executor_id": e, "task_id": -1 - i, "launch_ms": start_ms - 600_000,
                        "finish_ms": start_ms - 599_000} for i in range(WARMUP_TASKS)], [], window_ms, start_ms)
            fold.open.clear()
    _FOLDS[key] = (seq, fold)
    while len(_FOLDS) > MAX_FOLDS:
        _FOLDS.popitem(last=False)
    return fold


def make_report(job="job-a", n_tasks=10, seq=1, reporter_id=None, templates=("t-map", "t-reduce"),
                partitions=4, start_ms=1_700_000_000_000, seed=0, batches=0, dropped=0,
                schema_version=SCHEMA_VERSION, task_detail="failed", window_ms=WINDOW_MS, final=False,
                seconds=1) -> dict:
    """The report a reporter sends for the second from ``start_ms`` (epoch ms) of a job in which ``n_tasks`` tasks
    finished, ``batches`` micro-batches' progress with it.

    ``schema_version`` 3 (the default): a job of ``partitions`` partitions whose micro-batches run one stage per
    template (``n_tasks`` / (``partitions`` × templates) micro-batches in the second, their tasks on 4 executors),
    reported as a reporter that has run for a while sends it: the tasks folded at the edge (``policies.task_fold``,
    windows of ``window_ms``), carrying on the fold of the same ``(job, reporter_id)``'s report ``seq - 1`` when
    there was one (the vertices' previous launches; the runtime windows that ended go with this report), its
    executors past their warm-up, so the rows that travel are the uniform sample (and failed tasks); each stage's
    run. ``final``: the reporter's last report, with every runtime window still open. 1 or 2: the deprecated report
    of whole task rows, in the shape the tests of that path were written for (one executor, no stage records).
    ``seconds``: the report of a reporter that sends every ``seconds`` seconds (``attach(flush_interval_s=,
    state_interval_s=)``): that many consecutive job-seconds from ``start_ms``, ``n_tasks`` tasks and ``batches``
    micro-batches each."""
    if seconds < 1:
        raise ValueError(f"seconds: at least 1 (got {seconds})")
    rng = random.Random(seed)
    report = {
        "schema_version": schema_version, "job": job,
        "reporter": {"id": reporter_id or uuid.uuid4().hex, "seq": seq, "dropped_total": dropped,
                     "orphaned_total": 0, "app_id": "local-1", "master": "local[2]", "slots": 2},
        "templates": [{"key": k, "name": f"s{i} {k}", "ordinal": i, "operators": [k],
                       "parents": list(templates[i - 1:i])} for i, k in enumerate(templates)],
        "stages": [], "tasks": [],
        "batches": [{"query_id": "q1", "run_id": "r1", "name": None, "batch_id": (seq - 1) * batches * seconds + b,
                     "trigger_ms": start_ms + b * 1000,
                     "batch_duration_ms": 400 + b, "durations_ms": {"triggerExecution": 400 + b},
                     "num_input_rows": 100 * b, "input_rows_per_second": 100.0, "processed_rows_per_second": 250.0,
                     "state_operators": [], "event_time": {}, "observed_metrics": {}} for b in range(batches * seconds)],
    }
    if schema_version < 3:
        report["templates"] = [dict(t, parents=[]) for t in report["templates"]]
        report["tasks"] = _legacy_tasks(rng, n_tasks * seconds, templates, partitions, start_ms)
        return report
    report["reporter"].update(app_id=f"app-{job}", master="spark://127.0.0.1:7077", slots=8, executors=4,
                              task_detail=task_detail)
    tasks, stages = [], []
    for k in range(seconds):
        more = _job_second(rng, n_tasks, seq * seconds + k, templates, partitions, start_ms + k * 1000)
        tasks += more[0]
        stages += more[1]
    fold = _fold_of(job, report["reporter"]["id"], seq, task_detail, window_ms, start_ms)
    folded = fold.fold(tasks, stages, window_ms, start_ms + seconds * 1000, final)
    report.update(window_ms=window_ms, stages=stages, tasks=folded["tasks"],
                  runtime_windows=folded["runtime_windows"], template_windows=folded["template_windows"],
                  task_spans=folded["task_spans"])
    return report


#: a task of an executor's first seconds (only its executor, ids and times matter)
_WARM = {"template_key": "t-warm", "query_id": "q1", "batch_id": 0, "stage_id": 0, "stage_attempt": 0, "partition": 0,
         "attempt": 0, "host": "127.0.0.1", "stage_submission_ms": None, "run_time_ms": 1, "cpu_time_ns": 0,
         "gc_time_ms": 0, "deserialize_ms": 0, "result_serialize_ms": 0, "input_records": 0, "input_bytes": 0,
         "output_records": 0, "output_bytes": 0, "shuffle_read_records": 0, "shuffle_read_bytes": 0,
         "shuffle_fetch_wait_ms": 0, "shuffle_write_records": 0, "shuffle_write_bytes": 0, "shuffle_write_time_ns": 0,
         "successful": True, "speculative": False, "failure_reason": None}


def _job_second(rng: random.Random, n_tasks: int, seq: int, templates, partitions: int, start_ms: int):
    """The finished tasks and stage runs of one second of the job (module docstring of :func:`make_report`)."""
    per_batch = partitions * len(templates)
    n_batches = max(1, -(-n_tasks // per_batch))
    span = 1000 // n_batches
    tasks, stages = [], []
    for b in range(n_batches):
        batch_id = (seq % 10**8) * n_batches + b  # ids within the wire's bounds whatever the seq
        for s, key in enumerate(templates):
            stage_id = (batch_id * len(templates) + s) % 2**31
            sub = start_ms + b * span + s * span // (len(templates) + 1)
            last = sub
            n = min(partitions, n_tasks - len(tasks))
            for p in range(n):
                launch = sub + rng.randint(0, 20)
                run = rng.randint(20, max(21, span // (len(templates) + 1) - 40))
                finish = launch + run + rng.randint(0, 10)
                last = max(last, finish)
                tasks.append({
                    "template_key": key, "query_id": "q1", "batch_id": batch_id, "stage_id": stage_id,
                    "stage_attempt": 0, "task_id": stage_id * partitions + p, "partition": p, "attempt": 0,
                    "executor_id": str(1 + p % 4), "host": "127.0.0.1", "stage_submission_ms": sub,
                    "launch_ms": launch, "finish_ms": finish, "run_time_ms": run, "cpu_time_ns": run * 800_000,
                    "gc_time_ms": rng.randint(0, 5), "deserialize_ms": 1, "result_serialize_ms": 0,
                    "input_records": rng.randint(500, 1500) if s == 0 else 0, "input_bytes": rng.randint(0, 99_999),
                    "output_records": 0, "output_bytes": 0,
                    "shuffle_read_records": rng.randint(100, 500) if s else 0, "shuffle_read_bytes": rng.randint(0, 9999),
                    "shuffle_fetch_wait_ms": 0, "shuffle_write_records": rng.randint(100, 500) if s == 0 else 0,
                    "shuffle_write_bytes": rng.randint(0, 9999), "shuffle_write_time_ns": 1000,
                    "successful": True, "speculative": False, "failure_reason": None})
            if n:
                stages.append({"template_key": key, "query_id": "q1", "batch_id": batch_id, "stage_id": stage_id,
                               "attempt": 0, "num_tasks": n, "submission_ms": sub, "completion_ms": last,
                               "failure_reason": None, "slots": 8})
    return tasks, stages


def _legacy_tasks(rng: random.Random, n_tasks: int, templates, partitions: int, start_ms: int) -> list[dict]:
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
    return tasks


def gz(report: dict) -> bytes:
    return gzip.compress(json.dumps(report).encode())
