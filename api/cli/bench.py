"""``spark-governor bench``: benchmarks that print ratios against a baseline measured in the same run and write
JSON (the measuring code lives in ``spark_governor.bench``; this module only parses options and prints)."""
from __future__ import annotations

import json
import os
import time
from contextlib import contextmanager
from pathlib import Path

import click

from spark_governor.api.processes import ProcessError
from spark_governor.bench.output import write_json


@click.group()
def bench() -> None:
    """Benchmarks: print ratios against a baseline measured in the same run and write JSON."""


@bench.command("overhead")
@click.option("--runs", default=3, show_default=True, type=click.IntRange(1), help="Runs per variant.")
@click.option("--batches", default=30, show_default=True, type=click.IntRange(1), help="Measured batches per run.")
@click.option("--rows", default=20_000, show_default=True, type=click.IntRange(1), help="Rows per batch.")
@click.option("--ingest-tasks", default=200_000, show_default=True, type=click.IntRange(1000),
              help="Task records POSTed for the ingest benchmark.")
@click.option("--variants", default="without,with,jar,black-hole,drip", show_default=True,
              help="Comma-separated rows: without (always run, the baseline), with (attach()), jar (the listener "
                   "jar, when built), black-hole (attach() to a server that never answers), drip (attach() to one "
                   "that answers a byte every --drip-interval seconds).")
@click.option("--hostile-deadline", default=2.0, show_default=True, type=click.FloatRange(0, min_open=True),
              help="black-hole/drip rows: the reporter's total deadline per POST, seconds.")
@click.option("--hostile-retries", default=1, show_default=True, type=click.IntRange(0),
              help="black-hole/drip rows: resends of a report before the reporter drops it.")
@click.option("--drip-interval", default=1.0, show_default=True, type=click.FloatRange(0, min_open=True),
              help="drip row: seconds between the server's bytes.")
@click.option("--out", default="bench-results/overhead.json", show_default=True, type=click.Path(dir_okay=False))
def bench_overhead(runs: int, batches: int, rows: int, ingest_tasks: int, variants: str, hostile_deadline: float,
                   hostile_retries: int, drip_interval: float, out: str) -> None:
    """Reporter overhead on a Spark job (also against hostile endpoints), and ingest throughput of POST
    /api/v1/reports."""
    from spark_governor.bench.overhead import VARIANTS, HostileSettings, format_table, run_overhead_bench

    chosen = [v.strip() for v in variants.split(",") if v.strip()]
    unknown = [v for v in chosen if v not in VARIANTS]
    if unknown or not chosen:
        raise click.BadParameter(f"unknown {', '.join(unknown) or 'empty list'} (choose from {', '.join(VARIANTS)})",
                                 param_hint="--variants")
    hostile = HostileSettings(post_deadline_s=hostile_deadline, max_retries=hostile_retries, drip_s=drip_interval)
    try:
        result = run_overhead_bench(runs=runs, batches=batches, rows=rows, ingest_tasks=ingest_tasks,
                                    log=lambda m: click.echo(m, err=True), variants=chosen, hostile=hostile)
    except ProcessError as exc:
        raise click.ClickException(str(exc)) from None
    write_json(result, out, indent=2)
    click.echo(json.dumps(result["summary"], indent=2))
    click.echo(format_table(result["summary"]["table"]))
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
@click.option("--calibrate", "calibrate", default=None, type=click.Path(dir_okay=False),
              help="A `bench scaling-real` JSON: simulate its staircase and policies with the cluster parameters it "
                   "measured and print simulated vs real attainment and executor-seconds (--calibrate-seeds seeds from --seed; "
                   "--profiles/--duration/--plot unused; --out default bench-results/scaling-calibrate.json).")
@click.option("--calibrate-seeds", default=5, show_default=True, type=click.IntRange(1, 1000),
              help="With --calibrate: simulated seeds per policy run (--seed, --seed + 1, …).")
@click.option("--live-state/--no-live-state", default=True, show_default=True,
              help="The policies see the job between batches and the cluster profile, as the control plane "
                   "does (bench.scaling.LIVE_STATE); off: the completed batches only (the thesis' view).")
@click.option("--probe/--no-probe", default=False, show_default=True,
              help="With the live state: the job's source is probed between batches (collectors.source_probe), "
                   "so its live arrival rate shows a rate step within a second, and the control plane's surge "
                   "evaluations act on it.")
@click.option("--config", "configs", multiple=True, metavar="POLICY=JSON",
              help="Overrides of a governed policy's defaults, e.g. 'kingman={\"spare_executors\": 0}'; "
                   "repeatable, one per policy.")
