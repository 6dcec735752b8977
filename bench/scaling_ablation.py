"""Which of the executor policies' options earn their place (issue #44): an ablation in the calibrated simulator.

``spark-governor bench scaling-ablation``: for each extension of a policy beyond its paper's rule (Kingman: the
thesis, Lohrmann §4.6–4.7, digest 004; threshold: Spark's dynamic allocation read per micro-batch; utilization-target:
the Flink autoscaler's utilization target) and for each part of the job's attachment that serves the policies (the
source probe, the executor warm-up, the listener jar's launch and slot holds), the same policy runs with that one
extension *off* against the policy at today's defaults, over a grid:

* **clusters**: every cluster a real run measured (``bench scaling-real``'s reports; by default the ones kept under
  ``tests/data``), each the simulator calibrated from its runs as ``bench scaling --calibrate`` does
  (``bench.calibration_cluster.cluster_params``, ``bench.scaling_calibrate.sim_params``), and four derived from the
  newest: registration (provisioning delay) × 2 and × ½, service (per row, per task, per batch) × 1.5 and × 1/1.5;
* **load shapes** with the same peak (16 000 rows/s by default, the real runs' peak): staircases with gentle and sharp
  steps, the staircase issue #44 calls hidden, a spike, a random walk, a diurnal ramp and a burst train
  (:func:`shapes`);
* **seeds** of the simulator's noise.

Every cell runs the job as ``attach()`` does by default (source probed, added executors warmed, both holds) with
the control plane's default evaluation settings of the cluster's report; a job-side variant turns one of those off.
Per variant and cell: the share of constraint spans whose true mean latency is within the bound (mean over seeds)
and the executor-seconds registered, against the same policy at its defaults in the same cell. Only *feasible* cells
count: those where a static allocation at the most executors keeps 95 % of the spans (a slower cluster at the peak
may be beyond any size). Per variant over the grid (:func:`summarize`), read per load shape (over every cluster) and
per cluster (over every shape): what the extension **buys** — the most points of worst-case attainment it adds in
one of them, the largest share of executor-seconds it saves in one — and what it **costs** — the most points of
worst-case attainment it loses in one —, and the grid's worst case with and without it. The issue's rule
(:func:`verdict`): an extension earns its place when it buys ≥ 2 points or ≥ 5 % of executor-seconds somewhere and
loses < 2 points everywhere. Not in the papers: the grid, the feasibility cut and the reading per shape and per
cluster are this project's.

The simulator is for search and explaining: an option this removes is also checked on the real cluster
(``bench scaling-real``). Units: rows/s, seconds, executor-seconds; attainment a share (0–1).
"""
from __future__ import annotations

import math
import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Callable, Optional

import numpy as np

from spark_governor.bench.calibration_cluster import cluster_params
from spark_governor.bench.scaling_calibrate import load_report, sim_params, simulate_run
from spark_governor.bench.scaling_sim_model import DEFAULT_PARAMS

PEAK = 16000.0
#: gains and losses that count (issue #44): two points of attainment, 5 % of executor-seconds
POINTS = 0.02
SAVING = 0.05

#: the policies' extensions, each with the value(s) that turn it off (the paper's rule where it has one)
EXTENSIONS: dict[str, dict[str, dict]] = {
    "kingman": {
        "bulk arrivals": {"bulk_arrivals": False},
        "scale-down margin": {"scale_down_margin": 0.0},
        "spare executor": {"spare_executors": 0},
        "live rate": {"live_rate": False},
        "wave sizing": {"wave_sizing": False},
    },
    "threshold": {
        "in flight": {"in_flight": False},
    },
    "utilization-target": {
        "in flight": {"in_flight": False},
        "live rate": {"live_rate": False},
    },
}
#: Kingman with every extension above off: the thesis' rule on today's control plane
THESIS = "all off (the thesis' rule)"
#: the job's attachment (``attach()``'s defaults), each off: report fields the calibration reads
JOB_SIDE: dict[str, dict] = {
    "source probe": {"source_probe": False},
    "executor warm-up (and its slot hold)": {"warm_executors": False, "slot_hold": False},
    "launch hold": {"launch_hold": False, "launch_hold_waves": None},
    "slot hold": {"slot_hold": False},
    "jar only (no probe, no warm-up)": {"source_probe": False, "warm_executors": False, "slot_hold": False},
}
JOB_DEFAULTS = {"source_probe": True, "warm_executors": True, "launch_hold": True, "slot_hold": True}


