"""Lohrmann's queueing model and Elastic Scaling algorithms (policies.queueing).

The oracles are the worked examples of the design digest ``004_lohrmann.md`` §9 (times in ms there),
computed literally from the thesis formulas. The searches are also compared against brute force on
seeded random instances.
"""
import itertools
import math
import random

import pytest

from spark_governor.policies.queueing import (
    Constraint,
    VertexModel,
    has_bottleneck,
    kingman_wait,
    rebalance,
    rebalance_spark,
    resolve_bottlenecks,
    scale_reactively,
    sequence_wait,
    wait_budget,
)


def approx(x):
    return pytest.approx(x, rel=1e-9)


# -- §9.1 Kingman ---------------------------------------------------------------------------------

def test_kingman_oracles():
    assert kingman_wait(8, 10, 1.0, 0.5) == approx(20.0)   # K1: c_S = sqrt(16)/8, c_A = sqrt(100)/10
    assert kingman_wait(8, 10, 1.0, 1.0) == approx(32.0)   # K2: M/M/1, equals exact W_q
    assert kingman_wait(8, 10, 1.0, 0.0) == approx(16.0)   # K3: M/D/1, equals Pollaczek-Khinchine
    assert kingman_wait(8, 10, 1.0, 0.0) == approx(0.8 * 8 / (2 * (1 - 0.8)))


def test_kingman_unstable_is_infinite_never_negative():
    assert kingman_wait(10, 10, 1, 1) == math.inf          # K4: ρ = 1
    assert kingman_wait(12, 10, 1, 1) == math.inf          # ρ > 1 would give a negative number
    assert kingman_wait(1, 0, 1, 1) == math.inf
    assert kingman_wait(0, 10, 1, 1) == 0.0
    assert kingman_wait(1, math.inf, 1, 1) == 0.0
    with pytest.raises(ValueError):
        kingman_wait(-1, 10, 1, 1)


# -- §9.2 fitting coefficient and W_v(p*) -----------------------------------------------------------

def v1(**kw):
    return VertexModel(10, 0.8, 1.0, 1.0, 1.0, w=4.0, l=0.8, p_max=40, key="v1", **kw)


def v2(**kw):
    return VertexModel(4, 1.5, 2.0, 0.5, 1.0, w=5.625, l=1.5, p_max=40, key="v2", **kw)


def test_fitting_coefficient_and_wait_v1():
    v = v1()
    assert v.utilization == approx(0.8)
    assert v.kingman_unfitted == approx(3.2)
    assert v.e == approx(1.25)
    assert v.wait(9) == approx(8.0)
    assert v.wait(10) == approx(4.0)  # reproduces the measurement
    assert v.wait(11) == approx(8 / 3)
    assert v.wait(12) == approx(2.0)
    assert v.wait(8) == math.inf
    assert v.wait(7) == math.inf
    for p_star in range(9, 41):  # the closed form 8/(p* − 8)
        assert v.wait(p_star) == approx(8 / (p_star - 8))


def test_fitting_coefficient_and_wait_v2():
    v = v2()
    assert v.utilization == approx(0.75)
    assert v.kingman_unfitted == approx(2.8125)
    assert v.e == approx(2.0)
    assert v.wait(4) == approx(5.625)
    assert v.wait(5) == approx(2.8125)
    assert v.wait(6) == approx(1.875)
    assert v.wait(7) == approx(1.40625)
    assert v.wait(3) == math.inf
    for p_star in range(4, 41):  # 5.625/(p* − 3)
        assert v.wait(p_star) == approx(5.625 / (p_star - 3))


def test_fitting_coefficient_fallbacks_and_clamp():
    assert v1(e_clamp=(0.8, 1.2)).e == 1.2
    assert v2(e_clamp=(0.8, 1.2)).e == 1.2
    assert VertexModel(10, 0.8, 1.0, w=1.0, p_max=40, e_clamp=(0.8, 1.2)).e == 0.8  # raw 1/3.2
    assert VertexModel(10, 0.8, 1.0, p_max=40).e == 1.0                   # no measurement
    assert VertexModel(10, 0.8, 1.0, w=0.0, p_max=40).e == 1.0            # zero wait
    assert VertexModel(10, 1.2, 1.0, w=4.0, p_max=40).e == 1.0            # ρ ≥ 1: W^K infinite
    assert VertexModel(10, 0.0, 1.0, w=4.0, p_max=40).e == 1.0            # idle: W^K = 0
    assert VertexModel(10, 0.8, 1.0, w=math.inf, p_max=40).e == 1.0