@click.pass_context
def bench_scaling(ctx: click.Context, profiles: str, duration: float, seed: int, out: str, plot: str,
                  calibrate, calibrate_seeds: int, live_state: bool, probe: bool, configs: tuple[str, ...]) -> None:
    """Executor policies vs static allocations on a simulated micro-batch job (no Spark)."""
    from spark_governor.bench.scaling import GOVERNED, PROFILES, bench_params, format_table, plot_report, run_scaling_bench

    if calibrate is not None:
        options = {"live_state": "--live-state/--no-live-state", "probe": "--probe/--no-probe", "configs": "--config"}
        for name, option in options.items():
            if ctx.get_parameter_source(name) is not click.core.ParameterSource.DEFAULT:
                raise click.BadParameter("not with --calibrate (it replays the real run's configs and view)",
                                         param_hint=option)
        from spark_governor.bench.scaling_calibrate import (CalibrationError, format_calibration, load_report,
                                                           run_calibration)

        if ctx.get_parameter_source("out") is click.core.ParameterSource.DEFAULT:
            out = "bench-results/scaling-calibrate.json"
        try:
            result = run_calibration(load_report(calibrate), seed=seed, seeds=calibrate_seeds)
        except CalibrationError as exc:
            raise click.ClickException(f"--calibrate: {exc}") from None
        write_json(result, out, indent=2)
        click.echo(format_calibration(result))
        click.echo(f"wrote {out}", err=True)
        return

    names = tuple(p.strip() for p in profiles.split(",") if p.strip())
    unknown = sorted(set(names) - set(PROFILES))
    if unknown or not names:
        raise click.BadParameter(f"unknown {unknown or 'empty list'}; choose from {sorted(PROFILES)}",
                                 param_hint="--profiles")
    if probe and not live_state:
        raise click.BadParameter("a probed source needs the live state (not with --no-live-state)",
                                 param_hint="--probe")
    overrides = _policy_configs(configs, GOVERNED)
    started = time.perf_counter()
    report = run_scaling_bench(profiles=names, duration_s=duration, seed=seed,
                               params=bench_params(live_state, probe), configs=overrides)
    write_json(report, out, indent=2)
    click.echo(format_table(report))
    click.echo(f"wrote {out} ({time.perf_counter() - started:.1f} s)", err=True)
    if plot:
        os.makedirs(os.path.dirname(plot) or ".", exist_ok=True)
        if plot_report(report, plot):
            click.echo(f"wrote {plot}", err=True)
        else:
            click.echo("matplotlib not installed: no plot", err=True)


def _measured_cluster(f):
    """``--calibrate`` and ``--staircases`` of the commands that simulate a measured cluster."""
    f = click.option("--staircases", default=None,
                     help="RATE,RATE,...xSECONDS;... (default: seven staircases with a 16 000 rows/s peak).")(f)
    return click.option("--calibrate", "calibrate", required=True, type=click.Path(dir_okay=False),
                        help="A `bench scaling-real` JSON: the cluster it measured is simulated.")(f)


def _simulated_runs(f):
    """``--probe``, ``--launch-hold``, ``--seeds`` and ``--seed`` of the same commands."""
    f = click.option("--seed", default=0, show_default=True, type=int, help="First seed.")(f)
    f = click.option("--seeds", default=3, show_default=True, type=click.IntRange(1, 20), help="Seeds per run.")(f)
    f = click.option("--launch-hold/--no-launch-hold", default=None,
                     help="The simulated job runs the listener jar's launch hold (default: as in the real run).")(f)
    return click.option("--probe/--no-probe", default=None,
                        help="The simulated job's source is probed between batches (default: as in the real run).")(f)


@bench.command("scaling-whatif")
@_measured_cluster
@click.option("--variants", default=None,
              help='JSON object: variant name → Kingman config overrides, or {"policy": "threshold"} / '
                   '{"policy": "utilization-target"} for that policy (default: bench.scaling_whatif.VARIANTS: '
                   'spare 0, unless probed, 1 always (the default), 2 always).')
@_simulated_runs
@click.option("--out", default="bench-results/scaling-whatif.json", show_default=True,
              type=click.Path(dir_okay=False))