def shapes(peak: float = PEAK, seed: int = 0) -> dict[str, tuple[list[list[float]], float]]:
    """Load shapes with the same ``peak`` rows/s: name → (switches [[t s, rows/s], …], duration s). The random
    walk is drawn from ``seed`` (steps of ±peak/8 every 10 s within [peak/8, peak], its maximum raised to the
    peak); the diurnal ramp is a half sine from peak/8 to the peak and back in 10 s steps."""
    def stairs(levels, level_s):
        return [[i * level_s, peak * x] for i, x in enumerate(levels)], len(levels) * level_s

    low = 1 / 8
    rng = np.random.default_rng(seed)
    walk, x = [], 0.25
    for _ in range(30):
        walk.append(x)
        x = float(np.clip(x + rng.choice([-low, 0.0, low]), low, 1.0))
    walk[int(np.argmax(walk))] = 1.0
    diurnal = [low + (1 - low) * math.sin(math.pi * i / 30) for i in range(31)]
    burst = ([low] * 4 + [1.0] * 2) * 5
    return {
        "default staircase": stairs((1 / 8, 1 / 2, 1, 1 / 2, 1 / 8), 50.0),
        "gentle staircase": stairs((1 / 8, 1 / 4, 1 / 2, 1, 1 / 2, 1 / 4, 1 / 8), 40.0),
        "sharp staircase": stairs((1 / 8, 1, 1 / 8), 60.0),
        "hidden staircase": stairs((3 / 16, 3 / 4, 1 / 4, 1, 1 / 8), 40.0),
        "spike": ([[0.0, peak * 3 / 16], [100.0, peak], [130.0, peak * 3 / 16]], 250.0),
        "random walk": stairs(tuple(walk), 10.0),
        "diurnal ramp": stairs(tuple(diurnal), 10.0),
        "burst train": stairs(tuple(burst), 10.0),
    }


def clusters(paths: list[str], derive: bool = True) -> list[tuple[str, str, dict]]:
    """(name, report path, simulator overrides) per cluster: each report's own, and (``derive``) four derived from
    the newest report of a quiet cluster (by its ``date``, else its name; a run with ``cpu_hog`` is a slowed
    cluster of its own, not a reference to derive from — unless every report is one): registration × 2 / × ½,
    service × 1.5 / × 1/1.5."""
    out = [(Path(p).stem.replace("scaling-real-", ""), str(p), {}) for p in paths]
    if derive and paths:
        reports = {p: load_report(p) for p in paths}
        quiet = [p for p in paths if not reports[p].get("cpu_hog")] or list(paths)
        newest = max(quiet, key=lambda p: (str(reports[p].get("date") or ""), Path(p).name))
        base = Path(newest).stem.replace("scaling-real-", "")
        for label, over in (("registration ×2", {"registration": 2.0}), ("registration ×½", {"registration": 0.5}),
                            ("service ×1.5", {"service": 1.5}), ("service ×1/1.5", {"service": 1 / 1.5})):
            out.append((f"{base} {label}", str(newest), over))
    return out


