"""``spark-governor bench partitioners --drift-every K``: partitioners on a drifting Zipf stream.

A stream of ``batches`` micro-batches of ``tuples`` Zipf(z) draws over ``support`` keys; the
rank → key permutation is redrawn every ``drift_every`` batches, so the hot keys change (seeded;
tuples arrive in a seeded random order). One partitioner instance per algorithm sees the whole
stream in order, so stateful ones learn (Dalton's Q-table) or keep state (the routing tables of
Fang et al. run with ``plan_on="previous"``: batch b is routed with the table planned on batch
b−1, as in the paper's protocol, digest 003 §3.7).

Per batch and algorithm: max/mean Map-block load (tuples), routing decisions per second
(tuples / planning wall seconds, one core), and for routing tables the migration cost (tuples
of state moved, S(k, w) = the key's tuples over the last ``window`` batches, as a windowed
operator keeps them; the paper's w = 5 by default) and table size, for Dalton the Q-table rows and
bandit decisions and the "cold floor" (max/mean of the non-heavy keys alone, which Dalton
hashes by design). Ratios: max/mean against ``hash``, migration of ``mixed`` against
``mintable``, both measured in the same run. "After convergence" excludes the first
``settle`` batches after the start and after each drift.
"""
from __future__ import annotations

import platform
from typing import Optional, Sequence

import numpy as np

from spark_governor.policies.partitioning.base import KeyCounts, stable_hashes
from spark_governor.policies.partitioning.registry import get_partitioner
from spark_governor.bench.output import save_figure

DEFAULT_ALGORITHMS = ("hash", "shuffle", "pk2", "pk5", "cam", "prompt", "dalton", "mixed", "mintable", "minmig")
ROUTING_TABLES = ("mixed", "mintable", "minmig")
GOAL_DALTON = 1.1
GOAL_MIGRATION_RATIO = 2.0


def drifting_batches(z: float, support: int, tuples: int, batches: int, drift_every: int, seed: int = 0):
    """The stream: a list of KeyCounts with arrival orders (key names ``k<id>``)."""
    rng = np.random.default_rng(seed)
    p = np.arange(1, support + 1, dtype=float) ** -float(z)
    p /= p.sum()
    width = len(str(support))
    out = []
    perm = rng.permutation(support)
    for b in range(batches):
        if b and b % drift_every == 0:
            perm = rng.permutation(support)
        counts_by_rank = rng.multinomial(int(tuples), p)
        ranks = np.nonzero(counts_by_rank)[0]
        ids = perm[ranks]
        order = np.argsort(ids)
        keys = tuple(f"k{i:0{width}d}" for i in ids[order])
        batch = KeyCounts(keys, counts_by_rank[ranks][order].astype(np.int64))
        out.append(batch.with_arrival(int(rng.integers(1 << 31))))
    return out