def bench_scaling_whatif(calibrate: str, staircases, variants, probe, launch_hold, seeds: int, seed: int,
                         out: str) -> None:
    """Kingman config variants on staircases, simulated on the cluster a real run measured (no Spark)."""
    import json

    from spark_governor.bench.scaling_calibrate import CalibrationError, load_report
    from spark_governor.bench.scaling_whatif import STAIRCASES, format_whatif, parse_staircases, run_whatif
    from spark_governor.policies.kingman_config import KingmanConfig

    try:
        stairs = parse_staircases(staircases) if staircases else STAIRCASES
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--staircases") from None
    chosen = None
    if variants:
        try:
            chosen = json.loads(variants)
            if not isinstance(chosen, dict) or not chosen or not all(isinstance(v, dict) for v in chosen.values()):
                raise ValueError("want a non-empty object of objects")
            for cfg in chosen.values():
                if cfg.get("policy", "kingman") not in ("kingman", "threshold", "utilization-target"):
                    raise ValueError(f"policy {cfg['policy']!r}: kingman, threshold or utilization-target")
                if cfg.get("policy", "kingman") == "kingman":
                    KingmanConfig(min_value=1, **{k: v for k, v in cfg.items() if k != "policy"})
        except ValueError as exc:  # json.JSONDecodeError and pydantic's ValidationError are ValueErrors
            raise click.BadParameter(str(exc).splitlines()[0], param_hint="--variants") from None
    try:
        report = load_report(calibrate)
    except CalibrationError as exc:
        raise click.ClickException(f"--calibrate: {exc}") from None
    result = run_whatif(report, stairs, chosen, seeds=seeds, seed=seed, log=lambda m: click.echo(m, err=True),
                        overrides=_sim_overrides(probe, launch_hold))
    write_json(result, out, indent=2)
    click.echo(format_whatif(result))
    click.echo(f"wrote {out}", err=True)


def _sim_overrides(probe, launch_hold) -> dict | None:
    """``--probe`` / ``--launch-hold`` of the what-if and frontier commands as simulator overrides (None: as
    in the real run)."""
    out = {}
    if probe is not None:
        out["live_probe"] = probe
    if launch_hold is not None:
        # the plugin's default rule, and the warm-up's slot hold with it
        out.update(launch_hold=launch_hold, launch_hold_waves=1.0, slot_hold=launch_hold)
    return out or None


def _frontier_grid(text: str) -> dict:
    """``--grid`` JSON → {policy: {knob: tuple of values}}; ValueError naming what is wrong."""
    from spark_governor.bench.scaling_frontier import grid_variants

    grid = json.loads(text)
    if not isinstance(grid, dict) or not grid:
        raise ValueError("want an object: policy → {config field: [values]}")
    out = {}
    for policy, knobs in grid.items():
        if policy not in ("threshold", "utilization-target"):
            raise ValueError(f"policy {policy!r}: threshold or utilization-target")
        if not isinstance(knobs, dict) or not knobs or not all(
                isinstance(v, list) and v and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in v)
                for v in knobs.values()):
            raise ValueError(f"{policy}: want {{config field: [numbers, ...]}}")
        out[policy] = {k: tuple(float(x) for x in v) for k, v in knobs.items()}
        if not grid_variants({policy: out[policy]}):
            raise ValueError(f"{policy}: no combination its config accepts (fields: "
                             f"{', '.join(out[policy])})")
    return out


@bench.command("scaling-ablation")
@click.option("--reports", default="tests/data/scaling-real-*.json", show_default=True,
              help="Glob of `bench scaling-real` reports: every cluster they measured (and four derived from the "
                   "newest: registration ×2 and ×½, service ×1.5 and ×1/1.5, unless --no-derived).")
@click.option("--derived/--no-derived", default=True, show_default=True, help="Add the four derived clusters.")
@click.option("--policies", default="kingman,threshold,utilization-target", show_default=True,
              help="Comma-separated: the policies whose extensions are ablated (the job-side ones go with kingman).")
@click.option("--shapes", "shape_names", default=None,
              help="Comma-separated load shapes (default all): default staircase, gentle staircase, sharp "
                   "staircase, hidden staircase, spike, random walk, diurnal ramp, burst train.")
@click.option("--peak", default=16000.0, show_default=True, type=click.FloatRange(1), help="Every shape's peak, rows/s.")
@click.option("--seeds", default=3, show_default=True, type=click.IntRange(1), help="Simulated seeds per cell.")
@click.option("--seed", default=0, show_default=True, type=int, help="First seed (and the random walk's).")
@click.option("--workers", default=2, show_default=True, type=click.IntRange(1), help="Processes.")
@click.option("--out", default="bench-results/scaling-ablation.json", show_default=True,
              type=click.Path(dir_okay=False))
def bench_scaling_ablation(reports: str, derived: bool, policies: str, shape_names, peak: float, seeds: int, seed: int,
                           workers: int, out: str) -> None:
    """Each policy option off against the defaults, over every measured cluster × load shape × seed (simulated,
    no Spark): what it buys, what it costs, whether it earns its place."""
    import glob

    from spark_governor.bench.scaling_ablation import format_ablation, run_ablation
    from spark_governor.bench.scaling_calibrate import CalibrationError, load_report

    paths = sorted(glob.glob(reports))
    if not paths:
        raise click.BadParameter(f"no file matches {reports!r}", param_hint="--reports")
    for p in paths:
        try:
            load_report(p)
        except CalibrationError as exc:
            raise click.BadParameter(f"{p}: {exc}", param_hint="--reports") from None
    chosen = tuple(x.strip() for x in policies.split(",") if x.strip())
    bad = [x for x in chosen if x not in ("kingman", "threshold", "utilization-target")]
    if bad or not chosen:
        raise click.BadParameter(f"{bad or policies!r}: kingman, threshold, utilization-target", param_hint="--policies")
    names = [x.strip() for x in shape_names.split(",") if x.strip()] if shape_names else None
    t0 = time.perf_counter()
    try:
        result = run_ablation(paths, chosen, names, seeds=seeds, seed=seed, derive=derived, workers=workers,
                              peak=peak, log=lambda m: click.echo(m, err=True))
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--shapes") from None
    result["seconds"] = time.perf_counter() - t0
    write_json(result, out, indent=1)
    click.echo(format_ablation(result))
    click.echo(f"wrote {out} ({result['seconds']:.0f} s)", err=True)


