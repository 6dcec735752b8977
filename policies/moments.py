"""Running moments: Welford's online update and Chan et al.'s exact parallel merge.

Lohrmann's reporters keep mean and variance with Knuth/Welford (thesis §4.4.1, digest §2.3);
runtime→template aggregation must merge partial summaries *with their counts* (digest §2.4,
oracle §9.7): ``n = na + nb``, ``δ = mean_b − mean_a``, ``mean = mean_a + δ·nb/n``,
``M2 = M2a + M2b + δ²·na·nb/n``. Variance is the sample variance ``M2/(n−1)`` (the authors'
``BernoulliSampler``), defined only for ``n > 1``.

Moments are unit-agnostic; callers state units (this project keeps seconds). Pure: the reporters fold
finished tasks at the edge with it (``policies.task_fold``) and the control plane merges what they send.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np


@dataclass(frozen=True)
class Moments:
    """Count, mean and sum of squared deviations (M2) of a sample."""

    n: int = 0
    mean: float = 0.0
    m2: float = 0.0

    @staticmethod
    def of(values: Sequence[float] | np.ndarray) -> "Moments":
        """Exact moments of ``values`` (two-pass, numerically stable)."""
        if isinstance(values, (list, tuple)) and len(values) < 64:  # plain Python beats numpy here
            n = len(values)
            if n == 0:
                return Moments()
            if n == 1:  # the common case at ingest: one task per runtime vertex and window
                return Moments(1, float(values[0]), 0.0)
            mean = math.fsum(values) / n
            return Moments(n, mean, math.fsum((x - mean) ** 2 for x in values))
        arr = np.asarray(values, dtype=np.float64)
        if arr.size == 0:
            return Moments()
        mean = float(arr.mean())
        return Moments(int(arr.size), mean, float(((arr - mean) ** 2).sum()))

    def add(self, x: float) -> "Moments":
        """Welford's online update with one observation."""
        n = self.n + 1
        delta = x - self.mean
        mean = self.mean + delta / n
        return Moments(n, mean, self.m2 + delta * (x - mean))

    def merge(self, other: "Moments") -> "Moments":
        """Chan et al.'s parallel merge; exact, order-independent up to rounding."""
        if other.n == 0:
            return self
        if self.n == 0:
            return other
        n = self.n + other.n
        delta = other.mean - self.mean
        mean = self.mean + delta * other.n / n
        m2 = self.m2 + other.m2 + delta * delta * self.n * other.n / n
        return Moments(n, mean, m2)

    @staticmethod
    def merge_all(parts: Iterable["Moments"]) -> "Moments":
        out = Moments()
        for p in parts:
            out = out.merge(p)
        return out

    @property
    def variance(self) -> float | None:
        """Sample variance M2/(n−1); None when n < 2."""
        return self.m2 / (self.n - 1) if self.n > 1 else None

    @property
    def cv(self) -> float | None:
        """Coefficient of variation sqrt(variance)/mean; None when undefined (n < 2 or mean 0)."""
        var = self.variance
        if var is None or self.mean == 0:
            return None
        return math.sqrt(max(var, 0.0)) / abs(self.mean)

    def to_dict(self) -> dict:
        return {"count": self.n, "mean": self.mean if self.n else None,
                "variance": self.variance, "cv": self.cv}
