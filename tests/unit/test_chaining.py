"""Lohrmann's Dynamic Task Chaining (policies.chaining).

The oracles are the DTC worked examples of the design digest ``004_lohrmann.md`` §9.9 (D1–D4),
computed from Algorithm 10 with ρ_max = 0.9. Algorithm 10 is also compared against an independent
exhaustive search on seeded random instances.
"""
import math
import random

import pytest

from spark_governor.policies.chaining import (
    Boundary,
    chain_utilization,
    chains_from_splits,
    compute_primary_chain_partitioning,
    enumerate_partitionings,
    max_util,
    plan_exchanges,
    splits_from_chains,
    util_var,
)


def approx(x):
    return pytest.approx(x, rel=1e-9, abs=1e-12)


# -- Eqs. 4.13–4.15 ---------------------------------------------------------------------------------

def test_formulas():
    assert chain_utilization([0.2, 0.3, 0.25, 0.1]) == approx(0.85)
    assert chain_utilization([]) == 0.0
    assert max_util([[0.5], [0.3, 0.6]]) == approx(0.9)
    assert util_var([[0.5], [0.3], [0.2, 0.35]]) == approx(0.035 / 3)   # population variance, 1/#chains
    assert util_var([[0.2, 0.3, 0.25, 0.1]]) == 0.0                      # one chain: exactly 0
    with pytest.raises(ValueError):
        chain_utilization([0.1, -0.1])
    with pytest.raises(ValueError):
        chain_utilization([math.nan])
    with pytest.raises(ValueError):
        max_util([])


# -- enumeratePartitionings ---------------------------------------------------------------------------

def test_enumeration_order_thesis_example():
    assert list(enumerate_partitionings(5, 3)) == [(1, 2), (1, 3), (1, 4), (2, 3), (2, 4), (3, 4)]
    assert list(enumerate_partitionings(4, 1)) == [()]
    assert list(enumerate_partitionings(4, 4)) == [(1, 2, 3)]
    for n in range(1, 9):
        for i in range(1, n + 1):
            got = list(enumerate_partitionings(n, i))
            assert len(got) == math.comb(n - 1, i - 1)
            assert got == sorted(got)
    with pytest.raises(ValueError):
        list(enumerate_partitionings(3, 0))
    with pytest.raises(ValueError):
        list(enumerate_partitionings(3, 4))


def test_chains_from_splits():
    assert chains_from_splits(5, (1, 3)) == ((0,), (1, 2), (3, 4))
    assert chains_from_splits(3, ()) == ((0, 1, 2),)
    assert chains_from_splits(3, (1, 2)) == ((0,), (1,), (2,))
    assert splits_from_chains(((0,), (1, 2), (3, 4))) == (1, 3)
    for bad in [(0,), (3,), (2, 1), (1, 1)]:
        with pytest.raises(ValueError):
            chains_from_splits(3, bad)


# -- §9.9 D1–D4 ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["literal", "recommended"])
def test_d1_chain_all(mode):
    r = compute_primary_chain_partitioning([0.2, 0.3, 0.25, 0.1], mode=mode)   # Dec, Mer, Ovl, Enc
    assert r.std_var == approx(0.00546875)
    assert r.chains == ((0, 1, 2, 3),)
    assert r.max_util == approx(0.85)
    assert r.util_var == 0.0
    assert r.chained and r.num_chains == 1 and r.examined == 1


