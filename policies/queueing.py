"""Lohrmann's queueing model and Elastic Scaling algorithms, as pure functions.

The model and the algorithms of the thesis's Elastic Scaler (ES) [T §4.6], transcribed
literally so that the worked examples of the design digest (``004_lohrmann.md`` §9) are exact
unit-test oracles. The digest resolves the gaps in the thesis (§10); each function names the
resolution it follows. The Spark executor policy builds on :func:`rebalance_spark`, the "Spark
objective" of digest §11.5.

- Each subtask of a template vertex v is a GI/G/1 queue [T §4.6.2]. Kingman's approximation (Eq. 4.4)
  gives its mean queue wait. A fitting coefficient e_v (Eq. 4.5/4.6) scales it so that the model
  reproduces the measured wait at the current parallelism.
- Effective partitioning: the per-subtask arrival rate scales with 1/p*, so
  ``ρ_v(p*) = S̄_v·p(v) / (Ā_v·p*)`` and ``W_v(p*) = e_v·Kingman(ρ_v(p*))``.
- A latency constraint on a sequence S with bound ℓ gives the queueing budget
  ``Ŵ = (1 − w_ob)·(ℓ − Σ l_v)`` (Eq. 4.9). :func:`rebalance` (Algorithm 7) minimizes Σ p* subject to
  ``Σ W_v(p*_v) ≤ Ŵ``.
- :func:`resolve_bottlenecks` (Eq. 4.12) doubles bottlenecked vertices. :func:`scale_reactively`
  (Algorithm 8) runs both over all constraints.

Units: times in whatever unit the caller uses consistently. The policy uses **seconds**; the digest's
oracles use milliseconds. Rates are never taken directly: the model uses the mean interarrival time
per subtask Ā (time), the mean service time per record S̄ (time), and the dimensionless coefficients
of variation c_A and c_S.

Pure Python; no Spark, Flask or SQL.
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import KW_ONLY, dataclass, replace
from typing import Optional

#: Tolerance of the rounding ``ceil(x − CEIL_EPS)`` (digest §10.5). It absorbs floating-point
#: artefacts such as ``562500·0.00004/0.9 = 25.000000000000004`` (digest §9.10 edge2).
#: Consequence: a requirement that exceeds an integer by ≤ 1e-9 (absolute) rounds down to that integer.
#: At that integer ρ is at most 0.9·(1 + 1e-9/p), still far below 1, so W stays finite.
CEIL_EPS = 1e-9

#: Below this, a measured wait or a Kingman value counts as "zero" and e_v falls back to 1 (digest §10.8).
TINY = 1e-12

#: Default utilization floor for the effective p_min [T §4.6.4]; [C] ``GG1Server.MAX_UTILIZATION``.
MAX_UTILIZATION = 0.9

#: Default bottleneck threshold ρ_max [T §4.6.3] ("close to 1"); [C] 0.99 (digest §10.2).
BOTTLENECK_UTILIZATION = 0.99


def ceil_tolerant(x: float, eps: float = CEIL_EPS) -> int:
    """``ceil(x − eps)``: round up and ignore float noise just above an integer (digest §10.5)."""
    return math.ceil(x - eps)


def kingman_wait(S: float, A: float, cA: float, cS: float) -> float:
    """Kingman's approximation of the mean GI/G/1 queue wait (Eq. 4.4, [T §4.6.2]).

    ``W = S·ρ/(1−ρ) · (cA² + cS²)/2`` with ``ρ = S/A``, where S is the mean service time and A the mean
    interarrival time (same time unit; the result is in that unit too). If ``ρ ≥ 1`` the formula
    would turn negative; the queue is then unstable and the result is ``math.inf`` (digest §9.1 K4,
    §10.5). Idle queues (``S = 0`` or ``A = ∞``) give 0.
    """
    if S < 0 or A < 0 or cA < 0 or cS < 0:
        raise ValueError("S, A, cA and cS must be non-negative")
    if S == 0 or A == math.inf:
        return 0.0
    if A == 0:
        return math.inf
    rho = S / A
    if rho >= 1.0:
        return math.inf
    return S * rho / (1.0 - rho) * (cA * cA + cS * cS) / 2.0


@dataclass(frozen=True)
class VertexModel:
    """The global summary of one constrained template vertex (task) v [T §4.6.2].

    It is ``(Ā_v, S̄_v, c_A, c_S, w_v, l_v)``, the current parallelism ``p(v)`` and the user bounds.

    - ``p``: current parallelism p(v), i.e. the number of subtasks (in Spark, the effective concurrent slots).
    - ``S``: S̄_v, the mean service time per record of one subtask (time).
    - ``A``: Ā_v, the mean interarrival time of records at one subtask (time); ``math.inf`` means no arrivals.
    - ``cA``, ``cS``: coefficients of variation of interarrival and service time. When unknown, pass the
      fallback 1.0 (digest §11.3).
    - ``w``: the measured mean queue wait w_v (time), if any. It anchors the model at ``p`` through e_v.
    - ``l``: the vertex latency l_v (time). It reduces the constraint's queueing budget (Eq. 4.9).
    - ``p_min``, ``p_max``: user bounds (Eqs. 4.10/4.11). In Spark, ``p_max`` is the stage's task count.
    - ``e_clamp``: optional ``(lo, hi)`` clamp of the measured e_v. None is thesis-literal; [C] uses
      (0.8, 1.2) (digest §10.8).
    - ``key``: a stable identifier. :func:`scale_reactively` uses it to merge decisions across constraints.
    """

    p: int
    S: float
    A: float
    cA: float = 1.0
    cS: float = 1.0
    _: KW_ONLY
    p_max: int
    w: Optional[float] = None
    l: float = 0.0  # the thesis's l_v
    p_min: int = 1
    e_clamp: Optional[tuple[float, float]] = None
    key: str = ""

    def __post_init__(self):
        if self.p < 1:
            raise ValueError(f"p must be >= 1, got {self.p}")
        if not 1 <= self.p_min <= self.p_max:
            raise ValueError(f"need 1 <= p_min <= p_max, got p_min={self.p_min}, p_max={self.p_max}")
        if self.S < 0 or self.A < 0 or self.cA < 0 or self.cS < 0:
            raise ValueError("S, A, cA and cS must be non-negative")
        if self.e_clamp is not None and not 0 < self.e_clamp[0] <= self.e_clamp[1]:
            raise ValueError(f"e_clamp must be (lo, hi) with 0 < lo <= hi, got {self.e_clamp}")

    # -- model -----------------------------------------------------------------------------
    @property
    def utilization(self) -> float:
        """ρ_v = S̄_v/Ā_v at the current parallelism (dimensionless)."""
        return self.rho(self.p)

    @property
    def kingman_unfitted(self) -> float:
        """W^K_v: Kingman's wait at the current parallelism, before fitting (Eq. 4.4; time)."""
        return self.wait_unfitted(self.p)

    @property
    def e(self) -> float:
        """The fitting ("error") coefficient ``e_v = w_v / W^K_v`` (Eqs. 4.5/4.6).

        It falls back to 1.0 when w_v is missing, or when w_v or W^K_v is infinite, not a number or
        ≤ :data:`TINY` (digest §10.8). A measured value is then clamped to ``e_clamp`` if that is set.
        """
        if self.w is None:
            return 1.0
        wk = self.kingman_unfitted
        if not (math.isfinite(self.w) and math.isfinite(wk) and self.w > TINY and wk > TINY):
            return 1.0
        e = self.w / wk
        if self.e_clamp is not None:
            e = min(self.e_clamp[1], max(self.e_clamp[0], e))
        return e

    def rho(self, p_star: int) -> float:
        """``ρ_v(p*) = S̄_v·p(v) / (Ā_v·p*)`` [T §4.6.2], i.e. the utilization at parallelism p*."""
        if self.S == 0 or self.A == math.inf:
            return 0.0
        if self.A == 0 or p_star <= 0:
            return math.inf
        return self.S * self.p / (self.A * p_star)

    def wait_unfitted(self, p_star: int) -> float:
        """Kingman's wait at parallelism p*, without e_v (time); ``inf`` when ``ρ_v(p*) ≥ 1``."""
        r = self.rho(p_star)
        if r >= 1.0:
            return math.inf
        return self.S * r / (1.0 - r) * (self.cA * self.cA + self.cS * self.cS) / 2.0

    def wait(self, p_star: int) -> float:
        """``W_v(p*) = e_v · S̄_v² p(v) / (Ā_v p* − S̄_v p(v)) · (c_A² + c_S²)/2`` [T §4.6.2] (time).

        It is computed as ``e_v · Kingman(ρ_v(p*))``. The result is ``math.inf`` when ``ρ_v(p*) ≥ 1``
        (digest §10.5). It is convex and decreasing in p* where finite, which makes Algorithm 7
        optimal.
        """
        wk = self.wait_unfitted(p_star)
        return wk if wk == math.inf else self.e * wk

    def floor(self, max_utilization: float = MAX_UTILIZATION) -> int:
        """The effective minimum parallelism [T §4.6.4], digest §10.5. It is an integer.

        ``max(p_min, ceil(S̄·p/(max_utilization·Ā) − 1e-9))``, clamped to ≤ p_max: the smallest p* at
        which the utilization is at most ``max_utilization`` (90% by default). The 1e-9 tolerance
        (:data:`CEIL_EPS`) absorbs float noise. That is a deliberate deviation from the code oracle
        [C] ``GG1ServerTest`` edge2: there the same load, computed as ``λ_total·S̄/0.9``, gives
        ``ceil(25.000000000000004) = 26``, and this function gives 25 (digest §9.10).
        """
        if not 0 < max_utilization <= 1:
            raise ValueError(f"max_utilization must be in (0, 1], got {max_utilization}")
        load = self.rho(1)  # S̄·p/Ā: the offered load in "busy subtasks"
        need = ceil_tolerant(load / max_utilization) if math.isfinite(load) else self.p_max
        return min(self.p_max, max(self.p_min, need))


