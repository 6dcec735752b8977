"""Fang et al. routing tables (digest 003): Oracles 1–5 exactly, the §7 property tests and
brute force on random small instances (hypothesis)."""
from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from spark_governor.policies.partitioning.routing_compact import UNASSIGNED, CompactRecords
from spark_governor.policies.partitioning.routing_discretise import discretise, discretised_values, hlhe_representatives
from spark_governor.policies.partitioning.routing_llfd import llfd
from spark_governor.policies.partitioning.routing_planners import _mixed_trial, min_mig, min_table, mixed, mixed_bf, simple
from spark_governor.policies.partitioning.routing_table import Stats, _rank, assignment, gamma_order, memory_order


def ids(*ks):
    """k1.. → key indices 0.."""
    return {k - 1 for k in ks}


def tbl(**entries):
    return {int(k[1:]) - 1: d for k, d in entries.items()}


# Oracle 1 (paper Fig. 4): N = 2, θmax = 0, S = c
O1 = Stats([7, 4, 5, 2, 1, 1], [7, 4, 5, 2, 1, 1], [0, 0, 1, 0, 1, 1], 2, tbl(k3=0, k4=1))
O1_A = tbl(k1=1, k3=0, k4=1, k5=0)
O1_B = tbl(k2=1, k5=0)


def test_oracle1_llfd_and_minmig():
    for plan in (llfd(O1, 0.0, "cost"), min_mig(O1, 0.0), min_mig(O1, 0.0, beta=1.0)):
        assert plan.table == O1_A and plan.loads.tolist() == [10, 10]
        assert set(plan.moved.tolist()) == ids(1, 5) and plan.migration == 8 and plan.status == "ok"


def test_oracle1_mintable_and_simple():
    mt = min_table(O1, 0.0)
    assert mt.table == O1_B and mt.loads.tolist() == [10, 10]
    assert set(mt.moved.tolist()) == ids(2, 3, 4, 5) and mt.migration == 12
    sp = simple(O1, 0.0)
    assert sp.table == O1_B and sp.loads.tolist() == [10, 10]


@pytest.mark.parametrize("amax, trials, table, M, status", [
    (4, (0,), O1_A, 8, "ok"), (10, (0,), O1_A, 8, "ok"),
    (3, (0, 1, 2), O1_B, 12, "ok"),
    (2, (0, 2), O1_B, 12, "ok"),
])
def test_oracle1_mixed(amax, trials, table, M, status):
    p = mixed(O1, 0.0, amax)
    assert (p.trials, p.table, p.migration, p.status) == (trials, table, M, status)


def test_oracle1_mixed_table_violation_is_trimmed_to_amax():
    """Amax ∈ {0, 1}: no balanced table fits; the smallest plan (b) is trimmed to Amax (our
    decision: |A'| ≤ Amax always; the digest returns (b) untrimmed)."""
    p1 = mixed(O1, 0.0, 1)
    assert p1.status == "table_violation" and p1.table == tbl(k2=1) and p1.loads.tolist() == [9, 11]
    p0 = mixed(O1, 0.0, 0)
    assert p0.status == "table_violation" and p0.table == {} and p0.loads.tolist() == [13, 7]


def test_oracle1_literal_paper_rule_loops_and_bf():
    back = memory_order(O1, list(O1.table))
    rank = _rank(gamma_order(O1))
    a, seen = 0, []
    for _ in range(6):                      # the literal rule a ← |A'| − Amax, restart from A
        size = _mixed_trial(O1, back, a, rank, 0.0).size
        seen.append(a)
        a = size - 3
    assert seen == [0, 1, 1, 1, 1, 1]       # never reaches a = 2
    bf = mixed_bf(O1, 0.0, 3)
    assert bf.trials == (2,) and bf.migration == 12


# Oracle 2: N = 3, β = 1.5, γ ≠ cost order
O2 = Stats([7, 6, 6, 9, 2, 7, 3, 4, 1], [5, 9, 1, 3, 7, 5, 8, 6, 9], [1, 0, 1, 0, 0, 2, 2, 1, 2], 3,
           tbl(k1=2, k4=1, k5=1))