@bench.command("scaling-frontier")
@_measured_cluster
@click.option("--grid", default=None,
              help='JSON object: baseline → {config field: [values]}, every combination its config accepts '
                   '(default: bench.scaling_frontier.GRID, 33 threshold and 21 utilization-target configs).')
@_simulated_runs
@click.option("--out", default="bench-results/scaling-frontier.json", show_default=True,
              type=click.Path(dir_okay=False))
@click.option("--plot", default="bench-results/scaling-frontier.png", show_default=True,
              help="PNG of attainment against executor-seconds, a panel per staircase ('' to skip).")
def bench_scaling_frontier(calibrate: str, staircases, grid, probe, launch_hold, seeds: int, seed: int, out: str,
                           plot: str) -> None:
    """Kingman's defaults against each baseline over a grid of its configs, at equal executor-seconds,
    simulated on the cluster a real run measured (no Spark)."""
    from spark_governor.bench.scaling_calibrate import CalibrationError, load_report
    from spark_governor.bench.scaling_frontier import GRID, format_frontier, plot_frontier, run_frontier
    from spark_governor.bench.scaling_whatif import STAIRCASES, parse_staircases

    try:
        stairs = parse_staircases(staircases) if staircases else STAIRCASES
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--staircases") from None
    try:
        chosen = _frontier_grid(grid) if grid else GRID
    except ValueError as exc:  # json.JSONDecodeError is a ValueError
        raise click.BadParameter(str(exc).splitlines()[0], param_hint="--grid") from None
    try:
        report = load_report(calibrate)
    except CalibrationError as exc:
        raise click.ClickException(f"--calibrate: {exc}") from None
    result = run_frontier(report, stairs, chosen, seeds=seeds, seed=seed,
                          overrides=_sim_overrides(probe, launch_hold))
    write_json(result, out, indent=2)
    click.echo(format_frontier(result))
    click.echo(f"wrote {out}", err=True)
    if plot:
        if plot_frontier(result, plot):
            click.echo(f"wrote {plot}", err=True)
        else:
            click.echo("matplotlib not installed: no plot", err=True)


@bench.command("batch-sizing")
@click.option("--horizon", default=90.0, show_default=True, type=click.FloatRange(20),
              help="Simulated arrival time per run (s); rate steps at 1/3 and 2/3 of it.")
@click.option("--seed", default=0, show_default=True, type=int, help="Seed of the processing-time noise.")
@click.option("--noise", default=0.05, show_default=True, type=click.FloatRange(0, 1),
              help="Lognormal shape of the processing-time noise (mean 1).")
@click.option("--seeds", default=None, help="Also sweep these seeds (e.g. 0-5 or 0,3,7): worst ratio per workload "
                                            "and noise level, fixed-point vs fixed-point paper.")
@click.option("--noise-levels", default=None, help="Noise levels of the sweep, comma-separated (default: --noise).")
@click.option("--out-dir", default="bench-results", show_default=True, type=click.Path(file_okay=False))
@click.option("--no-plot", is_flag=True, help="Skip the PNG.")
@click.option("--spark", "with_spark", is_flag=True, help="Also run the short real-Spark version (local[2]).")
@click.option("--spark-phase-seconds", default=20.0, show_default=True, type=click.FloatRange(5),
              help="Real Spark: seconds per rate phase (rate, 2x rate, rate).")
@click.option("--spark-rate", default=1000.0, show_default=True, type=click.FloatRange(1),
              help="Real Spark: rows/s before and after the step.")
@click.option("--spark-cost-per-row", default=2e-4, show_default=True, type=click.FloatRange(0),
              help="Real Spark: seconds the sink sleeps per row (p = Spark's overhead + c·N).")