def with_load(v: VertexModel, factor: float) -> VertexModel:
    """The model of ``v`` under ``factor`` times its arrival rate (Ā_v / factor), keeping the fitted
    e_v of the measured load (issue #14: a scale-out sized for the load expected when the new
    executors work). The thesis holds S̄_v, c_A, c_S and e_v fixed when p* changes (§4.6.2); it is
    silent on a changing load, so e_v is held too — an extension: ``w`` becomes e_v times Kingman's
    wait at p under the new load, which reproduces e_v exactly (or 1.0 where the new load makes the
    current p unstable). ``factor`` 1 returns ``v`` itself."""
    if factor == 1.0:
        return v
    if factor <= 0:
        raise ValueError(f"factor must be > 0, got {factor}")
    scaled = replace(v, A=v.A / factor, w=None)
    wk = scaled.kingman_unfitted
    return replace(scaled, w=v.e * wk if math.isfinite(wk) and wk > TINY else None)


def sequence_wait(vertices: Sequence[VertexModel], p: Sequence[int]) -> float:
    """``W_S(p*_1..p*_n) = Σ_i W_{v_i}(p*_i)`` (Eq. 4.7; time), summed in index order."""
    return sum(v.wait(pi) for v, pi in zip(vertices, p, strict=True))


def wait_budget(vertices: Sequence[VertexModel], latency_bound: float, w_ob: float,
                safety_factor: float = 1.0) -> float:
    """Ŵ, the queueing budget of a constraint (time).

    ``Ŵ = safety_factor·(1 − w_ob)·(ℓ − Σ_i l_{v_i})`` (Eq. 4.9, [T §4.6.3]). The thesis formula is
    used, not [C]'s division by the edge count. ``safety_factor`` defaults to 1.0; [C] uses 0.9
    (digest §10.7). The result is ≤ 0 when the vertex latencies alone exceed ℓ (unenforceable).
    """
    if not 0 <= w_ob <= 1:
        raise ValueError(f"w_ob must be in [0, 1], got {w_ob}")
    budget = safety_factor * (1.0 - w_ob) * (latency_bound - sum(v.l for v in vertices))
    if math.isnan(budget):
        raise ValueError("the queueing budget is not a number (check latency_bound, safety_factor and l)")
    return budget