def test_oracle2_theta0():
    mm = min_mig(O2, 0.0)
    assert mm.table == tbl(k1=2, k3=0, k4=1, k5=1, k7=0) and mm.loads.tolist() == [15, 15, 15]
    assert set(mm.moved.tolist()) == ids(3, 7) and mm.migration == 9
    mt = min_table(O2, 0.0)
    assert mt.table == tbl(k5=1, k8=2) and set(mt.moved.tolist()) == ids(1, 4, 8) and mt.migration == 14
    lc = llfd(O2, 0.0, "cost")
    assert lc.table == tbl(k1=2, k5=1, k7=1) and set(lc.moved.tolist()) == ids(4, 7) and lc.migration == 11
    sp = simple(O2, 0.0)
    assert sp.loads.tolist() == [16, 15, 14] and sp.table == tbl(k2=1, k3=2, k5=1, k7=0, k8=0)


@pytest.mark.parametrize("amax, trials, table, M, status", [
    (5, (0,), tbl(k1=2, k3=0, k4=1, k5=1, k7=0), 9, "ok"),
    (4, (0, 1), tbl(k1=2, k5=1, k7=1), 11, "ok"),
    (3, (0, 2, 1), tbl(k1=2, k5=1, k7=1), 11, "ok"),
    (2, (0, 3, 1, 2), tbl(k5=1, k8=2), 14, "fallback_mintable"),
])
def test_oracle2_mixed_theta0(amax, trials, table, M, status):
    p = mixed(O2, 0.0, amax)
    assert (p.trials, p.table, p.migration, p.status) == (trials, table, M, status)


def test_oracle2_mixed_bf():
    assert mixed_bf(O2, 0.0, 4).trials == (1,) and mixed_bf(O2, 0.0, 3).migration == 11
    assert mixed_bf(O2, 0.0, 5).trials == (0,) and mixed_bf(O2, 0.0, 5).migration == 9


@pytest.mark.parametrize("amax, trials, table, loads, moved, M", [
    (4, (0,), tbl(k1=2, k3=0, k4=1, k5=1), [12, 15, 18], ids(3), 1),
    (3, (0, 1), tbl(k1=2, k5=1), [15, 12, 18], ids(4), 3),
    (2, (0, 2), tbl(k3=2, k5=1), [15, 13, 17], ids(1, 3, 4), 9),
    (1, (0, 3), {}, [17, 17, 11], ids(1, 4, 5), 15),
    (0, (0, 3), {}, [17, 17, 11], ids(1, 4, 5), 15),
])
def test_oracle2_theta02_tradeoff(amax, trials, table, loads, moved, M):
    p = mixed(O2, 0.2, amax)
    assert (p.trials, p.table, p.loads.tolist(), set(p.moved.tolist()), p.migration, p.status) == \
        (trials, table, loads, moved, M, "ok")
    mt = min_table(O2, 0.2)
    assert mt.table == {} and mt.migration == 15


def test_oracle3_infeasible():
    """The digest's Oracle 3 (the paper's behaviour, ``best_effort=False``): a single key above U."""
    s = Stats([10, 1, 1], [1, 1, 1], [0, 0, 1], 2, {})
    for p in (llfd(s, 0.1, best_effort=False), min_mig(s, 0.1, best_effort=False),
              min_table(s, 0.1, best_effort=False), mixed(s, 0.1, 5, best_effort=False)):
        assert p.status == "infeasible" and p.table == {} and p.loads.tolist() == [11, 1] and p.migration == 0


def test_oracle3_best_effort():
    """The default: the key above U = 6.6 on its instance d0 (its home) with at most θmax·R̄ = 0.2
    more (bound 10.2), the rest on d1 (bound (1 + θmax)·R̄ = 2.2): loads 10 / 2 = the lower bound
    max(c_max, L̄) = 10; achieved θ = 10/6 − 1."""
    s = Stats([10, 1, 1], [1, 1, 1], [0, 0, 1], 2, {})
    for p in (llfd(s, 0.1), min_mig(s, 0.1), min_table(s, 0.1), mixed(s, 0.1, 5)):
        assert p.status == "best_effort" and p.table == {1: 1} and p.loads.tolist() == [10, 2]
        assert p.migration == 1 and p.lower_bound == 10 and p.bound == pytest.approx(10.2)
        assert p.max_theta == pytest.approx(10 / 6 - 1) and p.to_dict()["best_effort"]
    # the digest's pre-check (a key above U) now names a plan, not a failure; two giants on one
    # instance: the one with more state stays, the other moves to the emptier free instance
    s2 = Stats([10, 9, 1, 1, 1], [5, 1, 1, 1, 1], [0, 0, 1, 2, 2], 3, {})
    p = mixed(s2, 0.1, 5)
    assert p.status == "best_effort" and p.owner[0] == 0 and p.owner[1] == 1 and p.loads.tolist() == [10, 9, 3]


