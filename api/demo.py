"""``spark-governor demo``: what the product is for, in about a minute on a laptop.

1. Start a control plane (``spark-governor serve``) in its own process, with a random API token (scope
   admin, for the operator's requests), a random report token (scope ``report``, which the job's
   ``attach()`` sends) and a 5 s evaluation interval.
2. Through its HTTP API — as an operator would — declare a latency constraint on the example job
   (mean record latency ≤ ``bound_ms``) and enable the Kingman policy in **dry-run** mode (decisions
   recorded with their prediction, no directives sent to the job).
3. Run the example job (``collectors.demo_job``: Zipf keys counted by key, ``local[2]``) against it,
   one progress line per micro-batch and one per policy decision on stderr.
4. Print the per-stage statistics, the policy's recommendation with the prediction behind it
   (predicted latency vs the bound, the model's inputs), and write a figure of the run
   (``<out_dir>/<job>.png``) and the API answers it was drawn from (``<out_dir>/<job>.json``).

In ``local[N]`` mode executors cannot be changed, so the policy recommends in task slots and the
decision says it is not actuatable. :func:`run_demo` is what the CLI command calls; it raises
:class:`DemoError` on failure and prints through the ``out`` (report) and ``err`` (progress)
callables.
"""
from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

import requests

from spark_governor.api.processes import ProcessError, free_port, wait_healthy, stop_process

JOB = "zipf-demo"
CONSTRAINT = "record-latency"
POLICY = "kingman"
DEFAULT_BOUND_MS = 3000.0
DEFAULT_OUT_DIR = "bench-results/demo"
EVALUATION_S = 5.0  # the control plane's policy evaluation interval (and statistics window)


class DemoError(RuntimeError):
    """The demo could not run (control plane, API or Spark)."""


@dataclass
class DemoOutcome:
    figure: str
    report_json: str
    decisions: list
    batches: int
    input_rows: int
    wall_seconds: float
    clean_stop: bool


def _stderr(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


class _Api:
    """The control plane's HTTP API as the demo uses it (reads open, writes with the bearer token)."""

    def __init__(self, url: str, token: str) -> None:
        self.url, self.session = url, requests.Session()
        self.auth = {"Authorization": f"Bearer {token}"}

    def get(self, path: str) -> dict:
        r = self.session.get(self.url + path, timeout=10)
        if r.status_code != 200:
            raise DemoError(f"GET {path}: HTTP {r.status_code}: {r.text[:300]}")
        return r.json()

    def put(self, path: str, body: dict) -> dict:
        r = self.session.put(self.url + path, json=body, headers=self.auth, timeout=10)
        if r.status_code != 200:
            raise DemoError(f"PUT {path}: HTTP {r.status_code}: {r.text[:300]}")
        return r.json()


def _spawn_control_plane(db_url: str, port: int, token: str, report_token: str, log_path: Path) -> subprocess.Popen:
    """``spark-governor serve`` in its own process (its log in ``log_path``); not waited for. ``token`` is the
    operator's (admin), ``report_token`` the job's reporter's (scope report); both reach ``serve`` through its
    environment, not its command line (which other local users can read)."""
    env = dict(os.environ, SPARK_GOVERNOR_TOKENS=f"demo={token},demo-reporter:report={report_token}")
    env.pop("SPARK_GOVERNOR_ANONYMOUS_REPORTS", None)
    with open(log_path, "wb") as log:
        return subprocess.Popen([sys.executable, "-m", "spark_governor", "serve", "--port", str(port), "--db", db_url,
                                 "--evaluation-seconds", f"{EVALUATION_S:g}", "--window-seconds", f"{EVALUATION_S:g}"],
                                stdout=subprocess.DEVNULL, stderr=log, env=env)


def _wait_control_plane(proc: subprocess.Popen, url: str, log_path: Path) -> None:
    try:
        wait_healthy(url, 60.0, proc=proc)
    except ProcessError as exc:
        tail = log_path.read_text(errors="replace")[-2000:] if log_path.exists() else ""
        raise DemoError(f"{exc}" + (f"\n{tail}" if tail else "")) from None


def run_demo(seconds: float = 60.0, rate: Optional[int] = None, keys: Optional[int] = None,
             skew: Optional[float] = None, port: int = 0, db_url: Optional[str] = None,
             bound_ms: float = DEFAULT_BOUND_MS, out_dir: str = DEFAULT_OUT_DIR,
             out: Callable[[str], None] = print, err: Callable[[str], None] = _stderr) -> DemoOutcome:
    """Run the demo (see the module docstring); ``rate``, ``keys``, ``skew``: the job's, None for
    ``DemoConfig``'s defaults. Returns where the figure and the JSON were written."""
    from spark_governor.collectors.demo_job import BatchProgress, DemoConfig, build_session, run_demo_job

    port = port or free_port()
    url = f"http://127.0.0.1:{port}"
    defaults = DemoConfig()
    # sized for two cores; the reporters attach once the warm-up batches are done (their seconds would
    # read as an overload)
    token, report_token = secrets.token_urlsafe(16), secrets.token_urlsafe(16)
    cfg = DemoConfig.two_cores(job=JOB, endpoint=url, seconds=seconds, rows_per_second=rate or defaults.rows_per_second,
                               keys=keys or defaults.keys, skew=defaults.skew if skew is None else skew,
                               reporter_options={"token": report_token})
    out_path = Path(out_dir)
    out_path.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="sg-demo-") as tmp:
        db_url = db_url or f"sqlite:///{Path(tmp) / 'demo.db'}"
        log_path = Path(tmp) / "control-plane.log"
        proc = _spawn_control_plane(db_url, port, token, report_token, log_path)
        spark = None
        try:
            err(f"starting a control plane ({url}, {db_url}) and Spark ({cfg.master}) ...")
            try:  # the JVM starts while the control plane does
                spark = build_session(cfg.master, cfg.shuffle_partitions, conf={"spark.sql.adaptive.enabled": "false"})
            except Exception as exc:
                raise DemoError(f"Spark did not start: {exc.__class__.__name__}: {str(exc)[:500]}") from exc
            _wait_control_plane(proc, url, log_path)
            api = _Api(url, token)
            # what an operator does: a latency constraint, then the policy in dry-run mode
            api.put(f"/api/v1/jobs/{JOB}/constraints/{CONSTRAINT}?register=true", {"bound_ms": bound_ms, "span_s": EVALUATION_S})
            api.put(f"/api/v1/jobs/{JOB}/policies/{POLICY}?register=true",
                    {"enabled": True, "mode": "dry-run", "config": {"trigger_interval_s": cfg.trigger_seconds}})
            err(f"PUT /api/v1/jobs/{JOB}/constraints/{CONSTRAINT}: mean record latency ≤ {bound_ms:,.0f} ms "
                f"over {EVALUATION_S:g} s spans")
            err(f"PUT /api/v1/jobs/{JOB}/policies/{POLICY}: mode dry-run (decisions recorded, no directives), "
                f"evaluated every {EVALUATION_S:g} s")
            err(f"running the Zipf job ({cfg.master}, {cfg.rows_per_second:,} rows/s over {cfg.keys:,} keys, "
                f"trigger {cfg.trigger_seconds:g} s) for {seconds:g} s after warming up ...")
            seen: set[int] = set()

            def new_decisions() -> None:
                from spark_governor.api.demo_report import decision_line

                try:
                    found = api.get(f"/api/v1/jobs/{JOB}/decisions?policy={POLICY}&limit=50")["decisions"]
                except (DemoError, requests.RequestException):
                    return  # progress output only; the report below asks again
                for d in reversed(found):
                    if d["id"] not in seen:
                        seen.add(d["id"])
                        err(f"         decision: {decision_line(d)}")

            def on_batch(b: BatchProgress) -> None:
                if b.warm_up:
                    err(f"[  warm-up] batch {b.batch_id:3d}: {b.rows:6,} rows in {b.duration_s:.2f} s (Spark warming "
                        "up; not reported)")
                    return
                late = " (longer than the trigger interval)" if b.duration_s > cfg.trigger_seconds else ""
                err(f"[{b.elapsed_s:5.1f} s] batch {b.batch_id:3d}: {b.rows:6,} rows in {b.duration_s:.2f} s{late}")
                new_decisions()

            try:
                result = run_demo_job(cfg, spark=spark, on_batch=on_batch)
            except Exception as exc:
                raise DemoError(f"the Spark job failed: {exc.__class__.__name__}: {str(exc)[:500]}") from exc
            new_decisions()
            stop = "" if result.clean_stop else " (stopped mid-batch)"
            rs = result.reporter_stats or {}
            err(f"job finished{stop}: {result.batches} micro-batches, {result.input_rows:,} rows in "
                f"{result.wall_seconds:.0f} s; reporter: {rs.get('sent_records', 0)} records in "
                f"{rs.get('sent_reports', 0)} reports, {rs.get('dropped', 0)} dropped, "
                f"{rs.get('failed_posts', 0)} failed posts, {rs.get('rejected', 0)} rejected")
            if rs.get("unauthorized"):
                raise DemoError(f"the control plane refused the job's reports: {rs.get('last_error')}")
            outcome = _report(api, out_path, out, cfg, result, bound_ms)
        finally:
            if spark is not None:
                spark.stop()
            stop_process(proc)
    return outcome


