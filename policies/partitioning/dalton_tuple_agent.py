"""Tuple-at-a-time Dalton, the paper-exact reference agent (Zapridou, Mytilinis, Ailamaki, PVLDB 16(3)
2022, Algorithm 1 and §3.3; digest 001 §2.5/§2.6).

:class:`TupleAgent` — Algorithm 1 tuple-at-a-time with the window bookkeeping of §3.3: sliding
application window ``window`` with slide ``slide`` (head + ⌈W/s⌉−1 past slides, Subtract-on-Evict
loads, refcounted fragmentation masks), tumbling statistics window ``stats_win``. Time is whatever
order attribute the caller passes (tuple index in the tests, digest §7.21). The digest's trace
(§6.2) and convergence (§6.6) oracles run on it; the product routes micro-batches with
``dalton.MicroBatchAgent``.

Units: loads and counts are tuples; times are the caller's order attribute. Randomness: a
``random.Random`` per agent, seeded from ``seed``. Pure: no Spark imports.
"""
from __future__ import annotations

import math
import random
from collections import deque
from typing import Callable, Hashable, Optional

from spark_governor.policies.partitioning.dalton_bandit import (EPSILON, GAMMA, P1, P2, Q_INIT, _choose, _popcount,
                                                                q_update, reward)

__all__ = ["TupleAgent"]


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
