"""``spark-governor plan <algorithm>``: a partition plan for key counts, offline (any registered
partitioner, Prompt and its baselines included)."""
from __future__ import annotations

import json

import click

from spark_governor.api.cli import main


def parse_options(items: tuple[str, ...]) -> dict:
    """``NAME=VALUE`` pairs; VALUE is read as JSON when it parses (true, 3, "x"), else as a string."""
    out = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise click.BadParameter(f"expected NAME=VALUE, got {item!r}", param_hint="--option")
        try:
            out[name] = json.loads(value)
        except ValueError:
            out[name] = value
    return out


def format_plan(plan, metrics) -> str:
    lines = [f"{plan.algorithm}: {plan.total} tuples, {len(plan.keys)} keys, P={plan.partitions}, R={plan.reduce}",
             "block  tuples  keys"]
    for b, (n, c) in enumerate(zip(plan.block_loads().tolist(), plan.block_cardinalities().tolist())):
        lines.append(f"{b:5d}  {n:6d}  {c:4d}")
    split = plan.split_keys()
    lines.append(f"split keys ({len(split)}): " + ", ".join(f"{k}→{plan.blocks_of(k)}" for k in split[:20])
                 + (" ..." if len(split) > 20 else ""))
    lines.append("BSI {bsi:.3f}  BCI {bci:.3f}  KSR {ksr:.4f}  MPI {mpi:.4f}  max/mean load {max_mean_load:.4f}  "
                 "BSI(buckets) {bsi_buckets:.3f}".format(**metrics.to_dict()))
    return "\n".join(lines)


@main.command("plan")
@click.argument("algorithm")
@click.option("--counts", "counts_path", required=True, type=click.Path(dir_okay=False),
              help="CSV file with lines 'key,count' (optional header).")
@click.option("--partitions", "-p", required=True, type=click.IntRange(1), help="Map blocks P.")
@click.option("--reduce", "-r", "reduce_", default=None, type=click.IntRange(1), help="Reduce buckets R (default P).")
@click.option("--option", "-o", "options", multiple=True, metavar="NAME=VALUE",
              help="Partitioner option, e.g. -o zigzag_start=continue (repeatable).")
@click.option("--arrival", default="grouped", show_default=True, type=click.Choice(["grouped", "shuffled"]),
              help="Arrival order for per-tuple partitioners: grouped by key in file order, or shuffled.")
@click.option("--seed", default=0, show_default=True, type=int, help="Seed of the shuffled arrival order.")
@click.option("--json", "as_json", is_flag=True, help="Print the plan and its metrics as JSON.")
@click.option("--previous", "previous_path", default=None, type=click.Path(dir_okay=False),
              help="Routing tables (mixed, mintable, minmig): JSON with the previous window's counts and table "
                   "(or an earlier plan's --json output); migration cost is reported against it.")
def plan_command(algorithm: str, counts_path: str, partitions: int, reduce_, options, arrival: str, seed: int,
                 as_json: bool, previous_path) -> None:
    """Partition key counts with ALGORITHM (prompt, hash, shuffle, time, pk2, pk5, cam, ...).

    Prints the assignment (key → blocks with tuple counts, Reduce bucket per key), the tuples per
    Map block and the metrics BSI, BCI, KSR, MPI (Prompt, SIGMOD'20 Eqs. 2–6)."""
    from spark_governor.policies.partitioning.base import PlanError
    from spark_governor.policies.partitioning.counts_file import read_counts
    from spark_governor.policies.partitioning.metrics import plan_metrics
    from spark_governor.policies.partitioning.registry import get_partitioner

    try:
        partitioner = get_partitioner(algorithm, **parse_options(options))
        if previous_path:
            from spark_governor.policies.partitioning.routing_plan import apply_previous
            apply_previous(partitioner, previous_path)
        try:
            batch = read_counts(counts_path)
        except OSError as exc:
            raise PlanError(f"{counts_path}: {exc.strerror}") from None
        if arrival == "shuffled":
            batch = batch.with_arrival(seed)
        plan = partitioner.plan(batch, partitions, reduce_)
    except PlanError as exc:
        raise click.ClickException(str(exc)) from None
    metrics = plan_metrics(plan)
    extra = partitioner.report() if hasattr(partitioner, "report") else {}
    if as_json:
        click.echo(json.dumps({**plan.to_dict(), "metrics": metrics.to_dict(), "arrival": arrival, **extra}))
    else:
        click.echo(format_plan(plan, metrics))
        for name, value in extra.items():
            click.echo(f"{name}: {json.dumps(value)}")


