"""``spark-governor demo``: a control plane in its own process, the Zipf example job against it, its statistics."""
from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path

import click

from spark_governor.api.cli.stats import echo_job_stats
from spark_governor.api.processes import ProcessError, free_port, start_serve, stop_process


@click.command()
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
        try:
            proc = start_serve(db_url, port, stderr=subprocess.PIPE)
        except ProcessError as exc:
            raise click.ClickException(str(exc)) from None
        try:
            click.echo(f"control plane: {url} ({db_url}); running the Zipf job for {seconds:.0f}s ...", err=True)
            cfg = DemoConfig(job="zipf-demo", endpoint=url, seconds=seconds, rows_per_second=rate, keys=keys, skew=skew)
            result = run_demo_job(cfg)
            click.echo(f"job finished: {result.batches} micro-batches, {result.input_rows:,} rows; "
                       f"reporter: {result.reporter_stats}", err=True)
            echo_job_stats(url, "zipf-demo", windows=1000, batches=10000)
        finally:
            stop_process(proc)
