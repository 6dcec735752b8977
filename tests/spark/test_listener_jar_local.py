"""The listener jar on its own (issue #17): its translation equals the Python reporter's on the same events, it
refuses to run on another Spark/Scala version with one clear message, and it never slows the job down when the
control plane is unreachable or does not answer (bounded queue, total deadline per post, bounded retries)."""
from __future__ import annotations

import copy
import gzip
import json
import socket
import subprocess
import sys
import threading
import time
import zipfile
from pathlib import Path

import pytest

from spark_governor.bench.standalone import spark_home
from spark_governor.collectors.events import EventTranslator, batch_record
from spark_governor.collectors.jvm import build
from tests.conftest import require
from tests.jar_support import JOBS, batches_run, env, jar_confs, listener_jar, run_submit

pytestmark = pytest.mark.spark
SAMPLE = Path(__file__).parent.parent / "data" / "spark_events_sample.jsonl.gz"
LOCAL = ["--master", "local[2]", "--conf", "spark.sql.shuffle.partitions=4", "--conf", "spark.ui.enabled=false"]


DATA = Path(__file__).resolve().parents[1] / "data"


@pytest.fixture(scope="module")
def jar():
    return listener_jar(require)


def _events() -> list[dict]:
    """The recorded sample plus what it lacks: failed and killed tasks, an orphan, a job of no query, executors,
    a stage name that needs JSON escapes, and progress events (paced offsets, missing rates)."""
    events = [json.loads(line) for line in gzip.open(SAMPLE, "rt")]
    task = next(e for e in events if e["Event"] == "SparkListenerTaskEnd")
    start = next(e for e in events if e["Event"] == "SparkListenerJobStart")
    out = list(events)
    failed = copy.deepcopy(task)
    failed["Task Info"]["Task ID"] = 9001
    failed["Task End Reason"] = {"Reason": "ExceptionFailure", "Class Name": "java.lang.IllegalStateException",
                                 "Description": 'boom "quoted" café', "Stack Trace": [], "Full Stack Trace": "",
                                 "Accumulator Updates": []}
    killed = copy.deepcopy(task)
    killed["Task Info"]["Task ID"] = 9002
    killed["Task End Reason"] = {"Reason": "TaskKilled", "Kill Reason": "another attempt succeeded",
                                 "Accumulator Updates": []}
    orphan = copy.deepcopy(task)
    orphan["Stage ID"] = 4242
    odd = copy.deepcopy(start)
    odd["Job ID"] = 77
    for info in odd["Stage Infos"]:
        info["Stage ID"] += 700
        info["Parent IDs"] = [p + 700 for p in info["Parent IDs"]]
        info["Stage Name"] = 'start at "Café\\Ünïcode" \u2713 \U0001d11e\ttab\x7f'
    odd["Stage IDs"] = [s["Stage ID"] for s in odd["Stage Infos"]]
    odd["Properties"] = {**odd["Properties"], "streaming.sql.batchId": "x1"}
    odd_task = copy.deepcopy(task)
    odd_task["Stage ID"] = odd["Stage Infos"][0]["Stage ID"]
    no_query = copy.deepcopy(start)
    no_query["Job ID"] = 78
    for info in no_query["Stage Infos"]:
        info["Stage ID"] += 800
        info["Parent IDs"] = [p + 800 for p in info["Parent IDs"]]
    no_query["Stage IDs"] = [s["Stage ID"] for s in no_query["Stage Infos"]]
    no_query["Properties"] = {}
    no_query_task = copy.deepcopy(task)
    no_query_task["Stage ID"] = no_query["Stage Infos"][0]["Stage ID"]
    added = {"Event": "SparkListenerExecutorAdded", "Timestamp": 1795321055000, "Executor ID": "3",
             "Executor Info": {"Host": "127.0.0.1", "Total Cores": 3, "Log Urls": {}, "Attributes": {},
                               "Resources": {}, "Resource Profile Id": 0}}
    removed = {"Event": "SparkListenerExecutorRemoved", "Timestamp": 1795321056000, "Executor ID": "9",
               "Removed Reason": "test"}
    progress = {"id": "q-1", "runId": "r-1", "name": "paced", "timestamp": "2026-11-25T06:30:59.123Z",
                "batchId": 3, "batchDuration": 412, "durationMs": {"triggerExecution": 412, "addBatch": 300},
                "numInputRows": 2000, "inputRowsPerSecond": 1999.5,
                "stateOperators": [{"numRowsTotal": 50, "customMetrics": {"a": 1}}],
                "eventTime": {"watermark": "2026-11-25T06:30:00.000Z"},
                "sources": [{"description": "paced", "endOffset": json.dumps({"rows": 10, "interval_ms": 500,
                                                                              "queueing_ms": 7})}],
                "observedMetrics": {"m": {"records": 5}}}
    bare = {"id": "q-2", "runId": "r-2", "timestamp": "2026-11-25T06:31:00.999Z", "batchId": 0, "numInputRows": 0,
            "sources": [{"endOffset": {"interval_ms": 250}}]}
    out += [failed, killed, orphan, odd, odd_task, no_query, no_query_task, added, removed,
            {"Event": "progress", "progress": progress}, {"Event": "progress", "progress": bare}]
    return out


