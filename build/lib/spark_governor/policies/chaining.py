"""Lohrmann's Dynamic Task Chaining (DTC), as pure functions.

The chaining algorithm of the thesis [T §4.7.4, Algorithms 9–10], transcribed literally so that the
worked examples of the design digest (``004_lohrmann.md`` §9.9, D1–D4) are exact unit-test oracles.
The digest's resolutions of the thesis gaps (§10.14 strict ``<``, §10.15 enumeration order) are named
where they apply.

- A *primary chain* ``pc = (cn_1..cn_n)`` is the longest run of one-to-one wired, co-located tasks of
  equal parallelism [T §4.7.3]. A *primary chain partitioning* (pcp) cuts it into consecutive chains;
  every chain runs in one thread.
- Chain utilization (Eq. 4.13) ``util(cn) = Σ ρ^max_v`` over the chain's tasks; ``maxUtil`` (Eq. 4.14)
  and ``utilVar`` (Eq. 4.15) summarize a pcp.
- :func:`compute_primary_chain_partitioning` (Algorithm 10) returns the pcp with the fewest chains that
  keeps every chain at ``util ≤ ρ_max`` (0.9) and lowers the utilization variance vs the all-unchained
  partitioning ``stdPcp``; otherwise stdPcp.
- :func:`plan_exchanges` maps this to Spark (digest §11.7): a "task" is a stage, *chain* = remove an
  optional exchange (fuse the neighbouring stages), *unchain* = keep or insert one (``repartition``).
  Required exchanges (key shuffles feeding aggregations, joins or state) always split. The result is
  advisory.

Units: every ρ^max is a dimensionless utilization, i.e. the fraction of one thread (in Spark, one task
slot) that a subtask keeps busy at its peak; a chain's utilization is the sum, and must stay ≤ ρ_max.
Task indices are 0-based positions along the chain; split indices are 1-based as in the thesis
(split index s cuts between task s−1 and task s in 0-based terms, i.e. after the s-th task).

Pure Python; no Spark, Flask or SQL.
"""
from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Literal, Optional, Union

#: DTC chain utilization bound ρ_max [T §4.7.4]: "empirically determined to be a safe setting".
#: Separate from the ES bottleneck threshold 0.99 (digest §10.2).
CHAIN_UTILIZATION = 0.9

#: Tolerance of the ``≤ ρ_max`` comparisons and of the variance comparisons (both modes)
#: (digest §10.14). It absorbs float artefacts such as ``0.2 + 0.4 + 0.3 = 0.9000000000000001`` (§9.9 D4).
CHAIN_EPS = 1e-9

Mode = Literal["recommended", "literal"]
MODES: tuple[str, ...] = ("recommended", "literal")


# -- Eqs. 4.13–4.15 ------------------------------------------------------------------------------

def _check_rhos(rhos: Sequence[float]) -> tuple[float, ...]:
    out = tuple(float(r) for r in rhos)
    for r in out:
        if not (math.isfinite(r) and r >= 0):
            raise ValueError(f"every ρ^max must be finite and >= 0, got {r!r}")
    return out


def chain_utilization(rhos: Sequence[float]) -> float:
    """``util(cn) = Σ_{i=1..k} ρ^max_{v_i}`` (Eq. 4.13): the summed peak utilization of a chain's tasks.

    Dimensionless (fraction of one thread). Summed left to right in plain float arithmetic, exactly as
    the formula reads and independent of the Python version (3.12's ``sum`` compensates float
    rounding); comparisons against ρ_max add :data:`CHAIN_EPS` to absorb the rounding
    (digest §9.9 D4). Example: ``chain_utilization([0.2, 0.4, 0.3]) == 0.9000000000000001``. (The
    digest writes the order ``0.2 + 0.3 + 0.4``, which is exactly 0.9 in floats.)
    """
    total = 0.0
    for r in _check_rhos(rhos):
        total += r
    return total


