"""Dalton: learned (contextual-bandit) partitioning of heavy hitters, hash for the rest
(Zapridou, Mytilinis, Ailamaki, PVLDB 16(3) 2022; digest 001) — the micro-batch agent.

:class:`MicroBatchAgent` — the micro-batch variant of §3.4 (digest §2.7, §8.2) with the driver
as the agent: it sees the whole batch first, so its statistics window is the batch itself
(heavy hitter iff count ≥ batch tuples / n, digest §8.2), rows live for the current and the next
batch; cold tuples are routed vectorised (numpy, ``hash(k) mod n``) and then the hot tuples are
decided in arrival order **per block of consecutive tuples of one key** (one ε-greedy
decision, one reward and one Eq. 5 update per block; digest §7.10 "block decision mode", a
documented deviation; ``block=1`` is the exact per-tuple bandit). The block is ``block`` tuples
when fixed, else ⌈count/decisions_per_key⌉ (default 4096 decisions per hot key and batch), so a
10^6-tuple batch costs a bounded number of Python steps. Loads and fragmentation are
per micro-batch by default (digest §7.11); ``load_window`` > 1 keeps the load of that many
batches (Subtract-on-Evict).

In the cooperative mode (§4.1, digest §2.8), :meth:`MicroBatchAgent.sync_message` /
:meth:`MicroBatchAgent.receive_global` are the agent's side of the SYNC/feedback exchange
including the AWAIT reward buffer (Alg. 2 l. 19); the reducer is ``dalton_cooperative``.
Key forwarding (§4.2, digest §2.9 and §7.18): :meth:`MicroBatchAgent.forwardable` names the keys
whose combiner partial is final (never bandit-routed in the window).

Beside it: the bandit arithmetic of §3.1–3.2 (``dalton_bandit``), the paper-exact tuple-at-a-time
agent of Algorithm 1 (``dalton_tuple_agent``), the cooperative reducer and DSYNC
(``dalton_cooperative``), the registered partitioner (``dalton_plan``).

**The default variant** (``VARIANT``; what the ``dalton`` partitioner and policy run — the
agent's own defaults and ``dalton-paper`` are the paper's configuration, ``PAPER``). The paper's
configuration converges to max/mean 1.5–1.65 on a drifting Zipf z = 1 stream over 16 partitions
(hashed keys just below total/n pile up on some combiners, and a −2-initialised row learns one
arm per exploration) and takes up to 8 batches after each drift to get near 1.1 at 64
partitions. The variant meets ≤ 1.1 after convergence on every cell of z 0.5–2.0 × 1 000–
100 000 keys × 4–64 partitions × seeds 0–2 (worst converged mean 1.028, worst single batch
1.043; ``bench partitioners-drift`` and the grid in the report). Each change is a decision where
the paper is silent or an extension, documented:

* ``full_information`` — before every decision, the reward each combiner *would* get now
  (Eqs. 3–4 are a known model of the current loads and the key's fragmentation) updates every
  arm of the key's row (Eq. 5 on all arms), then the agent acts greedily on the row. The paper
  updates only the chosen arm, because a bandit usually does not know the unchosen arms'
  rewards; here it does, so a new heavy hitter is placed well from its second block instead of
  after many ε-explorations. ``epsilon`` = 0: with every arm updated, exploration only adds
  random placements (at 10 % they alone left single batches up to 1.125 at 64 partitions).
  ``gamma`` = 0.5: the row follows the current loads within a few decisions (0.1 lagged 10
  decisions behind a moving optimum and overshot: 1.09 at z = 0.5, 16 partitions).
* ``p1, p2`` = 0.8, 0.2 (paper 0.5, 0.5): with n = 4 one more combiner for a key costs
  p2/n = 0.125 of reward, which the key's imbalance must exceed before it spreads — the paper's
  weights held 1.10–1.13 at 4 partitions; 0.2 tolerates about 6 % there (0.1 would give
  1.013 but more fragments).
* ``block_resolution`` = 64: a hot key's block is at least total/(64·n) tuples, so a batch costs
  about 64·n decisions whatever the number of hot keys, and a block is at most 1/64 of a
  combiner's mean load (≤ 1.6 % of imbalance per decision).
* ``cold_target`` = 0.95 — the cold-floor guard: heavy hitters are the paper's (Def. 3.3,
  count ≥ total/n) plus, on every combiner whose hashed non-heavy keys alone would exceed
  0.95·mean, its heaviest non-heavy keys until the rest fits. On skewed streams the keys just
  below total/n, hashed together, load some combiners above the mean on their own (the "cold
  floor"), which no placement of the heavy hitters can fix; a fixed lower threshold
  (``hot_factor``, ours) fixes it on some shapes only (hot_factor 8: 1.14–1.39 at 64 partitions).

Units: loads and counts are tuples; times are batch ids. Randomness: a ``random.Random`` per
batch, seeded from ``seed`` and the batch id (digest §7.20), so plans are reproducible. Keys are
any hashable values; integer id arrays (the partitioner's ``KeyIndex``) take a vectorised path.
Pure: no Spark imports.
"""
from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass
from typing import Iterable, Mapping, Optional, Sequence

