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

from spark_governor.policies.partitioning.base import Fragments

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
    # phase 3: residuals in RList order: home first, then BestFit (ties → lowest id)
    placer = _ResidualPlacer(load.tolist(), cap, overflow)
    res_all = counts[heavy] - cut
    heavy_l, home_l, res_l = heavy.tolist(), home.tolist(), res_all.tolist()
    pos, H, chunk = 0, len(heavy), 1024
    while pos < H:
        # vectorised: the longest prefix of residuals that all fit in their home blocks
        end = min(pos + chunk, H)
        r, h = res_all[pos:end], home[pos:end]
        loads = np.asarray(placer.loads, dtype=np.int64)
        accepted = _fits_at_home_prefix(r, h, np.maximum(cap - loads, 0))
        if accepted:
            fk.append(heavy[pos:pos + accepted]); fb.append(h[:accepted]); fc.append(r[:accepted])
            placer.reset(loads + np.bincount(h[:accepted], weights=r[:accepted], minlength=P).astype(np.int64))
            pos += accepted
        if accepted >= 64:
            chunk = min(chunk * 2, 1 << 16)
            continue
        # then one residual at a time for a stretch (the home blocks are filling up)
        chunk = 1024
        for j in range(pos, min(pos + 512, H)):
            placer.place(heavy_l[j], home_l[j], res_l[j])
        pos = min(pos + 512, H)
    fk.append(np.asarray(placer.key, dtype=np.int64)); fb.append(np.asarray(placer.block, dtype=np.int64))
    fc.append(np.asarray(placer.count, dtype=np.int64))
    return Fragments(np.concatenate(fk).astype(np.int64), np.concatenate(fb).astype(np.int64),
                     np.concatenate(fc).astype(np.int64))


class _ResidualPlacer:
    """Phase 3 one residual at a time: loads as a list and a sorted (remaining capacity, block) list."""

    def __init__(self, loads: list[int], cap: int, overflow: str) -> None:
        self.cap, self.overflow = cap, overflow
        self.key: list[int] = []
        self.block: list[int] = []
        self.count: list[int] = []
        self.reset(loads)

    def reset(self, loads) -> None:
        self.loads = [int(x) for x in loads]
        self.free = sorted((max(self.cap - x, 0), b) for b, x in enumerate(self.loads))

    def _put(self, key: int, b: int, n: int) -> None:
        free, cap, loads = self.free, self.cap, self.loads
        del free[bisect_left(free, (max(cap - loads[b], 0), b))]
        loads[b] += n
        insort(free, (max(cap - loads[b], 0), b))
        self.key.append(key); self.block.append(b); self.count.append(n)

    def _most_free(self) -> tuple[int, int]:
        top = self.free[-1][0]
        return top, self.free[bisect_left(self.free, (top, -1))][1]  # ties → lowest id

    def place(self, key: int, home: int, res: int) -> None:
        if res <= 0:
            return
        rem = max(self.cap - self.loads[home], 0)
        if res <= rem:
            self._put(key, home, res)
            return
        if rem > 0:
            self._put(key, home, rem)  # "Fill b from k" (nothing if home is full)
        rest = res - rem
        i = bisect_left(self.free, (rest, -1))
        if i < len(self.free):
            self._put(key, self.free[i][1], rest)  # BestFit: lowest remaining capacity that can hold it
        elif self.overflow == "single":
            self._put(key, self._most_free()[1], rest)
        else:  # spread: fill the block with the most remaining capacity, repeatedly
            while rest > 0:
                top, b = self._most_free()
                n = min(top, rest)
                self._put(key, b, n)
                rest -= n


def _fits_at_home_prefix(res: np.ndarray, home: np.ndarray, remaining: np.ndarray) -> int:
    """How many leading residuals fit in their home blocks when placed one after another."""
    order = np.argsort(home, kind="stable")
    hs, rs = home[order], res[order]
    cs = np.cumsum(rs)
    starts = np.r_[0, np.nonzero(np.diff(hs))[0] + 1]
    group_base = np.repeat(cs[starts] - rs[starts], np.diff(np.r_[starts, len(hs)]))
    cum = np.empty_like(cs)
    cum[order] = cs - group_base
    ok = cum <= remaining[home]
    return len(ok) if ok.all() else int(np.argmin(ok))
