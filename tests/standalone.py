"""A real Spark standalone cluster (master + one worker) on 127.0.0.1, from the pyspark install."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import requests

import pyspark

SPARK_HOME = Path(pyspark.__file__).resolve().parent
ROOT = Path(__file__).resolve().parent.parent


class StandaloneCluster:
    def __init__(self, workdir: Path, cores: int = 4, memory: str = "4g") -> None:
        from tests.conftest import free_port

        self.workdir = workdir
        self.port, self.ui, self.wui = free_port(), free_port(), free_port()
        self.cores, self.memory = cores, memory
        self.procs: list[subprocess.Popen] = []
        self.url = f"spark://127.0.0.1:{self.port}"

    def _spawn(self, *args: str, log: str) -> subprocess.Popen:
        env = {**os.environ, "SPARK_HOME": str(SPARK_HOME), "SPARK_LOCAL_IP": "127.0.0.1",
               "SPARK_WORKER_DIR": str(self.workdir / "work"), "SPARK_LOG_DIR": str(self.workdir)}
        proc = subprocess.Popen([str(SPARK_HOME / "bin" / "spark-class"), *args], env=env,
                                stdout=open(self.workdir / log, "w"), stderr=subprocess.STDOUT)
        self.procs.append(proc)
        return proc

    def start(self) -> "StandaloneCluster":
        from tests.conftest import wait_for

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


class Driver:
    """The scaling job in its own process; the test steers its input rate through a file."""

    def __init__(self, tmp: Path, cluster, plane, job: str) -> None:
        self.tmp, self.job = tmp, job
        self.rate_file, self.stop_file, self.out = tmp / "rate", tmp / "stop", tmp / "out.jsonl"
        self.rate(300)
        self.proc = subprocess.Popen(
            [sys.executable, str(ROOT / "tests" / "scaling_job.py"), "--master", cluster.url, "--endpoint", plane.url,
             "--job", job, "--rate-file", str(self.rate_file), "--stop-file", str(self.stop_file),
             "--out", str(self.out), "--checkpoint", str(tmp / "ckpt")],
            stdout=open(tmp / "driver.log", "w"), stderr=subprocess.STDOUT,
            env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYTHONPATH": str(ROOT)})

    def rate(self, rows_per_second: float) -> None:
        tmp = self.rate_file.with_suffix(".tmp")
        tmp.write_text(str(rows_per_second))
        tmp.replace(self.rate_file)

    def samples(self) -> list[dict]:
        if not self.out.exists():
            return []
        return [json.loads(line) for line in self.out.read_text().splitlines() if line.strip()]

    def executors(self) -> int | None:
        s = self.samples()
        return s[-1]["executors"] if s else None

    def stop(self) -> None:
        self.stop_file.write_text("stop")
        try:
            self.proc.wait(90)
        except subprocess.TimeoutExpired:
            self.proc.kill()
