"""``spark-governor bench partitioners-drift``: Dalton and Fang et al.'s routing tables side by side
with hash, shuffle, PK-2/PK-5, cAM and Prompt on a drifting Zipf stream (issue 7)."""
from __future__ import annotations

import click

from spark_governor.api.cli_extra import bench


@bench.command("partitioners-drift")
@click.option("--z", "zs", default="1.0,1.5", show_default=True, help="Zipf exponents (comma-separated).")
@click.option("--support", default=10_000, show_default=True, type=click.IntRange(1), help="Distinct keys drawn from.")
@click.option("--tuples", default=200_000, show_default=True, type=click.IntRange(1), help="Tuples per batch.")
@click.option("--batches", default=30, show_default=True, type=click.IntRange(1))
@click.option("--drift-every", default=10, show_default=True, type=click.IntRange(1), help="Batches between changes of the hot keys.")
@click.option("--partitions", default=8, show_default=True, type=click.IntRange(1), help="Blocks / stateful instances P.")
@click.option("--algorithms", default=None, help="Comma-separated partitioners (default: hash, shuffle, pk2, pk5, cam, "
                                                 "prompt, dalton, mixed, mintable, minmig).")
@click.option("--theta-max", default=0.08, show_default=True, type=click.FloatRange(0), help="Routing tables: θmax.")
@click.option("--table-max", default=3000, show_default=True, type=click.IntRange(0), help="Routing tables: Amax.")
@click.option("--plan-margin", default=0.5, show_default=True, type=click.FloatRange(0, 1, max_open=True),
              help="Routing tables: re-plan above θmax but plan for θmax·(1 − margin) (0: the paper's target).")
@click.option("--dalton-hot-factor", default=8.0, show_default=True, type=click.FloatRange(1, 100),
              help="Also run Dalton with heavy hitters at count ≥ total/(factor·P) (ours; 1: only the paper's).")
@click.option("--window", default=5, show_default=True, type=click.IntRange(1), help="Routing tables: state window w (batches).")
@click.option("--settle", default=3, show_default=True, type=click.IntRange(0), help="Batches after each drift excluded from 'converged'.")
@click.option("--seed", default=0, show_default=True, type=int)
@click.option("--out", default="bench-results/partitioners_drift.json", show_default=True, type=click.Path(dir_okay=False))
@click.option("--plot", default="bench-results/partitioners_drift.png", show_default=True, type=click.Path(dir_okay=False))
def bench_partitioners_drift(zs, support, tuples, batches, drift_every, partitions, algorithms, theta_max, table_max,
                             plan_margin, dalton_hot_factor, window, settle, seed, out, plot) -> None:
    """Max/mean load per batch, migration cost, table size and decisions/s on a drifting Zipf stream."""
    from spark_governor.bench.output import write_json
    from spark_governor.bench.partitioners_drift import format_drift, plot_drift, run_drift_bench
    from spark_governor.policies.partitioning.base import PlanError

    try:
        z_values = [float(x) for x in zs.split(",") if x.strip()]
    except ValueError:
        raise click.BadParameter(f"expected comma-separated numbers, got {zs!r}", param_hint="--z") from None
    try:
        report = run_drift_bench(zs=z_values, support=support, tuples=tuples, batches=batches, drift_every=drift_every,
                                 partitions=partitions,
                                 algorithms=[a.strip() for a in algorithms.split(",")] if algorithms else None,
                                 theta_max=theta_max, table_max=table_max, window=window, settle=settle, seed=seed,
                                 plan_margin=plan_margin, dalton_hot_factor=dalton_hot_factor)
    except PlanError as exc:
        raise click.ClickException(str(exc)) from None
    write_json(report, out)
    plot_drift(report, plot)
    click.echo(format_drift(report))
    click.echo(f"wrote {out} and {plot}")


@bench.command("routing-compact")
@click.option("--keys", default=1_000_000, show_default=True, type=click.IntRange(1), help="Distinct keys.")
@click.option("--z", default=1.0, show_default=True, type=click.FloatRange(0), help="Zipf exponent of the key costs.")
@click.option("--tuples", default=10_000_000, show_default=True, type=click.IntRange(1), help="Tuples in the interval.")
@click.option("--partitions", default=8, show_default=True, type=click.IntRange(1), help="Instances P.")
@click.option("--degrees", default="0,4,16,64,256", show_default=True,
              help="HLHE degrees r, comma-separated (0: exact values).")
@click.option("--theta-max", default=0.08, show_default=True, type=click.FloatRange(0))
@click.option("--seed", default=0, show_default=True, type=int)
@click.option("--out", default="bench-results/routing_compact.json", show_default=True, type=click.Path(dir_okay=False))
def bench_routing_compact(keys, z, tuples, partitions, degrees, theta_max, seed, out) -> None:
    """MinMig and Mixed per key vs on compact records (§3.8), with and without discretisation (§3.9)."""
    from spark_governor.bench.output import write_json
    from spark_governor.bench.routing_compact import format_compact, run_compact_bench

    try:
        rs = [int(x) for x in degrees.split(",") if x.strip()]
    except ValueError:
        raise click.BadParameter(f"expected comma-separated integers, got {degrees!r}", param_hint="--degrees") from None
    if not rs or any(r < 0 for r in rs):
        raise click.BadParameter("degrees must be integers >= 0", param_hint="--degrees")
    report = run_compact_bench(keys=keys, z=z, tuples=tuples, partitions=partitions, degrees=rs,
                               theta_max=theta_max, seed=seed)
    write_json(report, out)
    click.echo(format_compact(report))
    click.echo(f"wrote {out}")
