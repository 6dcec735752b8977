"""What-if staircases on a measured cluster: Kingman config variants, simulated (issue #14).

A variant is Kingman config overrides; ``{"policy": "threshold"}`` (or ``utilization-target``) runs that
policy with its defaults instead, for comparison.

``spark-governor bench scaling-whatif --calibrate FILE``: the simulator takes the cluster parameters a
real run measured (``bench scaling-real``'s JSON, as ``bench scaling --calibrate`` does:
provisioning delay, driver overhead, warm-up, service time per row, noise) and runs the Kingman policy
under each config variant on each staircase — the real run's own and others with the same peak — from
one executor, over a few seeds. The baseline, measured in the same run, is the static allocation at the
run's ``max_executors`` (its executor-seconds are max × duration; every span within the bound on
these staircases). Printed per staircase and variant: attainment (mean and worst over seeds: the
share of constraint spans whose true mean latency is within the bound) and executor-seconds as a ratio
of the static run's. It is how the ``spare_executors`` default was first chosen (issue #44's
``bench scaling-ablation`` now weighs every option over every measured cluster); the figures that count are the real cluster's (``bench scaling-real``). The cluster
parameters are pooled over the *real* run's policies once (``bench.calibration_cluster.cluster_params``),
the same for every staircase and variant; ``run_whatif(overrides=...)`` replaces some of them (e.g. a
slower provisioning delay) to check a choice against a cluster other than the one measured.
Units: rows/s, seconds, executor-seconds.
"""
from __future__ import annotations

import copy
from dataclasses import asdict, replace
from typing import Callable

from spark_governor.bench.calibration_cluster import cluster_params
from spark_governor.bench.scaling_calibrate import sim_params, simulate_run

#: staircases with the default real run's peak (16 000 rows/s), each (levels rows/s, seconds per level)
STAIRCASES: tuple[tuple[tuple[float, ...], float], ...] = (
    ((2000, 8000, 16000, 8000, 2000), 50.0),
    ((2000, 4000, 16000, 4000, 2000), 50.0),
    ((4000, 16000, 4000), 50.0),
    ((2000, 16000, 2000), 60.0),
    ((8000, 16000, 8000), 50.0),
    ((2000, 8000, 16000, 8000, 2000), 30.0),
    ((2000, 4000, 8000, 16000, 8000, 4000, 2000), 40.0),
)

#: the variants compared by default: the thesis' size, one spare executor (the default), two
VARIANTS: dict[str, dict] = {"spare 0 (thesis size)": {"spare_executors": 0},
                             "spare 1 (default)": {"spare_executors": 1},
                             "spare 2": {"spare_executors": 2}}


def parse_staircases(text: str) -> tuple[tuple[tuple[float, ...], float], ...]:
    """``"2000,16000,2000x60;4000,16000,4000x50"`` → staircases (levels, seconds per level); ValueError
    naming the bad part."""
    out = []
    for part in (p.strip() for p in text.split(";") if p.strip()):
        levels, _, secs = part.partition("x")
        try:
            lv = tuple(float(x) for x in levels.split(",") if x.strip())
            s = float(secs) if secs else 50.0
        except ValueError:
            raise ValueError(f"staircase {part!r}: want RATE,RATE,...xSECONDS") from None
        if not lv or min(lv) < 0 or s <= 0:
            raise ValueError(f"staircase {part!r}: rates ≥ 0 and seconds > 0 needed")
        out.append((lv, s))
    if not out:
        raise ValueError("no staircase given")
    return tuple(out)


