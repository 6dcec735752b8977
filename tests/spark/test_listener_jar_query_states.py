"""The listener jar's query states (``io.sparkgovernor.QueryStates``) equal the Python reporter's
(``collectors.query_state.QueryTracker``) on the same sequence of job starts, progress, listener events and status
polls: running batch and age, idle and terminated queries, the trigger interval, offsets that count rows (the
project's sources, Kafka's, as objects and as JSON text), the backlog and the oldest unprocessed row. On a real job
attached by the jar alone: tests/integration/test_listener_jar.py."""
from __future__ import annotations

import json
import subprocess
from datetime import datetime, timezone

import pytest

from spark_governor.bench.standalone import spark_home
from spark_governor.collectors.query_state import QueryTracker
from tests.conftest import require
from tests.jar_support import env, listener_jar

pytestmark = pytest.mark.spark
T0 = 1795321055000


@pytest.fixture(scope="module")
def jar():
    return listener_jar(require)


def iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def job_start(job: int, query: str, batch: str, at: int) -> dict:
    return {"Event": "SparkListenerJobStart", "Job ID": job, "Submission Time": at, "Stage Infos": [], "Stage IDs": [],
            "Properties": {"sql.streaming.queryId": query, "streaming.sql.batchId": batch}}


def progress(query: str, run: str, batch: int, at: int, duration: int, sources: list, name: str | None = "paced") -> dict:
    return {"Event": "progress", "progress": {
        "id": query, "runId": run, "name": name, "timestamp": iso(at), "batchId": batch, "batchDuration": duration,
        "durationMs": {"triggerExecution": duration}, "numInputRows": 10, "sources": sources}}


def poll(query: str, run: str, active: bool, data: bool, message: str = "Waiting for next trigger",
         trigger: str | None = "ProcessingTimeTrigger(1000)") -> dict:
    return {"id": query, "run_id": run, "name": "paced", "trigger": trigger, "message": message,
            "isDataAvailable": data, "isTriggerActive": active}


def sequence() -> list[dict]:
    rows = lambda n, t: {"rows": n, "t_ms": t}  # noqa: E731 - the project's sources' offsets
    kafka = {"description": "KafkaV2[Subscribe[clicks]]",
             "endOffset": json.dumps({"clicks": {"1": 200, "0": 100}}),
             "latestOffset": json.dumps({"clicks": {"0": 150, "1": 260}}), "inputRowsPerSecond": 55.5,
             "metrics": {"minOffsetsBehindLatest": "50", "avgOffsetsBehindLatest": "55.0",
                         "maxOffsetsBehindLatest": "60", "other": "1"}}
    return [
        {"Event": "query", "kind": "started", "event": {"id": "q-1", "runId": "r-1", "name": "paced",
                                                        "timestamp": iso(T0)}, "now_ms": T0},
        {"Event": "status", "polls": [poll("q-1", "r-1", False, False)], "now_ms": T0 + 500},
        {"Event": "snapshot", "now_ms": T0 + 600},
        job_start(1, "q-1", "0", T0 + 1000),
        job_start(2, "q-1", "0", T0 + 1200),  # a second job of the same batch keeps its start
        job_start(3, "q-1", "x1", T0 + 1300),  # not a batch id
        {"Event": "snapshot", "now_ms": T0 + 1500},
        progress("q-1", "r-1", 0, T0 + 1000, 900, [{"description": "paced", "endOffset": rows(1000, T0 + 1000),
                                                    "latestOffset": rows(1000, T0 + 1000)}]),
        job_start(4, "q-1", "0", T0 + 2100),  # late: batch 0 has completed
        {"Event": "status", "polls": [poll("q-1", "r-1", True, True, "Processing new data")], "now_ms": T0 + 2100},
        {"Event": "snapshot", "now_ms": T0 + 2200},
        job_start(5, "q-1", "1", T0 + 2300),
        progress("q-1", "r-1", 1, T0 + 2000, 1500, [{"description": "paced", "endOffset": rows(3000, T0 + 2000),
                                                     "latestOffset": json.dumps(rows(5000, T0 + 3100)),
                                                     "inputRowsPerSecond": 2000.0}]),
        progress("q-2", "r-2", 7, T0 + 2500, 700, [kafka], name=None),
        {"Event": "status", "polls": [poll("q-1", "r-1", False, True, "Waiting for next trigger")],
         "now_ms": T0 + 4000},
        {"Event": "snapshot", "now_ms": T0 + 5000},
        {"Event": "query", "kind": "idle", "event": {"id": "q-1", "runId": "r-1", "timestamp": iso(T0 + 6000)},
         "now_ms": T0 + 6010},
        {"Event": "query", "kind": "idle", "event": {"id": "q-1", "runId": "other-run", "timestamp": iso(T0 + 6100)},
         "now_ms": T0 + 6110},
        {"Event": "snapshot", "now_ms": T0 + 6500},
        {"Event": "query", "kind": "terminated", "event": {"id": "q-2", "runId": "r-2"}, "now_ms": T0 + 7000},
        *[{"Event": "snapshot", "now_ms": T0 + 7100 + i} for i in range(4)],  # q-2: 3 more times, then gone
        {"Event": "query", "kind": "started", "event": {"id": "q-1", "runId": "r-1b", "name": "paced"},
         "now_ms": T0 + 8000},  # a restart: a new run
        job_start(6, "q-1", "2", T0 + 8200),
        {"Event": "snapshot", "now_ms": T0 + 8700},
        {"Event": "status", "polls": [], "now_ms": T0 + 9000},  # the poll no longer lists it: terminated
        {"Event": "snapshot", "now_ms": T0 + 9100},
    ]