# -- Algorithm 7 --------------------------------------------------------------------------------

@dataclass(frozen=True)
class RebalanceResult:
    """Outcome of :func:`rebalance`.

    - ``p``: the new parallelism per vertex, in input order.
    - ``feasible``: False when even every vertex at p_max misses the budget; ``p`` is then all p_max.
    - ``predicted_wait``: W_S(p), the predicted sequence queue wait (time).
    - ``wait_budget``: Ŵ (time).
    - ``objective``: F = Σ p.
    """

    p: tuple[int, ...]
    feasible: bool
    predicted_wait: float
    wait_budget: float
    objective: int

    @property
    def unenforceable(self) -> bool:
        """True when Σ l_v ≥ ℓ, i.e. no queueing budget is left at all (digest §10.20)."""
        return self.wait_budget <= 0


def _marginal(v: VertexModel, p: int) -> float:
    """``Δ = W_v(p+1) − W_v(p)`` (≤ 0). When ``W_v(p) = ∞``, Δ is −∞, so that no ∞ − ∞ appears
    (digest §10.5): such a vertex must be raised in any feasible solution, so it goes first."""
    here = v.wait(p)
    if here == math.inf:
        return -math.inf
    return v.wait(p + 1) - here


def rebalance(vertices: Sequence[VertexModel], latency_bound: float, w_ob: float,
              p_min_override: Optional[Sequence[int]] = None, safety_factor: float = 1.0,
              max_utilization: float = MAX_UTILIZATION) -> RebalanceResult:
    """Algorithm 7, Rebalance(c, P_min) [T §4.6.3]: greedy marginal analysis.

    Minimize ``Σ p*_i`` subject to ``W_S(p*) ≤ Ŵ`` (:func:`wait_budget`) and ``P_min_i ≤ p*_i ≤ p_max_i``.

    - ``P_min`` defaults to each vertex's effective floor (:meth:`VertexModel.floor`, [T §4.6.4]).
      ``p_min_override`` replaces it, as Algorithm 8 does; it is clamped to ``[1, p_max]``.
    - Each step raises, by one, the vertex with the most negative ``Δ_i = W_i(p_i+1) − W_i(p_i)``.
      Ties go to the lowest index, so several optima (Fig. 4.10) are resolved deterministically.
    - The result is optimal for the given lower bounds, because every W_i is convex and decreasing.
    - If the problem is infeasible even at ``p_max``, every vertex gets ``p_max`` and ``feasible`` is False.
    """
    vertices = tuple(vertices)
    budget = wait_budget(vertices, latency_bound, w_ob, safety_factor)
    p_max = tuple(v.p_max for v in vertices)
    at_max = sequence_wait(vertices, p_max)
    if not at_max <= budget:  # feasibility check at maximum parallelism
        return RebalanceResult(p_max, False, at_max, budget, sum(p_max))
    if p_min_override is None:
        p = [v.floor(max_utilization) for v in vertices]
    else:
        if len(p_min_override) != len(vertices):
            raise ValueError("p_min_override must have one entry per vertex")
        p = [min(v.p_max, max(1, int(m))) for v, m in zip(vertices, p_min_override)]
    w_s = sequence_wait(vertices, p)
    while w_s > budget:
        best, best_delta = None, math.inf
        for i, v in enumerate(vertices):
            if p[i] < v.p_max:
                delta = _marginal(v, p[i])
                if best is None or delta < best_delta:  # strict: ties keep the lowest index
                    best, best_delta = i, delta
        if best is None:  # cannot happen, since W_S(p_max) ≤ Ŵ; kept as a guard against float surprises
            break
        p[best] += 1
        w_s = sequence_wait(vertices, p)
    return RebalanceResult(tuple(p), True, w_s, budget, sum(p))