def test_floor_90_percent():
    assert v1().floor() == 9   # ceil(8/0.9)
    assert v2().floor() == 4   # ceil(6/1.8)
    assert v1(p_min=12).floor() == 12  # the user minimum wins
    assert VertexModel(10, 0.8, 1.0, p_max=5).floor() == 5  # clamped to p_max
    assert VertexModel(10, 0.0, 1.0, p_max=5).floor() == 1  # idle: the user minimum
    assert VertexModel(9, 0.9, 1.0, p_max=40).floor() == 9  # exactly 90%: no extra subtask


def test_vertex_validation():
    with pytest.raises(ValueError):
        VertexModel(0, 1.0, 1.0, p_max=4)
    with pytest.raises(ValueError):
        VertexModel(2, 1.0, 1.0, p_max=4, p_min=5)
    with pytest.raises(ValueError):
        VertexModel(2, 1.0, 1.0, p_max=4, e_clamp=(1.2, 0.8))


# -- §9.3 – §9.5 Rebalance ------------------------------------------------------------------------

def test_rebalance_scale_up_trace():
    vs = (v1(), v2())
    assert wait_budget(vs, 15, 0.5) == approx(6.35)
    assert sequence_wait(vs, (40, 40)) == approx(0.25 + 5.625 / 37)
    assert sequence_wait(vs, (9, 4)) == approx(13.625)
    assert sequence_wait(vs, (10, 4)) == approx(9.625)
    assert sequence_wait(vs, (10, 5)) == approx(6.8125)
    r = rebalance(vs, 15, 0.5)
    assert r.p == (11, 5)
    assert r.objective == 16
    assert r.feasible and not r.unenforceable
    assert r.wait_budget == approx(6.35)
    assert r.predicted_wait == approx(8 / 3 + 2.8125)  # 5.479167


def test_rebalance_scale_up_has_two_optima_and_greedy_picks_11_5():
    vs = (v1(), v2())
    optima, best = brute_force_rebalance(vs, rebalance(vs, 15, 0.5).wait_budget, (9, 4))
    assert best == 16
    assert sorted(optima) == [(10, 6), (11, 5)]
    assert rebalance(vs, 15, 0.5).p == (11, 5)  # deterministic


def test_rebalance_scale_down():
    u1 = VertexModel(20, 0.8, 2.0, 1.0, 1.0, w=kingman_wait(0.8, 2.0, 1, 1), l=0.8, p_max=40)
    u2 = VertexModel(10, 1.5, 4.0, 0.5, 1.0, w=kingman_wait(1.5, 4.0, 0.5, 1), l=1.5, p_max=40)
    assert u1.kingman_unfitted == approx(0.8 * 0.4 / 0.6)
    assert u2.kingman_unfitted == approx(0.5625)
    assert u1.e == approx(1.0) and u2.e == approx(1.0)
    assert (u1.floor(), u2.floor()) == (9, 5)
    for p in range(9, 41):
        assert u1.wait(p) == approx(6.4 / (p - 8))
    for p in range(4, 41):
        assert u2.wait(p) == approx(14.0625 / (4 * p - 15))
    assert sequence_wait((u1, u2), (9, 5)) == approx(9.2125)
    r = rebalance((u1, u2), 15, 0.5)
    assert r.p == (10, 5) and r.objective == 15 and r.feasible
    assert r.predicted_wait == approx(6.0125)
    optima, best = brute_force_rebalance((u1, u2), r.wait_budget, (9, 5))
    assert optima == [(10, 5)] and best == 15


