"""Algorithm 4 of Prompt (SIGMOD'20 §5): latency-aware elasticity of the Map and Reduce task counts.

W_i = processing time / batch interval of batch i (both seconds; the whole batch job, digest
§8.26). Zones (§8.25): W > thres (0.9) is Zone 3, W ≤ thres − step (0.8) Zone 1, else Zone 2.
The state machine is the digest's (§2.6, §8.22–8.24): consecutive counters reset on a zone change;
after ``d`` consecutive Zone-3 batches scale out, after ``d`` consecutive Zone-1 batches scale in,
comparing the batch's tuples (data rate) and distinct keys (data distribution) with the batch d
earlier (relative tolerance ``eps``): rate changed → Map tasks p, keys changed → Reduce tasks r,
neither → both. A counter resets after firing; for ``d`` batches after a change no change in the
*opposite* direction is made (the grace period); p and r are clamped to their bounds. Zone tests
use integer per-mille to avoid float error at the 0.9/0.8 boundaries. The new (p, r) apply from
the next batch.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional


@dataclass
class ElasticityConfig:
    thres: float = 0.90
    step: float = 0.10
    d: int = 3
    delta_p: int = 1
    delta_r: int = 1
    p_min: int = 1
    r_min: int = 1
    p_max: int = 1 << 30
    r_max: int = 1 << 30
    eps: float = 0.0


@dataclass(frozen=True)
class ElasticityStep:
    batch: int
    zone: int
    p: int
    r: int
    action: str  # "none" | "out" | "in" | "blocked"
    reason: str = ""


@dataclass
class Elasticity:
    p: int
    r: int
    config: ElasticityConfig = field(default_factory=ElasticityConfig)
    over: int = 0
    under: int = 0
    no_in_until: int = -1
    no_out_until: int = -1
    batch: int = 0
    history: list = field(default_factory=list)  # (N, K) per batch, 1-based batch i at index i-1

    def zone(self, w: float) -> int:
        wm = round(w * 1000)
        hi = round(self.config.thres * 1000)
        lo = round((self.config.thres - self.config.step) * 1000)
        return 3 if wm > hi else (1 if wm <= lo else 2)

    def observe(self, w: float, tuples: int, keys: int) -> ElasticityStep:
        """Batch i finished with load W, N tuples and K distinct keys; returns (p, r) for batch i+1."""
        c = self.config
        self.batch += 1
        i = self.batch
        self.history.append((tuples, keys))
        z = self.zone(w)
        if z == 3:
            self.over, self.under = self.over + 1, 0
        elif z == 1:
            self.under, self.over = self.under + 1, 0
        else:
            self.over = self.under = 0
        ref_n, ref_k = self.history[max(1, i - c.d) - 1]
        if self.over >= c.d:
            if i <= self.no_out_until:
                return ElasticityStep(i, z, self.p, self.r, "blocked", "scale-out in grace period")
            up_n, up_k = tuples > ref_n * (1 + c.eps), keys > ref_k * (1 + c.eps)
            if not (up_n or up_k):
                up_n = up_k = True
            self.p = min(c.p_max, self.p + c.delta_p * up_n)
            self.r = min(c.r_max, self.r + c.delta_r * up_k)
            self.over, self.no_in_until = 0, i + c.d
            return ElasticityStep(i, z, self.p, self.r, "out", f"rate {'up' if up_n else '='} keys {'up' if up_k else '='}")
        if self.under >= c.d:
            if i <= self.no_in_until:
                return ElasticityStep(i, z, self.p, self.r, "blocked", "scale-in in grace period")
            dn_n, dn_k = tuples < ref_n * (1 - c.eps), keys < ref_k * (1 - c.eps)
            if not (dn_n or dn_k):
                dn_n = dn_k = True
            self.p = max(c.p_min, self.p - c.delta_p * dn_n)
            self.r = max(c.r_min, self.r - c.delta_r * dn_k)
            self.under, self.no_out_until = 0, i + c.d
            return ElasticityStep(i, z, self.p, self.r, "in", f"rate {'down' if dn_n else '='} keys {'down' if dn_k else '='}")
        return ElasticityStep(i, z, self.p, self.r, "none")
