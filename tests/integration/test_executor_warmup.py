"""Executor warm-up on a real Spark standalone cluster (master + worker on 127.0.0.1; collectors.executor_warmup).

A driver with one warm executor asks for two more while no job runs. ``attach`` runs, for each executor as it
registers, a ``mapInPandas`` task preferring it: the test checks from Spark's own status store that each ran on
the executor it was for, and that the job's next Python task on each added executor then ran (with the warm-up
off, the same job runs: tests/integration/warmup_job.py ``--no-warm``; the time it saves is a benchmark's
figure, ``bench scaling-real --warm/--no-warm``, not a test's).
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.spark
JOB = Path(__file__).parent / "warmup_job.py"


def run_job(cluster, *args: str) -> dict:
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
    # the control plane is not needed here: the reporter drops its reports (counted) and the job goes on
    proc = subprocess.run([sys.executable, str(JOB), cluster.url, "http://127.0.0.1:9", *args], env=env,
                          capture_output=True, text=True, timeout=600)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    assert proc.returncode == 0 and lines, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(lines[-1])


def test_each_added_executor_is_warmed_by_a_task_that_ran_on_it(standalone_cluster):
    out = run_job(standalone_cluster)
    assert len(out["first"]) == 1 and len(out["added"]) == 2, out
    assert out["ran_on"] == {e: e for e in out["added"]}, out
    probe = {t["executor"] for t in out["probe"]}
    assert set(out["added"]) <= probe and all(t["slot_ms"] > 0 for t in out["probe"]), out
