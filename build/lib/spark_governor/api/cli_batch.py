"""``spark-governor bench batch-sizing``: fixed-point vs PID vs fastest vs static intervals (issue 5)."""
from __future__ import annotations

import os
import time

import click

from spark_governor.api.cli_extra import bench
from spark_governor.bench.output import write_json


@bench.command("batch-sizing")
@click.option("--horizon", default=90.0, show_default=True, type=click.FloatRange(20),
              help="Simulated arrival time per run (s); rate steps at 1/3 and 2/3 of it.")
@click.option("--seed", default=0, show_default=True, type=int, help="Seed of the processing-time noise.")
@click.option("--noise", default=0.05, show_default=True, type=click.FloatRange(0, 1),
              help="Lognormal shape of the processing-time noise (mean 1).")
@click.option("--out-dir", default="bench-results", show_default=True, type=click.Path(file_okay=False))
@click.option("--no-plot", is_flag=True, help="Skip the PNG.")
@click.option("--spark", "with_spark", is_flag=True, help="Also run the short real-Spark version (local[2]).")
@click.option("--spark-phase-seconds", default=20.0, show_default=True, type=click.FloatRange(5),
              help="Real Spark: seconds per rate phase (rate, 2x rate, rate).")
@click.option("--spark-rate", default=1000.0, show_default=True, type=click.FloatRange(1),
              help="Real Spark: rows/s before and after the step.")
@click.option("--spark-cost-per-row", default=2e-4, show_default=True, type=click.FloatRange(0),
              help="Real Spark: seconds the sink sleeps per row (p = Spark's overhead + c·N).")
def bench_batch_sizing(horizon: float, seed: int, noise: float, out_dir: str, no_plot: bool, with_spark: bool,
                       spark_phase_seconds: float, spark_rate: float, spark_cost_per_row: float) -> None:
    """Batch-interval controllers on a queueing simulation of a micro-batch system (and real Spark)."""
    from spark_governor.bench.batch_sizing import run_bench

    started = time.perf_counter()
    report = run_bench(horizon_s=horizon, seed=seed, out_dir=out_dir, noise=noise, png=not no_plot)
    click.echo(report["table"])
    click.echo(f"wrote {report['json']}" + (f" and {report['png']}" if "png" in report else "")
               + f" ({time.perf_counter() - started:.1f} s)", err=True)
    if with_spark:
        from spark_governor.bench.batch_sizing_spark import format_spark_table, run_spark_bench

        spark_report = run_spark_bench(rate=spark_rate, phase_s=spark_phase_seconds, cost_per_row_s=spark_cost_per_row,
                                       log=lambda m: click.echo(m, err=True))
        path = os.path.join(out_dir, "batch_sizing_spark.json")
        write_json(spark_report, path)
        click.echo("\nreal Spark (local[2], paced Zipf source, rate x2 step then back):")
        click.echo(format_spark_table(spark_report))
        click.echo(f"wrote {path}", err=True)
