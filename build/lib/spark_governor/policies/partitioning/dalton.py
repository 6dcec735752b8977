"""Dalton: learned (contextual-bandit) partitioning of heavy hitters, hash for the rest
(Zapridou, Mytilinis, Ailamaki, PVLDB 16(3) 2022; digest 001).

Two agents share the bandit arithmetic of §3.1–3.2 (digest §2.2–2.3):

- :class:`TupleAgent` — Algorithm 1 tuple-at-a-time with the window bookkeeping of §3.3 (digest
  §2.5/§2.6): sliding application window ``window`` with slide ``slide`` (head + ⌈W/s⌉−1 past
  slides, Subtract-on-Evict loads, refcounted fragmentation masks), tumbling statistics window
  ``stats_win``. Time is whatever order attribute the caller passes (tuple index in the tests,
  digest §7.21). This is the paper-exact reference: the digest's trace (§6.2) and convergence
  (§6.6) oracles run on it.
- :class:`MicroBatchAgent` — the micro-batch variant of §3.4 (digest §2.7, §8.2) with the driver
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

Cooperative agents (§4.1, digest §2.8): :func:`merge_q_tables` is the QtableReducer with the
**normalised** frequency-weighted average (digest §7.12; the printed, non-normalised formula with
``normalized=False``), :class:`AdaptiveSync` the DSYNC protocol with the artifact's halving rule
(digest §6.5, §7.16) and bounds, :meth:`MicroBatchAgent.sync_message` / :meth:`MicroBatchAgent.
receive_global` the SYNC/feedback exchange including the AWAIT reward buffer (Alg. 2 l. 19).
Key forwarding (§4.2, digest §2.9 and §7.18): :meth:`MicroBatchAgent.forwardable` names the keys
whose combiner partial is final (never bandit-routed in the window).

Units: loads and counts are tuples; times are the caller's order attribute (tuples or batch ids);
DSYNC is in the caller's time unit (batches in Spark). Randomness: a ``random.Random`` per agent,
seeded from ``seed`` (and the batch id in micro-batch mode, digest §7.20), so plans are
reproducible. Pure: no Spark imports.
"""
from __future__ import annotations

import math
import random
from collections import deque
from dataclasses import dataclass, field
from typing import Callable, Hashable, Iterable, Mapping, Optional, Sequence

import numpy as np

__all__ = ["reward", "q_update", "greedy", "TupleAgent", "MicroBatchAgent", "BatchRouting",
           "SyncMessage", "merge_q_tables", "replay_rewards", "AdaptiveSync"]

GAMMA = 0.1
EPSILON = 0.1
P1 = P2 = 0.5
Q_INIT = -2.0


# -- the bandit arithmetic (§3.1–3.2) --------------------------------------------------------------

def reward(loads_after: Sequence[float], action: int, fragmentation: int,
           p1: float = P1, p2: float = P2) -> float:
    """R = −(p1·CI + p2·CA) (Eqs. 3–4), taken **after** the tuple was assigned to ``action``
    (digest §7.1): CI = (L_a − L̄)/max(L_a, L̄), CA = ‖X(k)‖/n. ``loads_after`` are the window
    loads in tuples, ``fragmentation`` the number of combiners holding the key in the window."""
    n = len(loads_after)
    la = float(loads_after[action])
    mean = float(sum(loads_after)) / n
    denom = max(la, mean)
    ci = (la - mean) / denom if denom > 0 else 0.0
    return -(p1 * ci + p2 * fragmentation / n)


def q_update(q: float, r: float, gamma: float = GAMMA) -> float:
    """Eq. 5: Q ← Q + γ·(R − Q) (constant step size)."""
    return q + gamma * (r - q)


def greedy(row: Sequence[float], hashed: int) -> int:
    """argmax of a Q-row; ties go to ``hashed`` (= hash(k)), then to the lowest index (digest §7.8)."""
    best = max(row)
    return hashed if row[hashed] == best else list(row).index(best)


def _choose(row: list[float], hashed: int, n: int, epsilon: float, rng: random.Random) -> int:
    """ε-greedy: uniform over all n combiners with probability ε (digest §7.9), else greedy."""
    if epsilon > 0 and rng.random() < epsilon:
        return rng.randrange(n)
    return greedy(row, hashed)


# -- tuple-at-a-time Dalton (Algorithm 1, §3.3) ----------------------------------------------------