@pytest.mark.parametrize("mode", ["literal", "recommended"])
def test_d2(mode):
    rhos = [0.5, 0.3, 0.2, 0.35]                                  # A, B, C, D
    assert util_var([[r] for r in rhos]) == approx(0.01171875)
    # the rejected i = 2 candidates, in enumeration order
    assert max_util([[0.5], [0.3, 0.2, 0.35]]) == approx(0.85)
    assert util_var([[0.5], [0.3, 0.2, 0.35]]) == approx(0.030625)
    assert max_util([[0.5, 0.3], [0.2, 0.35]]) == approx(0.8)
    assert util_var([[0.5, 0.3], [0.2, 0.35]]) == approx(0.015625)
    assert max_util([[0.5, 0.3, 0.2], [0.35]]) == approx(1.0)
    r = compute_primary_chain_partitioning(rhos, mode=mode)
    assert r.std_var == approx(0.01171875)
    assert r.chains == ((0,), (1,), (2, 3))                       # (A),(B),(C,D)
    assert r.splits == (1, 2)
    assert r.max_util == approx(0.55)
    assert r.util_var == approx(0.0116666666667)
    assert r.util_var < r.std_var
    assert r.examined == 1 + 3 + 1                                # (ABCD); 3 of i=2; first of i=3


def test_d3_equal_utilization():
    lit = compute_primary_chain_partitioning([0.3, 0.3], mode="literal")
    assert lit.std_var == 0.0
    assert lit.chains == ((0,), (1,)) and not lit.chained        # strict < never holds
    rec = compute_primary_chain_partitioning([0.3, 0.3])          # default: recommended (deviation)
    assert rec.mode == "recommended"
    assert rec.chains == ((0, 1),) and rec.chained
    assert rec.max_util == approx(0.6)


@pytest.mark.parametrize("mode", ["literal", "recommended"])
def test_d4_float_trap(mode):
    assert chain_utilization([0.3, 0.6]) == 0.8999999999999999
    r = compute_primary_chain_partitioning([0.5, 0.3, 0.6], mode=mode)
    assert r.std_var == approx(0.0155555555556)
    assert util_var([[0.5], [0.3, 0.6]]) == approx(0.04)          # (A)(BC): safe but variance too high
    assert r.chains == ((0, 1), (2,))                             # (AB)(C)
    assert r.max_util == approx(0.8)
    assert r.util_var == approx(0.01)


@pytest.mark.parametrize("mode", ["literal", "recommended"])
def test_d4_epsilon(mode):
    # The digest's "0.2 + 0.3 + 0.4 = 0.9000000000000001" holds for the order 0.2 + 0.4 + 0.3;
    # left to right, 0.2 + 0.3 is exactly 0.5 and 0.5 + 0.4 is exactly 0.9.
    assert 0.2 + 0.3 + 0.4 == 0.9
    assert chain_utilization([0.2, 0.3, 0.4]) == 0.9
    assert chain_utilization([0.2, 0.4, 0.3]) == 0.9000000000000001
    assert not 0.9000000000000001 <= 0.9
    r = compute_primary_chain_partitioning([0.2, 0.4, 0.3], mode=mode)   # eps = 1e-9 by default
    assert r.chains == ((0, 1, 2),)
    bare = compute_primary_chain_partitioning([0.2, 0.4, 0.3], mode=mode, eps=0.0)
    assert bare.chains == ((0,), (1,), (2,))                      # the float trap without eps:
    #                                       2-chain splits have higher variance than stdPcp, so nothing chains
    # eps does not loosen the bound materially
    assert compute_primary_chain_partitioning([0.5, 0.40001]).chains == ((0,), (1,))


def test_single_task_and_bottleneck():
    r = compute_primary_chain_partitioning([0.4])
    assert r.chains == ((0,),) and not r.chained and r.examined == 0 and r.std_var == 0.0
    hot = compute_primary_chain_partitioning([1.2, 0.1])           # stdPcp, even though 1.2 > ρ_max
    assert hot.chains == ((0,), (1,)) and not hot.within_bound()
    with pytest.raises(ValueError):
        compute_primary_chain_partitioning([])
    with pytest.raises(ValueError):
        compute_primary_chain_partitioning([0.1, 0.2], mode="thesis")


def test_rho_max_parameter():
    assert compute_primary_chain_partitioning([0.3, 0.4], rho_max=0.7).chained
    assert not compute_primary_chain_partitioning([0.3, 0.4], rho_max=0.6).chained


