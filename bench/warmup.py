"""``spark-governor bench warmup``: what warming an added executor saves (``collectors.executor_warmup``).

On a real standalone cluster on 127.0.0.1 (``bench.standalone``), :mod:`bench.warmup_job` runs ``reps`` times
with the warm-up and ``reps`` times without, alternately, in one invocation: a driver with one warm executor
asks for two more while no job runs, then runs one ``mapInPandas`` task per executor. The figure is the
time each added executor's first task held its slot (launch → finish, seconds), against the executor that
was warm from the start in the same run (the baseline), as a ratio: 1 would be an added executor as fast
as a warm one.

Units: seconds; ratios.
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Optional

from spark_governor.bench.standalone import StandaloneCluster

JOB = Path(__file__).resolve().parent / "warmup_job.py"


def run_job(master: str, warm: bool, timeout_s: float = 600) -> dict:
    """One :mod:`bench.warmup_job` run against ``master``; its JSON line. The reporter's endpoint is a closed
    port: the job reports nowhere (its reporter drops, counted) and is not slowed by it."""
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
    proc = subprocess.run([sys.executable, str(JOB), master, "http://127.0.0.1:9", *(() if warm else ("--no-warm",))],
                          env=env, capture_output=True, text=True, timeout=timeout_s)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"warmup_job exited {proc.returncode}: {(proc.stdout + proc.stderr)[-2000:]}")
    return json.loads(lines[-1])


def first_tasks(out: dict) -> dict:
    """{"added_s": [each added executor's first task, s], "warm_s": the first executor's task, s}."""
    by = {t["executor"]: t["slot_ms"] / 1000.0 for t in out["probe"]}
    return {"added_s": [by[e] for e in out["added"] if e in by],
            "warm_s": next((by[e] for e in out["first"] if e in by), None)}


def run_warmup_bench(reps: int = 2, workdir: Optional[Path] = None,
                     log: Callable[[str], None] = lambda m: None) -> dict:
    """``reps`` runs with the warm-up and ``reps`` without, alternately, on one cluster; the JSON-ready report."""
    workdir = Path(workdir or tempfile.mkdtemp(prefix="sg-warmup-"))
    workdir.mkdir(parents=True, exist_ok=True)
    runs = []
    with StandaloneCluster(workdir, cores=4) as cluster:
        for i in range(reps):
            for warm in (True, False):
                out = run_job(cluster.url, warm)
                runs.append({"warm": warm, **first_tasks(out), "job_s": out.get("job_s"), "ran_on": out.get("ran_on")})
                log(f"rep {i + 1}/{reps} {'warm' if warm else 'cold'}: added executors' first tasks "
                    f"{', '.join(f'{x:.2f}' for x in runs[-1]['added_s'])} s, warm executor {runs[-1]['warm_s']:.2f} s")
    summary = {}
    for warm in (True, False):
        added = [x for r in runs if r["warm"] == warm for x in r["added_s"]]
        base = [r["warm_s"] for r in runs if r["warm"] == warm and r["warm_s"]]
        ratios = [x / r["warm_s"] for r in runs if r["warm"] == warm and r["warm_s"] for x in r["added_s"]]
        summary["warm" if warm else "cold"] = {
            "first_task_s": statistics.median(added) if added else None,
            "warm_executor_s": statistics.median(base) if base else None,
            "ratio_vs_warm_executor": statistics.median(ratios) if ratios else None, "samples": len(added)}
    jobs = [x for r in runs for x in (r["job_s"] or [])]
    summary["warm_job_s"] = statistics.median(jobs) if jobs else None
    w, c = summary["warm"]["first_task_s"], summary["cold"]["first_task_s"]
    summary["saved_s"] = c - w if w is not None and c is not None else None
    return {"reps": reps, "runs": runs, "summary": summary, "workdir": str(workdir),
            "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


def format_warmup(report: dict) -> str:
    s = report["summary"]
    lines = [f"{'variant':10s} {'first task s':>12s} {'warm executor s':>15s} {'ratio':>6s} {'samples':>7s}", "-" * 54]
    for name in ("warm", "cold"):
        r = s[name]
        cells = [f"{r[k]:{w}.2f}" if r[k] is not None else f"{'-':>{w}}" for k, w in
                 (("first_task_s", 12), ("warm_executor_s", 15), ("ratio_vs_warm_executor", 6))]
        lines.append(f"{name:10s} {' '.join(cells)} {r['samples']:7d}")
    job = f"{s['warm_job_s']:.2f} s" if s["warm_job_s"] is not None else "not measured"
    saved = f"{s['saved_s']:.2f} s" if s["saved_s"] is not None else "-"
    lines.append(f"an added executor's first mapInPandas task: {saved} shorter with the warm-up "
                 f"(warm-up job {job}, run while the executor was idle)")
    return "\n".join(lines)