def bench_batch_sizing(horizon: float, seed: int, noise: float, seeds, noise_levels, out_dir: str, no_plot: bool,
                       with_spark: bool, spark_phase_seconds: float, spark_rate: float, spark_cost_per_row: float) -> None:
    """Batch-interval controllers on a queueing simulation of a micro-batch system (and real Spark):
    ``fixed-point`` (the policy's defaults) beside ``fixed-point paper`` (the paper's rule)."""
    from spark_governor.bench.batch_sizing import format_sweep, run_bench, run_sweep

    sweep_seeds = _seeds(seeds) if seeds else None
    levels = _floats(noise_levels, "--noise-levels") if noise_levels else [noise]
    if any(not 0 <= x <= 1 for x in levels):
        raise click.BadParameter("noise levels must be in [0, 1]", param_hint="--noise-levels")
    started = time.perf_counter()
    report = run_bench(horizon_s=horizon, seed=seed, out_dir=out_dir, noise=noise, png=not no_plot)
    click.echo(report["table"])
    click.echo(f"wrote {report['json']}" + (f" and {report['png']}" if "png" in report else "")
               + f" ({time.perf_counter() - started:.1f} s)", err=True)
    if sweep_seeds is not None or noise_levels:
        sweep = run_sweep(sweep_seeds if sweep_seeds is not None else [seed], levels, horizon_s=horizon)
        path = os.path.join(out_dir, "batch_sizing_sweep.json")
        write_json(sweep, path)
        click.echo("")
        click.echo(format_sweep(sweep))
        click.echo(f"wrote {path} ({sweep['elapsed_s']:.1f} s)", err=True)
    if with_spark:
        from spark_governor.bench.batch_sizing_spark import format_spark_table, run_spark_bench

        spark_report = run_spark_bench(rate=spark_rate, phase_s=spark_phase_seconds, cost_per_row_s=spark_cost_per_row,
                                       log=lambda m: click.echo(m, err=True))
        path = os.path.join(out_dir, "batch_sizing_spark.json")
        write_json(spark_report, path)
        click.echo("\nreal Spark (local[2], paced Zipf source, rate x2 step then back):")
        click.echo(format_spark_table(spark_report))
        click.echo(f"wrote {path}", err=True)


@contextmanager
def _plan_errors():
    """A partitioner's PlanError as a click error (no traceback)."""
    from spark_governor.policies.partitioning.base import PlanError

    try:
        yield
    except PlanError as exc:
        raise click.ClickException(str(exc)) from None


def _write_report(report: dict, out: str, plot: str, plot_report, format_report) -> None:
    """Write the JSON and the PNG (none when ``plot`` is ''), print the table and where they went."""
    write_json(report, out)
    if plot:
        plot_report(report, plot)
    click.echo(format_report(report))
    click.echo(f"wrote {out}" + (f" and {plot}" if plot else ""))


def _seeds(text: str) -> list[int]:
    """``0-5`` or ``0,3,7`` (or a mix) as a sorted list of distinct seeds."""
    out: set[int] = set()
    try:
        for part in (p.strip() for p in text.split(",")):
            if not part:
                continue
            lo, sep, hi = part.partition("-") if not part.startswith("-") else (part, "", "")
            out.update(range(int(lo), int(hi) + 1) if sep else [int(lo)])
    except ValueError:
        raise click.BadParameter(f"expected seeds like 0-5 or 0,3,7, got {text!r}", param_hint="--seeds") from None
    if not out:
        raise click.BadParameter("no seeds", param_hint="--seeds")
    return sorted(out)


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
@click.option("--plot", default="bench-results/partitioners.png", show_default=True, type=click.Path(dir_okay=False),
              help="PNG of the results ('' to skip).")
def bench_partitioners(zs, supports, tuples, partitions, algorithms, repeats, seed, out, plot) -> None:
    """Every partitioner's BSI, BCI, KSR, MPI, max/mean block load and planning throughput on Zipf batches."""
    from spark_governor.bench.partitioners import format_table, plot_report, run_partitioner_bench

    with _plan_errors():
        report = run_partitioner_bench(zs=_floats(zs, "--z"), supports=[int(x) for x in _floats(supports, "--supports")],
                                       tuples=tuples, partitions=[int(x) for x in _floats(partitions, "--partitions")],
                                       algorithms=[a.strip() for a in algorithms.split(",")] if algorithms else None,
                                       seed=seed, repeats=repeats)
    _write_report(report, out, plot, plot_report, format_table)


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
@click.option("--plot", default="bench-results/spark_skew.png", show_default=True, type=click.Path(dir_okay=False),
              help="PNG of the results ('' to skip).")
def bench_spark_skew(batches, rows, z, keys, cores, partitions, work, work_loops, work_us, seed, out, plot) -> None:
    """Batch processing time of a real Spark streaming job under skew: hash vs the Prompt plan (median, ratio)."""
    from spark_governor.bench.spark_skew import format_report, plot_report, run_spark_skew_bench

    report = run_spark_skew_bench(batches=batches, rows=rows, z=z, keys=keys, cores=cores, partitions=partitions,
                                  work=work, work_loops=work_loops, work_us=work_us, seed=seed)
    _write_report(report, out, plot, plot_report, format_report)


