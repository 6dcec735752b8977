"""Synthetic micro-batches for the partitioner benchmark and tests: Zipf key counts."""
from __future__ import annotations

import numpy as np

from spark_governor.policies.partitioning.base import KeyCounts


def zipf_counts(z: float, support: int, tuples: int, seed: int = 0, arrival: bool = False) -> KeyCounts:
    """``tuples`` draws from a Zipf(z) law over ``support`` keys (P(rank i) ∝ i^−z), keys that
    were drawn at least once, named ``k0000001``… (ascending with the rank). With ``arrival`` the
    tuples also get a seeded random arrival order (for the per-tuple baselines)."""
    rng = np.random.default_rng(seed)
    p = np.arange(1, support + 1, dtype=float) ** -float(z)
    p /= p.sum()
    counts = rng.multinomial(int(tuples), p)
    idx = np.nonzero(counts)[0]
    width = len(str(support))
    batch = KeyCounts(tuple(f"k{i + 1:0{width}d}" for i in idx), counts[idx].astype(np.int64))
    return batch.with_arrival(seed) if arrival else batch