def test_rebalance_infeasible_goes_to_p_max():
    vs = (v1(), v2())
    r = rebalance(vs, 2.5, 0.5)
    assert r.wait_budget == approx(0.1)
    assert r.p == (40, 40) and not r.feasible and r.objective == 80
    assert r.predicted_wait == approx(0.25 + 5.625 / 37)
    assert not r.unenforceable
    r = rebalance(vs, 2.0, 0.5)  # Σ l_v = 2.3 > ℓ
    assert r.unenforceable and not r.feasible and r.p == (40, 40)


def test_rebalance_without_floor_guards_infinity():
    # starting below the stable region (ρ ≥ 1): W = ∞ there, never ∞ − ∞ or a negative wait
    vs = (v1(), v2())
    r = rebalance(vs, 15, 0.5, p_min_override=(1, 1))
    assert r.p == (11, 5)
    r = rebalance(vs, 15, 0.5, p_min_override=(12, 1))
    assert r.p == (12, 5)


def test_rebalance_safety_factor():
    vs = (v1(), v2())
    r = rebalance(vs, 15, 0.5, safety_factor=0.9)
    assert r.wait_budget == approx(0.9 * 6.35)
    assert r.feasible and r.predicted_wait <= r.wait_budget
    assert r.objective == brute_force_rebalance(vs, r.wait_budget, (9, 4))[1]


def test_rebalance_ties_go_to_the_lowest_index():
    same = [VertexModel(10, 0.8, 1.0, w=4.0, p_max=40, key=k) for k in "abc"]
    # floors 9: W(9) = 8, W(10) = 4, W(11) = 8/3, so every vertex has the same Δ sequence
    assert rebalance(same, 20.0, 0.0).p == (10, 9, 9)      # 4 + 8 + 8
    assert rebalance(same, 16.0, 0.0).p == (10, 10, 9)     # 4 + 4 + 8
    assert rebalance(same, 12.0, 0.0).p == (10, 10, 10)
    assert rebalance(same, 10.7, 0.0).p == (11, 10, 10)    # 8/3 + 4 + 4 = 10.67


# -- brute force (test-only) ------------------------------------------------------------------------

def brute_force_rebalance(vertices, budget, lower):
    """All optimal p (min Σp with W_S ≤ budget, lower ≤ p ≤ p_max) and the optimum, by enumeration."""
    tables = [[v.wait(p) if p >= 1 else math.inf for p in range(v.p_max + 1)] for v in vertices]
    best, optima = None, []
    for combo in itertools.product(*(range(lo, v.p_max + 1) for lo, v in zip(lower, vertices))):
        if sum(tables[i][p] for i, p in enumerate(combo)) <= budget:
            f = sum(combo)
            if best is None or f < best:
                best, optima = f, [combo]
            elif f == best:
                optima.append(combo)
    return optima, best


def brute_force_spark(vertices, budget):
    """The smallest C ≥ every floor with Σ W_i(min(C, p_max_i)) ≤ budget, by a linear scan."""
    lo = max(v.floor() for v in vertices)
    for c in range(1, max(v.p_max for v in vertices) + 1):
        if c >= lo and sequence_wait(vertices, [min(c, v.p_max) for v in vertices]) <= budget:
            return c
    return None


def random_vertex(rng, key):
    p_max = rng.randint(2, 12)
    p = rng.randint(1, p_max)
    rho = rng.uniform(0.05, 0.97) if rng.random() < 0.9 else rng.uniform(1.0, 1.5)
    S = rng.uniform(0.1, 2.0)
    kw = {"cA": rng.uniform(0.2, 2.0), "cS": rng.uniform(0.2, 2.0), "l": rng.uniform(0.0, 1.0),
          "p_min": rng.randint(1, min(3, p_max)), "p_max": p_max, "key": key}
    if rng.random() < 0.7:
        kw["w"] = kingman_wait(S, S / rho, kw["cA"], kw["cS"]) * rng.uniform(0.5, 2.0)
    if rng.random() < 0.3:
        kw["e_clamp"] = (0.8, 1.2)
    return VertexModel(p, S, S / rho, **kw)