def _params(report: dict, derived: dict):
    """The simulator's parameters for ``report`` (its job-side fields as given) with a derived cluster's factors."""
    cluster = cluster_params(report)
    params, _ = sim_params(report, cluster)
    f = derived.get("registration")
    if f:
        params = replace(params, up_delay_s=params.up_delay_s * f, up_delays_s=tuple(d * f for d in params.up_delays_s))
    f = derived.get("service")
    if f:
        params = replace(params, row_cost_s=params.row_cost_s * f, task_overhead_s=params.task_overhead_s * f,
                         task_overhead_per_slot_s=params.task_overhead_per_slot_s * f,
                         driver_overhead_s=params.driver_overhead_s * f)
    return params


def variants(policies: tuple[str, ...]) -> dict[str, dict]:
    """Variant name → {"policy", "config" (overrides of the policy's defaults), "job" (report fields)}: per policy
    its defaults, each extension off and (Kingman) all off; each job-side part off under Kingman."""
    out: dict[str, dict] = {}
    for policy in policies:
        out[f"{policy}: defaults"] = {"policy": policy, "config": {}, "job": {}}
        for name, cfg in EXTENSIONS.get(policy, {}).items():
            out[f"{policy}: {name} off"] = {"policy": policy, "config": cfg, "job": {}}
        if policy == "kingman":
            everything = {k: v for cfg in EXTENSIONS["kingman"].values() for k, v in cfg.items()}
            out[f"kingman: {THESIS}"] = {"policy": "kingman", "config": everything, "job": {}}
            for name, job in JOB_SIDE.items():
                out[f"kingman: {name} off"] = {"policy": "kingman", "config": {}, "job": job}
    return out


#: the cell's static allocation at the most executors (its feasibility: :data:`FEASIBLE`)
STATIC = "static at the most executors"
#: a cell counts where the static allocation at the most executors keeps this share of spans (mean over seeds):
#: elsewhere no policy of 1..max executors can keep the SLO, and its spans say nothing about an option
FEASIBLE = 0.95


def run_cell(path: str, derived: dict, shape: tuple[list[list[float]], float], variant_map: dict[str, dict],
             seeds: list[int]) -> dict[str, dict]:
    """Every variant on one cluster and load shape, and :data:`STATIC`: name → {"attainment" (mean over seeds),
    "attainment_worst", "executor_seconds", "static_executor_seconds", "actions"}."""
    base = load_report(path)
    switches, duration = shape
    out = {}
    calibrated: dict[tuple, tuple[dict, object]] = {}  # per job-side variant: the report and the cluster fitted once
    for name, v in {STATIC: {"policy": None, "config": {}, "job": {}}, **variant_map}.items():
        key = tuple(sorted(v["job"].items()))
        if key not in calibrated:
            job = {**base, **JOB_DEFAULTS,
                   "launch_hold_waves": DEFAULT_PARAMS.launch_hold_waves,  # the plugin's default, as bench scaling-real
                   **v["job"]}
            calibrated[key] = (job, _params(job, derived))
        job, params = calibrated[key]
        policy = v["policy"] or f"static-{params.max_executors}"
        report = {**job, "policy_configs": {policy: dict(v["config"])}}
        run = {"policy": policy, "initial_executors": 1, "switches": switches, "duration_s": duration}
        sim = simulate_run(report, run, params, seeds)
        out[name] = {"attainment": sim["slo_attainment_windows"], "attainment_worst": min(sim["slo_attainment_range"]),
                     "executor_seconds": sim["executor_seconds"],
                     "static_executor_seconds": params.max_executors * duration, "actions": sim["actions"]}
    return out


def _cell(args):
    return run_cell(*args)


