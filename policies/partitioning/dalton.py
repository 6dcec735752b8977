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

Units: loads and counts are tuples; times are batch ids. Randomness: a ``random.Random`` per
batch, seeded from ``seed`` and the batch id (digest §7.20), so plans are reproducible. Pure: no
Spark imports.
"""
from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass
from typing import Iterable, Mapping, Optional, Sequence

import numpy as np

from spark_governor.policies.partitioning.dalton_bandit import EPSILON, GAMMA, P1, P2, Q_INIT, _popcount, greedy, reward
from spark_governor.policies.partitioning.dalton_cooperative import SyncMessage, replay_rewards

__all__ = ["MicroBatchAgent", "BatchRouting"]


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
                 q_init: float = Q_INIT, strict: bool = False, hot_factor: float = 1.0):
        if n < 1 or (block is not None and block < 1) or decisions_per_key < 1 or load_window < 1:
            raise ValueError("need n >= 1, block >= 1, decisions_per_key >= 1 and load_window >= 1")
        if not hot_factor >= 1:
            raise ValueError("hot_factor must be >= 1")
        self.hot_factor = hot_factor
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
    def heavy_hitters(self, keys: Sequence, counts: np.ndarray) -> np.ndarray:
        """Indices of the batch's hot keys: count ≥ batch total / n (or the global GL/n after a
        cooperative sync, §4.1 property 3), plus keys whose row has not expired.

        ``hot_factor`` κ > 1 (our extension, off by default: κ = 1 is Def. 3.3) lowers the threshold
        to total / (κ·n): keys between 1/(κn) and 1/n of the load are bandit-routed too instead of
        hashed, at most κ·n of them at a stable rate. On skewed streams the keys just below 1/n,
        hashed together, can alone load one combiner above the mean ("cold floor"), which no
        placement of the heavy hitters can fix; DAGreedy uses total / (100 n) for the same reason."""
        counts = np.asarray(counts, dtype=np.int64)
        total = int(counts.sum())
        thr = (self.global_threshold if self.global_threshold is not None else total / self.n) / self.hot_factor
        over = counts > thr if self.strict else counts >= thr
        if total == 0:
            over[:] = False
        hot = set(np.nonzero(over)[0].tolist())
        for i in hot:
            k = keys[i]
            self.Q.setdefault(k, [self.q_init] * self.n)
            self.exp[k] = self.batch_no + 2
        if self.Q:
            index = {k: i for i, k in enumerate(keys)} if len(self.Q) > 8 else None
            for k in list(self.Q):
                if self.exp[k] <= self.batch_no:
                    del self.Q[k], self.exp[k]
                    continue
                i = index.get(k) if index is not None else _find(keys, k)
                if i is not None:
                    hot.add(i)
        return np.array(sorted(hot), dtype=np.int64)

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
        hot = self.heavy_hitters(keys, counts)
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
            rows = {int(i): self.Q[keys[int(i)]] for i in hot}
            split: dict[tuple[int, int], int] = {}
            block_dest = np.empty(len(order), dtype=np.int64)
            eps, p1, p2, gamma = self.epsilon, self.p1, self.p2, self.gamma
            for j, (ki, size) in enumerate(zip(order.tolist(), sizes.tolist())):
                row = rows[ki]
                h = int(hashed[ki])
                a = rng.randrange(n) if (eps > 0 and rng.random() < eps) else greedy(row, h)
                loads[a] += size
                masks[ki] |= 1 << a
                r = reward(loads, a, _popcount(masks[ki]), p1, p2)
                row[a] += gamma * (r - row[a])
                if self.awaiting:
                    self.buffer.append((keys[ki], a, r))
                split[(ki, a)] = split.get((ki, a), 0) + size
                block_dest[j] = a
            decisions = len(order)
            sk = np.array([k for k, _ in split], dtype=np.int64)
            fk.append(sk); fb.append(np.array([b for _, b in split], dtype=np.int64))
            fc.append(np.array(list(split.values()), dtype=np.int64))
            batch_load = np.asarray(loads, dtype=np.int64) - past
            self.bandit_keys_in_window.update(keys[int(i)] for i in hot)
            if arrival is not None:
                dest = self._tuple_dest(arrival, hashed, is_hot, order, starts, sizes, block_dest)
        elif arrival is not None:
            dest = hashed[np.asarray(arrival, dtype=np.int64)]
        self._close_batch(batch_load, keys, counts)
        return BatchRouting(np.concatenate(fk).astype(np.int64), np.concatenate(fb).astype(np.int64),
                            np.concatenate(fc).astype(np.int64), hot, decisions, dest)

    def block_sizes(self, hot_counts: np.ndarray) -> np.ndarray:
        """Tuples per bandit decision for each hot key: ``block`` when fixed, else
        ⌈count / decisions_per_key⌉ (at least 1), so a batch costs at most
        ``decisions_per_key`` decisions per hot key whatever its size."""
        hot_counts = np.asarray(hot_counts, dtype=np.int64)
        if self.block is not None:
            return np.full(len(hot_counts), self.block, dtype=np.int64)
        return np.maximum(1, -(-hot_counts // self.decisions_per_key))

    def _hot_blocks(self, hot: np.ndarray, counts: np.ndarray, arrival: Optional[np.ndarray]):
        """Blocks of tuples per hot key, ordered by the arrival position of their first tuple:
        (key index per block, start rank within the key, block size)."""
        qk = self.block_sizes(counts[hot])
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
            self.top_since_sync[keys[i]] = self.top_since_sync.get(keys[i], 0) + int(counts[i])
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