def random_instance(rng):
    vs = [random_vertex(rng, f"v{i}") for i in range(rng.randint(2, 4))]
    w_max = sequence_wait(vs, [v.p_max for v in vs])
    w_floor = sequence_wait(vs, [v.floor() for v in vs])
    if not math.isfinite(w_max):  # some vertex is unstable even at p_max: infeasible at any budget
        return vs, sum(v.l for v in vs) + 1.0, 0.5
    lo = 0.5 * w_max if w_max > 0 else 1e-3
    hi = 2.0 * w_floor if math.isfinite(w_floor) and w_floor > lo else 4.0 * lo
    target = math.exp(rng.uniform(math.log(lo), math.log(hi)))
    w_ob = rng.choice([0.0, 0.5, 0.8])
    latency_bound = sum(v.l for v in vs) + target / (1.0 - w_ob)
    return vs, latency_bound, w_ob


def test_rebalance_equals_brute_force_on_random_instances():
    rng = random.Random(20240611)
    feasible = infeasible = multiple = 0
    for _ in range(200):
        vs, bound, w_ob = random_instance(rng)
        r = rebalance(vs, bound, w_ob)
        assert rebalance(vs, bound, w_ob) == r  # reproducible
        optima, best = brute_force_rebalance(vs, r.wait_budget, [v.floor() for v in vs])
        if best is None:
            infeasible += 1
            assert not r.feasible and r.p == tuple(v.p_max for v in vs)
            continue
        feasible += 1
        multiple += len(optima) > 1
        assert r.feasible
        assert r.objective == best == sum(r.p)
        assert r.p in optima
        assert r.predicted_wait == sequence_wait(vs, r.p) <= r.wait_budget
        assert all(v.floor() <= p <= v.p_max for v, p in zip(vs, r.p))
    assert feasible > 50 and infeasible > 5 and multiple > 0  # the generator covers all cases


def test_rebalance_with_arbitrary_lower_bounds_equals_brute_force():
    # P_min below the stable region exercises the ∞ guard; above the floor it models Algorithm 8's P_min
    rng = random.Random(7)
    checked = 0
    for _ in range(200):
        vs, bound, w_ob = random_instance(rng)
        lower = [rng.randint(1, v.p_max) for v in vs]
        r = rebalance(vs, bound, w_ob, p_min_override=lower)
        optima, best = brute_force_rebalance(vs, r.wait_budget, lower)
        if best is None:  # p_max is among the enumerated points, so only infeasibility gets here
            assert not r.feasible and r.p == tuple(v.p_max for v in vs)
            continue
        checked += 1
        assert r.objective == best and r.p in optima
    assert checked > 50


def test_rebalance_spark_equals_brute_force_on_random_instances():
    rng = random.Random(99)
    feasible = 0
    for _ in range(200):
        vs, bound, w_ob = random_instance(rng)
        spe = rng.randint(1, 4)
        r = rebalance_spark(vs, bound, w_ob, slots_per_executor=spe)
        c = brute_force_spark(vs, r.wait_budget)
        if c is None:
            assert not r.feasible and r.slots == max(v.p_max for v in vs)
        else:
            feasible += 1
            assert r.feasible and r.slots == c
            assert r.predicted_wait <= r.wait_budget
        assert r.executors == math.ceil(r.slots / spe)
        assert r.p == tuple(min(r.slots, v.p_max) for v in vs)
        assert r.predicted_wait == sequence_wait(vs, r.p)
        assert r.utilization == tuple(v.rho(p) for v, p in zip(vs, r.p))
        # never more slots than the Σp optimum needs at its busiest stage
        lit = rebalance(vs, bound, w_ob)
        if lit.feasible:
            assert r.slots <= max(lit.p)
    assert feasible > 50