def _chain_utils(rhos: Sequence[float], partitioning: Sequence[Sequence[int]]) -> tuple[float, ...]:
    return tuple(chain_utilization([rhos[k] for k in chain]) for chain in partitioning)


def max_util(partitioning: Sequence[Sequence[float]]) -> float:
    """``maxUtil(pcp) = max_i util(Cn_i)`` (Eq. 4.14).

    ``partitioning`` is a sequence of chains, each given as the ρ^max values of its tasks, e.g.
    ``[[0.5], [0.3, 0.6]]``. Dimensionless.
    """
    if not partitioning:
        raise ValueError("a partitioning needs at least one chain")
    return max(chain_utilization(chain) for chain in partitioning)


def _fsum_left(xs) -> float:
    total = 0.0
    for x in xs:
        total += x
    return total


def _variance(utils: Sequence[float]) -> float:
    p = len(utils)
    mean = _fsum_left(utils) / p
    return _fsum_left((u - mean) ** 2 for u in utils) / p


def util_var(partitioning: Sequence[Sequence[float]]) -> float:
    """``utilVar(pcp) = (1/p)·Σ_i (util(Cn_i) − (1/p)·Σ_j util(Cn_j))²`` (Eq. 4.15).

    The *population* variance of the chain utilizations. The thesis's ``p`` here is the **number of
    chains** in the partitioning (not a parallelism). ``partitioning`` is given as in :func:`max_util`.
    A single chain has variance exactly 0. Dimensionless (utilization squared).
    """
    if not partitioning:
        raise ValueError("a partitioning needs at least one chain")
    return _variance([chain_utilization(chain) for chain in partitioning])


# -- enumeratePartitionings -----------------------------------------------------------------------

def enumerate_partitionings(n: int, i: int) -> Iterator[tuple[int, ...]]:
    """The split-index tuples of all partitionings of a chain of ``n`` tasks into ``i`` chains.

    Each tuple holds the ``i − 1`` split indices, chosen from ``1..n−1`` (1-based: split index s cuts
    after the s-th task). They come in **lexicographic order** (digest §10.15), as in the thesis
    example: ``n = 5, i = 3`` gives ``(1,2), (1,3), (1,4), (2,3), (2,4), (3,4)``. There are
    ``C(n−1, i−1)`` of them; ``i = 1`` yields the single empty tuple, ``i = n`` the all-unchained one.
    """
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    if not 1 <= i <= n:
        raise ValueError(f"need 1 <= i <= n, got i={i}, n={n}")
    return itertools.combinations(range(1, n), i - 1)


def chains_from_splits(n: int, splits: Sequence[int]) -> tuple[tuple[int, ...], ...]:
    """Turn split indices (as from :func:`enumerate_partitionings`) into chains of 0-based task indices.

    ``chains_from_splits(5, (1, 3)) == ((0,), (1, 2), (3, 4))``. The splits must be strictly increasing
    and within ``1..n−1``.
    """
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    cuts = (0, *splits, n)
    if any(not a < b for a, b in zip(cuts, cuts[1:])):
        raise ValueError(f"split indices must be strictly increasing within 1..{n - 1}, got {tuple(splits)}")
    return tuple(tuple(range(a, b)) for a, b in zip(cuts, cuts[1:]))


def splits_from_chains(chains: Sequence[Sequence[int]]) -> tuple[int, ...]:
    """Inverse of :func:`chains_from_splits`: the 1-based split indices of consecutive chains."""
    out, k = [], 0
    for chain in chains[:-1]:
        k += len(chain)
        out.append(k)
    return tuple(out)


