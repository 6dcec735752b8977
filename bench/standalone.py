"""A real Spark standalone cluster (master + one worker) on 127.0.0.1 from the pyspark install, and
the paced Zipf job (``bench/scaling_job.py``) run against it in its own driver process.

Shared by the real-cluster scaling tests (``tests/standalone.py`` re-exports it) and
``spark-governor bench scaling-real``. Needs Java; everything binds 127.0.0.1
(``SPARK_LOCAL_IP``), and :meth:`StandaloneCluster.stop` / :meth:`Driver.stop` end exactly the
processes they started.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Optional

import requests

from spark_governor.api.processes import free_port, wait_for

ROOT = Path(__file__).resolve().parent.parent
JOB = ROOT / "bench" / "scaling_job.py"


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent


class StandaloneCluster:
    def __init__(self, workdir: Path, cores: int = 4, memory: str = "4g") -> None:
        self.workdir = Path(workdir)
        self.port, self.ui, self.wui = free_port(), free_port(), free_port()
        self.cores, self.memory = cores, memory
        self.procs: list[subprocess.Popen] = []
        self.url = f"spark://127.0.0.1:{self.port}"

    def _spawn(self, *args: str, log: str) -> subprocess.Popen:
        home = spark_home()
        env = {**os.environ, "SPARK_HOME": str(home), "SPARK_LOCAL_IP": "127.0.0.1",
               "SPARK_WORKER_DIR": str(self.workdir / "work"), "SPARK_LOG_DIR": str(self.workdir)}
        proc = subprocess.Popen([str(home / "bin" / "spark-class"), *args], env=env,
                                stdout=open(self.workdir / log, "w"), stderr=subprocess.STDOUT)
        self.procs.append(proc)
        return proc

    def start(self) -> "StandaloneCluster":
        self._spawn("org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(self.port),
                    "--webui-port", str(self.ui), log="master.log")
        wait_for(lambda: self._state().get("status") == "ALIVE", 90, what="standalone master")
        self._spawn("org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1", "--cores", str(self.cores),
                    "--memory", self.memory, "--webui-port", str(self.wui), self.url, log="worker.log")
        wait_for(lambda: len(self._state().get("workers", [])) == 1, 90, what="standalone worker registered")
        return self

    def _state(self) -> dict:
        try:
            return requests.get(f"http://127.0.0.1:{self.ui}/json/", timeout=2).json()
        except (requests.RequestException, ValueError):
            return {}

    def stop(self) -> None:
        for p in reversed(self.procs):
            p.terminate()
        for p in self.procs:
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                p.kill()

    def __enter__(self) -> "StandaloneCluster":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


class Driver:
    """The scaling job in its own process; the caller steers its input rate through a file."""

    def __init__(self, tmp: Path, cluster, plane, job: str, initial_executors: int = 1,
                 initial_rate: float = 300, extra_args: tuple[str, ...] = (), env: Optional[dict] = None) -> None:
        self.tmp, self.job = Path(tmp), job
        self.rate_file, self.stop_file, self.out = self.tmp / "rate", self.tmp / "stop", self.tmp / "out.jsonl"
        self.rate(initial_rate)
        self.proc = subprocess.Popen(
            [sys.executable, str(JOB), "--master", cluster.url, "--endpoint", plane.url,
             "--job", job, "--rate-file", str(self.rate_file), "--stop-file", str(self.stop_file),
             "--out", str(self.out), "--checkpoint", str(self.tmp / "ckpt"),
             "--initial-executors", str(initial_executors), *extra_args],
            stdout=open(self.tmp / "driver.log", "w"), stderr=subprocess.STDOUT,
            env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", **(env or {})})

    def rate(self, rows_per_second: float) -> None:
        tmp = self.rate_file.with_suffix(".tmp")
        tmp.write_text(str(rows_per_second))
        tmp.replace(self.rate_file)

    def _lines(self) -> list[dict]:
        if not self.out.exists():
            return []
        out = []
        for line in self.out.read_text().splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:  # a line being written
                continue
        return out

    def samples(self) -> list[dict]:
        """The per-second samples (time, executors, latest batch)."""
        return [x for x in self._lines() if "progress" not in x]

    def progress(self) -> list[dict]:
        """One record per completed micro-batch: batch, rows, trigger_ms, processing_ms."""
        return [x["progress"] for x in self._lines() if "progress" in x]

    def executors(self) -> int | None:
        s = self.samples()
        return s[-1]["executors"] if s else None

    def stop(self, timeout_s: float = 90.0) -> None:
        """Ask the job to stop (its stop file) and wait ``timeout_s`` seconds, then kill it."""
        self.stop_file.write_text("stop")
        try:
            self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
