"""Discretisation of key costs and states for compact routing-table planning (Fang et al.,
"Parallel Stream Processing Against Workload Skewness and Variance", HPDC'17 §4.2; digest 003 §3.9).

- :func:`hlhe_representatives` — HLHE[R]: linear {1..r} and exponential {2r, 4r, …} values;
- :func:`discretise` — greedy error cancellation over values in non-increasing order;
- :func:`discretised_values` — both applied to a vector of c(k) or S(k, w), as
  ``Stats(discretisation_r=r)`` (``routing_table``) does, so keys with equal discretised values
  collapse into few compact records (``routing_compact``, §3.8).

Units: values are normalised by the smallest positive one (§8 A10) and returned in their original
unit (tuples for c, rows or bytes for S). Pure: numpy and the standard library only.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

__all__ = ["hlhe_representatives", "discretise", "discretised_values"]


def hlhe_representatives(x_max: float, r: int) -> list[float]:
    """HLHE[R] (digest §3.9, §8 A10): linear {1..r} and exponential {2r, 4r, …, 2^m·r} with
    m = ⌈log2(x_max/r)⌉, descending; |V| = r + m when x_max > r."""
    if r < 1:
        raise ValueError("r must be >= 1")
    reps = list(range(1, r + 1))
    v = r
    while v < x_max:
        v *= 2
        reps.append(v)
    return sorted((float(x) for x in reps), reverse=True)


def discretise(values: Sequence[float], reps: Sequence[float]) -> tuple[list[float], list[float]]:
    """Greedy error cancellation (§3.9 step 2) over ``values`` sorted non-increasing: a value
    between two representatives takes the larger if the running deviation D = Σ(x − x̂) > 0,
    else the smaller. Returns (x̂, D after each value). |D_final| ≤ the largest gap used."""
    reps = sorted(reps, reverse=True)
    out, trace, D = [], [], 0.0
    for x in values:
        if x in reps:
            xh = x
        else:
            upper = min((v for v in reps if v > x), default=reps[0])
            lower = max((v for v in reps if v < x), default=reps[-1])
            xh = upper if D > 0 else lower
        D += x - xh
        out.append(xh); trace.append(D)
    return out, trace


def discretised_values(values: np.ndarray, r: int) -> np.ndarray:
    """Discretise positive values (normalised by the smallest positive one, §8 A10) in descending
    order with HLHE(r) representatives; zeros stay zero; result in the original unit."""
    v = np.asarray(values, dtype=float)
    pos = v > 0
    if not pos.any():
        return v.copy()
    unit = float(v[pos].min())
    x = v / unit
    order = np.argsort(-x, kind="stable")
    order = order[pos[order]]
    reps = hlhe_representatives(float(x[order[0]]), r)
    xh, _ = discretise(x[order].tolist(), reps)
    out = np.zeros_like(v)
    out[order] = np.asarray(xh) * unit
    return out
