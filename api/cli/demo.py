"""``spark-governor demo``: a control plane in its own process, the Zipf example job against it, and a policy
evaluating it (the orchestration is ``spark_governor.api.demo``)."""
from __future__ import annotations

import click

from spark_governor.api.demo import DEFAULT_BOUND_MS, DEFAULT_OUT_DIR, DemoError, run_demo


@click.command()
@click.option("--seconds", default=60.0, show_default=True, type=click.FloatRange(5),
              help="How long the job runs (after a few seconds of warm-up batches).")
@click.option("--rate", default=2000, show_default=True, type=click.IntRange(1), help="Source rows per second.")
@click.option("--keys", default=1000, show_default=True, type=click.IntRange(1))
@click.option("--skew", default=1.1, show_default=True, type=click.FloatRange(0), help="Zipf exponent.")
@click.option("--port", default=0, type=click.IntRange(0, 65535), help="Control plane port (0: a free one).")
@click.option("--db", "db_url", default=None, help="Database URL (default: a temporary SQLite file).")
@click.option("--bound-ms", default=DEFAULT_BOUND_MS, show_default=True, type=click.FloatRange(min=1),
              help="Latency constraint declared for the job: bound on the mean record latency, milliseconds.")
@click.option("--out-dir", default=DEFAULT_OUT_DIR, show_default=True, type=click.Path(file_okay=False),
              help="Where the figure of the run (zipf-demo.png) and the API answers it shows (zipf-demo.json) "
                   "are written.")
def demo(seconds: float, rate: int, keys: int, skew: float, port: int, db_url: str | None, bound_ms: float,
         out_dir: str) -> None:
    """Run the example job against a control plane and let a policy evaluate it.

    Starts a control plane, declares a latency constraint and enables the Kingman policy in dry-run
    mode through its HTTP API, runs the Zipf job (local[2]) with a progress line per micro-batch and
    per decision on stderr, then prints per-stage statistics and the policy's recommendation with
    the prediction behind it, and writes a figure of the run to OUT_DIR. In local mode the policy
    recommends task slots (executors cannot be changed there).
    """
    try:
        run_demo(seconds=seconds, rate=rate, keys=keys, skew=skew, port=port, db_url=db_url, bound_ms=bound_ms,
                 out_dir=out_dir, out=click.echo, err=lambda msg: click.echo(msg, err=True))
    except DemoError as exc:
        raise click.ClickException(str(exc)) from None
