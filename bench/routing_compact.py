"""``spark-governor bench routing-compact``: Fang et al.'s planners per key vs on compact records
(digest 003 §3.8–3.9; the paper's Fig. 11: 6 s on the original key space, an order of magnitude
less with discretisation).

One Zipf(z) key space of ``keys`` keys over ``partitions`` instances, costs c(k) = the key's
tuples in one interval, state S(k) = 3·c(k) (a 3-interval window), a hash table start (empty
routing table, so the imbalance is the hash's). For every HLHE degree r in ``degrees`` (0 = the
exact values) and algorithm: planning wall seconds per key and on records (both on the same
statistics, one core), the number of records, and the load-estimation error of discretisation:
max_d |L̂(d) − L(d)| / L̄ where L̂ are the loads the plan computed on discretised costs and L the
loads of the same assignment with the exact costs. Ratios are per key / on records, measured in
the same run.
"""
from __future__ import annotations

import platform
import time

import numpy as np

from spark_governor.policies.partitioning.base import stable_hashes
from spark_governor.policies.partitioning.routing_compact import KeySpace
from spark_governor.policies.partitioning.routing_planners import algorithm
from spark_governor.policies.partitioning.routing_table import Stats, instance_loads


def key_space(keys: int, z: float, tuples: int, partitions: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(cost c per key, h(k)) of a seeded Zipf draw: ``tuples`` draws over ``keys`` ranks; keys
    with no draw keep cost 0 (they hold state only)."""
    rng = np.random.default_rng(seed)
    p = np.arange(1, keys + 1, dtype=float) ** -float(z)
    counts = rng.multinomial(tuples, p / p.sum()).astype(float)
    names = [f"k{i}" for i in rng.permutation(keys)]
    return counts, stable_hashes(tuple(names)) % partitions


def _timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def run_compact_bench(keys: int = 1_000_000, z: float = 1.2, tuples: int = 10_000_000, partitions: int = 16,
                      degrees=(0, 1, 4, 16, 64, 256), algorithms=("minmig", "mixed"), theta_max: float = 0.08,
                      table_max: int = 3000, seed: int = 0) -> dict:
    c, h = key_space(keys, z, tuples, partitions, seed)
    rows = []
    for r in degrees:
        stats, build_s = _timed(lambda: Stats(c, 3 * c, h, partitions, {}, r))
        space, group_s = _timed(lambda: KeySpace(stats))
        records = len(space.groups)
        for name in algorithms:
            kw = {"table_max": table_max} if name == "mixed" else {}
            per_key, per_key_s = _timed(lambda: algorithm(name)(stats, theta_max, **kw))
            compact, compact_s = _timed(lambda: algorithm(name, compact=True)(stats, theta_max, **kw))
            exact = instance_loads(compact.owner, c, partitions)
            rows.append({"r": r, "algorithm": name, "records": records, "discretise_s": build_s,
                         "group_s": group_s, "per_key_s": per_key_s, "compact_s": compact_s,
                         "speedup": per_key_s / compact_s if compact_s > 0 else None,
                         "same_loads": bool(np.allclose(per_key.loads, compact.loads)),
                         "status": compact.status, "max_mean_planned": 1 + compact.max_theta,
                         "max_mean_exact": float(exact.max() / exact.mean()),
                         "load_error": float(np.abs(compact.loads - exact).max() / exact.mean()),
                         "table_size": compact.size, "migration": compact.migration})
    return {"bench": "routing-compact", "rows": rows,
            "config": {"keys": keys, "z": z, "tuples": tuples, "partitions": partitions, "degrees": list(degrees),
                       "algorithms": list(algorithms), "theta_max": theta_max, "table_max": table_max, "seed": seed,
                       "python": platform.python_version(), "machine": platform.machine()}}


def format_compact(report: dict) -> str:
    cfg = report["config"]
    lines = [f"{cfg['keys']} keys, Zipf {cfg['z']}, {cfg['tuples']} tuples, P = {cfg['partitions']}, "
             f"θmax {cfg['theta_max']} (r = 0: exact values)",
             f"{'r':>4} {'algorithm':>9} {'records':>8} {'per key s':>9} {'records s':>9} {'speedup':>8} "
             f"{'same L':>6} {'max/mean':>8} {'exact':>7} {'L error':>8} {'|A|':>5}"]
    for row in report["rows"]:
        lines.append(f"{row['r']:4d} {row['algorithm']:>9} {row['records']:8d} {row['per_key_s']:9.3f} "
                     f"{row['compact_s']:9.3f} {row['speedup']:8.1f} {str(row['same_loads']):>6} "
                     f"{row['max_mean_planned']:8.4f} {row['max_mean_exact']:7.4f} {row['load_error']:8.4f} "
                     f"{row['table_size']:5d}")
    lines.append("speedup = per-key planning s / planning s on records (same statistics, same run); "
                 "L error = max |planned − exact load| / mean load")
    return "\n".join(lines)
