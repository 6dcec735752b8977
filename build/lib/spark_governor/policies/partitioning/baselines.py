"""The baselines Prompt is compared with (SIGMOD'20 §2.2 and §7; digest 000 §1.4, §5, §9.3).

All decide the Map block of each tuple; their Reduce side is ``stable_hash(key) % R`` (the
interface's default). Per-tuple partitioners follow ``KeyCounts.arrival_order()`` (key-grouped
unless the batch carries an arrival order). Ties always go to the lowest block id (digest §8.9).

- ``time``: Spark Streaming's block interval at a constant rate: the i-th of N arrivals goes to
  block ⌊i·P/N⌋ (P equal sub-intervals of the batch interval).
- ``shuffle``: round-robin over arrival order, block = i mod P.
- ``hash``: key grouping, block = stable_hash(key) mod P.
- ``pk2`` / ``pk5``: partial key grouping with d = 2 / 5 hash functions (crc32 seeds 0..d−1);
  each tuple goes to the candidate block with the fewest tuples so far.
- ``cam``: cardinality-aware key splitting after Katsipoulakis et al. [25]: d candidates per key;
  each tuple goes to the candidate minimising load/mean-load + cardinality-after/mean-cardinality
  (the key adds to a block's cardinality only if it is not there yet). The paper reports cAM's
  best run over several candidate counts, "increasing the candidates until performance is stable
  or degrades" (§7.1), so ``candidates="best"`` (default) tries d = 2, 3, ... (at most P and 8)
  and stops at the first d whose MPI is not lower than the previous one, keeping the best plan.
  The cost formula is our reading of [25]; the Prompt paper does not give it.
"""
from __future__ import annotations

from typing import Literal, Union

import numpy as np
from pydantic import Field

from spark_governor.policies.partitioning.base import (Fragments, KeyCounts, Partitioner, PartitionerOptions,
                                        stable_hashes)
from spark_governor.policies.partitioning.registry import register


@register
class TimeBased(Partitioner):
    name = "time"
    description = "Spark Streaming block interval at a constant rate: consecutive arrivals, equal-sized blocks"
    needs_arrival = True

    def assign_blocks(self, batch: KeyCounts, partitions: int) -> Fragments:
        keys = batch.arrival_order()
        n = len(keys)
        blocks = (np.arange(n, dtype=np.int64) * partitions) // max(n, 1)
        return Fragments.from_tuples(keys, blocks, partitions)


@register
class Shuffle(Partitioner):
    name = "shuffle"
    description = "round-robin over arrival order"
    needs_arrival = True

    def assign_blocks(self, batch: KeyCounts, partitions: int) -> Fragments:
        keys = batch.arrival_order()
        return Fragments.from_tuples(keys, np.arange(len(keys), dtype=np.int64) % partitions, partitions)


@register
class Hash(Partitioner):
    name = "hash"
    description = "key grouping: block = crc32(key) mod P"

    def assign_blocks(self, batch: KeyCounts, partitions: int) -> Fragments:
        k = np.arange(batch.num_keys, dtype=np.int64)
        return Fragments(k, stable_hashes(batch.keys) % partitions, batch.counts.copy())


def candidate_blocks(batch: KeyCounts, partitions: int, d: int) -> np.ndarray:
    """K × d candidate blocks: crc32 with seeds 0..d−1, modulo P."""
    if batch.num_keys == 0:
        return np.zeros((0, d), dtype=np.int64)
    return np.stack([stable_hashes(batch.keys, seed) % partitions for seed in range(d)], axis=1)


def least_loaded_choice(arrival: np.ndarray, cand: np.ndarray, partitions: int) -> np.ndarray:
    """PKG: per tuple the candidate with the fewest tuples so far (ties → lowest block id)."""
    load = [0] * partitions
    cands = [sorted(set(row)) for row in cand.tolist()]
    out = np.empty(len(arrival), dtype=np.int64)
    for i, k in enumerate(arrival.tolist()):
        best = min(cands[k], key=load.__getitem__)  # sorted candidates: min keeps the lowest id on ties
        load[best] += 1
        out[i] = best
    return out