# -- Algorithm 10 ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class ChainPartitioning:
    """Outcome of :func:`compute_primary_chain_partitioning`.

    - ``chains``: the chosen partitioning, as consecutive tuples of 0-based task indices.
    - ``max_util``: maxUtil of the chosen partitioning (Eq. 4.14; dimensionless).
    - ``util_var``: utilVar of the chosen partitioning (Eq. 4.15).
    - ``std_var``: utilVar of stdPcp, the all-unchained baseline (every task its own chain).
    - ``chained``: True when the choice differs from stdPcp, i.e. at least two tasks share a chain.
    - ``examined``: how many candidate partitionings the loop tested (at most ``2^(n−1) − 1``).
    - ``mode``: the acceptance test used (``"recommended"`` or ``"literal"``).
    """

    chains: tuple[tuple[int, ...], ...]
    max_util: float
    util_var: float
    std_var: float
    chained: bool
    examined: int
    mode: str

    @property
    def num_chains(self) -> int:
        """The number of chains (threads) of the chosen partitioning."""
        return len(self.chains)

    @property
    def splits(self) -> tuple[int, ...]:
        """The 1-based split indices of the chosen partitioning (as :func:`enumerate_partitionings`)."""
        return splits_from_chains(self.chains)

    def within_bound(self, rho_max: float = CHAIN_UTILIZATION, eps: float = CHAIN_EPS) -> bool:
        """``max_util ≤ ρ_max`` (+ eps). May be False only for stdPcp: a single task already above ρ_max."""
        return self.max_util <= rho_max + eps


def accepts(max_util_: float, util_var_: float, std_var: float, i: int, *,
            rho_max: float = CHAIN_UTILIZATION, mode: Mode = "recommended", eps: float = CHAIN_EPS) -> bool:
    """The acceptance test of Algorithm 10 for one candidate with ``i`` chains.

    - Both modes: ``maxUtil ≤ ρ_max + eps`` (digest §10.14, "use an epsilon in ≤ ρ_max comparisons").
    - ``"literal"``: additionally ``utilVar < stdVar − eps`` (strict, as in the thesis). The ``− eps``
      only guards against float noise: with equal utilizations the computed stdVar can come out as
      ~1e-34 instead of 0 (e.g. eight tasks at 0.1), and a bare ``<`` would then chain them, which is
      not what the thesis's exact arithmetic does (D3). Variances that differ by ≤ eps count as equal.
    - ``"recommended"``: additionally ``utilVar ≤ stdVar + eps`` **or** ``i == 1`` (digest §10.14).
      Since a single chain has variance 0 and stdVar ≥ 0, the ``i == 1`` clause is implied by the
      variance clause; it is kept to mirror the digest's wording.
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    if not max_util_ <= rho_max + eps:
        return False
    if mode == "literal":
        return util_var_ < std_var - eps
    return util_var_ <= std_var + eps or i == 1


def compute_primary_chain_partitioning(rhos: Sequence[float], rho_max: float = CHAIN_UTILIZATION,
                                       mode: Mode = "recommended",
                                       eps: float = CHAIN_EPS) -> ChainPartitioning:
    """Algorithm 10 (computePrimaryChainPartitioning) [T §4.7.4] for a primary chain with peak utilizations
    ``rhos`` (ρ^max per task, in chain order; dimensionless).

    ::

        stdPcp ← ((cn_1), …, (cn_n))
        for i = 1 .. n−1:                              # number of chains, fewest first
          for pcp in enumeratePartitionings(pc, i):    # lexicographic by split indices (§10.15)
            if accepts(pcp): return pcp                # first match wins
        return stdPcp

    The acceptance test is :func:`accepts`:

    - ``mode="literal"``: the thesis's ``maxUtil ≤ ρ_max ∧ utilVar < utilVar(stdPcp)`` (ties within eps
      count as equal, see :func:`accepts`). With equal
      utilizations stdVar is 0, so the strict ``<`` never holds and nothing is chained (digest §9.9 D3).
    - ``mode="recommended"`` (default): ``maxUtil ≤ ρ_max ∧ (utilVar ≤ stdVar + eps ∨ i = 1)``. **This
      deviates from the thesis** for the equal-utilization case (D3): it chains ``A 0.3, B 0.3`` into one
      chain (util 0.6), and in general accepts ties in variance (digest §10.14).

    Both modes compare ``≤ ρ_max`` with tolerance ``eps`` (digest §10.14, §9.9 D4), and the variances
    with the same tolerance; pass ``eps=0`` for bare float comparisons. A chain of one task (or an empty loop) returns stdPcp. ``rho_max`` defaults
    to the DTC setting 0.9. Cost: at most ``2^(n−1) − 1`` candidates (``n·2^(n−1) − n`` steps, [T]).
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    if eps < 0:
        raise ValueError(f"eps must be >= 0, got {eps}")
    rhos = _check_rhos(rhos)
    n = len(rhos)
    if n == 0:
        raise ValueError("a primary chain needs at least one task")
    std_chains = chains_from_splits(n, tuple(range(1, n)))
    std_utils = _chain_utils(rhos, std_chains)
    std_var = _variance(std_utils)
    examined = 0
    for i in range(1, n):
        for splits in enumerate_partitionings(n, i):
            examined += 1
            chains = chains_from_splits(n, splits)
            utils = _chain_utils(rhos, chains)
            mu, var = max(utils), _variance(utils)
            if accepts(mu, var, std_var, i, rho_max=rho_max, mode=mode, eps=eps):
                return ChainPartitioning(chains, mu, var, std_var, True, examined, mode)
    return ChainPartitioning(std_chains, max(std_utils), std_var, std_var, False, examined, mode)


