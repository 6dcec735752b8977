"""Prompt (SIGMOD'20) as a partitioner: Algorithm 2 for the Map blocks, Algorithm 3 for buckets.

Keys are taken in count DESC / key ASC order (the reverse in-order walk of Algorithm 1's
CountTree with exact counts, digest §8.1–8.2); see ``prompt_map`` and ``prompt_reduce`` for the
phases and every choice where the paper is silent. Options and defaults:

- ``zigzag_start``: "first" (default, literal) | "continue" (digest §8.4)
- ``overflow``: "spread" (default) | "single" (digest §8.8)
- ``split_above_capacity``: False (default, literal) | True (digest §8.10)
"""
from __future__ import annotations

import numpy as np

from spark_governor.policies.partitioning.base import Fragments, KeyCounts, Partitioner, PartitionerOptions, stable_hashes
from spark_governor.policies.partitioning.prompt_map import Overflow, ZigzagStart, prompt_blocks
from spark_governor.policies.partitioning.prompt_reduce import allocate_task
from spark_governor.policies.partitioning.registry import register


class PromptOptions(PartitionerOptions):
    zigzag_start: ZigzagStart = "first"
    overflow: Overflow = "spread"
    split_above_capacity: bool = False


def bucket_allocation(batch: KeyCounts, fragments: Fragments, reduce: int, order: np.ndarray) -> np.ndarray:
    """Algorithm 3 in every Map block; returns the Reduce bucket per key (index into batch.keys).

    ``order``: key indices in count DESC / key ASC order. Split keys → stable_hash(k) mod R."""
    K = batch.num_keys
    nfrag = np.bincount(fragments.key, minlength=K)
    split = nfrag > 1
    bucket = np.zeros(K, dtype=np.int64)
    if split.any():
        bucket[split] = stable_hashes([batch.keys[i] for i in np.nonzero(split)[0]]) % reduce
    rank = np.empty(K, dtype=np.int64)
    rank[order] = np.arange(K)
    # fragments grouped by block, non-split ones in global DESC order within the block
    fkey, fblock, fcount = fragments.key, fragments.block, fragments.count
    is_split = split[fkey]
    sort = np.lexsort((rank[fkey], fblock))
    fkey, fblock, fcount, is_split = fkey[sort], fblock[sort], fcount[sort], is_split[sort]
    bounds = np.searchsorted(fblock, np.arange(fblock.max() + 2 if len(fblock) else 1))
    for b in range(len(bounds) - 1):
        lo, hi = bounds[b], bounds[b + 1]
        if lo == hi:
            continue
        s = is_split[lo:hi]
        keys_ns = fkey[lo:hi][~s]
        chosen, _ = allocate_task(fcount[lo:hi][~s], bucket[fkey[lo:hi][s]], fcount[lo:hi][s], reduce)
        bucket[keys_ns] = chosen
    return bucket


@register
class Prompt(Partitioner):
    name = "prompt"
    description = "Prompt (SIGMOD'20): heavy-key split + zigzag + BestFit residuals; load-aware Reduce buckets"
    Options = PromptOptions

    def _order(self, batch: KeyCounts) -> np.ndarray:
        cached = getattr(self, "_cached", None)
        if cached is not None and cached[0] is batch:
            return cached[1]
        order = batch.descending()
        self._cached = (batch, order)
        return order

    def assign_blocks(self, batch: KeyCounts, partitions: int) -> Fragments:
        order = self._order(batch)
        f = prompt_blocks(batch.counts[order], partitions, self.options.zigzag_start, self.options.overflow,
                          self.options.split_above_capacity)
        return Fragments(order[f.key], f.block, f.count).merged(partitions)  # a residual placed at home joins its cut

    def assign_buckets(self, batch: KeyCounts, fragments: Fragments, reduce: int) -> np.ndarray:
        return bucket_allocation(batch, fragments, reduce, self._order(batch))
