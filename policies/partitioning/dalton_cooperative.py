"""Cooperative Dalton agents (Zapridou, Mytilinis, Ailamaki, PVLDB 16(3) 2022, §4.1, Algorithm 2;
digest 001 §2.8).

- :class:`SyncMessage` — one partitioner's SYNC (Q-rows, records, top-n frequencies, expirations,
  loads, the request to double DSYNC);
- :func:`merge_q_tables` — the QtableReducer with the **normalised** frequency-weighted average
  (digest §7.12; the printed, non-normalised formula with ``normalized=False``);
- :func:`replay_rewards` — the AWAIT reward buffer replayed on top of Q̄ (Alg. 2 l. 19);
- :class:`AdaptiveSync` — the DSYNC protocol with the artifact's halving rule (digest §6.5, §7.16)
  and bounds.

The agent side (``dalton.MicroBatchAgent.sync_message`` / ``receive_global``) sends and receives
these. Units: records and loads are tuples; DSYNC is in the caller's time unit (batches in Spark).
Pure: no Spark imports.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Iterable, Optional, Sequence

import numpy as np

from spark_governor.policies.partitioning.dalton_bandit import GAMMA, Q_INIT, q_update

__all__ = ["SyncMessage", "merge_q_tables", "replay_rewards", "AdaptiveSync"]


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