# -- complexity --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("n", range(1, 9))
def test_complexity_count(n):
    expected = sum(math.comb(n - 1, i - 1) for i in range(1, n))
    assert expected == 2 ** (n - 1) - 1
    assert n * expected == n * 2 ** (n - 1) - n                   # the thesis's step count
    # nothing is ever accepted: every task alone is above ρ_max ...
    r = compute_primary_chain_partitioning([1.0] * n)
    assert r.examined == expected and not r.chained
    # ... or (literal mode) equal utilizations, so no variance is < stdVar = 0
    r = compute_primary_chain_partitioning([0.1] * n, mode="literal")
    assert r.examined == expected and not r.chained


def test_literal_variance_noise():
    # eight equal tasks: float noise makes the computed stdVar ~1e-34 instead of 0; a bare strict <
    # (eps=0) would chain them, the tolerant literal test does not (D3 in exact arithmetic)
    assert 0 < util_var([[0.1]] * 8) < 1e-30
    assert compute_primary_chain_partitioning([0.1] * 8, mode="literal", eps=0.0).chained
    assert not compute_primary_chain_partitioning([0.1] * 8, mode="literal").chained


# -- brute force ----------------------------------------------------------------------------------------

def brute_force(rhos, mode, rho_max=0.9, eps=1e-9):
    """Independent exhaustive search: all compositions of the chain via bitmasks over the n−1 gaps, ordered
    by (number of chains, split indices); the first one passing the acceptance test, else all unchained."""
    n = len(rhos)

    def add(xs):                       # left to right, as Eq. 4.13 reads
        t = 0.0
        for x in xs:
            t += x
        return t

    def utils_of(chains):
        return [add(rhos[k] for k in c) for c in chains]

    def pvar(xs):
        m = add(xs) / len(xs)
        return add((x - m) ** 2 for x in xs) / len(xs)

    std = [[k] for k in range(n)]
    std_var = pvar(utils_of(std))
    candidates = []
    for mask in range(2 ** (n - 1)):
        splits = tuple(g + 1 for g in range(n - 1) if mask >> g & 1)
        chains, cur = [], [0]
        for k in range(1, n):
            if k in splits:
                chains.append(cur)
                cur = []
            cur.append(k)
        chains.append(cur)
        if len(chains) < n:
            candidates.append((len(chains), splits, chains))
    candidates.sort(key=lambda c: (c[0], c[1]))
    for i, _, chains in candidates:
        us = utils_of(chains)
        v = pvar(us)
        if max(us) > rho_max + eps:
            continue
        ok = v < std_var - eps if mode == "literal" else (v <= std_var + eps or i == 1)
        if ok:
            return tuple(tuple(c) for c in chains)
    return tuple(tuple(c) for c in std)


@pytest.mark.parametrize("mode", ["literal", "recommended"])
def test_brute_force_random(mode):
    rng = random.Random(20240604)
    grid = [0.05 * k for k in range(1, 19)] + [0.1, 0.2, 0.3, 0.3, 0.45]
    differs = 0
    for trial in range(1500):
        n = rng.randint(1, 6)
        if trial % 2:
            rhos = [rng.choice(grid) for _ in range(n)]              # ties and exact-bound sums
        else:
            rhos = [rng.uniform(0.0, 0.7) for _ in range(n)]
        rho_max = rng.choice([0.9, 0.9, 0.6, 1.0])
        got = compute_primary_chain_partitioning(rhos, rho_max=rho_max, mode=mode)
        want = brute_force(rhos, mode, rho_max=rho_max)
        assert got.chains == want, (rhos, rho_max)
        assert got.chained == (len(want) < n)
        utils = [sum((rhos[k] for k in c), 0.0) for c in want]
        assert got.max_util == approx(max(utils))
        differs += got.chains != brute_force(rhos, "recommended" if mode == "literal" else "literal",
                                             rho_max=rho_max)
    assert differs > 0                                           # the two modes do disagree somewhere