import numpy as np

from spark_governor.policies.partitioning.dalton_bandit import EPSILON, GAMMA, P1, P2, Q_INIT, _popcount, greedy, reward
from spark_governor.policies.partitioning.dalton_cooperative import SyncMessage, replay_rewards

__all__ = ["MicroBatchAgent", "BatchRouting", "VARIANT", "PAPER"]

#: the paper's configuration (digest §2.1; the agent's defaults, ``dalton-paper``)
PAPER = {"gamma": GAMMA, "epsilon": EPSILON, "p1": P1, "p2": P2, "full_information": False,
         "block_resolution": None, "cold_target": None, "hot_factor": 1.0}
#: the default variant (module docstring; ``dalton``)
VARIANT = {"gamma": 0.5, "epsilon": 0.0, "p1": 0.8, "p2": 0.2, "full_information": True,
           "block_resolution": 64, "cold_target": 0.95, "hot_factor": 1.0}


@dataclass(frozen=True)
class BatchRouting:
    """One batch's routing: ``dest[i]`` is the combiner of tuple i (arrival order) when the batch
    was routed per tuple, and always the per-key split ``frag_key/frag_block/frag_count``
    (tuples). ``hot`` are the bandit-routed key indices, ``decisions`` the bandit decisions taken."""

    frag_key: np.ndarray
    frag_block: np.ndarray
    frag_count: np.ndarray
    hot: np.ndarray
    decisions: int
    dest: Optional[np.ndarray] = None