def test_jar_translates_events_exactly_as_the_python_reporter(jar, tmp_path):
    events = _events()
    path = tmp_path / "events.jsonl"
    path.write_text("\n".join(json.dumps(e) for e in events) + "\n")
    t = EventTranslator()
    expected = []
    for e in events:
        if e["Event"] == "progress":
            expected.append({"kind": "batch", "record": batch_record(e["progress"])})
        else:
            expected += [{"kind": k, "record": r} for k, r in t.handle(e)]
    out = subprocess.run(["java", "-cp", f"{jar}:{spark_home() / 'jars'}/*", "io.sparkgovernor.Replay", str(path)],
                         capture_output=True, text=True, timeout=120, env=env())
    assert out.returncode == 0, out.stderr[-3000:]
    lines = [json.loads(line) for line in out.stdout.splitlines()]
    records, tail = lines[:-1], lines[-1]
    assert len(records) == len(expected)
    for got, want in zip(records, expected):
        assert got == want
    failures = [r["record"]["failure_reason"] for r in records if r["kind"] == "task" and not r["record"]["successful"]]
    assert failures == ['ExceptionFailure: boom "quoted" café', "TaskKilled: another attempt succeeded"]
    templates = {k: {"key": v.key, "name": v.name, "ordinal": v.ordinal, "operators": list(v.operators),
                     "parents": list(v.parents)} for k, v in t.known_templates.items()}
    assert tail["templates"] == templates
    assert tail["orphaned"] == t.orphaned == 1 and tail["slots"] == t.slots == 3


@pytest.mark.parametrize("log,detail", [("spark_events_sample.jsonl.gz", "failed"), ("replay_template.jsonl.gz", "none"),
                                        ("replay_template.jsonl.gz", "all")])
def test_jar_folds_tasks_exactly_as_the_python_reporter(jar, tmp_path, log, detail):
    """Issue #42: the jar's edge fold (io.sparkgovernor.TaskFold) gives the records of policies/task_fold.py on the
    same events cut into the same reports (real Spark event logs; a report every 40 events, now = the latest
    event's time, the last one final), to 1e-9."""
    from spark_governor.policies.task_fold import TaskFold
    from tests.edge_fold_support import assert_close

    lines = [json.loads(x) for x in gzip.decompress((DATA / log).read_bytes()).decode().splitlines() if x.strip()]
    events, now, t, fold = [], 0, EventTranslator(), TaskFold(detail)
    expected, tasks, stages = [], [], []

    def cut(final=False):
        events.append({"Event": "fold", "window_ms": 2000, "now_ms": now, "final": final, "task_detail": detail})
        expected.append(fold.fold(tasks, stages, 2000, now, final))
        tasks.clear()
        stages.clear()

    for k, e in enumerate(lines):
        events.append(e)
        now = max(now, *(v for v in (e.get("Timestamp"), e.get("Submission Time"), e.get("Completion Time"),
                                     (e.get("Task Info") or {}).get("Finish Time")) if isinstance(v, int)), 0)
        for kind, rec in t.handle(e):
            (tasks if kind == "task" else stages if kind == "stage" else []).append(rec)
        if k % 40 == 39:
            cut()
    cut(final=True)
    path = tmp_path / "events.jsonl"
    path.write_text("\n".join(json.dumps(e) for e in events) + "\n")
    out = subprocess.run(["java", "-cp", f"{jar}:{spark_home() / 'jars'}/*", "io.sparkgovernor.Replay", str(path)],
                         capture_output=True, text=True, timeout=120, env=env())
    assert out.returncode == 0, out.stderr[-3000:]
    folded = [json.loads(x)["record"] for x in out.stdout.splitlines() if '"kind":"folded"' in x]
    assert len(folded) == len(expected)
    assert sum(len(f["template_windows"]) for f in expected) > 0 and any(f["runtime_windows"] for f in expected)
    assert_close(folded, expected, "folded")


