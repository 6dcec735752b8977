"""Algorithm 3 of Prompt (SIGMOD'20 §4.3): load-aware Reduce bucket allocation, run per Map task.

Each Map task places its key clusters (size = records of the key in its block; digest §8.21):
split keys (present in more than one block) by the stable hash ``h(k) mod R`` so every task
agrees; the task's non-split clusters sorted by size DESC (ties key ASC) each go to the
*least-loaded* candidate bucket (Worst-Fit on remaining capacity Bucket_size − load, digest
§8.20), which then leaves the candidate set until every bucket got one (reset when the set is
empty — the printed line 8 is inverted, §8.19). Ties → lowest bucket id.

Within one round the candidates' loads do not change, so a round of R clusters goes to the
buckets in ascending order of their load at the round's start; a run of equal-sized clusters
covering whole rounds repeats the same order. :func:`allocate_task` uses this to stay O(R log R)
per distinct cluster size instead of per cluster — same result as the literal loop.
"""
from __future__ import annotations

import numpy as np


def allocate_task(sizes_desc: np.ndarray, split_buckets: np.ndarray, split_sizes: np.ndarray,
                  reduce: int) -> tuple[np.ndarray, np.ndarray]:
    """One Map task. ``sizes_desc``: non-split cluster sizes sorted DESC (ties already by key);
    ``split_buckets``/``split_sizes``: hashed buckets and sizes of the task's split clusters.
    Returns (bucket per non-split cluster, final bucket loads of this task)."""
    R = int(reduce)
    load = np.bincount(np.asarray(split_buckets, dtype=np.int64), weights=split_sizes,
                       minlength=R).astype(np.int64)
    sizes = np.asarray(sizes_desc, dtype=np.int64)
    n = len(sizes)
    out = np.empty(n, dtype=np.int64)
    j = 0
    while j < n:
        order = np.argsort(load, kind="stable")  # ascending load, ties → lowest id
        end = min(j + R, n)
        s = sizes[j]
        # equal sizes from j on: whole rounds repeat this order
        run_end = j + int(np.searchsorted(-sizes[j:], -s, side="right"))
        full = (run_end - j) // R
        if full >= 1:
            m = full * R
            out[j:j + m] = np.tile(order, full)
            load += full * s
            j += m
            continue
        take = sizes[j:end]
        out[j:end] = order[:end - j]
        np.add.at(load, order[:end - j], take)
        j = end
    return out, load