class MicroBatchAgent:
    """Micro-batch Dalton (digest §2.7, §8.2): one agent per job (the driver) or one per
    partitioner in the cooperative mode. Call :meth:`route_batch` once per micro-batch."""

    def __init__(self, n: int, *, seed: int = 0, block: Optional[int] = None, decisions_per_key: int = 4096,
                 load_window: int = 1,
                 gamma: float = GAMMA, epsilon: float = EPSILON, p1: float = P1, p2: float = P2,
                 q_init: float = Q_INIT, strict: bool = False, hot_factor: float = 1.0,
                 full_information: bool = False, block_resolution: Optional[int] = None,
                 cold_target: Optional[float] = None):
        if n < 1 or (block is not None and block < 1) or decisions_per_key < 1 or load_window < 1:
            raise ValueError("need n >= 1, block >= 1, decisions_per_key >= 1 and load_window >= 1")
        if not hot_factor >= 1:
            raise ValueError("hot_factor must be >= 1")
        if block_resolution is not None and block_resolution < 1:
            raise ValueError("block_resolution must be >= 1")
        if cold_target is not None and not cold_target > 0:
            raise ValueError("cold_target must be > 0")
        self.hot_factor = hot_factor
        self.full_information, self.block_resolution, self.cold_target = full_information, block_resolution, cold_target
        self.n, self.seed, self.block, self.load_window = n, seed, block, load_window
        self.decisions_per_key = decisions_per_key
        self.gamma, self.epsilon, self.p1, self.p2, self.q_init, self.strict = gamma, epsilon, p1, p2, q_init, strict
        self.Q: dict = {}
        self.exp: dict = {}               # key -> first batch number at which the row is expired
        self.batch_no = 0
        self.past_loads: deque[np.ndarray] = deque()
        self.global_threshold: Optional[float] = None   # GL/n after a sync (cooperative mode)
        self.awaiting = False
        self.buffer: list[tuple] = []
        self.records_since_sync = 0
        self.loads_since_sync = np.zeros(n, dtype=np.int64)
        self.top_since_sync: dict = {}
        self.bandit_keys_in_window: set = set()

    # -- heavy hitters (Def. 3.3 over the batch, rows for the current and the next batch) --
    def heavy_hitters(self, keys: Sequence, counts: np.ndarray, hashed: Optional[np.ndarray] = None) -> np.ndarray:
        """Indices of the batch's hot keys: count ≥ batch total / n (or the global GL/n after a
        cooperative sync, §4.1 property 3), plus keys whose row has not expired.

        ``hot_factor`` κ > 1 (our extension, off by default: κ = 1 is Def. 3.3) lowers the threshold
        to total / (κ·n): keys between 1/(κn) and 1/n of the load are bandit-routed too instead of
        hashed, at most κ·n of them at a stable rate. On skewed streams the keys just below 1/n,
        hashed together, can alone load one combiner above the mean ("cold floor"), which no
        placement of the heavy hitters can fix; DAGreedy uses total / (100 n) for the same reason.

        ``cold_target`` (the default variant's cold-floor guard, module docstring; needs
        ``hashed``, hash(k) mod n per key): also the heaviest non-heavy keys of every combiner
        whose hashed non-heavy keys alone exceed cold_target·mean, until the rest fits."""
        counts = np.asarray(counts, dtype=np.int64)
        total = int(counts.sum())
        thr = (self.global_threshold if self.global_threshold is not None else total / self.n) / self.hot_factor
        over = counts > thr if self.strict else counts >= thr
        if total == 0:
            over[:] = False
        hot = set(np.nonzero(over)[0].tolist())
        if self.cold_target is not None and hashed is not None and total > 0:
            hot.update(self._cold_overflow(counts, np.asarray(hashed, dtype=np.int64), over, total).tolist())
        for i in hot:
            k = keys[i]
            if isinstance(keys, np.ndarray):
                k = k.item()
            self.Q.setdefault(k, [self.q_init] * self.n)
            self.exp[k] = self.batch_no + 2
        if self.Q and isinstance(keys, np.ndarray):          # integer key ids: vectorised lookup
            for k in [k for k, e in self.exp.items() if e <= self.batch_no]:
                del self.Q[k], self.exp[k]
            alive = np.fromiter(self.Q, dtype=keys.dtype, count=len(self.Q))
            hot.update(np.nonzero(np.isin(keys, alive))[0].tolist())
        elif self.Q:
            index = {k: i for i, k in enumerate(keys)} if len(self.Q) > 8 else None
            for k in list(self.Q):
                if self.exp[k] <= self.batch_no:
                    del self.Q[k], self.exp[k]
                    continue
                i = index.get(k) if index is not None else _find(keys, k)
                if i is not None:
                    hot.add(i)
        return np.array(sorted(hot), dtype=np.int64)

    def _cold_overflow(self, counts: np.ndarray, hashed: np.ndarray, over: np.ndarray, total: int) -> np.ndarray:
        """Keys to promote so that no combiner's hashed cold load exceeds ``cold_target``·mean:
        on each combiner whose cold keys (not ``over``) sum above it, its heaviest cold keys until
        the rest fits (the "cold floor" guard of the default variant)."""
        n = self.n
        limit = self.cold_target * total / n
        cold = np.nonzero(~over)[0]
        if not len(cold):
            return cold
        load = np.bincount(hashed[cold], weights=counts[cold], minlength=n)
        if load.max() <= limit:
            return np.empty(0, dtype=np.int64)
        sel = cold[load[hashed[cold]] > limit]                     # cold keys on overfull combiners
        order = np.lexsort((-counts[sel], hashed[sel]))            # by combiner, heaviest first
        sel = sel[order]
        b = hashed[sel]
        csum = np.cumsum(counts[sel])
        starts = np.r_[0, np.nonzero(np.diff(b))[0] + 1]
        base = np.repeat(np.r_[0, csum[starts[1:] - 1]], np.diff(np.r_[starts, len(sel)]))
        removed_before = csum - counts[sel] - base                 # removed on this combiner before key j
        keep_going = load[b] - removed_before > limit
        return sel[keep_going]

    def route_batch(self, keys: Sequence, counts: Sequence[int], hashed: np.ndarray,
                    arrival: Optional[np.ndarray] = None) -> BatchRouting:
        """Route one micro-batch.

        ``keys`` the distinct keys, ``counts`` tuples per key, ``hashed`` hash(k) mod n per key,
        ``arrival`` (optional) the key index of every tuple in arrival order. Cold keys go to
        ``hashed`` (vectorised); hot keys are cut into blocks of ``block`` consecutive tuples of
        the key (in arrival order; without ``arrival`` the key's tuples are taken to be spread
        evenly over the batch) and the blocks are decided in order of their first tuple."""
        counts = np.asarray(counts, dtype=np.int64)
        hashed = np.asarray(hashed, dtype=np.int64)
        n = self.n
        rng = random.Random(self.seed * 1_000_003 + self.batch_no)
        hot = self.heavy_hitters(keys, counts, hashed)
        is_hot = np.zeros(len(counts), dtype=bool); is_hot[hot] = True
        cold = ~is_hot
        batch_load = np.bincount(hashed[cold], weights=counts[cold], minlength=n).astype(np.int64)
        past = np.sum(self.past_loads, axis=0) if self.past_loads else np.zeros(n, dtype=np.int64)
        loads = (batch_load + past).tolist()
        fk, fb, fc = [np.nonzero(cold)[0]], [hashed[cold]], [counts[cold]]
        decisions = 0
        dest = None
        if len(hot):
            order, starts, sizes = self._hot_blocks(hot, counts, arrival)
            masks = {int(i): 0 for i in hot}
            rows = {int(i): self.Q[_item(keys[int(i)])] for i in hot}
            split: dict[tuple[int, int], int] = {}
            block_dest = np.empty(len(order), dtype=np.int64)
            decide = self._decide_full_information if self.full_information else self._decide_bandit
            loads = decide(order, sizes, rows, hashed, masks, loads, keys, split, block_dest, rng)
            decisions = len(order)
            sk = np.array([k for k, _ in split], dtype=np.int64)
            fk.append(sk); fb.append(np.array([b for _, b in split], dtype=np.int64))
            fc.append(np.array(list(split.values()), dtype=np.int64))
            batch_load = np.asarray(loads, dtype=np.int64) - past
            self.bandit_keys_in_window.update(_item(keys[int(i)]) for i in hot)
            if arrival is not None:
                dest = self._tuple_dest(arrival, hashed, is_hot, order, starts, sizes, block_dest)
        elif arrival is not None:
            dest = hashed[np.asarray(arrival, dtype=np.int64)]
        self._close_batch(batch_load, keys, counts)
        return BatchRouting(np.concatenate(fk).astype(np.int64), np.concatenate(fb).astype(np.int64),
                            np.concatenate(fc).astype(np.int64), hot, decisions, dest)

    def _decide_bandit(self, order, sizes, rows, hashed, masks, loads, keys, split, block_dest, rng):
        """The paper's decisions (Alg. 1 l. 4–6 per block): ε-greedy on the key's Q-row, then the
        reward of the chosen combiner after the assignment and Eq. 5 on it alone."""
        n, eps, p1, p2, gamma = self.n, self.epsilon, self.p1, self.p2, self.gamma
        for j, (ki, size) in enumerate(zip(order.tolist(), sizes.tolist())):
            row = rows[ki]
            h = int(hashed[ki])
            a = rng.randrange(n) if (eps > 0 and rng.random() < eps) else greedy(row, h)
            loads[a] += size
            masks[ki] |= 1 << a
            r = reward(loads, a, _popcount(masks[ki]), p1, p2)
            row[a] += gamma * (r - row[a])
            if self.awaiting:
                self.buffer.append((_item(keys[ki]), a, r))
            split[(ki, a)] = split.get((ki, a), 0) + size
            block_dest[j] = a
        return loads

    def _decide_full_information(self, order, sizes, rows, hashed, masks, loads, keys, split, block_dest, rng):
        """The default variant's decisions: before each decision the reward every combiner would
        get now (Eqs. 3–4 on the current loads and the key's fragmentation) updates the whole row
        (Eq. 5 on every arm: "full-information" updates, the reward model being known), then
        ε-greedy acts on the row. Returns the loads after the batch (list)."""
        n, eps, p1, p2, gamma = self.n, self.epsilon, self.p1, self.p2, self.gamma
        L = np.asarray(loads, dtype=float)
        S = float(L.sum())
        arrs = {ki: np.asarray(row, dtype=float) for ki, row in rows.items()}
        held = {ki: np.zeros(n, dtype=bool) for ki in rows}
        frag = dict.fromkeys(rows, 0)
        for j, (ki, size) in enumerate(zip(order.tolist(), sizes.tolist())):
            row, h = arrs[ki], int(hashed[ki])
            la = L + size
            mean = (S + size) / n
            ci = (la - mean) / np.maximum(la, mean)
            ca = (frag[ki] + ~held[ki]) / n
            row += gamma * (-(p1 * ci + p2 * ca) - row)
            if eps > 0 and rng.random() < eps:
                a = rng.randrange(n)
            else:
                best = row.max()
                a = h if row[h] == best else int(row.argmax())
            L[a] += size
            S += size
            if not held[ki][a]:
                held[ki][a] = True
                frag[ki] += 1
            masks[ki] |= 1 << a
            if self.awaiting:
                r = -(p1 * ci[a] + p2 * ca[a])
                self.buffer.append((_item(keys[ki]), a, float(r)))
            split[(ki, a)] = split.get((ki, a), 0) + size
            block_dest[j] = a
        for ki, arr in arrs.items():
            rows[ki][:] = arr.tolist()
        return L.astype(np.int64).tolist()

    def block_sizes(self, hot_counts: np.ndarray, total: Optional[int] = None) -> np.ndarray:
        """Tuples per bandit decision for each hot key: ``block`` when fixed, else
        ⌈count / decisions_per_key⌉ (at least 1), so a batch costs at most
        ``decisions_per_key`` decisions per hot key whatever its size; with ``block_resolution``
        ρ also at least ⌊total / (n·ρ)⌋ (a block is at most 1/ρ of the mean combiner load, so a
        batch costs about n·ρ decisions whatever the number of hot keys)."""
        hot_counts = np.asarray(hot_counts, dtype=np.int64)
        if self.block is not None:
            return np.full(len(hot_counts), self.block, dtype=np.int64)
        q = np.maximum(1, -(-hot_counts // self.decisions_per_key))
        if self.block_resolution is not None and total:
            q = np.maximum(q, int(total) // (self.n * self.block_resolution))
        return q

    def _hot_blocks(self, hot: np.ndarray, counts: np.ndarray, arrival: Optional[np.ndarray]):
        """Blocks of tuples per hot key, ordered by the arrival position of their first tuple:
        (key index per block, start rank within the key, block size)."""
        qk = self.block_sizes(counts[hot], int(counts.sum()))
        nblocks = -(-counts[hot] // qk)
        key_of = np.repeat(hot, nblocks)
        first = np.arange(len(key_of)) - np.repeat(np.cumsum(nblocks) - nblocks, nblocks)
        start = first * np.repeat(qk, nblocks)
        size = np.minimum(np.repeat(qk, nblocks), counts[key_of] - start)
        if arrival is not None:
            arrival = np.asarray(arrival, dtype=np.int64)
            pos_of = _positions_by_key(arrival, hot, counts)
            offs = np.concatenate([[0], np.cumsum(counts[hot])[:-1]])
            rank = np.repeat(offs, nblocks) + start
            when = pos_of[rank].astype(float)
        else:
            when = (start + 0.5) / counts[key_of]
        order = np.lexsort((key_of, when))
        return key_of[order], start[order], size[order]

    def _tuple_dest(self, arrival, hashed, is_hot, order, starts, sizes, block_dest) -> np.ndarray:
        """Per-tuple combiner (arrival order) for a routed batch."""
        arrival = np.asarray(arrival, dtype=np.int64)
        dest = hashed[arrival]
        hot_pos = np.nonzero(is_hot[arrival])[0]
        hot_keys = arrival[hot_pos]
        by_key = np.lexsort((hot_pos, hot_keys))
        pos_sorted = hot_pos[by_key]
        # the blocks in (key, start) order cover each key's tuples (in arrival order) contiguously
        blk = np.lexsort((starts, order))
        dest[pos_sorted] = np.repeat(block_dest[blk], sizes[blk])
        return dest

    def _close_batch(self, batch_load: np.ndarray, keys, counts) -> None:
        self.past_loads.append(np.asarray(batch_load, dtype=np.int64))
        while len(self.past_loads) > self.load_window - 1:
            self.past_loads.popleft()
        self.records_since_sync += int(np.sum(counts))
        self.loads_since_sync += np.asarray(batch_load, dtype=np.int64)
        counts = np.asarray(counts)
        top = np.argpartition(-counts, self.n)[: self.n] if len(counts) > self.n else np.arange(len(counts))
        for i in top.tolist():
            k = _item(keys[i])
            self.top_since_sync[k] = self.top_since_sync.get(k, 0) + int(counts[i])
        self.batch_no += 1

    def forwardable(self, keys: Iterable, cooperative: bool = False, synced_this_slide: bool = True) -> list:
        """Key forwarding (§4.2): keys whose combiner partial of the current window is final
        because they were never bandit-routed in it (digest §7.18). With cooperative agents the
        paper allows forwarding only when DSYNC ≤ slide, failing safe (none) when no global Q̄
        arrived during the slide (``synced_this_slide``). Call before :meth:`end_window`."""
        if cooperative and not synced_this_slide:
            return []
        return [k for k in keys if k not in self.bandit_keys_in_window]

    def end_window(self) -> None:
        """The application window closed: forget which keys were bandit-routed in it."""
        self.bandit_keys_in_window = set()

    # -- cooperative mode (§4.1, Algorithm 2) --
    def sync_message(self, request_double: bool = False) -> SyncMessage:
        """SYNC: local Q, records since the last sync, top-n keys (summed per batch top-n), the
        per-combiner load since the last sync; the agent enters AWAIT (rewards are buffered)."""
        top = dict(sorted(self.top_since_sync.items(), key=lambda kv: (-kv[1], str(kv[0])))[: self.n])
        msg = SyncMessage({k: list(v) for k, v in self.Q.items()}, self.records_since_sync, top,
                          dict(self.exp), self.loads_since_sync.tolist(), request_double)
        self.records_since_sync = 0
        self.loads_since_sync = np.zeros(self.n, dtype=np.int64)
        self.top_since_sync = {}
        self.awaiting = True
        self.buffer = []
        return msg

    def receive_global(self, qbar: Mapping, gl: int, exp: Mapping) -> None:
        """Feedback (Alg. 2 l. 17–20): Q ← Q̄, threshold GL/n, replay buffered rewards."""
        self.Q = {k: list(v) for k, v in qbar.items()}
        self.exp = dict(exp)
        self.global_threshold = gl / self.n if gl > 0 else None
        replay_rewards(self.Q, self.buffer, self.gamma)
        self.buffer = []
        self.awaiting = False


def _item(k):
    """A key as a plain Python value (numpy integer ids → int)."""
    return k.item() if isinstance(k, np.generic) else k


def _find(keys: Sequence, k) -> Optional[int]:
    try:
        return keys.index(k)
    except ValueError:
        return None


def _positions_by_key(arrival: np.ndarray, hot: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Arrival positions of the hot keys' tuples, grouped by key in ``hot`` order, ascending."""
    slot = np.full(int(arrival.max()) + 1 if len(arrival) else 1, -1, dtype=np.int64)
    slot[hot] = np.arange(len(hot))
    s = slot[arrival]
    pos = np.nonzero(s >= 0)[0]
    return pos[np.argsort(s[pos], kind="stable")]