class PKOptions(PartitionerOptions):
    candidates: int = Field(2, ge=1, description="hash functions (choices) per key")


class _PartialKeyGrouping(Partitioner):
    Options = PKOptions
    needs_arrival = True

    def assign_blocks(self, batch: KeyCounts, partitions: int) -> Fragments:
        arrival = batch.arrival_order()
        cand = candidate_blocks(batch, partitions, self.options.candidates)
        return Fragments.from_tuples(arrival, least_loaded_choice(arrival, cand, partitions), partitions)


class PK2Options(PKOptions):
    candidates: int = Field(2, ge=2, le=2)


class PK5Options(PKOptions):
    candidates: int = Field(5, ge=5, le=5)


@register
class PK2(_PartialKeyGrouping):
    name = "pk2"
    description = "partial key grouping, 2 choices, least-loaded per tuple"
    Options = PK2Options


@register
class PK5(_PartialKeyGrouping):
    name = "pk5"
    description = "partial key grouping, 5 choices, least-loaded per tuple"
    Options = PK5Options


def cardinality_aware_choice(arrival: np.ndarray, cand: np.ndarray, partitions: int, num_keys: int) -> np.ndarray:
    """cAM: per tuple the candidate minimising load/mean-load + cardinality-after/mean-cardinality."""
    load = [0] * partitions
    card = [0] * partitions
    present: set[int] = set()  # key * P + block
    cands = [sorted(set(row)) for row in cand.tolist()]
    out = np.empty(len(arrival), dtype=np.int64)
    total = 0
    frags = 0
    for i, k in enumerate(arrival.tolist()):
        mean_load = max(total / partitions, 1.0)
        mean_card = max(frags / partitions, 1.0)
        best, best_cost = -1, 0.0
        for b in cands[k]:
            new = 0 if k * partitions + b in present else 1
            cost = load[b] / mean_load + (card[b] + new) / mean_card
            if best < 0 or cost < best_cost:
                best, best_cost = b, cost
        code = k * partitions + best
        if code not in present:
            present.add(code)
            card[best] += 1
            frags += 1
        load[best] += 1
        total += 1
        out[i] = best
    return out


class CAMOptions(PartitionerOptions):
    candidates: Union[int, Literal["best"]] = Field("best", description="choices per key, or 'best': raise from 2 while MPI improves")


@register
class CAM(Partitioner):
    name = "cam"
    description = "cardinality-aware key splitting (Katsipoulakis et al.), best candidate count by MPI"
    Options = CAMOptions
    needs_arrival = True
    MAX_CANDIDATES = 8

    def _with(self, batch: KeyCounts, partitions: int, d: int) -> Fragments:
        arrival = batch.arrival_order()
        cand = candidate_blocks(batch, partitions, d)
        return Fragments.from_tuples(arrival, cardinality_aware_choice(arrival, cand, partitions, batch.num_keys),
                                     partitions)

    def assign_blocks(self, batch: KeyCounts, partitions: int) -> Fragments:
        from spark_governor.policies.partitioning.metrics import imbalance, ksr, mpi

        if self.options.candidates != "best":
            return self._with(batch, partitions, int(self.options.candidates))
        best, best_mpi = None, None
        for d in range(2, max(2, min(partitions, self.MAX_CANDIDATES)) + 1):
            f = self._with(batch, partitions, d)
            loads = np.bincount(f.block, weights=f.count, minlength=partitions)
            value = mpi(imbalance(loads), imbalance(np.bincount(f.block, minlength=partitions)),
                        ksr(len(f.key), batch.num_keys))
            if best_mpi is not None and value >= best_mpi:
                break  # stable or worse: stop raising the candidate count
            best, best_mpi = f, value
        return best
