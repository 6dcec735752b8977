"""Algorithm 2 of Prompt (SIGMOD'20 §4.2): load-balanced batch partitioning of the Map input.

Input: keys sorted by count DESC (ties key ASC), N_C tuples, K keys, P blocks. Units: tuples.

- P_Size = N_C/P, P_|k| = K/P, S_Cut = P_Size/P_|k| (= N_C/K, the mean key count). A key is
  *heavy* iff n_k > S_Cut, tested exactly as ``n_k·K > N_C`` (digest §8.3); block capacity
  ``cap = ⌈N_C/P⌉``; the fragment cut from a heavy key is ``N_C // K``.
- Phase 1: one S_Cut fragment of every heavy key, round-robin from block 0; residuals go to RList
  and the key's block is its *home*.
- Phase 2: the other keys, in order, zigzag (boustrophedon: b1..bP, bP..b1, ...; the end block
  takes two consecutive keys at each turn, digest §8.5), no capacity check (§8.6).
  ``zigzag_start="first"`` (default, the literal "foreach b ∈ Partitions") starts at block 0;
  ``"continue"`` starts at the phase-1 cursor (digest §8.4; better BCI on Example A).
- Phase 3: residuals in RList order: into the home block if they fit; otherwise fill the home
  block (nothing if it is full, §8.7) and put the rest into the block with the *lowest remaining
  capacity that can hold it* (BestFit; ties → lowest id). If no block can hold the rest (a gap of
  the paper, §8.8): ``overflow="spread"`` (default) repeatedly fills the block with the most
  remaining capacity; ``"single"`` puts the whole rest into that block (may exceed cap).
  Negative remaining capacity (phase-2 overfill) counts as 0.
- ``split_above_capacity`` (default False, literal): also treat keys with n_k > cap as heavy and
  cut their first fragment at min(N_C // K, cap) — fixes the K < P degenerate case (§7.3, §8.10).

Complexity: O(K log K) for the sort (done by the caller), O(K) vectorised phases 1–2, and
O(|RList| · log P) for phase 3.
"""
from __future__ import annotations

from bisect import bisect_left, insort
from typing import Literal

import numpy as np

from policies.partitioning.base import Fragments

ZigzagStart = Literal["first", "continue"]
Overflow = Literal["spread", "single"]


def zigzag_blocks(n: int, partitions: int, start: int = 0) -> np.ndarray:
    """Blocks of the first n positions of the boustrophedon over blocks start, start+1, ... (mod P)."""
    pos = np.arange(n, dtype=np.int64)
    within = pos % partitions
    forward = (pos // partitions) % 2 == 0
    idx = np.where(forward, within, partitions - 1 - within)
    return (idx + start) % partitions


def prompt_blocks(counts_desc: np.ndarray, partitions: int, zigzag_start: ZigzagStart = "first",
                  overflow: Overflow = "spread", split_above_capacity: bool = False) -> Fragments:
    """Algorithm 2 over counts already sorted DESC; fragments refer to positions in that order."""
    counts = np.asarray(counts_desc, dtype=np.int64)
    K, P = len(counts), int(partitions)
    if K == 0:
        return Fragments.from_lists([], [], [])
    N = int(counts.sum())
    cap = -(-N // P)
    frag = N // K
    heavy_mask = counts * K > N
    first_cut = np.full(K, frag, dtype=np.int64)
    if split_above_capacity:
        over_cap = counts > cap
        first_cut[over_cap] = np.minimum(frag, cap)
        heavy_mask |= over_cap
    heavy = np.nonzero(heavy_mask)[0]
    light = np.nonzero(~heavy_mask)[0]

    # phase 1: one cut per heavy key, round-robin from block 0
    home = np.arange(len(heavy), dtype=np.int64) % P
    cut = first_cut[heavy]
    load = np.bincount(home, weights=cut, minlength=P).astype(np.int64)
    # phase 2: zigzag over the light keys
    start = 0 if zigzag_start == "first" else len(heavy) % P
    light_blocks = zigzag_blocks(len(light), P, start)
    load += np.bincount(light_blocks, weights=counts[light], minlength=P).astype(np.int64)

    fk = [heavy, light]
    fb = [home, light_blocks]
    fc = [cut, counts[light]]
    # phase 3: residuals, home first, then BestFit (ties → lowest id)
    rk, rb, rc = [], [], []
    loads = load.tolist()
    free = sorted((max(cap - loads[b], 0), b) for b in range(P))  # (remaining capacity, block)

    def put(b: int, key: int, n: int) -> None:
        old = max(cap - loads[b], 0)
        loads[b] += n
        del free[bisect_left(free, (old, b))]
        insort(free, (max(cap - loads[b], 0), b))
        rk.append(key); rb.append(b); rc.append(n)

    residual = (counts[heavy] - cut).tolist()
    for key, b, res in zip(heavy.tolist(), home.tolist(), residual):
        if res <= 0:
            continue
        rem = max(cap - loads[b], 0)
        if res <= rem:
            put(b, key, res)
            continue
        if rem > 0:
            put(b, key, rem)  # "Fill b from k"
        rest = res - rem
        i = bisect_left(free, (rest, -1))
        if i < len(free):
            put(free[i][1], key, rest)  # BestFit: lowest remaining capacity that can hold the rest
        elif overflow == "single":
            top = free[-1][0]
            put(free[bisect_left(free, (top, -1))][1], key, rest)
        else:  # spread: fill the block with the most remaining capacity, repeatedly
            while rest > 0:
                top = free[-1][0]
                b2 = free[bisect_left(free, (top, -1))][1]
                n = min(top, rest)
                put(b2, key, n)
                rest -= n
    fk.append(np.asarray(rk, dtype=np.int64)); fb.append(np.asarray(rb, dtype=np.int64))
    fc.append(np.asarray(rc, dtype=np.int64))
    return Fragments(np.concatenate(fk), np.concatenate(fb), np.concatenate(fc))