@bench.command("partitioners-drift")
@click.option("--z", "zs", default="1.0,1.5", show_default=True, help="Zipf exponents (comma-separated).")
@click.option("--support", default=10_000, show_default=True, type=click.IntRange(1), help="Distinct keys drawn from.")
@click.option("--tuples", default=200_000, show_default=True, type=click.IntRange(1), help="Tuples per batch.")
@click.option("--batches", default=30, show_default=True, type=click.IntRange(1))
@click.option("--drift-every", default=10, show_default=True, type=click.IntRange(1), help="Batches between changes of the hot keys.")
@click.option("--partitions", default=8, show_default=True, type=click.IntRange(1), help="Blocks / stateful instances P.")
@click.option("--algorithms", default=None, help="Comma-separated partitioners (default: hash, shuffle, pk2, pk5, cam, "
                                                 "prompt, dalton, dalton-paper, mixed, mixed-paper, mintable, minmig; "
                                                 "NAME-paper is a routing table in the paper's configuration).")
@click.option("--theta-max", default=0.08, show_default=True, type=click.FloatRange(0), help="Routing tables: θmax.")
@click.option("--table-max", default=3000, show_default=True, type=click.IntRange(0), help="Routing tables: Amax.")
@click.option("--plan-margin", default=0.5, show_default=True, type=click.FloatRange(0, 1, max_open=True),
              help="Routing tables: re-plan above θmax but plan for θmax·(1 − margin) (0: the paper's target).")
@click.option("--dalton-hot-factor", default=1.0, show_default=True, type=click.FloatRange(1, 100),
              help="Also run dalton-paper with heavy hitters at count ≥ total/(factor·P) (row dalton-paper-hhF; "
                   "1: no such row).")
@click.option("--window", default=5, show_default=True, type=click.IntRange(1), help="Routing tables: state window w (batches).")
@click.option("--settle", default=3, show_default=True, type=click.IntRange(0), help="Batches after each drift excluded from 'converged'.")
@click.option("--seed", default=0, show_default=True, type=int)
@click.option("--out", default="bench-results/partitioners_drift.json", show_default=True, type=click.Path(dir_okay=False))
@click.option("--plot", default="bench-results/partitioners_drift.png", show_default=True, type=click.Path(dir_okay=False),
              help="PNG of the results ('' to skip).")
def bench_partitioners_drift(zs, support, tuples, batches, drift_every, partitions, algorithms, theta_max, table_max,
                             plan_margin, dalton_hot_factor, window, settle, seed, out, plot) -> None:
    """Max/mean load per batch, planning time (median, p95), migration cost and table size on a drifting Zipf
    stream: the default rows (dalton, mixed) beside the paper's (dalton-paper, mixed-paper)."""
    from spark_governor.bench.partitioners_drift import format_drift, plot_drift, run_drift_bench

    z_values = _floats(zs, "--z")
    with _plan_errors():
        report = run_drift_bench(zs=z_values, support=support, tuples=tuples, batches=batches, drift_every=drift_every,
                                 partitions=partitions,
                                 algorithms=[a.strip() for a in algorithms.split(",")] if algorithms else None,
                                 theta_max=theta_max, table_max=table_max, window=window, settle=settle, seed=seed,
                                 plan_margin=plan_margin, dalton_hot_factor=dalton_hot_factor)
    _write_report(report, out, plot, plot_drift, format_drift)


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


def _levels(raw: str) -> tuple[float, ...]:
    try:
        levels = tuple(float(x) for x in raw.split(",") if x.strip())
    except ValueError:
        raise click.BadParameter(f"not a comma-separated list of numbers: {raw!r}", param_hint="--levels")
    if not levels or any(x <= 0 for x in levels):
        raise click.BadParameter("need at least one rate, every rate > 0", param_hint="--levels")
    return levels


def _policy_configs(raw: tuple[str, ...], names: tuple[str, ...]) -> dict[str, dict]:
    """``--config POLICY=JSON`` options → {policy: overrides}, each checked against the policy's config
    (BadParameter naming the policy and the field)."""
    from pydantic import ValidationError

    from spark_governor.bench.scaling import GOVERNED
    from spark_governor.bench.scaling_real import full_config

    out: dict[str, dict] = {}
    for item in raw:
        name, sep, text = item.partition("=")
        name = name.strip()
        if not sep or name not in GOVERNED:
            raise click.BadParameter(f"{item!r}: want POLICY=JSON with POLICY one of {', '.join(GOVERNED)}",
                                     param_hint="--config")
        if name not in names:
            raise click.BadParameter(f"{name} is not in --policies", param_hint="--config")
        if name in out:
            raise click.BadParameter(f"{name} given twice", param_hint="--config")
        try:
            value = json.loads(text)
        except ValueError as exc:
            raise click.BadParameter(f"{name}: not JSON ({exc})", param_hint="--config") from None
        if not isinstance(value, dict):
            raise click.BadParameter(f"{name}: want a JSON object of config fields", param_hint="--config")
        try:
            full_config(name, value)
        except ValidationError as exc:
            first = exc.errors()[0]
            field = ".".join(str(x) for x in first["loc"]) or "config"
            raise click.BadParameter(f"{name}: {field}: {first['msg']}", param_hint="--config") from None
        out[name] = value
    return out


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
@click.option("--policies", default="kingman,threshold,utilization-target,static", show_default=True,
              help="Runs, in order, on the same staircase: kingman, threshold, utilization-target, static.")