# -- Spark mapping (digest §11.7) ----------------------------------------------------------------------

class Boundary(str, Enum):
    """The kind of exchange between two consecutive stages of one query (digest §11.7).

    - ``OPTIONAL``: an exchange the plan does not need for correctness (a user ``repartition``, a shuffle
      join that could be broadcast, a ``repartition`` that could be a ``coalesce``). It may be removed
      (chain) or kept/inserted (unchain).
    - ``REQUIRED``: a key shuffle feeding an aggregation, join or state. It always stays, so it always
      splits primary chains.
    """

    OPTIONAL = "optional"
    REQUIRED = "required"


@dataclass(frozen=True)
class ExchangeDecision:
    """The desired state of the exchange between stage ``index`` and stage ``index + 1``.

    - ``optional``: whether the exchange may be removed at all.
    - ``remove``: True = remove it (chain the two stages); False = it must be present (a required exchange,
      or an optional one that stays or is (re)inserted, i.e. unchained).
    - ``currently_removed``: the caller's current state, if given (None otherwise).
    """

    index: int
    optional: bool
    remove: bool
    currently_removed: Optional[bool] = None

    @property
    def action(self) -> Optional[str]:
        """``"chain"`` (remove a present exchange), ``"unchain"`` (insert a removed one, e.g. a
        ``repartition``), or None when nothing changes or the current state is unknown."""
        if self.currently_removed is None or self.currently_removed == self.remove:
            return None
        return "chain" if self.remove else "unchain"


@dataclass(frozen=True)
class ExchangePlan:
    """Outcome of :func:`plan_exchanges`.

    - ``exchanges``: one :class:`ExchangeDecision` per boundary, in pipeline order.
    - ``groups``: the resulting fused stages, as tuples of original (0-based) stage indices.
    - ``runs``: one ``(stage indices, ChainPartitioning)`` per maximal run of stages joined by optional
      boundaries (the analog of a primary chain); the partitioning's task indices are local to the run.
    """

    exchanges: tuple[ExchangeDecision, ...]
    groups: tuple[tuple[int, ...], ...]
    runs: tuple[tuple[tuple[int, ...], ChainPartitioning], ...]

    @property
    def removed(self) -> tuple[bool, ...]:
        """Per boundary: True if the exchange should be removed."""
        return tuple(d.remove for d in self.exchanges)

    @property
    def changes(self) -> tuple[ExchangeDecision, ...]:
        """The decisions whose :attr:`ExchangeDecision.action` is not None."""
        return tuple(d for d in self.exchanges if d.action is not None)