def python_snapshots(events: list[dict]) -> list[list[dict]]:
    t, out = QueryTracker(), []
    for e in events:
        kind = e["Event"]
        if kind == "SparkListenerJobStart":
            t.on_job_start(e)
        elif kind == "progress":
            t.on_progress(e["progress"])
        elif kind == "query":
            t.on_query_event(e["kind"], e["event"], e["now_ms"])
        elif kind == "status":
            t.on_status(e["polls"], e["now_ms"])
        elif kind == "snapshot":
            out.append(t.snapshot(e["now_ms"]))
    return out


def test_the_jar_keeps_each_querys_state_exactly_as_the_python_reporter(jar, tmp_path):
    events = sequence()
    path = tmp_path / "events.jsonl"
    path.write_text("\n".join(json.dumps(e) for e in events) + "\n")
    out = subprocess.run(["java", "-cp", f"{jar}:{spark_home() / 'jars'}/*", "io.sparkgovernor.Replay", str(path)],
                         capture_output=True, text=True, timeout=120, env=env())
    assert out.returncode == 0, out.stderr[-3000:]
    got = [json.loads(line)["record"] for line in out.stdout.splitlines() if json.loads(line).get("kind") == "queries"]
    want = python_snapshots(events)
    assert len(got) == len(want) == 11
    for i, (g, w) in enumerate(zip(got, want)):
        assert g == w, (i, g, w)
    # the sequence went where it was meant to: each state the wire knows, and a counted backlog
    statuses = [[q["status"] for q in snap] for snap in want]
    assert statuses[0] == ["idle"] and statuses[1] == ["running"] and statuses[2] == ["running"]
    assert statuses[3] == ["waiting", "waiting"] and statuses[4] == ["idle", "waiting"]
    assert statuses[5:8] == [["idle", "terminated"]] * 3 and statuses[8] == ["idle"]  # then forgotten
    assert statuses[9] == ["running"] and statuses[10] == ["terminated"]
    q1, q2 = want[3]
    assert q1["trigger_interval_ms"] == 1000 and q1["backlog_rows"] > 2000 and q1["oldest_unprocessed_ms"] is not None
    assert q2["sources"][0]["backlog_rows"] > 0 and q2["sources"][0]["min_offsets_behind_latest"] == 50.0
    assert want[1][0]["running_batch_start_ms"] == T0 + 1000 and want[9][0]["running_batch_id"] == 2