@click.option("--config", "configs", multiple=True, metavar="POLICY=JSON",
              help="Overrides of a governed policy's defaults, e.g. "
                   "'utilization-target={\"target_utilization\": 0.5}'; repeatable, one per policy.")
@click.option("--probe/--no-probe", default=True, show_default=True,
              help="The job's reporter probes its source's rate file between batches (collectors.source_probe).")
@click.option("--warm/--no-warm", default=True, show_default=True,
              help="The job's attach() warms executors added while it runs (collectors.executor_warmup).")
@click.option("--launch-hold/--no-launch-hold", default=True, show_default=True,
              help="The job runs the listener jar's launch hold (spark.plugins=io.sparkgovernor.LaunchHold): an "
                   "added executor takes no waiting task cold (collectors.launch_hold).")
@click.option("--jar-only", is_flag=True, default=False,
              help="Attach the job by the listener jar's Spark confs alone, as a job whose code cannot change: no "
                   "attach(), so no source probe and no executor warm-up (--probe and --warm are refused with it).")
@click.option("--cpu-hog", default=0.0, show_default=True, type=click.FloatRange(0, 16), metavar="CORES",
              help="CPU taken by busy processes while the runs go, in cores (0.5: half of one; bench.cpu_hog): a "
                   "slower cluster, registration and service alike (1 core of 2: registration 24 s, service ×1.5).")
@click.option("--workdir", default=None, type=click.Path(file_okay=False), help="Logs, checkpoints, SQLite (default: a temp dir).")
@click.option("--out", default="bench-results/scaling-real.json", show_default=True, type=click.Path(dir_okay=False))
def bench_scaling_real(levels: str, level_seconds: float, bound_ms: int, span_s: float, max_executors: int,
                       static_executors: int, row_cost_us: float, trigger_s: float, policies: str, configs: tuple[str, ...],
                       probe: bool, warm: bool, launch_hold: bool, jar_only: bool, cpu_hog: float, workdir,
                       out: str) -> None:
    """Executor policies vs static executors on a real Spark standalone cluster on 127.0.0.1 (needs Java;
    minutes per policy); writes the measured cluster parameters for `bench scaling --calibrate`."""
    from spark_governor.bench.scaling_real import POLICIES, format_real_table, run_real_scaling_bench

    names = tuple(p.strip() for p in policies.split(",") if p.strip())
    bad = sorted(set(names) - set(POLICIES))
    if bad or not names or len(set(names)) != len(names):
        raise click.BadParameter(f"unknown {bad or 'empty list' if bad or not names else 'repeated policy'}; "
                                 f"choose from {', '.join(POLICIES)}, each once", param_hint="--policies")
    if static_executors > max_executors:
        raise click.BadParameter("must not exceed --max-executors", param_hint="--static-executors")
    overrides = _policy_configs(configs, names)
    if jar_only:  # the probe and the warm-up are attach()'s: asked for explicitly, they cannot be had
        ctx = click.get_current_context()
        for name in ("probe", "warm"):
            if ctx.get_parameter_source(name) is click.core.ParameterSource.COMMANDLINE and ctx.params[name]:
                raise click.BadParameter("a jar-only job has no attach(): it cannot be had with --jar-only",
                                         param_hint=f"--{name}")
        probe = warm = False
    started = time.perf_counter()
    report = run_real_scaling_bench(levels=_levels(levels), level_s=level_seconds, bound_s=bound_ms / 1000.0,
                                    span_s=span_s, trigger_s=trigger_s, max_executors=max_executors, static_executors=static_executors,
                                    row_cost_us=row_cost_us, policies=names, configs=overrides, source_probe=probe,
                                    warm_executors=warm, launch_hold=launch_hold, jar_only=jar_only, cpu_hog=cpu_hog,
                                    workdir=Path(workdir) if workdir else None,
                                    log=lambda m: click.echo(m, err=True))
    write_json(report, out, indent=2)
    click.echo(format_real_table(report))
    if report.get("prediction"):
        from spark_governor.bench.scaling_real_prediction import format_prediction

        click.echo("")
        click.echo(format_prediction(report["prediction"]))
    click.echo(f"wrote {out} ({time.perf_counter() - started:.0f} s)", err=True)