def run_ablation(report_paths: list[str], policies: tuple[str, ...] = ("kingman", "threshold", "utilization-target"),
                 shape_names: Optional[list[str]] = None, seeds: int = 3, seed: int = 0, derive: bool = True,
                 workers: int = 2, peak: float = PEAK, log: Callable[[str], None] = lambda m: None) -> dict:
    """The ablation over every cluster of ``report_paths`` (and the derived ones) × load shape × seed; JSON-ready:
    the grid's cells, the per-variant :func:`summarize` with its :func:`verdict`."""
    all_shapes = shapes(peak, seed)
    names = list(all_shapes) if shape_names is None else list(shape_names)
    unknown = [n for n in names if n not in all_shapes]
    if unknown:
        raise ValueError(f"unknown load shape(s) {unknown}: choose from {list(all_shapes)}")
    vmap = variants(policies)
    grid = clusters(report_paths, derive)
    seed_list = list(range(seed, seed + seeds))
    jobs = [(c, s) for c in grid for s in names]
    args = [(path, derived, all_shapes[s], vmap, seed_list) for (_, path, derived), s in jobs]
    cells = []
    if workers > 1:
        with ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn")) as pool:
            results = pool.map(_cell, args)
            for ((cname, _, _), s), res in zip(jobs, results):
                cells.append({"cluster": cname, "shape": s, "variants": res})
                log(f"{cname} / {s}: done")
    else:
        for ((cname, _, _), s), a in zip(jobs, args):
            cells.append({"cluster": cname, "shape": s, "variants": run_cell(*a)})
            log(f"{cname} / {s}: done")
    summary = summarize(cells, vmap)
    return {"policies": list(policies), "clusters": [{"name": n, "report": p, "derived": d} for n, p, d in grid],
            "shapes": {n: {"switches": all_shapes[n][0], "duration_s": all_shapes[n][1]} for n in names},
            "peak": peak, "seeds": seed_list, "variants": vmap, "cells": cells, "summary": summary,
            "rule": {"points": POINTS, "saving": SAVING}, "cpus": os.cpu_count()}


def feasible(cells: list[dict]) -> list[dict]:
    """The cells where :data:`STATIC` keeps :data:`FEASIBLE` of the spans."""
    return [c for c in cells if c["variants"][STATIC]["attainment"] >= FEASIBLE - 1e-9]


def _groups(cells: list[dict]) -> dict[str, list[dict]]:
    """The grid's rows and columns: per load shape (every cluster) and per cluster (every shape)."""
    out: dict[str, list[dict]] = {}
    for c in cells:
        out.setdefault(f"shape {c['shape']}", []).append(c)
        out.setdefault(f"cluster {c['cluster']}", []).append(c)
    return out


def summarize(cells: list[dict], vmap: dict[str, dict]) -> dict[str, dict]:
    """Per variant against its policy's defaults over the :func:`feasible` cells, read per group of the grid (each
    load shape over every cluster, each cluster over every shape; a group's *worst case* is its lowest cell, a
    cell's attainment the mean over seeds, its executor-seconds the sum over its cells): ``buys_points`` (the most
    worst-case attainment the option adds in a group: defaults − off), ``costs_points`` (the most it loses in a
    group: off − defaults), ``saves`` (the largest share of a group's executor-seconds it saves: 1 − defaults /
    off; negative: it saves in none), ``spends`` (the most it adds: defaults / off − 1), each with the group
    (``where_*``); the worst case of every feasible cell with the option (``worst``) and without (``worst_off``),
    the mean executor-seconds against static, and the :func:`verdict`. Reading groups, not single cells: one cell's
    three seeds move by a span (3 points) when an option shifts one decision."""
    ok = feasible(cells)
    groups = _groups(ok)
    out = {}
    for name, v in vmap.items():
        ref = f"{v['policy']}: defaults"
        row = {"policy": v["policy"], "cells": len(ok),
               "worst_off": min(c["variants"][name]["attainment"] for c in ok),
               "worst_seed_off": min(c["variants"][name]["attainment_worst"] for c in ok),
               "ratio_vs_static_off": float(np.mean([c["variants"][name]["executor_seconds"]
                                                     / c["variants"][name]["static_executor_seconds"] for c in ok])),
               "worst": min(c["variants"][ref]["attainment"] for c in ok),
               "ratio_vs_static": float(np.mean([c["variants"][ref]["executor_seconds"]
                                                 / c["variants"][ref]["static_executor_seconds"] for c in ok]))}
        if name != ref:
            gain, spent = {}, {}
            for g, cs in groups.items():
                gain[g] = (min(c["variants"][ref]["attainment"] for c in cs)
                           - min(c["variants"][name]["attainment"] for c in cs))
                off = sum(c["variants"][name]["executor_seconds"] for c in cs)
                spent[g] = sum(c["variants"][ref]["executor_seconds"] for c in cs) / off - 1 if off > 0 else 0.0
            best, worst = max(gain, key=gain.get), min(gain, key=gain.get)
            cheap, dear = min(spent, key=spent.get), max(spent, key=spent.get)
            row.update(buys_points=gain[best], where_buys=best, costs_points=max(0.0, -gain[worst]),
                       where_costs=worst, saves=-spent[cheap], where_saves=cheap,
                       spends=max(0.0, spent[dear]), where_spends=dear)
            row["verdict"] = verdict(row)
        out[name] = row
    return out