def test_rebalance_spark_worked_example():
    vs = (v1(), v2())  # §9.3 with a shared pool: W_1(C) + W_2(C) ≤ 6.35
    r = rebalance_spark(vs, 15, 0.5, slots_per_executor=4)
    # C = 9: 8 + 5.625/6 = 8.94 > 6.35; C = 10: 4 + 0.8036 = 4.80 ≤ 6.35
    assert r.slots == 10 and r.executors == 3 and r.p == (10, 10) and r.feasible
    assert r.predicted_wait == approx(4.0 + 5.625 / 7)
    assert r.utilization == (approx(0.8), approx(0.3))
    # p_max caps a stage: v2 has only 4 tasks
    vs = (v1(), VertexModel(4, 1.5, 2.0, 0.5, 1.0, w=5.625, l=1.5, p_max=4))
    r = rebalance_spark(vs, 15, 0.5)
    # W_2(4) = 5.625 leaves 0.725 for v1: 8/(C − 8) ≤ 0.725 → C = 20
    assert r.feasible and r.slots == 20 and r.p == (20, 4)
    assert r.predicted_wait == approx(8 / 12 + 5.625)


def test_rebalance_spark_infeasible():
    r = rebalance_spark((v1(), v2()), 2.5, 0.5, slots_per_executor=3)
    assert not r.feasible and r.slots == 40 and r.executors == 14 and r.p == (40, 40)


# -- §9.10 code oracles (GG1ServerTest, SI units: seconds) --------------------------------------------

def edge1():
    lam, p = 7500 * 50, 50
    return VertexModel(p, 0.08e-3, p / lam, 11.66726, 0.3535534, w=8e-3, p_max=1000)


def edge2():
    lam, p = 562500, 50
    return VertexModel(p, 0.04e-3, p / lam, 13.77838, 2.5, w=3e-3, p_max=1000)


def test_code_oracle_edge1():
    v = edge1()
    assert v.utilization == approx(0.6)
    assert v.kingman_unfitted == pytest.approx(8.175e-3, rel=1e-6)  # c_A is given to 7 digits
    assert v.e == pytest.approx(0.9785936, rel=1e-6)
    assert v.wait(40) == approx(16.0e-3)  # e cancels c_A: W(p*) = w·K(p*)/K(p)
    assert v.wait(70) == approx(4.0e-3)
    assert v.floor() == 34


def test_code_oracle_edge2_and_the_26_vs_25_decision():
    v = edge2()
    assert v.utilization == approx(0.45)
    assert v.wait(40) == approx(33 / 7 * 1e-3)   # 4.714286 ms
    assert v.wait(70) == approx(33 / 19 * 1e-3)  # 1.736842 ms
    # [C] computes ceil(λ_total·S̄/0.9) = ceil(25.000000000000004) = 26, a float artefact: the exact
    # requirement is 22.5/0.9 = 25. The module rounds with ceil(x − 1e-9) and gives 25 (digest §10.5).
    assert math.ceil(562500 * 0.00004 / 0.9) == 26
    assert v.floor() == 25
    assert v.rho(25) == pytest.approx(0.9, rel=1e-12)


# -- §9.6 ResolveBottlenecks ----------------------------------------------------------------------

def test_resolve_bottlenecks_oracles():
    a = VertexModel(8, 1.3, 1.0, p_max=100)      # ρ = 1.3 → ceil(20.8) = 21
    b = VertexModel(8, 0.995, 1.0, p_max=100)    # ρ = 0.995 ≥ 0.99 → at least double: 16
    c = VertexModel(8, 1.3, 1.0, p_max=16)       # capped by p_max
    d = VertexModel(8, 0.5, 1.0, p_max=100)      # not a bottleneck: unchanged
    assert resolve_bottlenecks((a, b, c, d)) == (21, 16, 16, 8)
    assert has_bottleneck((d, b)) and not has_bottleneck((d,))
    assert not has_bottleneck((b,), rho_max=0.999)
    e = VertexModel(8, 1.0, 0.0, p_max=50)       # A = 0: infinite utilization → p_max
    assert resolve_bottlenecks((e,)) == (50,)


# -- Algorithm 8 ScaleReactively --------------------------------------------------------------------

def test_scale_reactively_single_constraint_is_rebalance():
    c = Constraint("c", (v1(), v2()), 15, 0.5)
    assert scale_reactively([c]) == {"v1": 11, "v2": 5}