# -- the Spark objective (digest §11.5) ----------------------------------------------------------

@dataclass(frozen=True)
class SparkRebalanceResult:
    """Outcome of :func:`rebalance_spark`.

    - ``slots``: C, the concurrent task slots the query needs.
    - ``executors``: ``ceil(C / slots_per_executor)``.
    - ``p``: the per-stage parallelism ``min(C, p_max_i)``.
    - ``predicted_wait``: W_S(p) (time).
    - ``wait_budget``: Ŵ (time).
    - ``feasible``: False when even C = max p_max misses the budget; C is then max p_max.
    - ``utilization``: the predicted ρ_i(p_i) per stage.
    """

    slots: int
    executors: int
    p: tuple[int, ...]
    predicted_wait: float
    wait_budget: float
    feasible: bool
    utilization: tuple[float, ...]


def same_waves_slots(p_maxes: Iterable[int], slots: int) -> int:
    """The fewest slots that run every stage in as many waves as ``slots`` do (``slots`` ≥ 1; a stage
    of ``p`` tasks runs in ``ceil(p / slots)`` waves and needs ``ceil(p / waves)`` slots for them).

    A micro-batch's stages end at a barrier: its next stage (or batch) waits for the last task, so
    slots beyond this count idle through the last wave and buy no latency — 4 tasks on 3 slots run in
    2 waves, as on 2. Not in the thesis, whose vertices have no barrier (this project's, issue #14)."""
    out = 1
    for p in p_maxes:
        waves = math.ceil(p / slots)
        out = max(out, math.ceil(p / waves))
    return min(out, slots)


