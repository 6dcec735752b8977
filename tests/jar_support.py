"""Helpers of the listener-jar tests: the jar (built from collectors/jvm/src if needed), ``spark-submit`` of the
pyspark install with the jar's ``--jars``/``--conf`` switches, and a Java job compiled in the test."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import requests

from spark_governor.bench.standalone import spark_home
from spark_governor.collectors.jvm import build

ROOT = Path(__file__).resolve().parent.parent
JOBS = ROOT / "tests" / "integration" / "jar_jobs"


def listener_jar(require) -> Path:
    """The listener jar; skip (locally) or fail (CI=true) when there is none and no JDK to build one."""
    require(shutil.which("java") is not None, "java")
    try:
        return build.find_jar(build=True, log=lambda m: None)
    except build.JarUnavailable as exc:
        require(False, f"listener jar: {exc}")


def env() -> dict:
    return {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable,
            "PYSPARK_DRIVER_PYTHON": sys.executable, "SPARK_HOME": str(spark_home())}


def jar_confs(jar: Path, endpoint: str, job: str, interval: str = "500ms") -> list[str]:
    """The switches a user adds: ``--jars`` and ``--conf`` only."""
    return build.submit_args(endpoint, job, interval=interval, jar=jar)


def spark_submit(args: list[str], log: Path) -> subprocess.Popen:
    """Start ``bin/spark-submit ARGS`` of the pyspark install (its own process; the caller waits or stops it)."""
    return subprocess.Popen([str(spark_home() / "bin" / "spark-submit"), *args], env=env(),
                            stdout=open(log, "w"), stderr=subprocess.STDOUT)


def run_submit(args: list[str], log: Path, timeout: float = 300) -> str:
    proc = spark_submit(args, log)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise AssertionError(f"spark-submit did not finish in {timeout}s:\n{log.read_text()[-3000:]}")
    text = log.read_text()
    assert proc.returncode == 0, f"spark-submit exited {proc.returncode}:\n{text[-3000:]}"
    return text


def batches_run(text: str) -> int:
    """The micro-batches with rows that ``jar_jobs/rate_count.py`` says it ran (0 when it printed none). The job
    counts after ``query.stop()``, so a batch that completes between its last check and the stop makes the count one
    more than asked: callers require at least the number they asked for."""
    done = re.search(r"^batches: (\d+)$", text, re.M)
    return int(done.group(1)) if done else 0


def stop(proc: subprocess.Popen, timeout: float = 60) -> None:
    """End a process this test started: SIGTERM (Spark shuts down cleanly), SIGKILL after ``timeout``."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def compile_java_job(source: Path, out_dir: Path) -> Path:
    """``javac --release 17`` the job against the pyspark jars and pack it into a jar."""
    javac = build.javac()
    assert javac, "javac"
    classes = out_dir / "classes"
    subprocess.run([javac, "--release", "17", "-nowarn", "-cp", f"{spark_home() / 'jars'}/*", "-d", str(classes),
                    str(source)], check=True, capture_output=True, text=True)
    jar = out_dir / (source.stem + ".jar")
    with zipfile.ZipFile(jar, "w") as z:
        z.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\r\n\r\n")
        for f in classes.rglob("*.class"):
            z.write(f, f.relative_to(classes).as_posix())
    return jar


def job(plane, name: str) -> dict | None:
    r = requests.get(f"{plane.url}/api/v1/jobs/{name}", timeout=10)
    return r.json() if r.status_code == 200 else None


def stages(plane, name: str) -> list[dict]:
    r = requests.get(f"{plane.url}/api/v1/jobs/{name}/stages?windows=1000", timeout=10)
    return r.json()["stages"] if r.status_code == 200 else []
