"""``spark-governor bench overhead``: reporter overhead on a Spark job and ingest throughput.

Overhead: the same job (``bench.overhead_worker``: N micro-batches of R Zipf rows, keyed count,
back to back) runs ``runs`` times without and with the reporters, alternating, each in a fresh
process and JVM. Job time = sum of batch durations (ms) after warm-up. The ratio
median(with) / median(without) − 1 is the overhead (target ≤ 3 %).

Ingest: synthetic reports of ``tasks_per_report`` task records are POSTed (gzip JSON, as the
reporter sends them) to a control plane in its own process on SQLite; throughput is task
records per second of wall time and per CPU-second of the server process (target ≥ 20 000/s
per core).
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Callable

import requests

from spark_governor.api.processes import free_port, new_secret, start_serve, stop_process
from spark_governor.bench.reports import gz, make_report

OVERHEAD_TARGET = 0.03
INGEST_TARGET_PER_CORE = 20_000


def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure_ingest(url: str, pid: int, total_tasks: int, tasks_per_report: int = 2000,
                   token: str | None = None) -> dict:
    bodies = [gz(make_report(job="bench-ingest", n_tasks=tasks_per_report, seq=i + 1, reporter_id="bench",
                             partitions=64, templates=("t-scan", "t-agg", "t-sink"), seed=i,
                             start_ms=1_700_000_000_000 + i * 5_000))
              for i in range(max(1, total_tasks // tasks_per_report))]
    session = requests.Session()
    auth = {"Authorization": f"Bearer {token}"} if token else {}
    cpu0, t0 = _cpu_seconds(pid), time.perf_counter()
    for body in bodies:
        r = session.post(url + "/api/v1/reports", data=body,
                         headers={"Content-Type": "application/json", "Content-Encoding": "gzip", **auth}, timeout=60)
        r.raise_for_status()
    wall, cpu = time.perf_counter() - t0, _cpu_seconds(pid) - cpu0
    n = len(bodies) * tasks_per_report
    return {"task_records": n, "reports": len(bodies), "wall_seconds": wall, "server_cpu_seconds": cpu,
            "tasks_per_second": n / wall, "tasks_per_cpu_second": n / cpu if cpu else None,
            "ratio_to_target_per_core": (n / cpu) / INGEST_TARGET_PER_CORE if cpu else None}


def run_overhead_bench(runs: int = 3, batches: int = 30, rows: int = 20_000, ingest_tasks: int = 200_000,
                       log: Callable[[str], None] = print) -> dict:
    with tempfile.TemporaryDirectory(prefix="sg-bench-") as tmp:
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        token = new_secret()  # the reporters authenticate as in production (SPARK_GOVERNOR_TOKEN of the driver)
        plane = start_serve(f"sqlite:///{tmp}/bench.db", port, report_token=token)
        try:
            samples = {"without": [], "with": [], "jar": []}
            reporter_stats = []
            variants = ("without", "with", "jar") if _jar_available(log) else ("without", "with")
            for i in range(runs):
                for variant in variants:
                    cmd = [sys.executable, "-m", "spark_governor.bench.overhead_worker", "--batches", str(batches), "--rows", str(rows)]
                    if variant != "without":
                        cmd += ["--endpoint", url] + (["--jar"] if variant == "jar" else [])
                    out = subprocess.run(cmd, capture_output=True, text=True, timeout=900,
                                         env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_GOVERNOR_TOKEN": token})
                    if out.returncode != 0:
                        raise RuntimeError(f"benchmark job failed: {out.stderr[-2000:]}")
                    res = json.loads(out.stdout.strip().splitlines()[-1])
                    job_ms = sum(res["batch_ms"])
                    samples[variant].append(job_ms)
                    if res["reporter"]:
                        reporter_stats.append({"variant": variant, "wall_ms": res.get("wall_ms"), **res["reporter"]})
                    log(f"run {i + 1}/{runs} {variant:>7} reporters: {job_ms / 1000:.2f} s for {len(res['batch_ms'])} batches")
            jar_job = requests.get(f"{url}/api/v1/jobs/bench-overhead-jar", timeout=10)
            jar_reporter = jar_job.json() if jar_job.status_code == 200 else None
        finally:
            stop_process(plane)
        ingest_port = free_port()
        ingest_plane = start_serve(f"sqlite:///{tmp}/ingest.db", ingest_port, report_token=token)
        try:
            log(f"ingest: posting {ingest_tasks} task records ...")
            ingest = measure_ingest(f"http://127.0.0.1:{ingest_port}", ingest_plane.pid, ingest_tasks, token=token)
        finally:
            stop_process(ingest_plane)
    med_without, med_with = statistics.median(samples["without"]), statistics.median(samples["with"])
    overhead = med_with / med_without - 1
    summary = {
        "job_seconds_median_without_reporters": med_without / 1000,
        "job_seconds_median_with_reporters": med_with / 1000,
        "ratio_with_over_without": med_with / med_without,
        "overhead_fraction": overhead,
        "overhead_target": OVERHEAD_TARGET,
        "overhead_within_target": overhead <= OVERHEAD_TARGET,
        **_jar_summary(samples["jar"], med_without, jar_reporter,
                       [r for r in reporter_stats if r["variant"] == "jar"]),
        "ingest_tasks_per_second": ingest["tasks_per_second"],
        "ingest_tasks_per_cpu_second": ingest["tasks_per_cpu_second"],
        "ingest_ratio_to_target_per_core": ingest["ratio_to_target_per_core"],
    }
    return {"summary": summary, "runs": samples, "batches_per_run": batches, "rows_per_batch": rows,
            "reporter_stats": reporter_stats, "jar_reporter": jar_reporter, "ingest": ingest}


def _jar_available(log: Callable[[str], None]) -> bool:
    """Whether the listener jar (``spark-governor jar``) is there or can be built; the jar row is left out if not."""
    from spark_governor.collectors.jvm.build import JarUnavailable, find_jar

    try:
        find_jar(log=log)
        return True
    except JarUnavailable as exc:
        log(f"no jar row: {exc}")
        return False


def _jar_summary(jar_ms: list, med_without: float, jar_reporter, jar_stats: list) -> dict:
    """The jar row: the same job reported by the JVM listener jar (added by --jars/--conf) instead of attach().
    Besides the job-time ratio (noisy on a busy machine), the reporter thread's own CPU time per second of the
    query's wall time: what the jar takes from the driver, whatever else runs."""
    if not jar_ms:
        return {}
    med = statistics.median(jar_ms)
    cpu = [r["thread_cpu_ms"] / r["wall_ms"] for r in jar_stats if r.get("thread_cpu_ms") and r.get("wall_ms")]
    return {"job_seconds_median_with_jar": med / 1000, "ratio_jar_over_without": med / med_without,
            "jar_overhead_fraction": med / med_without - 1,
            "jar_overhead_within_target": med / med_without - 1 <= OVERHEAD_TARGET,
            "jar_tasks_reported": (jar_reporter or {}).get("tasks_reported_total"),
            "jar_reporter_dropped": (jar_reporter or {}).get("reporter_dropped_total"),
            "jar_reporter_cpu_fraction_of_wall": statistics.median(cpu) if cpu else None}