# -- Spark mapping -------------------------------------------------------------------------------------------

def test_plan_exchanges_required_boundary_splits():
    # stages 0..4; the required shuffle between 2 and 3 splits [0,1,2] from [3,4]
    rhos = [0.2, 0.3, 0.25, 0.3, 0.3]
    plan = plan_exchanges(rhos, ["optional", "optional", Boundary.REQUIRED, "optional"])
    assert plan.groups == ((0, 1, 2), (3, 4))                     # 0.75 and 0.6, not 1.35 across the shuffle
    assert plan.removed == (True, True, False, True)
    assert [d.optional for d in plan.exchanges] == [True, True, False, True]
    assert [stages for stages, _ in plan.runs] == [(0, 1, 2), (3, 4)]
    assert plan.changes == ()                                     # no current state given

    # the same run with literal mode: the equal-utilization run [3,4] stays unchained (D3)
    lit = plan_exchanges(rhos, ["optional", "optional", "required", "optional"], mode="literal")
    assert lit.groups == ((0, 1, 2), (3,), (4,))
    assert lit.removed == (True, True, False, False)

    # every boundary required: nothing can be chained, even when it would fit
    req = plan_exchanges([0.1, 0.1, 0.1], ["required", "required"])
    assert req.groups == ((0,), (1,), (2,)) and req.removed == (False, False)


def test_plan_exchanges_d2_and_actions():
    # D2 as one run of optional exchanges, with the current state "everything fused"
    plan = plan_exchanges([0.5, 0.3, 0.2, 0.35], [Boundary.OPTIONAL] * 3, current_removed=[True, True, True])
    assert plan.groups == ((0,), (1,), (2, 3))
    assert plan.removed == (False, False, True)
    assert [d.action for d in plan.exchanges] == ["unchain", "unchain", None]
    assert [d.index for d in plan.changes] == [0, 1]

    # D1 with every exchange present: chain all
    plan = plan_exchanges([0.2, 0.3, 0.25, 0.1], ["optional"] * 3, current_removed=[False] * 3)
    assert [d.action for d in plan.exchanges] == ["chain"] * 3


def test_plan_exchanges_single_stage_and_validation():
    plan = plan_exchanges([0.7], [])
    assert plan.exchanges == () and plan.groups == ((0,),)
    with pytest.raises(ValueError):
        plan_exchanges([0.1, 0.2], [])
    with pytest.raises(ValueError):
        plan_exchanges([0.1, 0.2], ["maybe"])
    with pytest.raises(ValueError):
        plan_exchanges([0.1, 0.2], ["required"], current_removed=[True])
    with pytest.raises(ValueError):
        plan_exchanges([0.1, 0.2], ["optional"], current_removed=[True, False])
    with pytest.raises(ValueError):
        plan_exchanges([], [])


def test_plan_exchanges_random_equals_per_run():
    rng = random.Random(7)
    for _ in range(300):
        n = rng.randint(1, 8)
        rhos = [rng.choice([0.1, 0.2, 0.3, 0.45, 0.6]) for _ in range(n)]
        kinds = [rng.choice(["optional", "optional", "required"]) for _ in range(n - 1)]
        plan = plan_exchanges(rhos, kinds)
        # independent: cut at required boundaries, brute-force each run, stitch the groups
        groups, start = [], 0
        for k in range(n):
            if k == n - 1 or kinds[k] == "required":
                for chain in brute_force(rhos[start:k + 1], "recommended"):
                    groups.append(tuple(start + j for j in chain))
                start = k + 1
        assert plan.groups == tuple(groups)
        fused = {(g[j], g[j + 1]) for g in groups for j in range(len(g) - 1)}
        assert plan.removed == tuple((k, k + 1) in fused for k in range(n - 1))
        assert all(not d.remove for d in plan.exchanges if not d.optional)
