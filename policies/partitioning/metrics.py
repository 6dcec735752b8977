"""Partitioning quality metrics of Prompt (SIGMOD'20 §3, Eqs. 2–6; digest 000 §3).

Units: BSI in tuples, BCI in keys, KSR a ratio (fragments per distinct key, ≥ 1, = 1 iff no key is
split), MPI the paper's weighted sum of the three as printed (mixed units, p1 = p2 = p3 = 1/3;
digest §8.13). ``max_mean_load`` = max block load / mean block load (1.0 is perfect balance).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Optional, Sequence

import numpy as np

from spark_governor.policies.partitioning.base import PartitionPlan

WEIGHTS = (1 / 3, 1 / 3, 1 / 3)


def imbalance(values: Sequence[float] | np.ndarray) -> float:
    """max − mean (Eq. 2/3 for sizes, Eq. 4 for cardinalities); 0 for an empty sequence."""
    v = np.asarray(values, dtype=float)
    return float(v.max() - v.mean()) if len(v) else 0.0


def ksr(fragments: int, keys: int) -> float:
    """Eq. 5: key fragments / distinct keys (1.0 for an empty batch)."""
    return fragments / keys if keys else 1.0


def mpi(bsi: float, bci: float, ksr_value: float, weights: Sequence[float] = WEIGHTS) -> float:
    """Eq. 6: p1·BSI + p2·BCI + p3·KSR with p1 + p2 + p3 = 1."""
    p1, p2, p3 = weights
    if abs(p1 + p2 + p3 - 1) > 1e-9:
        raise ValueError("MPI weights must sum to 1")
    return p1 * bsi + p2 * bci + p3 * ksr_value


def max_mean(values: Sequence[float] | np.ndarray) -> float:
    """max / mean of the loads (1.0 when all are equal or empty)."""
    v = np.asarray(values, dtype=float)
    return float(v.max() / v.mean()) if len(v) and v.mean() > 0 else 1.0


@dataclass(frozen=True)
class PlanMetrics:
    bsi: float                # tuples: max − mean Map-block load
    bci: float                # keys: max − mean distinct keys per block
    ksr: float                # fragments / distinct keys
    mpi: float                # Eq. 6, weights 1/3
    bsi_buckets: float        # tuples: max − mean Reduce-bucket input (Eq. 3)
    max_mean_load: float      # max / mean Map-block load
    max_mean_bucket: float    # max / mean Reduce-bucket load
    max_block_load: int       # tuples
    mean_block_load: float    # tuples
    tuples: int
    keys: int
    fragments: int
    split_keys: int
    partitions: int
    reduce: int

    def to_dict(self) -> dict:
        return asdict(self)


def plan_metrics(plan: PartitionPlan, weights: Sequence[float] = WEIGHTS) -> PlanMetrics:
    loads = plan.block_loads()
    card = plan.block_cardinalities()
    buckets = plan.bucket_loads()
    frags = int(len(plan.fragments.key))
    b, c, s = imbalance(loads), imbalance(card), ksr(frags, len(plan.keys))
    return PlanMetrics(bsi=b, bci=c, ksr=s, mpi=mpi(b, c, s, weights), bsi_buckets=imbalance(buckets),
                       max_mean_load=max_mean(loads), max_mean_bucket=max_mean(buckets),
                       max_block_load=int(loads.max()) if len(loads) else 0,
                       mean_block_load=float(loads.mean()) if len(loads) else 0.0,
                       tuples=plan.total, keys=len(plan.keys), fragments=frags,
                       split_keys=int((plan.fragments_per_key() > 1).sum()),
                       partitions=plan.partitions, reduce=plan.reduce)


def relative(value: float, baseline: float) -> Optional[float]:
    """Fig. 10's relative form value / baseline (BSI vs hash, BCI vs shuffle); None if baseline is 0."""
    return value / baseline if baseline else None
