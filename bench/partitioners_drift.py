"""``spark-governor bench partitioners --drift-every K``: partitioners on a drifting Zipf stream.

A stream of ``batches`` micro-batches of ``tuples`` Zipf(z) draws over ``support`` keys; the
rank → key permutation is redrawn every ``drift_every`` batches, so the hot keys change (seeded;
tuples arrive in a seeded random order). One partitioner instance per algorithm sees the whole
stream in order, so stateful ones learn (Dalton's Q-table) or keep state (the routing tables of
Fang et al. run with ``plan_on="previous"``: batch b is routed with the table planned on batch
b−1, as in the paper's protocol, digest 003 §3.7).

Per batch and algorithm: max/mean Map-block load (tuples), planning time (wall and CPU seconds
of the planning thread; summarised as median and p95), routing decisions per second (tuples /
planning wall seconds, one core), and for routing tables the migration cost (tuples of state
moved, S(k, w) = the key's tuples over the last ``window`` batches, as a windowed operator keeps
them; the paper's w = 5 by default), table size, status and max load / max(heaviest key, mean)
(the lower bound of any table: a key is never split), for Dalton the Q-table rows and bandit
decisions and the "cold floor" (max/mean of the non-heavy keys alone, which the paper's Dalton
hashes by design). Ratios: max/mean against ``hash``, migration of ``mixed`` against
``mintable``, both measured in the same run. "After convergence" excludes the first ``settle``
batches after the start and after each drift.

Default rows beside paper rows (issue 18): ``dalton`` (the default variant) and
``dalton-paper``; ``mixed`` (best effort, planning margin, the Good–Turing reserve for unseen
keys) and ``mixed-paper`` (the paper's target θmax, ``infeasible`` when a key alone exceeds it:
``plan_margin`` 0, ``best_effort`` false, ``unseen`` none). Goals: ``dalton`` converged max/mean ≤ 1.1; ``mixed`` max load ≤ 1.1 × max(heaviest key,
mean) on every batch but the first after a drift (routed with the table planned before the
drift: no planner that sees only the previous batch can anticipate it), migration ≥ 2× less than
``mintable``, planning median ≤ 0.25 s and p95 ≤ 0.5 s per batch.
"""
from __future__ import annotations

import platform
from typing import Optional, Sequence

import numpy as np

from spark_governor.policies.partitioning.base import KeyCounts, stable_hashes
from spark_governor.policies.partitioning.registry import get_partitioner
from spark_governor.bench.output import save_figure

DEFAULT_ALGORITHMS = ("hash", "shuffle", "pk2", "pk5", "cam", "prompt", "dalton", "dalton-paper", "mixed", "mixed-paper",
                      "mintable", "minmig")
ROUTING_TABLES = ("mixed", "mintable", "minmig")
#: the paper's routing-table configuration: θmax as the target, no best effort
ROUTING_PAPER = {"plan_margin": 0.0, "best_effort": False, "unseen": "none"}
GOAL_DALTON = 1.1
GOAL_MIGRATION_RATIO = 2.0
GOAL_ROUTING_LB = 1.1
GOAL_PLAN_MEDIAN_S = 0.25
GOAL_PLAN_P95_S = 0.5


