"""``spark-governor bench scaling-real``: Kingman vs a static allocation on a real standalone cluster."""
from __future__ import annotations

import time
from pathlib import Path

import click

from spark_governor.api.cli_extra import bench


def _levels(raw: str) -> tuple[float, ...]:
    try:
        levels = tuple(float(x) for x in raw.split(",") if x.strip())
    except ValueError:
        raise click.BadParameter(f"not a comma-separated list of numbers: {raw!r}", param_hint="--levels")
    if not levels or any(x <= 0 for x in levels):
        raise click.BadParameter("need at least one rate, every rate > 0", param_hint="--levels")
    return levels


@bench.command("scaling-real")
@click.option("--levels", default="2000,8000,16000,8000,2000", show_default=True,
              help="Staircase input rates (rows/s), comma-separated.")
@click.option("--level-seconds", default=50.0, show_default=True, type=click.FloatRange(10),
              help="Seconds per rate level.")
@click.option("--bound-ms", default=14000, show_default=True, type=click.IntRange(1),
              help="Latency constraint: mean record latency per span.")
@click.option("--span-s", default=8.0, show_default=True, type=click.FloatRange(1), help="Constraint span.")
@click.option("--max-executors", default=4, show_default=True, type=click.IntRange(1, 16),
              help="Worker cores = the most executors (1 core each).")
@click.option("--static-executors", default=4, show_default=True, type=click.IntRange(1, 16),
              help="Executors of the static baseline run.")
@click.option("--row-cost-us", default=100.0, show_default=True, type=click.FloatRange(0, min_open=True),
              help="Per-row work of the job (a sleep), microseconds.")
@click.option("--trigger-s", default=8.0, show_default=True, type=click.FloatRange(1), help="Trigger interval.")
@click.option("--policies", default="kingman,static", show_default=True, help="Runs, in order: kingman, static.")
@click.option("--workdir", default=None, type=click.Path(file_okay=False), help="Logs, checkpoints, SQLite (default: a temp dir).")
@click.option("--out", default="bench-results/scaling-real.json", show_default=True, type=click.Path(dir_okay=False))
def bench_scaling_real(levels: str, level_seconds: float, bound_ms: int, span_s: float, max_executors: int,
                       static_executors: int, row_cost_us: float, trigger_s: float, policies: str, workdir, out: str) -> None:
    """Kingman vs static executors on a real Spark standalone cluster on 127.0.0.1 (needs Java; minutes)."""
    from spark_governor.bench.scaling_real import format_real_table, run_real_scaling_bench

    names = tuple(p.strip() for p in policies.split(",") if p.strip())
    bad = sorted(set(names) - {"kingman", "static"})
    if bad or not names:
        raise click.BadParameter(f"unknown {bad or 'empty list'}; choose from kingman, static", param_hint="--policies")
    if static_executors > max_executors:
        raise click.BadParameter("must not exceed --max-executors", param_hint="--static-executors")
    started = time.perf_counter()
    report = run_real_scaling_bench(levels=_levels(levels), level_s=level_seconds, bound_s=bound_ms / 1000.0,
                                    span_s=span_s, trigger_s=trigger_s, max_executors=max_executors, static_executors=static_executors,
                                    row_cost_us=row_cost_us, policies=names,
                                    workdir=Path(workdir) if workdir else None,
                                    log=lambda m: click.echo(m, err=True))
    from spark_governor.bench.output import write_json

    write_json(report, out, indent=2)
    click.echo(format_real_table(report))
    click.echo(f"wrote {out} ({time.perf_counter() - started:.0f} s)", err=True)
