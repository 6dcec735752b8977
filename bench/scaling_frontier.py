"""Attainment against executor-seconds: each baseline over a grid of its configs beside Kingman's defaults,
simulated on the cluster a real run measured (issue #14, the goal's last clause).

"Ahead of threshold and utilization-target on attainment at no more executor-seconds" compares policies at
a budget. A baseline's defaults are one point of many: it can be configured to spend more (a lower
``scale_up_ratio``, a lower ``target_utilization``) and keep more spans. So per staircase this module runs
Kingman at its defaults (the *reference*) and every config of :data:`GRID` for each baseline, and reads off
per baseline:

* its **best attainment at no more executor-seconds** than the reference (the configs within the
  reference's executor-seconds; none: every config spends more);
* its **cheapest config that attains as much** as the reference (none: no config does).

Kingman is *ahead* of a baseline on a staircase when its attainment is above the baseline's best at its
budget, *level* when equal (every span kept by both, as on gentle staircases), *behind* when below.
Attainment is the mean over seeds of the share of spans whose true mean latency is within the bound
(``bench.latency_truth``); executor-seconds are registered executors integrated over the run, as a ratio
of static-``max_executors`` over the same staircase. The simulation is ``bench.scaling_whatif``'s (the
cluster parameters pooled over the real run's policies); the figures that count are the real cluster's
(``bench scaling-real --config POLICY=JSON`` runs a config this picks).

Not in the papers: the thesis compares Kingman with static allocations only.
"""
from __future__ import annotations

import itertools
from typing import Callable

from spark_governor.bench.scaling_whatif import STAIRCASES, _name, run_whatif
from spark_governor.policies.registry import InvalidConfig, get_policy, validate_config

REFERENCE = "kingman (defaults)"

#: each baseline's knobs and the values tried (every combination its config accepts): how often and at
#: which load threshold scales, and where utilization-target centres its band and how wide it is
GRID: dict[str, dict[str, tuple]] = {
    "threshold": {"scaling_interval_s": (8.0, 24.0, 60.0), "scale_up_ratio": (0.3, 0.5, 0.7, 0.9),
                  "scale_down_ratio": (0.05, 0.1, 0.3)},
    "utilization-target": {"target_utilization": (0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8),
                           "utilization_boundary": (0.1, 0.2, 0.3)},
}


def grid_variants(grid: dict[str, dict[str, tuple]] = GRID, max_executors: int = 4) -> dict[str, dict]:
    """Variant name → ``{"policy": name, **config}`` for every combination of ``grid`` that the policy's
    config accepts (its validation: e.g. threshold's ``scale_down_ratio`` below ``scale_up_ratio``)."""
    out: dict[str, dict] = {}
    for policy, knobs in grid.items():
        cls = get_policy(policy)
        keys = list(knobs)
        for values in itertools.product(*(knobs[k] for k in keys)):
            cfg = dict(zip(keys, values))
            try:
                validate_config(cls, {"min_value": 1, "max_value": max_executors, **cfg})
            except InvalidConfig:
                continue
            out[f"{policy} " + " ".join(f"{k}={v:g}" for k, v in cfg.items())] = {"policy": policy, **cfg}
    return out


def frontier_rows(whatif: dict, reference: str = REFERENCE) -> list[dict]:
    """Per staircase and baseline policy of a ``run_whatif`` result: the reference's attainment and ratio,
    the baseline's best attainment at no more executor-seconds and its cheapest config as good, and the
    verdict (``ahead``, ``level``, ``behind``)."""
    rows = []
    stairs: list[tuple] = []
    for r in whatif["results"]:
        key = (tuple(r["levels"]), r["level_s"])
        if key not in stairs:
            stairs.append(key)
    for levels, level_s in stairs:
        here = [r for r in whatif["results"] if tuple(r["levels"]) == levels and r["level_s"] == level_s]
        ref = next(r for r in here if r["variant"] == reference)
        policies = sorted({r["config"].get("policy", "kingman") for r in here if r["variant"] != reference})
        for policy in policies:
            mine = [r for r in here if r["variant"] != reference and r["config"].get("policy", "kingman") == policy]
            within = [r for r in mine if r["executor_seconds"] <= ref["executor_seconds"]]
            best = max(within, key=lambda r: (r["attainment"], -r["executor_seconds"]), default=None)
            as_good = [r for r in mine if r["attainment"] >= ref["attainment"]]
            cheapest = min(as_good, key=lambda r: (r["executor_seconds"], -r["attainment"]), default=None)
            if best is None or ref["attainment"] > best["attainment"] + 1e-9:
                verdict = "ahead"
            elif ref["attainment"] >= best["attainment"] - 1e-9:
                verdict = "level"
            else:
                verdict = "behind"
            rows.append({
                "levels": list(levels), "level_s": level_s, "policy": policy, "configs": len(mine),
                "reference_attainment": ref["attainment"], "reference_ratio": ref["ratio_vs_static"],
                "best_at_budget": None if best is None else {
                    "variant": best["variant"], "attainment": best["attainment"],
                    "ratio_vs_static": best["ratio_vs_static"]},
                "cheapest_as_good": None if cheapest is None else {
                    "variant": cheapest["variant"], "attainment": cheapest["attainment"],
                    "ratio_vs_static": cheapest["ratio_vs_static"]},
                "verdict": verdict})
    return rows