def routing_algorithm(name: str) -> Optional[str]:
    """The routing-table algorithm of a row name (``mixed``, ``mixed-paper``, …), or None."""
    base = name[:-len("-paper")] if name.endswith("-paper") else name
    return base if base in ROUTING_TABLES else None


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
                    progress=None, plan_margin: float = 0.5, dalton_hot_factor: float = 1.0) -> dict:
    names = list(algorithms or DEFAULT_ALGORITHMS)
    cases = []
    for z in zs:
        stream = drifting_batches(z, support, tuples, batches, drift_every, seed)
        series: dict[str, list[dict]] = {}
        runs = [(name, name) for name in names]
        if "dalton-paper" in names and dalton_hot_factor > 1:
            runs.insert(names.index("dalton-paper") + 1, (f"dalton-paper-hh{dalton_hot_factor:g}", "dalton-paper"))
        for name, algo in runs:
            table_algo = routing_algorithm(algo)
            if table_algo:
                opts = {"theta_max": theta_max, "table_max": table_max, "plan_on": "previous", "window": window,
                        "plan_margin": plan_margin, **(ROUTING_PAPER if algo.endswith("-paper") else {})}
                algo = table_algo
            elif algo in ("dalton", "dalton-paper"):
                opts = {"seed": seed, "hot_factor": dalton_hot_factor if name.endswith(f"hh{dalton_hot_factor:g}") else 1.0}
            else:
                opts = {}
            part = get_partitioner(algo, **opts)
            rows = []
            for b, batch in enumerate(stream):
                plan = part.plan(batch, partitions)
                loads = plan.block_loads()
                row = {"batch": b, "max_mean": float(loads.max() / loads.mean()), "batch_tuples": int(batch.total),
                       "decisions_per_s": batch.total / plan.planning_s if plan.planning_s > 0 else None,
                       "planning_s": plan.planning_s, "planning_cpu_s": plan.planning_cpu_s, "migration": None,
                       "table_size": None, "split_keys": len(plan.split_keys())}
                if table_algo:
                    row["migration"] = part.last.migration if part.rebuilt else 0.0
                    row["table_size"] = len(part.table)
                    row["status"] = part.last.status
                    row["planned_max_mean"] = part.last.max_theta + 1   # on the statistics it was planned from
                    lb = max(float(batch.counts.max()), batch.total / partitions)
                    row["max_over_lower_bound"] = float(loads.max() / lb)
                    row["planned_over_lower_bound"] = float(part.last.loads.max() / part.last.lower_bound) \
                        if part.last.lower_bound > 0 else 1.0
                if algo in ("dalton", "dalton-paper"):
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
        wall = [r["planning_s"] for r in rows]
        cpu = [r["planning_cpu_s"] for r in rows]
        s = {"mean_max_mean": float(np.mean(mm)),
             "converged_max_mean": float(np.mean([r["max_mean"] for r in converged])) if converged else None,
             "worst_converged_max_mean": float(max(r["max_mean"] for r in converged)) if converged else None,
             "median_decisions_per_s": float(np.median(tps)) if tps else None,
             "planning_s_median": float(np.median(wall)), "planning_s_p95": float(np.percentile(wall, 95)),
             "planning_cpu_s_median": float(np.median(cpu)), "planning_cpu_s_p95": float(np.percentile(cpu, 95))}
        if hash_mean:
            s["max_mean_vs_hash"] = s["mean_max_mean"] / hash_mean
        if routing_algorithm(name):
            s["migration_total"] = float(sum(r["migration"] for r in rows))
            s["max_table_size"] = max(r["table_size"] for r in rows)
            s["within_theta_converged"] = float(np.mean([r["max_mean"] <= 1 + theta_max + 1e-9 for r in converged])) \
                if converged else None
            s["statuses"] = sorted({r["status"] for r in rows})
            steady = [r for r in rows if r["batch"] % drift_every != 0]   # not the first batch after a drift
            s["worst_max_over_lower_bound"] = float(max(r["max_over_lower_bound"] for r in steady)) if steady else None
            s["worst_planned_over_lower_bound"] = float(max(r["planned_over_lower_bound"] for r in rows))
        out[name] = s
    if "mixed" in out and "mintable" in out and out["mixed"]["migration_total"] > 0:
        out["mintable_over_mixed_migration"] = out["mintable"]["migration_total"] / out["mixed"]["migration_total"]
    if "mixed" in out:
        m = out["mixed"]
        goal = {"max_over_lower_bound": m["worst_max_over_lower_bound"] is None
                or m["worst_max_over_lower_bound"] <= GOAL_ROUTING_LB,
                "planning": m["planning_s_median"] <= GOAL_PLAN_MEDIAN_S and m["planning_s_p95"] <= GOAL_PLAN_P95_S,
                "planning_cpu": m["planning_cpu_s_median"] <= GOAL_PLAN_MEDIAN_S
                and m["planning_cpu_s_p95"] <= GOAL_PLAN_P95_S}
        if "mintable" in out:
            streamed = sum(r["batch_tuples"] for r in series["mixed"])
            if out["mintable"]["migration_total"] < 0.01 * streamed:
                goal["migration"] = None   # n/a: MinTable itself moves < 1 % of the stream's tuples
            else:
                goal["migration"] = out["mintable"]["migration_total"] >= GOAL_MIGRATION_RATIO * m["migration_total"]
        out["mixed_goal"] = goal
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
        lines.append(f"{'algorithm':>18} {'max/mean':>9} {'converged':>9} {'worst conv':>10} {'vs hash':>8} "
                     f"{'migration':>10} {'|A|max':>7} {'max/LB':>7} {'plan s med':>10} {'p95':>6} "
                     f"{'cpu s med':>9} {'p95':>6} {'Mdec/s':>7}")
        summ = case["summary"]
        for name in case["series"]:
            s = summ[name]
            mig = f"{s['migration_total']:10.0f}" if "migration_total" in s else f"{'-':>10}"
            tab = f"{s['max_table_size']:7d}" if "max_table_size" in s else f"{'-':>7}"
            lb = f"{s['worst_max_over_lower_bound']:7.3f}" if s.get("worst_max_over_lower_bound") is not None \
                else f"{'-':>7}"
            dps = (s["median_decisions_per_s"] or float("nan")) / 1e6
            lines.append(f"{name:>18} {s['mean_max_mean']:9.3f} {s['converged_max_mean'] or float('nan'):9.3f} "
                         f"{s['worst_converged_max_mean'] or float('nan'):10.3f} {s.get('max_mean_vs_hash', float('nan')):8.3f} "
                         f"{mig} {tab} {lb} {s['planning_s_median']:10.3f} {s['planning_s_p95']:6.3f} "
                         f"{s['planning_cpu_s_median']:9.3f} {s['planning_cpu_s_p95']:6.3f} {dps:7.2f}")
        if "mintable_over_mixed_migration" in summ:
            lines.append(f"migration MinTable / Mixed = {summ['mintable_over_mixed_migration']:.2f} "
                         f"(goal ≥ {GOAL_MIGRATION_RATIO})")
        for name in [n for n in case["series"] if routing_algorithm(n)]:
            s = summ[name]
            lines.append(f"{name} within θmax on {100 * (s['within_theta_converged'] or 0):.0f}% of converged batches; "
                         f"statuses {s['statuses']}; worst max/max(heaviest key, mean) {s['worst_max_over_lower_bound'] or float('nan'):.3f} "
                         f"(every batch but the first after a drift), planned {s['worst_planned_over_lower_bound']:.3f}")
        if "mixed_goal" in summ:
            g = summ["mixed_goal"]
            verdict = {True: "met", False: "NOT met", None: "n/a (MinTable moves < 1 % of the stream)"}
            lines.append("mixed goals: " + ", ".join(f"{k} {verdict[v]}" for k, v in g.items())
                         + f" (max/LB ≤ {GOAL_ROUTING_LB}, MinTable/Mixed ≥ {GOAL_MIGRATION_RATIO}, planning median ≤ "
                           f"{GOAL_PLAN_MEDIAN_S} s and p95 ≤ {GOAL_PLAN_P95_S} s, wall and CPU)")
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