def test_oracle4_discretisation():
    reps = hlhe_representatives(8, 2)
    assert reps == [8, 4, 2, 1]
    xh, D = discretise([8, 7, 5, 3, 3, 2, 2, 1, 1, 1], reps)
    assert xh == [8, 4, 8, 2, 4, 2, 2, 1, 1, 1] and D == [0, 3, 0, 1, 0, 0, 0, 0, 0, 0]
    xh, D = discretise([8, 7, 6, 5, 3, 3, 3, 2, 1, 1], reps)
    assert xh == [8, 4, 8, 8, 2, 2, 2, 2, 1, 1] and D == [0, 3, 1, -2, -1, 0, 1, 1, 1, 1]


def test_oracle5_compact_records():
    s = Stats([4, 4, 8, 4, 4], [4, 4, 2, 3, 3], [0, 0, 0, 0, 0], 2, {0: 1, 1: 1})
    rec = CompactRecords.from_stats(s)
    R1, R2, R3 = (1, 1, 0, 4.0, 4.0), (0, 0, 0, 8.0, 2.0), (0, 0, 0, 4.0, 3.0)
    assert rec.records == {R1: 2, R2: 1, R3: 2} and rec.keys == 5 and len(rec) == 3
    assert rec.loads(2).tolist() == [16, 8]
    moved = rec.move_back(R1)
    assert moved == (0, 1, 0, 4.0, 4.0) and rec.loads(2).tolist() == [24, 0]
    out = rec.take(R3, 1, UNASSIGNED)
    assert rec.records[R3] == 1 and rec.records[out] == 1 and out == (UNASSIGNED, 0, 0, 4.0, 3.0)
    rec.take(R3, 1, UNASSIGNED)
    assert R3 not in rec.records and rec.records[out] == 2 and rec.keys == 5


def test_hlhe_size_and_discretised_plan_equivalence():
    for x1, r in ((8, 2), (100, 4), (3, 5)):
        reps = hlhe_representatives(x1, r)
        assert reps[0] >= x1 and len(reps) == r + max(0, int(np.ceil(np.log2(x1 / r))))
    # exact values (already representatives) leave the plan unchanged
    assert min_mig(Stats(O2.cost, O2.state, O2.hashed, 3, O2.table, discretisation_r=64), 0.0).table == \
        min_mig(O2, 0.0).table


# -- properties on random small instances ---------------------------------------------------------

@st.composite
def instances(draw):
    N = draw(st.integers(2, 4)); K = draw(st.integers(1, 6))
    c = draw(st.lists(st.integers(0, 10), min_size=K, max_size=K))
    S = draw(st.lists(st.integers(0, 10), min_size=K, max_size=K))
    h = draw(st.lists(st.integers(0, N - 1), min_size=K, max_size=K))
    table = draw(st.dictionaries(st.integers(0, K - 1), st.integers(0, N - 1), max_size=K))
    theta = draw(st.sampled_from([0.0, 0.08, 0.2, 0.5]))
    amax = draw(st.integers(0, 4))
    return Stats(c, S, h, N, table), theta, amax


def feasible_within(stats: Stats, theta: float, amax: int) -> bool:
    U = (1 + theta) * stats.cost.sum() / stats.instances + 1e-9
    for F in itertools.product(range(stats.instances), repeat=stats.keys):
        if sum(F[k] != stats.hashed[k] for k in range(stats.keys)) > amax:
            continue
        if np.bincount(F, weights=stats.cost, minlength=stats.instances).max() <= U:
            return True
    return False