def run_drift_bench(zs: Sequence[float] = (1.0, 1.5), support: int = 10_000, tuples: int = 200_000, batches: int = 30,
                    drift_every: int = 10, partitions: int = 8, algorithms: Optional[Sequence[str]] = None,
                    theta_max: float = 0.08, table_max: int = 3000, window: int = 5, settle: int = 3, seed: int = 0,
                    progress=None, plan_margin: float = 0.5, dalton_hot_factor: float = 8.0) -> dict:
    names = list(algorithms or DEFAULT_ALGORITHMS)
    cases = []
    for z in zs:
        stream = drifting_batches(z, support, tuples, batches, drift_every, seed)
        series: dict[str, list[dict]] = {}
        runs = [(name, name) for name in names]
        if "dalton" in names and dalton_hot_factor > 1:
            runs.insert(names.index("dalton") + 1, (f"dalton-hh{dalton_hot_factor:g}", "dalton"))
        for name, algo in runs:
            opts = {"theta_max": theta_max, "table_max": table_max, "plan_on": "previous", "window": window,
                    "plan_margin": plan_margin} \
                if algo in ROUTING_TABLES \
                else ({"seed": seed, "hot_factor": 1.0 if name == "dalton" else dalton_hot_factor}
                      if algo == "dalton" else {})
            part = get_partitioner(algo, **opts)
            rows = []
            for b, batch in enumerate(stream):
                plan = part.plan(batch, partitions)
                loads = plan.block_loads()
                row = {"batch": b, "max_mean": float(loads.max() / loads.mean()),
                       "decisions_per_s": batch.total / plan.planning_s if plan.planning_s > 0 else None,
                       "planning_s": plan.planning_s, "migration": None, "table_size": None,
                       "split_keys": len(plan.split_keys())}
                if algo in ROUTING_TABLES:
                    row["migration"] = part.last.migration if part.rebuilt else 0.0
                    row["table_size"] = len(part.table)
                    row["status"] = part.last.status
                    row["planned_max_mean"] = part.last.max_theta + 1   # on the statistics it was planned from
                if algo == "dalton":
                    row["table_size"] = len(part.agent(partitions).Q)
                    row["bandit_decisions"] = part.last_routing.decisions
                    row["cold_floor"] = cold_floor(batch, partitions, part.options.hot_factor)
                rows.append(row)
                if progress:
                    progress(z, name, row)
            series[name] = rows
        cases.append({"z": z, "series": series, "summary": _summarise(series, drift_every, settle, theta_max)})
    return {"cases": cases,
            "config": {"zs": list(zs), "support": support, "tuples": tuples, "batches": batches,
                       "drift_every": drift_every, "partitions": partitions, "algorithms": names,
                       "theta_max": theta_max, "table_max": table_max, "plan_margin": plan_margin,
                       "dalton_hot_factor": dalton_hot_factor, "window": window,
                       "settle": settle, "seed": seed,
                       "python": platform.python_version(), "machine": platform.machine()}}


def cold_floor(batch: KeyCounts, partitions: int, hot_factor: float = 1.0) -> float:
    """max/mean block load of the batch's non-heavy keys alone (count < total/(κ·P), κ = the
    hot factor, 1 in the paper), hashed: Dalton never moves them (Def. 3.3), so no placement of
    the heavy hitters gets below this."""
    hot = batch.counts >= batch.total / (hot_factor * partitions)
    cold = np.bincount(stable_hashes(batch.keys)[~hot] % partitions, weights=batch.counts[~hot], minlength=partitions)
    return float(cold.max() / (batch.total / partitions))


def _summarise(series: dict, drift_every: int, settle: int, theta_max: float) -> dict:
    out = {}
    hash_mean = np.mean([r["max_mean"] for r in series["hash"]]) if "hash" in series else None
    for name, rows in series.items():
        converged = [r for r in rows if r["batch"] % drift_every >= settle]
        mm = [r["max_mean"] for r in rows]
        tps = [r["decisions_per_s"] for r in rows if r["decisions_per_s"]]
        s = {"mean_max_mean": float(np.mean(mm)),
             "converged_max_mean": float(np.mean([r["max_mean"] for r in converged])) if converged else None,
             "worst_converged_max_mean": float(max(r["max_mean"] for r in converged)) if converged else None,
             "median_decisions_per_s": float(np.median(tps)) if tps else None}
        if hash_mean:
            s["max_mean_vs_hash"] = s["mean_max_mean"] / hash_mean
        if name in ROUTING_TABLES:
            s["migration_total"] = float(sum(r["migration"] for r in rows))
            s["max_table_size"] = max(r["table_size"] for r in rows)
            s["within_theta_converged"] = float(np.mean([r["max_mean"] <= 1 + theta_max + 1e-9 for r in converged])) \
                if converged else None
            s["statuses"] = sorted({r["status"] for r in rows})
        out[name] = s
    if "mixed" in out and "mintable" in out and out["mixed"]["migration_total"] > 0:
        out["mintable_over_mixed_migration"] = out["mintable"]["migration_total"] / out["mixed"]["migration_total"]
    for name in [n for n in series if n.startswith("dalton")]:
        d = out[name]
        if d["converged_max_mean"] is None:
            continue
        d["goal_met"] = d["converged_max_mean"] <= GOAL_DALTON
        movable = [r for r in series[name] if r["batch"] % drift_every >= settle and r["cold_floor"] <= 1.0]
        d["converged_max_mean_movable"] = float(np.mean([r["max_mean"] for r in movable])) if movable else None
        d["converged_batches_movable"] = len(movable)
        d["mean_cold_floor"] = float(np.mean([r["cold_floor"] for r in series[name]]))
    if "dalton" in out and "goal_met" in out["dalton"]:
        out["dalton_goal_met"] = out["dalton"]["goal_met"]
    return out