def run_frontier(report: dict, staircases=STAIRCASES, grid: dict[str, dict[str, tuple]] = GRID, seeds: int = 3,
                 seed: int = 0, log: Callable[[str], None] = lambda m: None, overrides: dict | None = None) -> dict:
    """Kingman's defaults and every grid config on every staircase (``run_whatif``), with the frontier
    rows (:func:`frontier_rows`) under ``"frontier"``; JSON-ready."""
    variants = {REFERENCE: {}, **grid_variants(grid, int(report["max_executors"]))}
    out = run_whatif(report, staircases, variants, seeds=seeds, seed=seed, log=log, overrides=overrides)
    out["grid"] = {p: {k: list(v) for k, v in knobs.items()} for p, knobs in grid.items()}
    out["reference"] = REFERENCE
    out["frontier"] = frontier_rows(out, REFERENCE)
    return out


def _cell(point: dict | None) -> str:
    if point is None:
        return "none"
    return f"{point['attainment']:.3f} at {point['ratio_vs_static']:.2f}×"


def format_frontier(out: dict) -> str:
    """The frontier rows as a table: per staircase and baseline, Kingman's point, the baseline's best at
    no more executor-seconds, its cheapest config as good, the verdict."""
    head = (f"{'staircase':<30}{'baseline':<20}{'kingman':>16}{'best at ≤ its exec-s':>24}"
            f"{'cheapest as good':>22}  verdict")
    lines = [f"attainment (mean of seeds {out['seeds'][0]}..{out['seeds'][-1]}) at executor-seconds vs "
             f"static-{out['max_executors']}; bound {out['bound_s']:g} s", head, "-" * len(head)]
    for r in out["frontier"]:
        ref = {"attainment": r["reference_attainment"], "ratio_vs_static": r["reference_ratio"]}
        lines.append(f"{_name(r['levels'], r['level_s']):<30}{r['policy']:<20}{_cell(ref):>16}"
                     f"{_cell(r['best_at_budget']):>24}{_cell(r['cheapest_as_good']):>22}  {r['verdict']}")
    lines.append("-" * len(head))
    counts = {v: sum(r["verdict"] == v for r in out["frontier"]) for v in ("ahead", "level", "behind")}
    lines.append("kingman " + ", ".join(f"{k} {n}" for k, n in counts.items()) + f" of {len(out['frontier'])}")
    return "\n".join(lines)


def plot_frontier(out: dict, path: str) -> bool:
    """Attainment against executor-seconds, one panel per staircase: every baseline config a dot, Kingman's
    defaults a star; False when matplotlib is not installed."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    from spark_governor.bench.output import save_figure

    stairs = []
    for r in out["results"]:
        key = (tuple(r["levels"]), r["level_s"])
        if key not in stairs:
            stairs.append(key)
    cols = 2
    rows_n = -(-len(stairs) // cols)
    fig, axes = plt.subplots(rows_n, cols, figsize=(10, 3.2 * rows_n), squeeze=False)
    colours = {"threshold": "tab:orange", "utilization-target": "tab:green"}
    for ax, (levels, level_s) in zip(axes.flat, stairs):
        here = [r for r in out["results"] if tuple(r["levels"]) == levels and r["level_s"] == level_s]
        for policy, colour in colours.items():
            pts = [r for r in here if r["config"].get("policy") == policy]
            ax.scatter([r["ratio_vs_static"] for r in pts], [r["attainment"] for r in pts], s=14, alpha=0.6,
                       color=colour, label=policy)
        ref = next(r for r in here if r["variant"] == out["reference"])
        ax.scatter([ref["ratio_vs_static"]], [ref["attainment"]], marker="*", s=160, color="tab:blue",
                   label="kingman (defaults)", zorder=3)
        ax.set_title(_name(levels, level_s), fontsize="small")
        ax.set_xlabel(f"executor-seconds / static-{out['max_executors']}")
        ax.set_ylabel("SLO spans kept")
        ax.set_ylim(-0.02, 1.02)
    for ax in list(axes.flat)[len(stairs):]:
        ax.set_visible(False)
    axes.flat[0].legend(fontsize="x-small", loc="lower right")
    fig.tight_layout()
    save_figure(fig, path)
    return True
