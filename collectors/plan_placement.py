"""Realizing a partition plan on a micro-batch and placing every row in its Map block (Prompt on
Spark, digest 000 §9.2; steps 2–3 of ``collectors.partition_plan.PlanRunner.apply``). Pure numpy:
the runner calls these on the driver (:func:`realize`, :func:`placement_for`) and in the Python
workers (:func:`tag_blocks`).

- :func:`realize` — the plan the control plane sent (``PartitionPlan.to_dict`` form, computed from
  earlier batches) on this batch's counts: a planned key's tuples are spread over its planned
  blocks in proportion to its planned fragments (largest remainder, ties → lowest block), a key
  the plan does not know goes whole to ``crc32(key) mod P`` (bucket ``crc32(key) mod R``);
- :func:`placement_for` / :func:`tag_blocks` — exact Map placement: the j-th row of key k in
  input partition i has global ordinal offset(i, k) + j, which falls into exactly one of k's
  fragments, so Map block b holds exactly the plan's tuples of block b.

Units: counts, offsets and ordinals are rows (tuples). Keys are the plan's key strings
(``CAST(key AS STRING)``, ``policies.partitioning.base``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import numpy as np

from spark_governor.policies.partitioning.base import Fragments, KeyCounts, PartitionPlan, PlanError, stable_hashes

__all__ = ["realize", "Placement", "placement_for", "tag_blocks"]


def _largest_remainder(n: int, weights: list[int]) -> list[int]:
    """Split n in proportion to weights (largest remainder; ties → earlier entry)."""
    total = sum(weights)
    raw = [n * w / total for w in weights]
    base = [int(x) for x in raw]
    left = n - sum(base)
    for i in sorted(range(len(raw)), key=lambda i: (-(raw[i] - base[i]), i))[:left]:
        base[i] += 1
    return base


def realize(plan: Mapping, batch: KeyCounts) -> PartitionPlan:
    """The directive's plan (``PartitionPlan.to_dict`` form, or a subset of its keys) applied to this
    batch's counts: planned keys keep their blocks (sizes scaled to the new count) and bucket;
    unknown keys go whole to crc32 mod P / R."""
    P, R = int(plan["partitions"]), int(plan["reduce"])
    assignment = plan.get("assignment") or {}
    K = batch.num_keys
    hashes = stable_hashes(batch.keys)
    block = hashes % P
    bucket = hashes % R
    whole = np.ones(K, dtype=bool)
    xk, xb, xc = [], [], []  # fragments of the keys the plan splits
    for i, key in enumerate(batch.keys):
        entry = assignment.get(key)
        if entry is None:
            continue
        bucket[i] = int(entry["bucket"]) % R
        frags = entry["blocks"]
        if len(frags) == 1:
            block[i] = int(frags[0][0]) % P
            continue
        whole[i] = False
        for (b, _), n in zip(frags, _largest_remainder(int(batch.counts[i]), [int(c) for _, c in frags])):
            if n:
                xk.append(i); xb.append(int(b) % P); xc.append(n)
    keys = np.arange(K, dtype=np.int64)
    frags = Fragments(np.concatenate([keys[whole], np.asarray(xk, dtype=np.int64)]),
                      np.concatenate([block[whole], np.asarray(xb, dtype=np.int64)]),
                      np.concatenate([batch.counts[whole], np.asarray(xc, dtype=np.int64)]))
    return PartitionPlan(str(plan.get("algorithm", "directive")), P, R, batch.keys, batch.counts, frags, bucket,
                         dict(plan.get("options") or {}))


@dataclass(frozen=True)
class Placement:
    """What the Python workers need to tag rows with their Map block (broadcast)."""

    keys: np.ndarray            # sorted key strings (object array) for index lookups
    key_block: np.ndarray       # block of a whole key (−1 for split keys), aligned with ``keys``
    split_slot: np.ndarray      # index of the key among split keys (−1 if whole), aligned with ``keys``
    split_base: np.ndarray      # per split key: ordinal of its first tuple in the flat fragment space
    flat_end: np.ndarray        # cumulative fragment ends over all split keys (flat space)
    flat_block: np.ndarray      # block of each fragment in the flat space
    offsets: dict               # input partition → per-split-key ordinal offset (int64 array)
    bucket: np.ndarray          # Reduce bucket, aligned with ``keys``


def placement_for(plan: PartitionPlan, per_partition: list[tuple[int, str, int]]) -> Placement:
    """``per_partition``: (input partition, key, rows) from the statistics pass."""
    order = np.argsort(np.array(plan.keys, dtype=object), kind="stable")
    keys = np.array(plan.keys, dtype=object)[order]
    rank = np.empty(len(order), dtype=np.int64)
    rank[order] = np.arange(len(order))
    f = plan.fragments
    nfrag = plan.fragments_per_key()
    key_block = np.full(len(keys), -1, dtype=np.int64)
    whole = nfrag[f.key] == 1
    key_block[rank[f.key[whole]]] = f.block[whole]
    split_keys = np.nonzero(nfrag > 1)[0]  # indices into plan.keys
    split_slot = np.full(len(keys), -1, dtype=np.int64)
    split_slot[rank[split_keys]] = np.arange(len(split_keys))
    sel = np.isin(f.key, split_keys)
    slot_of_key = np.full(len(plan.keys), -1, dtype=np.int64)
    slot_of_key[split_keys] = np.arange(len(split_keys))
    sk, sb, sc = slot_of_key[f.key[sel]], f.block[sel], f.count[sel]
    o = np.lexsort((sb, sk))
    sk, sb, sc = sk[o], sb[o], sc[o]
    flat_end = np.cumsum(sc)
    split_base = np.zeros(len(split_keys), dtype=np.int64)
    if len(split_keys):
        totals = np.bincount(sk, weights=sc, minlength=len(split_keys)).astype(np.int64)
        split_base[1:] = np.cumsum(totals)[:-1]
    offsets: dict[int, np.ndarray] = {}
    index = {plan.keys[k]: s for s, k in enumerate(split_keys)}
    running = np.zeros(len(split_keys), dtype=np.int64)
    for pid, key, n in sorted(r for r in per_partition if r[1] in index):
        if pid not in offsets:
            offsets[pid] = running.copy()
        s = index[key]
        offsets[pid][s] = running[s]
        running[s] += n
    bucket = plan.bucket[order]
    return Placement(keys, key_block, split_slot, split_base, flat_end, sb, offsets, bucket)


def tag_blocks(key_strings: np.ndarray, placement: Placement, pid: int, seen: np.ndarray) -> np.ndarray:
    """Map block of each row of one Arrow batch of input partition ``pid``; ``seen`` counts the
    rows of each split key already tagged in this partition (updated in place)."""
    idx = np.searchsorted(placement.keys, key_strings)
    idx = np.minimum(idx, len(placement.keys) - 1)
    if len(key_strings) and not np.all(placement.keys[idx] == key_strings):
        bad = key_strings[np.nonzero(placement.keys[idx] != key_strings)[0][0]]
        raise PlanError(f"key {bad!r} is not in the batch statistics (did the batch change between passes?)")
    blocks = placement.key_block[idx].copy()
    slot = placement.split_slot[idx]
    rows = np.nonzero(slot >= 0)[0]
    if len(rows):
        s = slot[rows]
        o = np.argsort(s, kind="stable")
        ss = s[o]
        starts = np.r_[0, np.nonzero(np.diff(ss))[0] + 1]
        lengths = np.diff(np.r_[starts, len(ss)])
        local = np.arange(len(ss)) - np.repeat(starts, lengths)
        base = placement.offsets.get(pid)
        ordinal = (base[ss] if base is not None else 0) + seen[ss] + local
        np.add.at(seen, ss[starts], lengths)
        flat = placement.split_base[ss] + ordinal
        blocks[rows[o]] = placement.flat_block[np.searchsorted(placement.flat_end, flat, side="right")]
    return blocks
