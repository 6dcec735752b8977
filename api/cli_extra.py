"""CLI commands that drive Spark or other servers: ``demo``, ``dashboards``, ``bench``."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import click
import requests

from spark_governor.api.cli import _get, main
from spark_governor.bench.output import write_json


def wait_healthy(url: str, timeout_s: float = 60.0, proc: subprocess.Popen | None = None) -> None:
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        if proc is not None and proc.poll() is not None:
            err = proc.stderr.read().decode(errors="replace")[-2000:] if proc.stderr is not None else ""
            raise click.ClickException(f"control plane exited with code {proc.returncode}" + (f":\n{err}" if err else ""))
        try:
            if requests.get(url + "/healthz", timeout=1).status_code == 200:
                return
        except requests.RequestException:
            pass
        time.sleep(0.2)
    raise click.ClickException(f"control plane at {url} not healthy after {timeout_s}s")


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@main.command()
@click.option("--seconds", default=60.0, show_default=True, type=click.FloatRange(5), help="How long the job runs.")
@click.option("--rate", default=2000, show_default=True, type=click.IntRange(1), help="Source rows per second.")
@click.option("--keys", default=1000, show_default=True, type=click.IntRange(1))
@click.option("--skew", default=1.1, show_default=True, type=click.FloatRange(0), help="Zipf exponent.")
@click.option("--port", default=0, type=click.IntRange(0, 65535), help="Control plane port (0: a free one).")
@click.option("--db", "db_url", default=None, help="Database URL (default: a temporary SQLite file).")
def demo(seconds: float, rate: int, keys: int, skew: float, port: int, db_url: str | None) -> None:
    """Start a control plane, run the Zipf example job against it, print per-stage statistics."""
    from spark_governor.collectors.demo_job import DemoConfig, run_demo_job

    port = port or free_port()
    url = f"http://127.0.0.1:{port}"
    with tempfile.TemporaryDirectory(prefix="sg-demo-") as tmp:
        db_url = db_url or f"sqlite:///{Path(tmp) / 'demo.db'}"
        proc = subprocess.Popen([sys.executable, "-m", "spark_governor", "serve", "--port", str(port), "--db", db_url],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            wait_healthy(url, proc=proc)
            click.echo(f"control plane: {url} ({db_url}); running the Zipf job for {seconds:.0f}s ...", err=True)
            cfg = DemoConfig(job="zipf-demo", endpoint=url, seconds=seconds, rows_per_second=rate, keys=keys, skew=skew)
            result = run_demo_job(cfg)
            click.echo(f"job finished: {result.batches} micro-batches, {result.input_rows:,} rows; "
                       f"reporter: {result.reporter_stats}", err=True)
            from spark_governor.api.tables import batches_table, stages_table

            stages = _get(url, "/api/v1/jobs/zipf-demo/stages?windows=1000")
            click.echo(stages_table(stages["stages"]))
            click.echo()
            click.echo(batches_table(_get(url, "/api/v1/jobs/zipf-demo/batches?limit=10000")))
        finally:
            proc.terminate()
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()


@main.group()
def dashboards() -> None:
    """Grafana dashboards shipped with spark-governor."""


@dashboards.command("list")
def dashboards_list() -> None:
    """List the dashboards and their panel counts."""
    from spark_governor.dashboards import load_all

    for d in load_all():
        click.echo(f"{d['uid']}: {d['title']} ({len(d['panels'])} panels)")


@dashboards.command("export")
@click.argument("uid")
def dashboards_export(uid: str) -> None:
    """Print dashboard UID as JSON."""
    from spark_governor.dashboards import load_all

    for d in load_all():
        if d["uid"] == uid:
            click.echo(json.dumps(d, indent=2))
            return
    raise click.ClickException(f"no dashboard with uid {uid!r}")


@dashboards.command("push")
@click.option("--grafana-url", required=True, help="e.g. http://127.0.0.1:3000")
@click.option("--token", envvar="GRAFANA_TOKEN", default=None, help="API token (or GRAFANA_TOKEN).")
@click.option("--user", envvar="GRAFANA_USER", default=None)
@click.option("--password", envvar="GRAFANA_PASSWORD", default=None)
@click.option("--datasource-uid", default=None, help="Prometheus datasource uid to bind panels to.")
@click.option("--folder-uid", default=None, help="Grafana folder uid.")
def dashboards_push(grafana_url: str, token, user, password, datasource_uid, folder_uid) -> None:
    """Create or update every dashboard in Grafana (grafana-client)."""
    from spark_governor.dashboards.push import PushError, push_all

    try:
        for uid, status in push_all(grafana_url, token=token, user=user, password=password,
                                    datasource_uid=datasource_uid, folder_uid=folder_uid):
            click.echo(f"{uid}: {status}")
    except PushError as exc:
        raise click.ClickException(str(exc)) from None


@main.group()
def bench() -> None:
    """Benchmarks: print ratios against a baseline measured in the same run and write JSON."""


@bench.command("overhead")
@click.option("--runs", default=3, show_default=True, type=click.IntRange(1), help="Runs per variant.")
@click.option("--batches", default=30, show_default=True, type=click.IntRange(1), help="Measured batches per run.")
@click.option("--rows", default=20_000, show_default=True, type=click.IntRange(1), help="Rows per batch.")
@click.option("--ingest-tasks", default=200_000, show_default=True, type=click.IntRange(1000),
              help="Task records POSTed for the ingest benchmark.")
@click.option("--out", default="bench-results/overhead.json", show_default=True, type=click.Path(dir_okay=False))
def bench_overhead(runs: int, batches: int, rows: int, ingest_tasks: int, out: str) -> None:
    """Reporter overhead on a Spark job, and ingest throughput of POST /api/v1/reports."""
    from spark_governor.bench.overhead import run_overhead_bench

    result = run_overhead_bench(runs=runs, batches=batches, rows=rows, ingest_tasks=ingest_tasks,
                                log=lambda m: click.echo(m, err=True))
    write_json(result, out, indent=2)
    click.echo(json.dumps(result["summary"], indent=2))
    click.echo(f"wrote {out}", err=True)


@bench.command("scaling")
@click.option("--profiles", default="step,staircase,sinusoid,spike", show_default=True,
              help="Comma-separated rate profiles.")
@click.option("--duration", default=1200.0, show_default=True, type=click.FloatRange(60),
              help="Simulated seconds per run.")
@click.option("--seed", default=0, show_default=True, type=int, help="Seed of the processing-time noise.")
@click.option("--out", default="bench-results/scaling.json", show_default=True, type=click.Path(dir_okay=False))
@click.option("--plot", default="bench-results/scaling.png", show_default=True, type=click.Path(dir_okay=False),
              help="PNG of executors and rate over time ('' to skip).")
def bench_scaling(profiles: str, duration: float, seed: int, out: str, plot: str) -> None:
    """Executor policies vs static allocations on a simulated micro-batch job (no Spark)."""
    from spark_governor.bench.scaling import PROFILES, format_table, plot_report, run_scaling_bench

    names = tuple(p.strip() for p in profiles.split(",") if p.strip())
    unknown = sorted(set(names) - set(PROFILES))
    if unknown or not names:
        raise click.BadParameter(f"unknown {unknown or 'empty list'}; choose from {sorted(PROFILES)}",
                                 param_hint="--profiles")
    started = time.perf_counter()
    report = run_scaling_bench(profiles=names, duration_s=duration, seed=seed)
    write_json(report, out, indent=2)
    click.echo(format_table(report))
    click.echo(f"wrote {out} ({time.perf_counter() - started:.1f} s)", err=True)
    if plot:
        os.makedirs(os.path.dirname(plot) or ".", exist_ok=True)
        if plot_report(report, plot):
            click.echo(f"wrote {plot}", err=True)
        else:
            click.echo("matplotlib not installed: no plot", err=True)