def verdict(row: dict) -> str:
    """The issue's rule for one extension's row: ``earns`` (buys ≥ 2 points of attainment or ≥ 5 % of
    executor-seconds in some cell and costs < 2 points in every cell), ``mixed`` (buys, and costs ≥ 2 points
    somewhere), ``costs`` (buys nothing, costs ≥ 2 points), ``nothing`` (neither)."""
    buys = row["buys_points"] >= POINTS - 1e-9 or row["saves"] >= SAVING - 1e-9
    costs = row["costs_points"] >= POINTS - 1e-9
    return {(True, False): "earns", (True, True): "mixed", (False, True): "costs", (False, False): "nothing"}[
        (buys, costs)]


def ablation_rows(out: dict) -> list[list[str]]:
    """The table's rows: variant, worst case at the defaults → with the option off, executor-seconds against
    static at the defaults → off, what it buys (points, where), saves, spends, costs (points, where), verdict."""
    rows = []
    for name, r in out["summary"].items():
        if "verdict" not in r:
            rows.append([name, f"{r['worst']:.3f}", f"{r['ratio_vs_static']:.2f}×", "", "", "", "", "", "", ""])
            continue
        rows.append([name, f"{r['worst']:.3f} → {r['worst_off']:.3f}",
                     f"{r['ratio_vs_static']:.2f}× → {r['ratio_vs_static_off']:.2f}×",
                     f"{100 * r['buys_points']:+.1f}", r["where_buys"] if r["buys_points"] > 0 else "",
                     f"{100 * max(0.0, r['saves']):.0f} %", f"{100 * r['spends']:.0f} %",
                     f"{100 * r['costs_points']:.1f}", r["where_costs"] if r["costs_points"] > 0 else "",
                     r["verdict"]])
    return rows


HEADER = ["variant (option off)", "worst case", "× static", "buys (points)", "where", "saves", "spends",
          "costs (points)", "where", "verdict"]


def caption(out: dict) -> str:
    first = next(iter(out["summary"].values()), {})
    return (f"{len(out['clusters'])} clusters × {len(out['shapes'])} load shapes × {len(out['seeds'])} seeds, peak "
            f"{out['peak']:g} rows/s; {first.get('cells', 0)} of {len(out['cells'])} cells feasible (static at the "
            f"most executors keeps {FEASIBLE:g} of the spans); worst case: the lowest feasible cell, defaults → "
            f"option off; buys, saves, spends, costs: the most in one load shape or cluster")


def format_ablation(out: dict, markdown: bool = False) -> str:
    """:func:`ablation_rows` as a text table (the CLI's) or a Markdown one (the docs')."""
    rows = ablation_rows(out)
    if markdown:
        return "\n".join(["| " + " | ".join(HEADER) + " |", "|" + " --- |" * len(HEADER)]
                         + ["| " + " | ".join(r) + " |" for r in rows])
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(HEADER)]
    line = lambda cells: "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()  # noqa: E731
    return "\n".join([caption(out), line(HEADER), "-" * len(line(HEADER))] + [line(r) for r in rows])