def shared_constraints():
    a = VertexModel(10, 0.8, 1.0, w=4.0, l=0.8, p_max=40, key="a")
    b = VertexModel(4, 1.5, 2.0, 0.5, 1.0, w=5.625, l=1.5, p_max=40, key="b")
    c = VertexModel(6, 0.5, 1.0, l=0.2, p_max=40, key="c")
    tight = Constraint("c1", (a, b), 15, 0.5)   # alone: (11, 5)
    loose = Constraint("c2", (b, c), 100, 0.5)  # alone: both at their floors (4, 4)
    return tight, loose


def test_scale_reactively_respects_earlier_decisions_on_shared_vertices():
    tight, loose = shared_constraints()
    assert rebalance(loose.vertices, 100, 0.5).p == (4, 4)
    result = scale_reactively([loose, tight])  # sorted by id: c1 (tight) first
    assert result == {"a": 11, "b": 5, "c": 4}
    assert scale_reactively([tight, loose]) == result  # the order of the input does not matter
    # manual replay of Algorithm 8
    r1 = rebalance(tight.vertices, 15, 0.5)
    b_vertex, c_vertex = loose.vertices
    r2 = rebalance(loose.vertices, 100, 0.5,
                   p_min_override=(max(b_vertex.floor(), r1.p[1]), c_vertex.floor()))
    assert result == {"a": r1.p[0], "b": r2.p[0], "c": r2.p[1]}


def test_scale_reactively_order_is_by_id():
    tight, loose = shared_constraints()
    # loose first: b → 4, then tight with P_min(b) = 4 gives the same as tight alone: b = 5 overwrites
    early = Constraint("a0", loose.vertices, 100, 0.5)
    assert scale_reactively([tight, early]) == {"a": 11, "b": 5, "c": 4}
    # a later tight constraint may raise b; a later loose one can never lower it
    tighter = Constraint("c3", (loose.vertices[0],), 1.5 + 2 * 1.0, 0.5)  # Ŵ = 1.0 on b alone
    res = scale_reactively([tight, loose, tighter])
    assert res["b"] == rebalance(tighter.vertices, 3.5, 0.5, p_min_override=(5,)).p[0] > 5


def test_scale_reactively_merges_bottlenecks_with_max():
    a = VertexModel(8, 1.3, 1.0, p_max=100, key="a")           # bottleneck → 21
    b_low = VertexModel(5, 0.5, 1.0, p_max=100, key="b")       # not a bottleneck: keeps 5
    b = VertexModel(5, 0.5, 1.0, p_max=100, key="b")
    c = VertexModel(10, 0.8, 1.0, w=4.0, p_max=100, key="c")
    first = Constraint("1", (b, c), 0.5, 0.0)                 # tight: raises b well above 5
    r1 = rebalance(first.vertices, 0.5, 0.0)
    assert r1.feasible and r1.p[0] > 5
    bottleneck = Constraint("2", (a, b_low), 10.0, 0.5)
    res = scale_reactively([bottleneck, first])
    assert res == {"a": 21, "b": r1.p[0], "c": r1.p[1]}  # max(P[b], 5) keeps the earlier decision
    # and alone, the bottleneck constraint leaves the non-bottleneck vertex at its p
    assert scale_reactively([bottleneck]) == {"a": 21, "b": 5}
    # a bottleneck decision is not lowered by a later rebalance either (P_min includes P[v])
    a2 = VertexModel(8, 1.3, 1.0, p_max=100, key="x")
    later = Constraint("3", (VertexModel(5, 0.5, 1.0, p_max=100, key="a"),), 1000.0, 0.5)
    assert scale_reactively([Constraint("2", (a, a2), 10, 0.5), later])["a"] == 21


def test_scale_reactively_rejects_bad_keys_and_ids():
    with pytest.raises(ValueError):
        scale_reactively([Constraint("c", (v1(), v1()), 15, 0.5)])
    with pytest.raises(ValueError):
        scale_reactively([Constraint("c", (VertexModel(1, 0.1, 1.0, p_max=2),), 15, 0.5)])
    with pytest.raises(ValueError):
        scale_reactively([Constraint("c", (v1(),), 15, 0.5), Constraint("c", (v2(),), 15, 0.5)])