def wave_slots(p_maxes: Iterable[int], slots: int) -> int:
    """The smallest slot count ≥ ``slots`` that wastes no slot in a last wave (``same_waves_slots`` of
    it is itself): the queueing model's latency at a count that does is the latency of the count
    below, so a plan that needs more than that count needs the next one up. At most the largest p."""
    p_maxes = tuple(p_maxes)
    top = max(p_maxes, default=slots)
    c = slots
    while c < top and same_waves_slots(p_maxes, c) != c:
        c += 1
    return c


def rebalance_spark(vertices: Sequence[VertexModel], latency_bound: float, w_ob: float,
                    slots_per_executor: int = 1, safety_factor: float = 1.0,
                    max_utilization: float = MAX_UTILIZATION,
                    budget: Optional[float] = None, waves: bool = False) -> SparkRebalanceResult:
    """The Spark objective (digest §11.5): the fewest shared slots that meet the constraint.

    The stages of one micro-batch run one after another and share one executor pool. With C slots,
    stage i runs at ``min(C, p_max_i)``, where ``p_max_i`` is its task count. Minimizing executors is
    therefore minimizing C, a monotone 1-D search:

    - find the smallest C with ``Σ_i W_i(min(C, p_max_i)) ≤ Ŵ``;
    - C must also be at least every stage's floor (:meth:`VertexModel.floor`, already capped by its
      p_max).

    ``W_S`` is non-increasing in C, also in floating point, because every operation on the way is
    monotone. A binary search therefore finds the same C as a linear scan.

    If the problem is infeasible even at ``C = max_i p_max_i``, that C is returned with ``feasible``
    False. The result reports ``executors = ceil(C / slots_per_executor)``, where
    ``slots_per_executor = spark.executor.cores / spark.task.cpus``.

    ``budget`` replaces Ŵ of Eq. 4.9 when the caller derives the queueing budget otherwise (the
    executor policy uses ℓ minus the measured non-queueing part of the latency).

    ``waves``: the found C is raised to the next count that wastes no slot in a stage's last wave
    (:func:`wave_slots`; the model, which has no barrier, overrates such a count). False: the digest's
    rule, as its worked examples have it.
    """
    if slots_per_executor < 1:
        raise ValueError(f"slots_per_executor must be >= 1, got {slots_per_executor}")
    vertices = tuple(vertices)
    if not vertices:
        raise ValueError("at least one vertex is needed")
    if budget is None:
        budget = wait_budget(vertices, latency_bound, w_ob, safety_factor)

    def stage_p(c: int) -> tuple[int, ...]:
        return tuple(min(c, v.p_max) for v in vertices)

    def w_s(c: int) -> float:
        return sequence_wait(vertices, stage_p(c))

    hi = max(v.p_max for v in vertices)
    lo = max(v.floor(max_utilization) for v in vertices)  # floors are ≤ their p_max ≤ hi
    feasible = w_s(hi) <= budget
    if feasible:
        while lo < hi:  # invariant: w_s(hi) ≤ budget
            mid = (lo + hi) // 2
            if w_s(mid) <= budget:
                hi = mid
            else:
                lo = mid + 1
    c = hi
    if waves and feasible:
        c = wave_slots([v.p_max for v in vertices], c)
    p = stage_p(c)
    return SparkRebalanceResult(
        slots=c, executors=math.ceil(c / slots_per_executor), p=p, predicted_wait=sequence_wait(vertices, p),
        wait_budget=budget, feasible=feasible, utilization=tuple(v.rho(pi) for v, pi in zip(vertices, p)))


# -- bottlenecks (Eq. 4.12) and Algorithm 8 ------------------------------------------------------