class TupleAgent:
    """Single-partitioner Dalton, one decision per tuple (digest §2.5, paper semantics).

    ``hash_fn(key) -> combiner`` routes cold keys (and breaks greedy ties). ``strict`` uses the
    artifact's ``count > thr`` instead of Def. 3.3's ``≥`` (digest §7.2). The first statistics
    window has threshold +∞ (§7.3); an empty previous window keeps the last non-empty total
    (§7.4). A row is valid while ``t < exp`` with exp = end of the next statistics window (§7.6).
    """

    def __init__(self, n: int, window: float, slide: float, stats_win: Optional[float] = None, *,
                 hash_fn: Callable[[Hashable], int], seed: int = 0, t0: float = 0.0,
                 gamma: float = GAMMA, epsilon: float = EPSILON, p1: float = P1, p2: float = P2,
                 q_init: float = Q_INIT, strict: bool = False, rng: Optional[random.Random] = None):
        if n < 1 or window <= 0 or slide <= 0 or window < slide:
            raise ValueError("need n >= 1 and window >= slide > 0")
        self.n, self.gamma, self.epsilon, self.p1, self.p2, self.q_init = n, gamma, epsilon, p1, p2, q_init
        self.hash_fn, self.strict = hash_fn, strict
        self.rng = rng if rng is not None else random.Random(seed)
        self.slide = slide
        self.stats_win = slide if stats_win is None else stats_win
        self.past_slides = math.ceil(window / slide) - 1
        # sliding-window loads (Subtract-on-Evict) and fragmentation (head + refcounted aggregate)
        self.head_load = [0] * n
        self.past_loads: deque[list[int]] = deque()
        self.past_sum = [0] * n
        self.head_frag: dict = {}
        self.past_frags: deque[dict] = deque()
        self.agg_mask: dict = {}
        self.agg_ref: dict = {}
        self.next_slide = t0 + slide
        # statistics window
        self.freq: dict = {}
        self.stats_total = 0
        self.last_nonempty_total = 0
        self.thr = math.inf
        self.hot_now: set = set()
        self.next_stats = t0 + self.stats_win
        # bandit
        self.Q: dict = {}
        self.exp: dict = {}
        self.bandit_decisions = 0

    # window bookkeeping (§3.3)
    def _advance(self, t: float) -> None:
        while t >= self.next_stats:
            if self.stats_total > 0:
                self.last_nonempty_total = self.stats_total
            self.thr = self.last_nonempty_total / self.n if self.last_nonempty_total else math.inf
            self.freq.clear(); self.stats_total = 0; self.hot_now.clear()
            boundary = self.next_stats
            for k in [k for k, e in self.exp.items() if e <= boundary]:
                del self.Q[k], self.exp[k]
            self.next_stats += self.stats_win
        while t >= self.next_slide:
            for k, m in self.head_frag.items():
                self.agg_mask[k] = self.agg_mask.get(k, 0) | m
                ref = self.agg_ref.setdefault(k, [0] * self.n)
                for i in _bits(m):
                    ref[i] += 1
            self.past_loads.append(self.head_load)
            self.past_sum = [a + b for a, b in zip(self.past_sum, self.head_load)]
            self.past_frags.append(self.head_frag)
            while len(self.past_loads) > self.past_slides:
                old = self.past_loads.popleft()
                self.past_sum = [a - b for a, b in zip(self.past_sum, old)]
                for k, m in self.past_frags.popleft().items():
                    ref = self.agg_ref[k]
                    for i in _bits(m):
                        ref[i] -= 1
                        if ref[i] == 0:
                            self.agg_mask[k] &= ~(1 << i)
                    if self.agg_mask[k] == 0:
                        del self.agg_mask[k], self.agg_ref[k]
            self.head_load = [0] * self.n
            self.head_frag = {}
            self.next_slide += self.slide

    def window_loads(self) -> list[int]:
        """L_w: tuples per combiner in the current window (head + past slides)."""
        return [a + b for a, b in zip(self.head_load, self.past_sum)]

    def fragmentation(self, key) -> int:
        """‖X_w(k)‖: combiners holding ``key`` in the window."""
        return _popcount(self.head_frag.get(key, 0) | self.agg_mask.get(key, 0))

    def is_hot(self, key, t: float) -> bool:
        """Def. 3.3 with the current/next-window rule; updates the hot set and Q-rows."""
        c = self.freq[key]
        if key in self.hot_now:
            return True
        if (c > self.thr) if self.strict else (c >= self.thr):
            self.hot_now.add(key)
            self.Q.setdefault(key, [self.q_init] * self.n)
            self.exp[key] = self.next_stats + self.stats_win
            return True
        if key in self.Q and t < self.exp[key]:
            return True
        self.Q.pop(key, None); self.exp.pop(key, None)
        return False

    def on_tuple(self, t: float, key, explore_to: Optional[int] = None) -> int:
        """Route one tuple at time ``t``; returns the combiner. ``explore_to`` forces an exploratory
        choice (for scripted traces); otherwise ε-greedy with the agent's RNG."""
        self._advance(t)
        self.freq[key] = self.freq.get(key, 0) + 1
        self.stats_total += 1
        h = self.hash_fn(key)
        hot = self.is_hot(key, t)
        if hot:
            row = self.Q[key]
            a = explore_to if explore_to is not None else _choose(row, h, self.n, self.epsilon, self.rng)
        else:
            a = h
        self.head_load[a] += 1
        self.head_frag[key] = self.head_frag.get(key, 0) | (1 << a)
        if hot:
            self.bandit_decisions += 1
            r = reward(self.window_loads(), a, self.fragmentation(key), self.p1, self.p2)
            row[a] = q_update(row[a], r, self.gamma)
        return a


