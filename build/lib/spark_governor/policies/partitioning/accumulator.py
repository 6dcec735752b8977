"""Algorithm 1 of Prompt (SIGMOD'20 §4.1): frequency-aware buffering of one micro-batch.

A hash table (key → entry with the exact count and the update-control fields) plus a balanced
ordered structure of *approximate* counts (the CountTree; a ``sortedcontainers.SortedList`` of
``(count, key)``). Each key updates its tree node at most ``budget`` times per batch: when
Δfreq ≥ f.step (frequency step) or, failing that, when Δtime ≥ t.step (time step). Units: times in
seconds (the batch interval [t_start, t_end) and ``now``), counts in tuples.

Digest choices (000 §8): ``≥`` instead of the printed ``==`` (§8.14); line 13 uses the global
Budget, ``f.step = (N_est/Budget) · Freq_Current / N_C`` (§8.15); LastUpdateTime is set on insert
and every update (§8.16); a key whose budget is spent is no longer updated (§8.17); the initial
``f = N_est / (K_avg · Budget)`` (§2.1), ``f = 1`` when no estimate exists yet (§8.18).
:meth:`seal` walks the tree in reverse order (count DESC, key ASC; §8.1) and returns the *exact*
counts (§8.2). The engine keeps the tuples themselves (in Spark, the micro-batch DataFrame); this
class keeps only the statistics.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Hashable, Optional

from sortedcontainers import SortedList


@dataclass
class Entry:
    current: int          # Freq_Current: exact tuples of the key so far
    updated: int          # Freq_Updated: the count stored in the tree
    budget: int           # updates left in this batch
    f_step: float         # tuples between frequency-triggered updates
    t_step: float         # seconds between time-triggered updates
    last: float           # LastUpdateTime (seconds)


class Accumulator:
    """One batch interval [t_start, t_end) of Algorithm 1."""

    def __init__(self, t_start: float, t_end: float, budget: int = 10, n_est: Optional[float] = None,
                 k_avg: Optional[float] = None) -> None:
        if budget < 1:
            raise ValueError("budget must be >= 1")
        if t_end <= t_start:
            raise ValueError("t_end must be after t_start")
        self.t_start, self.t_end, self.budget = float(t_start), float(t_end), int(budget)
        self.n_est = n_est
        self.f = n_est / (k_avg * budget) if n_est and k_avg else 1.0
        self.table: dict[Hashable, Entry] = {}
        self.tree: SortedList = SortedList()
        self.n_c = 0
        self.updates = 0

    def _reinsert(self, key: Hashable, e: Entry, now: float) -> None:
        self.tree.remove((e.updated, key))
        self.tree.add((e.current, key))
        e.budget -= 1
        e.updated = e.current
        e.last = now
        self.updates += 1

    def add(self, key: Hashable, now: float) -> None:
        """One tuple of ``key`` arriving at time ``now`` (seconds)."""
        self.n_c += 1
        e = self.table.get(key)
        if e is None:
            self.table[key] = Entry(1, 1, self.budget, self.f, (self.t_end - now) / self.budget, now)
            self.tree.add((1, key))
            return
        e.current += 1
        if e.budget <= 0:
            return
        n_est = self.n_est if self.n_est else self.n_c
        if e.current - e.updated >= e.f_step:
            self._reinsert(key, e, now)
            e.f_step = (n_est / self.budget) * e.current / self.n_c
        elif now - e.last >= e.t_step:
            self._reinsert(key, e, now)
            e.t_step = (self.t_end - now) / e.budget if e.budget > 0 else math.inf

    def approximate_counts(self) -> list[tuple[Hashable, int]]:
        """(key, tree count) in count DESC, key ASC order — the quasi-sorted CountTree."""
        return sorted(((k, c) for c, k in self.tree), key=lambda kc: (-kc[1], kc[0]))

    def seal(self) -> tuple[list[tuple[Hashable, int]], int, int]:
        """At the heartbeat: ([(key, exact count)] in CountTree order, N_C, |K|)."""
        order = [(k, self.table[k].current) for k, _ in self.approximate_counts()]
        return order, self.n_c, len(self.table)