def run_whatif(report: dict, staircases=STAIRCASES, variants: dict[str, dict] | None = None, seeds: int = 3,
               seed: int = 0, log: Callable[[str], None] = lambda m: None, overrides: dict | None = None) -> dict:
    """Every variant on every staircase with the cluster measured in ``report``; JSON-ready.
    ``overrides``: simulator parameters (``SimParams`` fields, e.g. ``{"up_delay_s": 10.0}`` seconds)
    replacing the measured ones — a sensitivity check of a choice against a cluster slower than the
    one measured."""
    variants = VARIANTS if variants is None else variants
    max_exec = int(report["max_executors"])
    # the cluster measured by the real run's policies (pooled over ``report["results"]``), fixed for every
    # staircase and variant: a what-if run has no measurements of its own (until 2026-11-25 the pool was
    # taken over the what-if run itself, i.e. the simulator's defaults: a 10 s provisioning delay, no
    # warm-up and no driver or task overhead)
    cluster = cluster_params(report)
    params, defaults = sim_params(report, cluster)
    if overrides:
        # a single provisioning delay replaces the measured ones (the simulator draws from ``up_delays_s``
        # whenever it has them: until 2026-11-26 an ``up_delay_s`` override alone changed nothing)
        single = {"up_delays_s": ()} if "up_delay_s" in overrides and "up_delays_s" not in overrides else {}
        params = replace(params, **{**overrides, **single})
    rows = []
    for levels, level_s in staircases:
        static_s = max_exec * len(levels) * level_s
        for name, cfg in variants.items():
            what = copy.deepcopy(report)
            what["levels"], what["level_s"] = list(levels), level_s
            policy = cfg.get("policy", "kingman")
            # a variant is overrides of the policy's *current* defaults, not of the config the real run
            # had (``report["policy_configs"]`` says what ran there; ``{}`` is today's default)
            what["policy_configs"] = {policy: {k: v for k, v in cfg.items() if k != "policy"}}
            run = {"policy": policy, "initial_executors": 1}
            sim = simulate_run(what, run, params, list(range(seed, seed + seeds)))
            rows.append({"levels": list(levels), "level_s": level_s, "variant": name, "config": cfg,
                         "attainment": sim["slo_attainment_windows"],
                         "attainment_worst": min(sim["slo_attainment_range"]),
                         "executor_seconds": sim["executor_seconds"], "static_executor_seconds": static_s,
                         "ratio_vs_static": sim["executor_seconds"] / static_s, "actions": sim["actions"]})
            log(f"{_name(levels, level_s)} {name}: {rows[-1]['attainment']:.3f} at {rows[-1]['ratio_vs_static']:.2f}×")
    summary = {}
    for name in variants:
        mine = [r for r in rows if r["variant"] == name]
        summary[name] = {"worst_attainment": min(r["attainment_worst"] for r in mine),
                         "mean_attainment": sum(r["attainment"] for r in mine) / len(mine),
                         "max_ratio_vs_static": max(r["ratio_vs_static"] for r in mine),
                         "mean_ratio_vs_static": sum(r["ratio_vs_static"] for r in mine) / len(mine)}
    return {"real_date": report.get("date"), "max_executors": max_exec, "bound_s": report["bound_s"],
            "params": asdict(params), "defaults": defaults, "overrides": dict(overrides or {}),
            "seeds": list(range(seed, seed + seeds)), "variants": variants, "results": rows, "summary": summary}


def _name(levels, level_s) -> str:
    return ",".join(f"{x / 1000:g}k" for x in levels) + f" × {level_s:g} s"


def format_whatif(out: dict) -> str:
    names = list(out["variants"])
    head = f"{'staircase':<34}" + "".join(f"{n[:22]:>24}" for n in names)
    lines = [f"attainment mean (worst seed) / executor-seconds vs static-{out['max_executors']}; "
             f"bound {out['bound_s']:g} s; seeds {out['seeds'][0]}..{out['seeds'][-1]}", head, "-" * len(head)]
    keys = []
    for r in out["results"]:
        k = (tuple(r["levels"]), r["level_s"])
        if k not in keys:
            keys.append(k)
    for levels, level_s in keys:
        cells = ""
        for n in names:
            r = next(x for x in out["results"] if tuple(x["levels"]) == levels and x["level_s"] == level_s
                     and x["variant"] == n)
            cells += f"{r['attainment']:>9.3f} ({r['attainment_worst']:.3f}) {r['ratio_vs_static']:.2f}×"
        lines.append(f"{_name(levels, level_s):<34}{cells}")
    lines.append("-" * len(head))
    lines.append(f"{'worst / max ratio':<34}" + "".join(
        f"{out['summary'][n]['worst_attainment']:>17.3f} {out['summary'][n]['max_ratio_vs_static']:.2f}×"
        for n in names))
    return "\n".join(lines)