@bench.command("warmup")
@click.option("--reps", default=2, show_default=True, type=click.IntRange(1, 20),
              help="Runs with the executor warm-up and as many without, alternately.")
@click.option("--workdir", default=None, type=click.Path(file_okay=False), help="Cluster logs (default: a temp dir).")
@click.option("--out", default="bench-results/warmup.json", show_default=True, type=click.Path(dir_okay=False))
def bench_warmup(reps: int, workdir, out: str) -> None:
    """An added executor's first mapInPandas task with and without attach()'s warm-up, on a real Spark
    standalone cluster on 127.0.0.1 (needs Java; about a minute per run), against the executor warm from the
    start in the same run."""
    from spark_governor.bench.warmup import format_warmup, run_warmup_bench

    started = time.perf_counter()
    report = run_warmup_bench(reps=reps, workdir=Path(workdir) if workdir else None,
                              log=lambda m: click.echo(m, err=True))
    write_json(report, out, indent=2)
    click.echo(format_warmup(report))
    click.echo(f"wrote {out} ({time.perf_counter() - started:.0f} s)", err=True)


@bench.command("load")
@click.option("--jobs", default=200, show_default=True, type=click.IntRange(1, 5000), help="Simulated jobs (1 report/s each).")
@click.option("--seconds", default=30, show_default=True, type=click.IntRange(1, 3600), help="Measured seconds.")
@click.option("--db", "db_url", default=None, help="SQLAlchemy URL of the control plane's database (required "
                                                   "unless --floor).")
@click.option("--floor", is_flag=True, help="Against the no-storage floor instead of serve (api.load_floor: token, "
                                            "gunzip and validation of each report, nothing stored).")
@click.option("--workers", default=2, show_default=True, type=click.IntRange(1, 64), help="serve --workers.")
@click.option("--threads", default=8, show_default=True, type=click.IntRange(1, 256), help="serve --threads.")
@click.option("--tasks", default=40, show_default=True, type=click.IntRange(2, 10_000), help="Task records per report.")
@click.option("--policy-share", default=0.2, show_default=True, type=click.FloatRange(0, 1),
              help="Share of the jobs with a (dry-run) policy configured.")
@click.option("--linger-ms", default=None, type=click.FloatRange(0, 1000),
              help="serve --batch-linger-ms (default: serve's own).")
@click.option("--replicas", default=1, show_default=True, type=click.IntRange(1, 16),
              help="serve processes on the same database, each job's reports to one of them.")
@click.option("--report-seconds", "report_s", default=1, show_default=True, type=click.IntRange(1, 60),
              help="Each job reports every N seconds, a report holding N seconds of the job (attach(flush_interval_s=N, "
                   "state_interval_s=N)).")
@click.option("--baseline/--no-baseline", default=False, show_default=True,
              help="First the same load of whole-task reports (schema v2, as reporters of before the edge fold "
                   "send them) on a database of its own, then the folded one; print the ratios.")
@click.option("--log", "log_path", default=None, type=click.Path(dir_okay=False), help="serve's log file.")
@click.option("--out", default="bench-results/load.json", show_default=True, type=click.Path(dir_okay=False))
def bench_load(jobs: int, seconds: int, db_url, floor: bool, workers: int, threads: int, tasks: int,
               policy_share: float, linger_ms, replicas: int, report_s: int, baseline: bool, log_path,
               out: str) -> None:
    """Simulated reporters against `serve` on 127.0.0.1: offered vs achieved, stored, p50/p99, CPU per report."""
    from spark_governor.bench.load import baseline_url, format_ratios, format_result, run_load

    if not db_url and not floor:
        raise click.BadParameter("a database URL is required (or --floor)", param_hint="--db")
    if db_url and floor:
        raise click.BadParameter("--floor stores nothing: leave --db out", param_hint="--db")
    if baseline and floor:
        raise click.BadParameter("--floor stores nothing: no baseline to compare", param_hint="--baseline")
    runs = {}
    for shape in (("whole", "folded") if baseline else ("folded",)):
        url = baseline_url(db_url) if shape == "whole" else db_url
        runs[shape] = run_load(jobs, seconds, url or "", workers=workers, threads=threads, tasks=tasks,
                               policy_share=policy_share, linger_ms=linger_ms, log_path=log_path, floor=floor,
                               replicas=replicas, shape=shape, report_s=report_s,
                               out=lambda m: click.echo(m, err=True))
        click.echo(format_result(runs[shape]))
    result = runs["folded"].as_dict()
    if baseline:
        result["baseline"] = runs["whole"].as_dict()
        click.echo(format_ratios(runs["folded"], runs["whole"]))
    write_json(result, out, indent=2)
