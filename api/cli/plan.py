"""``spark-governor plan <algorithm>``: a partition plan for key counts, offline (any registered
partitioner, Prompt and its baselines included)."""
from __future__ import annotations

import json

import click


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


@click.command("plan")
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