def _bits(mask: int):
    i = 0
    while mask:
        if mask & 1:
            yield i
        mask >>= 1; i += 1


def _popcount(mask: int) -> int:
    return mask.bit_count()


# -- micro-batch Dalton, driver as the agent (§3.4) ------------------------------------------------

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


@dataclass
class SyncMessage:
    """SYNC of one partitioner (§4.1): its Q-rows, records since the last sync, top-n key
    frequencies, row expirations, the per-combiner load since the last sync (digest §7.14) and
    the request to double DSYNC."""

    q: dict
    records: int
    top: dict
    exp: dict = field(default_factory=dict)
    loads: Optional[list] = None
    request_double: bool = False


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


# -- QtableReducer (§4.1) ---------------------------------------------------------------------------

def merge_q_tables(messages: Sequence[SyncMessage], n: int, *, normalized: bool = True,
                   q_init: float = Q_INIT, now: float = 0.0, sync_interval: float = 1.0):
    """Global Q̄, GL, expirations and the global load vector from the partitioners' SYNCs.

    GL = Σ records. Global heavy hitters: summed top-n frequency ≥ GL/n (digest §7.2 uses ≥).
    Q̄ holds the global HH ∪ the unexpired local rows (digest §7.13, exp = max over partitioners;
    a new global HH without any local row gets a fresh row of ``q_init`` expiring at
    ``now + sync_interval``). ``normalized=True``: Q̄(k,i) = Σ_j f_j(k)·Q_j(k,i) / Σ_j f_j(k) over
    the partitioners **having** a row for k (digest §7.12); ``False``: the printed
    Σ_j (f_j(k)/GL)·Q_j(k,i) / P. Partitioners with a row but no frequency for k (k outside
    their top-n) get weight 0 unless no one reports k, then an unweighted mean."""
    gl = sum(m.records for m in messages)
    P = len(messages)
    freq: dict = {}
    for m in messages:
        for k, f in m.top.items():
            freq[k] = freq.get(k, 0) + f
    global_hh = {k for k, f in freq.items() if gl > 0 and f >= gl / n}
    keys = set(global_hh)
    exp: dict = {}
    for m in messages:
        for k, e in m.exp.items():
            if e > now:
                keys.add(k)
                exp[k] = max(exp.get(k, e), e)
    qbar: dict = {}
    for k in sorted(keys, key=str):
        holders = [m for m in messages if k in m.q]
        if not holders:
            qbar[k] = [q_init] * n
            exp[k] = max(exp.get(k, now + sync_interval), now + sync_interval)
            continue
        weights = [float(m.top.get(k, 0)) for m in holders]
        if normalized:
            wsum = sum(weights)
            if wsum == 0:
                weights, wsum = [1.0] * len(holders), float(len(holders))
            qbar[k] = [sum(w * m.q[k][i] for w, m in zip(weights, holders)) / wsum for i in range(n)]
        else:
            qbar[k] = [sum((w / gl) * m.q[k][i] for w, m in zip(weights, holders)) / P for i in range(n)]
        if k in global_hh:
            exp[k] = max(exp.get(k, now + sync_interval), now + sync_interval)
    loads = None
    if all(m.loads is not None for m in messages) and messages:
        loads = np.sum([m.loads for m in messages], axis=0).tolist()
    return qbar, gl, exp, loads


def replay_rewards(q: dict, buffered: Iterable[tuple], gamma: float = GAMMA) -> dict:
    """Alg. 2 l. 19: apply buffered (key, combiner, reward) through Eq. 5 on top of Q̄ (in place)."""
    for k, a, r in buffered:
        if k in q:
            q[k][a] = q_update(q[k][a], r, gamma)
    return q


class AdaptiveSync:
    """Adaptive DSYNC (§4.1, digest §6.5/§7.16): double on any partitioner's request (the max of
    the proposals), halve when the reducer's idle time exceeds twice its processing time and
    nobody asked for more; clamp to [lower, upper] (units: the caller's, batches in Spark)."""

    def __init__(self, initial: float, lower: float = 1.0, upper: float = math.inf):
        if not lower <= initial <= upper:
            raise ValueError("need lower <= initial <= upper")
        self.dsync, self.lower, self.upper = initial, lower, upper

    def update(self, requests_double: Sequence[bool], idle: float, processing: float) -> float:
        if any(requests_double):
            self.dsync = min(self.upper, self.dsync * 2)
        elif idle > 2 * processing:
            self.dsync = max(self.lower, self.dsync / 2)
        return self.dsync