def is_bottleneck(v: VertexModel, rho_max: float = BOTTLENECK_UTILIZATION) -> bool:
    """A vertex is a bottleneck when ``ρ_v ≥ ρ_max`` [T §4.6.3]; ρ_max 0.99 as in [C] (digest §10.2)."""
    return v.utilization >= rho_max


def has_bottleneck(vertices: Iterable[VertexModel], rho_max: float = BOTTLENECK_UTILIZATION) -> bool:
    """hasBottleneck(S) of Algorithm 8: any vertex of the sequence is a bottleneck."""
    return any(is_bottleneck(v, rho_max) for v in vertices)


def resolve_bottlenecks(vertices: Sequence[VertexModel],
                        rho_max: float = BOTTLENECK_UTILIZATION) -> tuple[int, ...]:
    """ResolveBottlenecks(S) (Eq. 4.12) [T §4.6.3], new parallelism per vertex in input order.

    - A bottleneck vertex gets ``p* = min(p_max, max(2p, ceil(2pρ)))``: at least double, and enough
      for a utilization of at most 50%. This is [C]'s rounding of ``2p·max(1, ρ)``. The ceil uses the
      same 1e-9 tolerance as the floor, :data:`CEIL_EPS`.
    - Any other vertex keeps ``p``.
    - ``p* ≤ p`` means the vertex is already at p_max, so scaling cannot help (a no-op, digest §10.10).
    """
    out = []
    for v in vertices:
        if is_bottleneck(v, rho_max):
            rho = v.utilization
            grown = v.p_max if math.isinf(rho) else max(2 * v.p, ceil_tolerant(2 * v.p * rho))
            out.append(min(v.p_max, grown))
        else:
            out.append(v.p)
    return tuple(out)


@dataclass(frozen=True)
class Constraint:
    """A latency constraint ``c = (S, ℓ, t)`` [T §4.2], reduced to what Elastic Scaling needs.

    - ``id``: sorts the constraints in Algorithm 8 (digest §10.13).
    - ``vertices``: the vertices whose input queue lies inside the sequence S (digest §10.6).
    - ``latency_bound``: ℓ (time).
    - ``w_ob``: the output-batching share of the slack.
    - ``safety_factor``: see :func:`wait_budget`.
    """

    id: str
    vertices: tuple[VertexModel, ...]
    latency_bound: float
    w_ob: float
    safety_factor: float = 1.0


def scale_reactively(constraints: Iterable[Constraint], rho_max: float = BOTTLENECK_UTILIZATION,
                     max_utilization: float = MAX_UTILIZATION) -> dict[str, int]:
    """Algorithm 8, ScaleReactively(C) [T §4.6.3]: the new parallelism per vertex key.

    The constraints are processed in the order of their ids, the "random but deterministic" order of
    the thesis (digest §10.13). For each constraint:

    - if a vertex of the constraint is a bottleneck: ``P[v] ← max(P[v], p*)`` with p* from
      :func:`resolve_bottlenecks`;
    - otherwise: ``P_min[v] ← max(floor_v, P[v])``, which respects the decisions of earlier
      constraints, then ``P[v] ← Rebalance(c, P_min)``. Here ``floor_v`` is the effective p_min of
      [T §4.6.4], so the user minimum and the 90% floor are both included.

    The result is optimal for one constraint or for disjoint ones. It is a heuristic when constraints
    share vertices.
    """
    ordered = sorted(constraints, key=lambda c: c.id)
    ids = [c.id for c in ordered]
    if len(set(ids)) != len(ids):
        raise ValueError("constraint ids must be unique")
    P: dict[str, int] = {}
    for c in ordered:
        keys = [v.key for v in c.vertices]
        if not all(keys) or len(set(keys)) != len(keys):
            raise ValueError(f"constraint {c.id!r}: every vertex needs a distinct, non-empty key")
        if has_bottleneck(c.vertices, rho_max):
            for k, p_star in zip(keys, resolve_bottlenecks(c.vertices, rho_max)):
                P[k] = max(P.get(k, p_star), p_star)
        else:
            p_min = [max(v.floor(max_utilization), P.get(v.key, 0)) for v in c.vertices]
            result = rebalance(c.vertices, c.latency_bound, c.w_ob, p_min_override=p_min,
                               safety_factor=c.safety_factor, max_utilization=max_utilization)
            P.update(zip(keys, result.p))
    return P