def _retitled(jar: Path, out: Path, spark: str, scala: str) -> Path:
    """A copy of the jar whose manifest says it was built for another Spark/Scala."""
    with zipfile.ZipFile(jar) as src, zipfile.ZipFile(out, "w") as dst:
        for item in src.infolist():
            data = src.read(item)
            if item.filename == "META-INF/MANIFEST.MF":
                text = data.decode().replace("\r\n ", "")
                text = "\r\n".join(f"Spark-Version: {spark}" if line.startswith("Spark-Version:") else
                                   f"Scala-Version: {scala}" if line.startswith("Scala-Version:") else line
                                   for line in text.split("\r\n"))
                data = text.encode()
            dst.writestr(item, data)
    return out


def test_a_jar_built_for_another_spark_refuses_with_one_clear_message(jar, tmp_path, control_plane):
    other = _retitled(jar, tmp_path / build.JAR_NAME, "3.5.1", "2.12.18")
    assert build.read_manifest(other)["Spark-Version"] == "3.5.1"
    text = run_submit([*LOCAL, *jar_confs(other, control_plane.url, "wrong-spark"), str(JOBS / "rate_count.py"),
                       str(tmp_path / "ckpt"), "2"], tmp_path / "submit.log")
    assert batches_run(text) >= 2, text[-3000:]  # the job itself runs normally
    errors = [line for line in text.splitlines() if "built for Spark 3.5.1" in line]
    assert len(errors) == 1 and "ERROR" in errors[0] and "DISABLED" in errors[0] and "Scala 2.12" in errors[0]
    assert "spark-governor jar --build" in errors[0]
    import requests

    assert requests.get(f"{control_plane.url}/api/v1/jobs", timeout=10).json()["jobs"] == []


class _Silent:
    """A TCP server on 127.0.0.1 that accepts connections, reads what comes and never answers (a hung control
    plane); ``received`` holds the bytes of every connection."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.conns: list = []
        self.received: list[bytes] = []
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.conns.append(conn)
            threading.Thread(target=self._read, args=(conn,), daemon=True).start()

    def _read(self, conn) -> None:
        data = b""
        try:
            while len(data) < 65536:
                chunk = conn.recv(4096)
                if not chunk:
                    break
                data += chunk
                if b"\r\n\r\n" in data:
                    break
        except OSError:
            pass
        self.received.append(data)

    def close(self) -> None:
        self.sock.close()
        for c in self.conns:
            c.close()


def test_an_unreachable_or_hung_control_plane_never_blocks_the_job(jar, tmp_path):
    """Against a closed port and against a server that never answers, the job finishes as fast as without the jar,
    the reporter says once that it cannot report, and the application ends within the bounded last flush. The
    hung server also sees the reporter token, read from spark.governor.tokenFile, as a bearer token."""
    from spark_governor.api.processes import free_port

    silent = _Silent()
    token_file = tmp_path / "token"
    token_file.write_text("sg-report-secret\n")
    try:
        timings = {}
        for name, endpoint, extra in (
                ("none", None, []),
                ("closed", f"http://127.0.0.1:{free_port()}", []),
                ("hung", f"http://127.0.0.1:{silent.port}", ["--conf", "spark.governor.postTimeout=1s",
                                                             "--conf", "spark.governor.maxRetries=1",
                                                             "--conf", f"spark.governor.tokenFile={token_file}"])):
            confs = jar_confs(jar, endpoint, f"down-{name}") + extra if endpoint else []
            t0 = time.time()
            text = run_submit([*LOCAL, *confs, str(JOBS / "rate_count.py"), str(tmp_path / f"ckpt-{name}"), "5"],
                              tmp_path / f"{name}.log")
            timings[name] = time.time() - t0
            assert batches_run(text) >= 5, text[-3000:]
            if endpoint:
                warnings = [line for line in text.splitlines() if "cannot report to" in line]
                assert len(warnings) == 1, warnings  # said once, not per report
        # generous: a shared 2-core machine; the point is no stall of post timeouts × reports
        assert timings["closed"] < timings["none"] + 15 and timings["hung"] < timings["none"] + 15, timings
        heads = [r.split(b"\r\n\r\n")[0].decode("latin-1").lower() for r in silent.received if r]
        assert heads and all(h.startswith("post /api/v1/reports http/1.1") for h in heads)
        assert all("authorization: bearer sg-report-secret" in h and "content-encoding: gzip" in h for h in heads)
    finally:
        silent.close()


def test_jar_path_command_prints_the_packaged_jar(jar):
    out = subprocess.run([sys.executable, "-m", "spark_governor", "jar"], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert Path(out.stdout.strip()) == jar and jar.is_file()
    assert build.read_manifest(jar)["Spark-Version"] == build.spark_versions(spark_home() / "jars")[0]
