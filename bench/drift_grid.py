"""The drift benchmark (``bench.partitioners_drift``) over a grid of shapes: Zipf exponent × key
support × partitions × seed, for the goals of issue 18 "for any support and partition count".

Per cell: Dalton's converged max/mean (mean and worst batch after ``settle`` batches of each drift
phase), and for the routing tables the worst max load / max(heaviest key, mean) on every batch
but the first after a drift, MinTable's migration over Mixed's, and Mixed's planning time (wall
and CPU, median and p95). The summary gives the worst cell of each.

    python -m spark_governor.bench.drift_grid --z 0.5,1,1.5,2 --supports 1000,10000,100000 \\
        --partitions 4,8,16,32,64 --seeds 0-2 --algorithms dalton,dalton-paper
"""
from __future__ import annotations

import argparse
import itertools
import json
import time
from typing import Sequence

from spark_governor.bench.partitioners_drift import run_drift_bench


def _ints(text: str) -> list[int]:
    out: list[int] = []
    for part in (p.strip() for p in text.split(",") if p.strip()):
        lo, sep, hi = part.partition("-")
        out += list(range(int(lo), int(hi) + 1)) if sep else [int(lo)]
    return out


def run_grid(zs: Sequence[float], supports: Sequence[int], partitions: Sequence[int], seeds: Sequence[int],
             algorithms: Sequence[str], tuples: int = 200_000, batches: int = 30, drift_every: int = 10,
             settle: int = 3, progress=print) -> dict:
    cells = []
    started = time.time()
    for support, P, seed in itertools.product(supports, partitions, seeds):
        r = run_drift_bench(zs=zs, support=support, tuples=tuples, batches=batches, drift_every=drift_every,
                            partitions=P, algorithms=list(algorithms), settle=settle, seed=seed)
        for case in r["cases"]:
            s = case["summary"]
            cell = {"z": case["z"], "support": support, "partitions": P, "seed": seed}
            for name in algorithms:
                if name not in s:
                    continue
                a = s[name]
                cell[name] = {k: a.get(k) for k in ("converged_max_mean", "worst_converged_max_mean",
                                                     "worst_max_over_lower_bound", "planning_s_median",
                                                     "planning_s_p95", "planning_cpu_s_median",
                                                     "planning_cpu_s_p95", "migration_total", "statuses")}
            if "mintable_over_mixed_migration" in s:
                cell["mintable_over_mixed_migration"] = s["mintable_over_mixed_migration"]
            if "mixed_goal" in s:
                cell["mixed_goal"] = s["mixed_goal"]
            cells.append(cell)
            if progress:
                progress(format_cell(cell, algorithms))
    return {"cells": cells, "elapsed_s": time.time() - started,
            "config": {"zs": list(zs), "supports": list(supports), "partitions": list(partitions),
                       "seeds": list(seeds), "algorithms": list(algorithms), "tuples": tuples, "batches": batches,
                       "drift_every": drift_every, "settle": settle}}


def format_cell(cell: dict, algorithms: Sequence[str]) -> str:
    parts = [f"z={cell['z']:<4} keys={cell['support']:<6} P={cell['partitions']:<3} seed={cell['seed']}"]
    for name in algorithms:
        a = cell.get(name)
        if not a:
            continue
        if a.get("worst_max_over_lower_bound") is not None:
            parts.append(f"{name}: max/LB {a['worst_max_over_lower_bound']:.3f} plan {a['planning_s_median']:.3f}/"
                         f"{a['planning_s_p95']:.3f} s (cpu {a['planning_cpu_s_median']:.3f}/{a['planning_cpu_s_p95']:.3f})")
        else:
            parts.append(f"{name}: {a['converged_max_mean']:.3f} (worst {a['worst_converged_max_mean']:.3f})")
    if "mintable_over_mixed_migration" in cell:
        parts.append(f"MinTable/Mixed migration {cell['mintable_over_mixed_migration']:.2f}")
    return " | ".join(parts)


def summary(body: dict) -> str:
    lines = []
    cells = body["cells"]
    for name in body["config"]["algorithms"]:
        have = [c for c in cells if name in c]
        if not have:
            continue
        if have[0][name].get("worst_max_over_lower_bound") is not None:
            worst = max(have, key=lambda c: c[name]["worst_max_over_lower_bound"] or 0)
            med = max(c[name]["planning_s_median"] for c in have)
            p95 = max(c[name]["planning_s_p95"] for c in have)
            cmed = max(c[name]["planning_cpu_s_median"] for c in have)
            cp95 = max(c[name]["planning_cpu_s_p95"] for c in have)
            lines.append(f"{name}: worst max/max(heaviest key, mean) {worst[name]['worst_max_over_lower_bound']:.3f} "
                         f"(z={worst['z']}, keys={worst['support']}, P={worst['partitions']}, seed={worst['seed']}); "
                         f"planning worst median {med:.3f} s, worst p95 {p95:.3f} s (CPU {cmed:.3f} / {cp95:.3f} s)")
        else:
            worst = max(have, key=lambda c: c[name]["converged_max_mean"])
            batch = max(c[name]["worst_converged_max_mean"] for c in have)
            lines.append(f"{name}: worst converged max/mean {worst[name]['converged_max_mean']:.3f} "
                         f"(z={worst['z']}, keys={worst['support']}, P={worst['partitions']}, seed={worst['seed']}), "
                         f"worst single converged batch {batch:.3f}, over {len(have)} cells")
    ratios = [c["mintable_over_mixed_migration"] for c in cells if c.get("mixed_goal", {}).get("migration") is not None]
    if ratios:
        lines.append(f"MinTable / Mixed migration: min {min(ratios):.2f} over the {len(ratios)} cells where MinTable "
                     f"moves ≥ 1 % of the stream")
    return "\n".join(lines)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--z", default="0.5,1.0,1.5,2.0")
    ap.add_argument("--supports", default="1000,10000,100000")
    ap.add_argument("--partitions", default="4,8,16,32,64")
    ap.add_argument("--seeds", default="0-2")
    ap.add_argument("--algorithms", default="dalton,dalton-paper")
    ap.add_argument("--tuples", type=int, default=200_000)
    ap.add_argument("--batches", type=int, default=30)
    ap.add_argument("--out", default=None, help="JSON output file")
    a = ap.parse_args(argv)
    body = run_grid([float(x) for x in a.z.split(",")], _ints(a.supports), _ints(a.partitions), _ints(a.seeds),
                    [x.strip() for x in a.algorithms.split(",") if x.strip()], tuples=a.tuples, batches=a.batches)
    print(summary(body))
    if a.out:
        with open(a.out, "w") as f:
            json.dump(body, f, indent=1)


if __name__ == "__main__":
    main()