def format_drift(report: dict) -> str:
    lines = []
    for case in report["cases"]:
        lines.append(f"z={case['z']}: {report['config']['batches']} batches × {report['config']['tuples']} tuples, "
                     f"drift every {report['config']['drift_every']}, P={report['config']['partitions']}")
        lines.append(f"{'algorithm':>9} {'max/mean':>9} {'converged':>9} {'worst conv':>10} {'vs hash':>8} "
                     f"{'migration':>10} {'|A|max':>7} {'Mdec/s':>8}")
        summ = case["summary"]
        for name in case["series"]:
            s = summ[name]
            mig = f"{s['migration_total']:10.0f}" if "migration_total" in s else f"{'-':>10}"
            tab = f"{s['max_table_size']:7d}" if "max_table_size" in s else f"{'-':>7}"
            dps = (s["median_decisions_per_s"] or float("nan")) / 1e6
            lines.append(f"{name:>9} {s['mean_max_mean']:9.3f} {s['converged_max_mean'] or float('nan'):9.3f} "
                         f"{s['worst_converged_max_mean'] or float('nan'):10.3f} {s.get('max_mean_vs_hash', float('nan')):8.3f} "
                         f"{mig} {tab} {dps:8.2f}")
        if "mintable_over_mixed_migration" in summ:
            lines.append(f"migration MinTable / Mixed = {summ['mintable_over_mixed_migration']:.2f} "
                         f"(goal ≥ {GOAL_MIGRATION_RATIO})")
        if "mixed" in summ and summ["mixed"].get("within_theta_converged") is not None:
            lines.append(f"mixed within θmax on {100 * summ['mixed']['within_theta_converged']:.0f}% of converged batches; "
                         f"statuses {summ['mixed']['statuses']}")
        for name in [n for n, v in summ.items() if n.startswith("dalton") and isinstance(v, dict) and "goal_met" in v]:
            d = summ[name]
            lines.append(f"{name} converged max/mean {d['converged_max_mean']:.3f} "
                         f"(goal ≤ {GOAL_DALTON}: {'met' if d['goal_met'] else 'NOT met'}); "
                         f"non-heavy keys alone give {d['mean_cold_floor']:.3f} on average; on the "
                         f"{d['converged_batches_movable']} converged batches where they stay ≤ mean: "
                         + (f"{d['converged_max_mean_movable']:.3f}" if d["converged_max_mean_movable"] is not None else "n/a"))
    return "\n".join(lines)


def plot_drift(report: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cases = report["cases"]
    fig, axes = plt.subplots(1, len(cases), figsize=(6 * len(cases), 4), squeeze=False)
    for ax, case in zip(axes[0], cases):
        for name, rows in case["series"].items():
            ax.plot([r["batch"] for r in rows], [r["max_mean"] for r in rows], label=name, marker=".")
        ax.set_yscale("log"); ax.set_xlabel("batch"); ax.set_ylabel("max/mean block load")
        ax.set_title(f"z={case['z']}, drift every {report['config']['drift_every']}")
    axes[0][-1].legend(fontsize=7)
    fig.tight_layout()
    save_figure(fig, path)

