"""Dalton's contextual bandit, the arithmetic both agents share (Zapridou, Mytilinis, Ailamaki,
PVLDB 16(3) 2022, §3.1–3.2; digest 001 §2.2–2.3).

- :func:`reward` — R = −(p1·CI + p2·CA) (Eqs. 3–4), taken after the tuple is assigned (§7.1);
- :func:`q_update` — Eq. 5, Q ← Q + γ·(R − Q) with a constant step size;
- :func:`greedy` — argmax of a Q-row, ties to hash(k), then the lowest index (§7.8); ε-greedy
  explores uniformly over all n combiners (§7.9).

Defaults: γ = ε = 0.1, p1 = p2 = 0.5, Q-rows start at −2. Units: loads in tuples, fragmentation in
combiners. The agents: tuple-at-a-time ``dalton_tuple_agent``, micro-batch ``dalton``; cooperative
agents ``dalton_cooperative``. Pure: no Spark imports.
"""
from __future__ import annotations

import random
from typing import Sequence

__all__ = ["reward", "q_update", "greedy", "GAMMA", "EPSILON", "P1", "P2", "Q_INIT"]

GAMMA = 0.1
EPSILON = 0.1
P1 = P2 = 0.5
Q_INIT = -2.0


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


def _popcount(mask: int) -> int:
    """‖X(k)‖: the combiners set in a fragmentation bitmask."""
    return mask.bit_count()