def _report(api: _Api, out_path: Path, out: Callable[[str], None], cfg, result, bound_ms: float) -> DemoOutcome:
    from spark_governor.api.demo_report import recommendation_report
    from spark_governor.api.run_figure import plot_run, run_series
    from spark_governor.api.tables import batches_table, stages_table

    job = api.get(f"/api/v1/jobs/{JOB}")
    stages = api.get(f"/api/v1/jobs/{JOB}/stages?windows=1000")["stages"]
    batches = api.get(f"/api/v1/jobs/{JOB}/batches?limit=10000")
    decisions = api.get(f"/api/v1/jobs/{JOB}/decisions?limit=10000")["decisions"]
    constraint = api.get(f"/api/v1/jobs/{JOB}/constraints/{CONSTRAINT}?spans=720")
    events = api.get(f"/api/v1/jobs/{JOB}/events")["events"]
    errors = tuple(e["message"] for e in events if e["kind"] == "policy_error")[:3]

    out(stages_table(stages))
    out("")
    out(batches_table(batches))
    out("")
    out(recommendation_report(decisions, constraint, job, {s["key"]: s["name"] for s in stages}, POLICY, errors))
    figure = str(out_path / f"{JOB}.png")
    report_json = str(out_path / f"{JOB}.json")
    title = (f"spark-governor demo: {JOB} ({cfg.master}), {POLICY} policy in dry run, "
             f"bound {bound_ms:,.0f} ms on the mean record latency")
    plot_run(run_series(batches["batches"], decisions, constraint, job), figure, title)
    Path(report_json).write_text(json.dumps({"job": job, "stages": stages, "batches": batches, "decisions": decisions,
                                             "constraint": constraint, "events": events,
                                             "created_ms": int(time.time() * 1000)}, indent=1))
    out("")
    out(f"figure of the run: {figure}")
    out(f"API answers it was drawn from: {report_json}")
    return DemoOutcome(figure, report_json, decisions, result.batches, result.input_rows, result.wall_seconds,
                       result.clean_stop)