def _boundary(b: Union[Boundary, str]) -> Boundary:
    try:
        return Boundary(b)
    except ValueError:
        raise ValueError(f"boundary must be 'optional' or 'required', got {b!r}") from None


def plan_exchanges(stage_rhos: Sequence[float], boundaries: Sequence[Union[Boundary, str]],
                   current_removed: Optional[Sequence[bool]] = None, *,
                   rho_max: float = CHAIN_UTILIZATION, mode: Mode = "recommended",
                   eps: float = CHAIN_EPS) -> ExchangePlan:
    """Desired state of the optional exchanges of one query: Algorithm 10 per run of stages (digest §11.7).

    - ``stage_rhos``: ρ^max per **original** stage in pipeline order, i.e. the stages as they would be with
      every optional exchange present. When an exchange is currently removed (stages fused), the caller
      estimates each part's ρ^max separately (e.g. by splitting the fused stage's busy time per operator)
      so that the input does not depend on the current state. Each estimate should be taken at the
      partition count the merged stage would run with, so that ``util(merged) = Σ ρ^max ≤ ρ_max``
      (0.9) is the right test (digest §11.7); that conversion is the caller's.
    - ``boundaries``: for each boundary between stage k and k+1 (``len(stage_rhos) − 1`` entries),
      :class:`Boundary` ``OPTIONAL`` or ``REQUIRED`` (or the strings ``"optional"``/``"required"``).
    - ``current_removed``: optional current state per boundary (True = exchange currently removed). It
      only fills :attr:`ExchangeDecision.action`; a required exchange cannot be currently removed.

    Required boundaries always split. Each maximal run of stages joined by optional boundaries is a
    primary chain for :func:`compute_primary_chain_partitioning` (with ``rho_max``, ``mode``, ``eps``);
    an optional exchange is removed iff its two stages end up in the same chain. The plan is advisory:
    applying it needs a query restart.
    """
    rhos = _check_rhos(stage_rhos)
    n = len(rhos)
    if n == 0:
        raise ValueError("a query needs at least one stage")
    kinds = tuple(_boundary(b) for b in boundaries)
    if len(kinds) != n - 1:
        raise ValueError(f"need {n - 1} boundaries for {n} stages, got {len(kinds)}")
    if current_removed is not None:
        current = tuple(bool(c) for c in current_removed)
        if len(current) != n - 1:
            raise ValueError(f"need {n - 1} current states for {n} stages, got {len(current)}")
        for k, (kind, c) in enumerate(zip(kinds, current)):
            if c and kind is Boundary.REQUIRED:
                raise ValueError(f"boundary {k} is required, so it cannot be currently removed")
    else:
        current = None

    # maximal runs of stages joined by optional boundaries
    run_starts = [0] + [k + 1 for k, kind in enumerate(kinds) if kind is Boundary.REQUIRED]
    run_ends = run_starts[1:] + [n]
    remove = [False] * (n - 1)
    groups: list[tuple[int, ...]] = []
    runs = []
    for start, end in zip(run_starts, run_ends):
        stages = tuple(range(start, end))
        pcp = compute_primary_chain_partitioning(rhos[start:end], rho_max=rho_max, mode=mode, eps=eps)
        runs.append((stages, pcp))
        for chain in pcp.chains:
            groups.append(tuple(start + k for k in chain))
            for k in chain[:-1]:
                remove[start + k] = True

    exchanges = tuple(
        ExchangeDecision(k, kinds[k] is Boundary.OPTIONAL, remove[k], None if current is None else current[k])
        for k in range(n - 1))
    return ExchangePlan(exchanges, tuple(groups), tuple(runs))