@settings(max_examples=1500, deadline=None)
@given(instances())
def test_properties(inst):
    s, theta, amax = inst
    old_owner = assignment(s.hashed, s.table)
    U = (1 + theta) * s.cost.sum() / s.instances
    plans = [llfd(s, theta), min_table(s, theta), min_mig(s, theta), mixed(s, theta, amax), simple(s, theta)]
    for p in plans:
        assert np.array_equal(p.owner, assignment(s.hashed, p.table))                      # P1
        assert all(d != s.hashed[k] for k, d in p.table.items())
        assert p.loads.sum() == pytest.approx(s.cost.sum())                                # P2
        if p.status in ("ok", "fallback_mintable", "exact"):
            assert p.loads.max() <= U + 1e-9                                               # P3
        moved = np.nonzero(old_owner != p.owner)[0]
        assert set(moved.tolist()) == set(p.moved.tolist())                                # P5
        assert p.migration == pytest.approx(s.state[moved].sum())
    mx = plans[3]
    assert mx.size <= amax                                                                 # |A'| ≤ Amax always
    other = Stats(s.cost, s.state, s.hashed, s.instances, {})
    assert min_table(other, theta).table == plans[1].table                                # P4
    if len(s.cost) and np.bincount(old_owner, weights=s.cost, minlength=s.instances).max() <= U + 1e-9:
        assert plans[2].table == s.table and plans[2].migration == 0                       # P6
        if len(s.table) <= amax:
            assert mx.table == s.table and mx.migration == 0
    mt = plans[1]
    if mt.status == "ok" and mt.size <= amax:
        assert mx.migration <= mt.migration + 1e-9                                         # never above MinTable
    if feasible_within(s, theta, amax):
        assert mx.balanced and mx.status in ("ok", "fallback_mintable", "exact")
    mm = plans[2]
    if mm.status == "ok" and amax >= mm.size and not (mt.status == "ok" and mt.migration < mm.migration):
        assert mx.table == mm.table                                                        # P7


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(1, 300), min_size=1, max_size=30), st.sampled_from([1, 2, 4, 16]))
def test_discretisation_deviation_bounded(values, r):
    x = sorted(values, reverse=True)
    reps = hlhe_representatives(x[0], r)
    xh, D = discretise(x, reps)
    gaps = [a - b for a, b in zip(reps, reps[1:])] or [0]
    assert abs(D[-1]) <= max(gaps) + 1e-9 and abs(sum(x) - sum(xh) - D[-1]) < 1e-9
    assert all(v in reps for v in xh)
    out = discretised_values(np.array(values, dtype=float), r)
    unit = min(values)
    reps_u = hlhe_representatives(max(values) / unit, r)
    gap_u = max([a - b for a, b in zip(reps_u, reps_u[1:])] or [0]) * unit
    assert abs(out.sum() - sum(values)) <= gap_u + 1e-6


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 20), min_size=2, max_size=8), st.integers(2, 3))
def test_simple_graham_bound(costs, N):
    """P8 (first half): with a perfect assignment, Simple (LPT) has max ≤ (4/3 − 1/(3N))·L̄."""
    total = sum(costs)
    if total == 0 or total % N:
        return
    mean = total / N
    perfect = any(np.bincount(F, weights=costs, minlength=N).max() == mean
                  for F in itertools.product(range(N), repeat=len(costs)))
    if not perfect:
        return
    s = Stats(costs, costs, [0] * len(costs), N, {})
    sp = simple(s)
    assert sp.loads.max() <= (4 / 3 - 1 / (3 * N)) * mean + 1e-9


def test_mixed_terminates_on_looping_cases():
    """The digest's looping case (Oracle 1, Amax = 3) and every Amax on both oracles end within
    |A_old| + 1 trials."""
    for s in (O1, O2):
        for theta in (0.0, 0.08, 0.2):
            for amax in range(0, 7):
                p = mixed(s, theta, amax)
                assert len(p.trials) <= len(s.table) + 1 and len(set(p.trials)) == len(p.trials)


@settings(max_examples=400, deadline=None)
@given(instances(), st.sampled_from([0.25, 0.5, 0.9]))
def test_plan_margin_targets_the_tighter_bound_and_falls_back_to_theta_max(inst, margin):
    """``plan_with_margin`` (ours, off by default): a valid plan for θmax·(1 − margin) when there
    is one; otherwise exactly the paper's plan for θmax, so a margin never loses a valid plan."""
    from spark_governor.policies.partitioning.routing_plan import VALID, plan_with_margin

    s, theta, amax = inst
    plan = plan_with_margin(mixed, s, theta, margin, table_max=amax)
    tight = mixed(s, theta * (1 - margin), amax)
    if tight.status in VALID:
        assert plan.table == tight.table and plan.bound == tight.bound
        assert plan.loads.max(initial=0) <= plan.bound + 1e-9
        if tight.status != "best_effort":   # best effort: the bound is the giant's own cost
            assert plan.bound == pytest.approx((1 + theta * (1 - margin)) * s.cost.sum() / s.instances)
    else:
        paper = mixed(s, theta, amax)
        assert plan.table == paper.table and plan.status == paper.status
    assert plan_with_margin(mixed, s, theta, 0.0, table_max=amax).table == mixed(s, theta, amax).table