from spark_governor.api.cli_extra import bench  # noqa: E402  (the bench group)


def _floats(text: str, name: str) -> list[float]:
    try:
        return [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise click.BadParameter(f"expected comma-separated numbers, got {text!r}", param_hint=name) from None


@bench.command("partitioners")
@click.option("--z", "zs", default="0.5,1.0,1.5,2.0", show_default=True, help="Zipf exponents.")
@click.option("--supports", default="10000,100000,1000000", show_default=True, help="Key supports (distinct keys drawn from).")
@click.option("--tuples", default=1_000_000, show_default=True, type=click.IntRange(1), help="Tuples per batch.")
@click.option("--partitions", default="8,32,128", show_default=True, help="Map blocks P.")
@click.option("--algorithms", default=None, help="Comma-separated partitioners (default: all registered).")
@click.option("--repeats", default=3, show_default=True, type=click.IntRange(1), help="Plans per case (partitioners under 1 s); the least CPU time is kept.")
@click.option("--seed", default=0, show_default=True, type=int)
@click.option("--out", default="bench-results/partitioners.json", show_default=True, type=click.Path(dir_okay=False))
@click.option("--plot", default="bench-results/partitioners.png", show_default=True, type=click.Path(dir_okay=False))
def bench_partitioners(zs, supports, tuples, partitions, algorithms, repeats, seed, out, plot) -> None:
    """Every partitioner's BSI, BCI, KSR, MPI, max/mean block load and planning throughput on Zipf batches."""
    from spark_governor.bench.output import write_json
    from spark_governor.bench.partitioners import format_table, plot_report, run_partitioner_bench
    from spark_governor.policies.partitioning.base import PlanError

    try:
        report = run_partitioner_bench(zs=_floats(zs, "--z"), supports=[int(x) for x in _floats(supports, "--supports")],
                                       tuples=tuples, partitions=[int(x) for x in _floats(partitions, "--partitions")],
                                       algorithms=[a.strip() for a in algorithms.split(",")] if algorithms else None,
                                       seed=seed, repeats=repeats)
    except PlanError as exc:
        raise click.ClickException(str(exc)) from None
    write_json(report, out)
    plot_report(report, plot)
    click.echo(format_table(report))
    click.echo(f"wrote {out} and {plot}")


@bench.command("spark-skew")
@click.option("--batches", default=6, show_default=True, type=click.IntRange(2), help="Micro-batches per partitioner (the first is warm-up).")
@click.option("--rows", default=200_000, show_default=True, type=click.IntRange(1), help="Rows per micro-batch.")
@click.option("--z", default=1.5, show_default=True, type=click.FloatRange(0), help="Zipf exponent of the keys.")
@click.option("--keys", default=10_000, show_default=True, type=click.IntRange(1), help="Key support.")
@click.option("--cores", default=None, type=click.IntRange(1), help="Task slots, local[cores] (default: all cores).")
@click.option("--partitions", default=None, type=click.IntRange(1), help="Map blocks P (default: cores).")
@click.option("--work", default="cpu", show_default=True, type=click.Choice(["cpu", "wait"]),
              help="Per-record Map work: CPU-bound Python UDF, or a latency-bound wait per record.")
@click.option("--work-loops", default=300, show_default=True, type=click.IntRange(1), help="Iterations per record (cpu).")
@click.option("--work-us", default=20.0, show_default=True, type=click.FloatRange(0), help="Microseconds per record (wait).")
@click.option("--seed", default=0, show_default=True, type=int)
@click.option("--out", default="bench-results/spark_skew.json", show_default=True, type=click.Path(dir_okay=False))
@click.option("--plot", default="bench-results/spark_skew.png", show_default=True, type=click.Path(dir_okay=False))
def bench_spark_skew(batches, rows, z, keys, cores, partitions, work, work_loops, work_us, seed, out, plot) -> None:
    """Batch processing time of a real Spark streaming job under skew: hash vs the Prompt plan (median, ratio)."""
    from spark_governor.bench.output import write_json
    from spark_governor.bench.spark_skew import format_report, plot_report, run_spark_skew_bench

    report = run_spark_skew_bench(batches=batches, rows=rows, z=z, keys=keys, cores=cores, partitions=partitions,
                                  work=work, work_loops=work_loops, work_us=work_us, seed=seed)
    write_json(report, out)
    plot_report(report, plot)
    click.echo(format_report(report))
    click.echo(f"wrote {out} and {plot}")
