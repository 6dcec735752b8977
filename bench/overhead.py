"""``spark-governor bench overhead``: reporter overhead on a Spark job and ingest throughput.

Overhead: the same job (``bench.overhead_worker``: N micro-batches of R Zipf rows, keyed count,
back to back) runs ``runs`` times without and with the reporters, alternating, each in a fresh
process and JVM. Job time = sum of batch durations (ms) after warm-up. The ratio
median(with) / median(without) − 1 is the overhead (target ≤ 3 %).

Rows: ``without``; ``with`` (``attach()``); ``jar`` (the listener jar, when built); and two hostile rows
(issue #16, Faults): ``attach()`` reporting to a server that accepts and never answers (``black-hole``) and to
one that answers a byte every ``drip_s`` seconds (``drip``; ``bench.hostile_servers``). The job's batch
times should be within noise of ``without``, the reporter should count dropped reports, and after
``detach()`` its sending thread should be gone. The JSON records the load average (1/5/15 min) before
and after every run, since on a shared machine it explains most of the spread.

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
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from typing import Callable, Sequence

import requests

from spark_governor.api.processes import free_port, new_secret, start_serve, stop_process
from spark_governor.bench.hostile_servers import BlackHoleServer, DripServer
from spark_governor.bench.reports import gz, make_report

OVERHEAD_TARGET = 0.03
#: the rows: no reporter, attach(), the listener jar, attach() against a server that never answers / drips
VARIANTS = ("without", "with", "jar", "black-hole", "drip")
HOSTILE_VARIANTS = ("black-hole", "drip")
INGEST_TARGET_PER_CORE = 20_000


def _cpu_seconds(pid: int) -> float:
    """CPU seconds (user + system) of process ``pid`` and all its live descendants (``serve`` runs its requests
    in gunicorn worker processes, whose CPU time the master's own counters do not include)."""
    total = 0.0
    for p in [pid, *_descendants(pid)]:
        try:
            with open(f"/proc/{p}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:  # exited meanwhile
            continue
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def _descendants(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        try:
            tids = os.listdir(f"/proc/{p}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                with open(f"/proc/{p}/task/{tid}/children") as f:
                    kids = [int(c) for c in f.read().split()]
            except OSError:
                continue
            out += kids
            todo += kids
    return out


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


@dataclass(frozen=True)
class HostileSettings:
    """The reporter and servers of the black-hole and drip rows (issue #16, Faults).

    ``post_deadline_s`` (seconds, the whole of one POST) and ``max_retries`` go to ``attach()``: shorter than the
    reporter's defaults (10 s, 5) so that reports are given up, and counted as dropped, within a short job;
    ``drip_s``: seconds between the drip server's bytes (below the reporter's 5 s read timeout, so only the total
    deadline ends a post); ``stop_timeout_s``: the bound given to ``detach()`` (its last flush)."""

    post_deadline_s: float = 2.0
    max_retries: int = 1
    drip_s: float = 1.0
    stop_timeout_s: float = 3.0

    def __post_init__(self) -> None:
        for name in ("post_deadline_s", "drip_s", "stop_timeout_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name}: expected seconds > 0 (got {getattr(self, name)})")
        if self.max_retries < 0:
            raise ValueError(f"max_retries: expected 0 or more (got {self.max_retries})")


def _load_sample(t0: float) -> dict:
    """The machine's load averages (1, 5, 15 min, from ``os.getloadavg``) ``t_s`` seconds into the run."""
    one, five, fifteen = os.getloadavg()
    return {"t_s": round(time.monotonic() - t0, 1), "load1": one, "load5": five, "load15": fifteen}


def _worker_cmd(variant: str, endpoint: str | None, batches: int, rows: int, hostile: HostileSettings) -> list:
    cmd = [sys.executable, "-m", "spark_governor.bench.overhead_worker", "--batches", str(batches), "--rows", str(rows)]
    if variant == "without":
        return cmd
    cmd += ["--endpoint", endpoint]
    if variant == "jar":
        return cmd + ["--jar"]
    if variant in HOSTILE_VARIANTS:
        cmd += ["--job", f"bench-overhead-{variant}", "--post-deadline", str(hostile.post_deadline_s),
                "--max-retries", str(hostile.max_retries), "--stop-timeout", str(hostile.stop_timeout_s)]
    return cmd


@contextmanager
def _endpoint(variant: str, plane_url: str, hostile: HostileSettings):
    """The address a variant reports to: the control plane, or a fresh hostile server (stopped afterwards)."""
    if variant not in HOSTILE_VARIANTS:
        yield plane_url, None
        return
    server = BlackHoleServer() if variant == "black-hole" else DripServer(hostile.drip_s)
    try:
        yield server.url, server
    finally:
        server.stop()


def run_overhead_bench(runs: int = 3, batches: int = 30, rows: int = 20_000, ingest_tasks: int = 200_000,
                       log: Callable[[str], None] = print, variants: Sequence[str] | None = None,
                       hostile: HostileSettings = HostileSettings()) -> dict:
    """Run the overhead rows (``variants``, default all of ``VARIANTS``, the jar row only when the jar is
    there; ``without`` is always run, it is the baseline) ``runs`` times each, alternating, then the ingest
    benchmark (skipped when ``ingest_tasks`` is 0). Job times in seconds, batch durations in ms."""
    chosen = list(VARIANTS if variants is None else variants)
    unknown = [v for v in chosen if v not in VARIANTS]
    if unknown:
        raise ValueError(f"variants: unknown {', '.join(unknown)} (choose from {', '.join(VARIANTS)})")
    if "jar" in chosen and not _jar_available(log):
        chosen.remove("jar")
    chosen = ["without"] + [v for v in VARIANTS[1:] if v in chosen]
    t0 = time.monotonic()
    started = datetime.now(timezone.utc).isoformat(timespec="seconds")
    load = [_load_sample(t0)]
    with tempfile.TemporaryDirectory(prefix="sg-bench-") as tmp:
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        token = new_secret()  # the reporters authenticate as in production (SPARK_GOVERNOR_TOKEN of the driver)
        plane = start_serve(f"sqlite:///{tmp}/bench.db", port, report_token=token)
        try:
            samples = {v: [] for v in chosen}
            batch_ms = {v: [] for v in chosen}
            reporter_stats = []
            for i in range(runs):
                for variant in chosen:
                    with _endpoint(variant, url, hostile) as (endpoint, server):
                        out = subprocess.run(_worker_cmd(variant, endpoint, batches, rows, hostile),
                                             capture_output=True, text=True, timeout=900,
                                             env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1",
                                                  "SPARK_GOVERNOR_TOKEN": token})
                    load.append(_load_sample(t0))
                    if out.returncode != 0:
                        raise RuntimeError(f"benchmark job failed ({variant}): {out.stderr[-2000:]}")
                    res = json.loads(out.stdout.strip().splitlines()[-1])
                    job_ms = sum(res["batch_ms"])
                    samples[variant].append(job_ms)
                    batch_ms[variant].extend(res["batch_ms"])
                    if res["reporter"]:
                        reporter_stats.append({"variant": variant, "run": i + 1, "wall_ms": res.get("wall_ms"),
                                               "detach_s": res.get("detach_s"),
                                               "reporter_threads_after_stop": res.get("reporter_threads_after_stop"),
                                               **({"server": server.stats()} if server else {}), **res["reporter"]})
                    log(f"run {i + 1}/{runs} {variant:>10}: {job_ms / 1000:.2f} s for {len(res['batch_ms'])} batches"
                        + (f", dropped {res['reporter'].get('dropped')}" if res["reporter"] else "")
                        + f" (load {load[-1]['load1']:.2f})")
            jar_job = requests.get(f"{url}/api/v1/jobs/bench-overhead-jar", timeout=10)
            jar_reporter = jar_job.json() if jar_job.status_code == 200 else None
        finally:
            stop_process(plane)
        ingest = None
        if ingest_tasks:
            ingest_port = free_port()
            ingest_plane = start_serve(f"sqlite:///{tmp}/ingest.db", ingest_port, report_token=token)
            try:
                log(f"ingest: posting {ingest_tasks} task records ...")
                ingest = measure_ingest(f"http://127.0.0.1:{ingest_port}", ingest_plane.pid, ingest_tasks, token=token)
            finally:
                stop_process(ingest_plane)
            load.append(_load_sample(t0))
    med_without = statistics.median(samples["without"])
    table = overhead_table(samples, batch_ms, reporter_stats)
    summary = {"table": table}
    if "with" in samples:
        med_with = statistics.median(samples["with"])
        overhead = med_with / med_without - 1
        summary.update({
            "job_seconds_median_without_reporters": med_without / 1000,
            "job_seconds_median_with_reporters": med_with / 1000,
            "ratio_with_over_without": med_with / med_without,
            "overhead_fraction": overhead,
            "overhead_target": OVERHEAD_TARGET,
            "overhead_within_target": overhead <= OVERHEAD_TARGET,
        })
    summary.update(_jar_summary(samples.get("jar", []), med_without, jar_reporter,
                                [r for r in reporter_stats if r["variant"] == "jar"]))
    if ingest:
        summary.update({"ingest_tasks_per_second": ingest["tasks_per_second"],
                        "ingest_tasks_per_cpu_second": ingest["tasks_per_cpu_second"],
                        "ingest_ratio_to_target_per_core": ingest["ratio_to_target_per_core"]})
    ones = [s["load1"] for s in load]
    summary["load_average_1min"] = {"min": min(ones), "median": statistics.median(ones), "max": max(ones),
                                    "cpus": os.cpu_count()}
    return {"summary": summary, "runs": samples, "batch_ms": batch_ms, "batches_per_run": batches,
            "rows_per_batch": rows, "started_utc": started,
            "finished_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "load_average": load, "hostile_settings": asdict(hostile),
            "reporter_stats": reporter_stats, "jar_reporter": jar_reporter, "ingest": ingest}


def overhead_table(job_ms: dict, batch_ms: dict, reporter_stats: list) -> list[dict]:
    """One row per variant: median job time (s, sum of a run's batch durations; median over runs), median and
    p90 batch duration (ms, over every measured batch of every run), both as ratios to ``without``, and the
    reporter's counters per run (records dropped, reports given up, failed posts, reports sent; seconds
    ``detach()`` took and reporter threads alive after it). ``within_noise``: the median job time is at most the
    slowest ``without`` run's plus the 3 % overhead target (faster than the baseline is noise too, not a cost)."""
    base_job, base_batch = statistics.median(job_ms["without"]), statistics.median(batch_ms["without"])
    hi = max(job_ms["without"]) * (1 + OVERHEAD_TARGET)
    table = []
    for variant, jobs in job_ms.items():
        batches = sorted(batch_ms[variant])
        med_job, med_batch = statistics.median(jobs), statistics.median(batches)
        row = {"variant": variant, "runs": len(jobs), "job_seconds_median": med_job / 1000,
               "batch_ms_median": med_batch, "batch_ms_p90": batches[min(len(batches) - 1, int(0.9 * len(batches)))],
               "ratio_job_to_without": med_job / base_job, "ratio_batch_ms_to_without": med_batch / base_batch,
               "within_noise": med_job <= hi}
        stats = [r for r in reporter_stats if r["variant"] == variant]
        if stats:
            row.update({f"{k}_per_run": [r.get(k) for r in stats]
                        for k in ("dropped", "dropped_reports", "failed_posts", "sent_reports", "detach_s")})
            row["reporter_threads_after_stop"] = sorted({t for r in stats for t in r.get("reporter_threads_after_stop") or []})
        table.append(row)
    return table


def format_table(table: list[dict]) -> str:
    """The overhead rows as a Markdown table (what ``bench overhead`` prints)."""
    lines = ["| variant | median batch ms | ratio to without | median job s | ratio | dropped per run | within noise |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for r in table:
        drops = ", ".join(str(d) for d in r.get("dropped_per_run", [])) or "-"
        lines.append(f"| {r['variant']} | {r['batch_ms_median']:.0f} | {r['ratio_batch_ms_to_without']:.3f} | "
                     f"{r['job_seconds_median']:.2f} | {r['ratio_job_to_without']:.3f} | {drops} | "
                     f"{'yes' if r['within_noise'] else 'no'} |")
    return "\n".join(lines)


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
