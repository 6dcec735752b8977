"""Best-effort routing tables (policies.partitioning.routing_llfd, issue 18): when a key alone exceeds
U = (1 + θmax)·L̄ the planners minimise the maximum load instead of giving up. Properties
(hypothesis) of every planner, per key and on compact records, on random instances including
infeasible ones and coarse ones (few, large keys): the plan routes every key, no key is lost or
duplicated across the migration, the reported θ is the achieved one, the best-effort maximum load
is within (1 + θmax) ≤ 1.1 × the lower bound max(c_max, L̄), and never above the list-scheduling
bound; brute force on small instances for the lower bound and the best-effort bound."""
from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import assume, given, settings, strategies as st

from spark_governor.policies.partitioning.base import KeyCounts
from spark_governor.policies.partitioning.registry import get_partitioner
from spark_governor.policies.partitioning.routing_compact import llfd_compact, min_mig_compact, min_table_compact
from spark_governor.policies.partitioning.routing_llfd import llfd
from spark_governor.policies.partitioning.routing_planners import min_mig, min_table, mixed
from spark_governor.policies.partitioning.routing_table import (VALID, Stats, assignment, bounds, lower_bound,
                                                                within_bounds)

EPS = 1e-6


def planners(s: Stats, theta: float, amax: int, best_effort: bool = True):
    kw = {"best_effort": best_effort}
    return {"llfd": llfd(s, theta, **kw), "mintable": min_table(s, theta, **kw), "minmig": min_mig(s, theta, **kw),
            "mixed": mixed(s, theta, amax, **kw), "mixed-compact": mixed(s, theta, amax, compact=True, **kw),
            "llfd-compact": llfd_compact(s, theta, **kw), "mintable-compact": min_table_compact(s, theta, **kw),
            "minmig-compact": min_mig_compact(s, theta, **kw)}


@st.composite
def any_instance(draw, max_keys=30):
    """Random statistics: costs with optional giants (a key ≥ 1.2× the rest's mean per instance),
    states, hash instances and an old table; θmax and Amax."""
    N = draw(st.integers(2, 8))
    K = draw(st.integers(1, max_keys))
    c = draw(st.lists(st.integers(0, 100), min_size=K, max_size=K))
    g = draw(st.integers(0, min(N - 1, K)))
    for i in range(g):                                   # giants: infeasible at any θmax ≤ 0.2
        c[i] = int(sum(c) * draw(st.floats(0.3, 3.0))) + 1
    S = draw(st.lists(st.integers(0, 50), min_size=K, max_size=K))
    h = draw(st.lists(st.integers(0, N - 1), min_size=K, max_size=K))
    table = draw(st.dictionaries(st.integers(0, K - 1), st.integers(0, N - 1), max_size=K))
    theta = draw(st.sampled_from([0.0, 0.04, 0.08, 0.1]))
    amax = draw(st.integers(0, K))
    return Stats(c, S, h, N, table), theta, amax


@st.composite
def fine_infeasible(draw):
    """Infeasible but fine-grained, like a Zipf stream: 1–(N−1) giants above U, and 15·N or more
    small keys (cost 1–10) — the instances the issue's goal is about."""
    N = draw(st.integers(2, 8))
    small = draw(st.lists(st.integers(1, 10), min_size=15 * N, max_size=25 * N))
    g = draw(st.integers(1, N - 1))
    per = sum(small) / (N - g)
    giants = [int(per * draw(st.floats(1.15, 8.0))) + 1 for _ in range(g)]
    c = giants + small
    K = len(c)
    S = draw(st.lists(st.integers(0, 50), min_size=K, max_size=K))
    h = draw(st.lists(st.integers(0, N - 1), min_size=K, max_size=K))
    table = draw(st.dictionaries(st.integers(0, K - 1), st.integers(0, N - 1), max_size=K // 4))
    theta = draw(st.sampled_from([0.04, 0.08, 0.1]))
    return Stats(c, S, h, N, table), theta


def check_routing(s: Stats, p) -> None:
    """Every key routed once, no key lost or duplicated across the migration, θ as achieved."""
    K, N = s.keys, s.instances
    assert p.owner.shape == (K,) and ((p.owner >= 0) & (p.owner < N)).all()          # every key routed
    assert np.array_equal(p.owner, assignment(s.hashed, p.table))                       # F' = table + hash
    assert all(d != s.hashed[k] for k, d in p.table.items())
    # the migration: take the moved keys off their old instance and put them on the new one
    old = assignment(s.hashed, s.table)
    held = [set(np.nonzero(old == d)[0].tolist()) for d in range(N)]
    moved = set(p.moved.tolist())
    assert moved == set(np.nonzero(old != p.owner)[0].tolist())
    for k in moved:
        held[old[k]].remove(k)
        held[p.owner[k]].add(k)
    flat = sorted(k for h in held for k in h)
    assert flat == list(range(K))                                                         # none lost, none twice
    assert all(held[d] == set(np.nonzero(p.owner == d)[0].tolist()) for d in range(N))
    assert p.migration == pytest.approx(float(s.state[sorted(moved)].sum()))
    # the reported θ is the achieved one
    loads = np.bincount(p.owner, weights=s.cost, minlength=N)
    assert np.allclose(p.loads, loads)
    mean = s.cost.sum() / N
    if mean > 0:
        assert p.max_theta == pytest.approx(loads.max() / mean - 1)
        assert p.to_dict()["max_theta"] == pytest.approx(loads.max() / mean - 1)
    assert p.lower_bound == pytest.approx(lower_bound(s))


def check_bounds(s: Stats, p, theta: float, name: str) -> None:
    """Best effort within (1 + θ)·LB; any plan the planner did not trim within the list-scheduling
    bound max(bound, L̄ + c_max·(1 − 1/N)) (LLFD places a key no instance accepts on the
    least-loaded one, and fits never exceed the bound)."""
    N = s.instances
    mean = s.cost.sum() / N
    c_max = float(s.cost.max(initial=0))
    lb = lower_bound(s)
    mx = float(p.loads.max(initial=0))
    if p.status == "best_effort":
        assert mx <= p.bound + EPS
        assert p.bound <= (1 + theta) * lb + EPS, (name, p.bound, lb)
        assert mx <= 1.1 * lb + EPS
    if p.status in ("ok", "fallback_mintable", "exact"):
        assert mx <= (1 + theta) * mean + EPS
    trimmed = name.startswith("mixed") and p.status not in VALID   # Mixed trims a too-large table to Amax
    if not trimmed:
        assert mx <= max(p.bound, mean + c_max * (1 - 1 / N)) + EPS, (name, mx, p.bound, mean, c_max)


@settings(max_examples=300, deadline=None)
@given(any_instance())
def test_every_planner_routes_every_key_and_reports_the_achieved_theta(inst):
    s, theta, amax = inst
    for best_effort in (True, False):
        for name, p in planners(s, theta, amax, best_effort).items():
            check_routing(s, p)
            check_bounds(s, p, theta, name)
        if not best_effort:
            continue
        U = (1 + theta) * s.cost.sum() / s.instances
        infeasible = s.keys and s.cost.max() > U + 1e-9
        for name, p in planners(s, theta, amax).items():
            if infeasible:               # a key alone above U: no plan says ok, best effort when it met its bounds
                assert p.status not in ("ok", "fallback_mintable", "exact"), name
            else:                        # without a giant the paper's planners are unchanged
                assert p.status != "best_effort", name
        assert mixed(s, theta, amax).size <= amax


@settings(max_examples=300, deadline=None)
@given(fine_infeasible())
def test_best_effort_within_ten_percent_of_the_lower_bound(inst):
    """The issue's goal as a property: on infeasible, fine-grained instances every planner's
    maximum load is ≤ 1.1 × the lower bound max(c_max, L̄), every giant on an instance of its
    own; when the plan meets its per-instance bounds (``best_effort``) ≤ (1 + θmax)·max(c_max, L̄).
    (With integer costs the rest may not fit (1 + θmax)·R̄ exactly — e.g. 91 keys of cost 1 on 5
    instances of bound 18.9 — then one key goes over and the status says ``infeasible``, the
    maximum load staying the giant's.) The paper's planners (best_effort=False) say infeasible."""
    s, theta = inst
    U = (1 + theta) * s.cost.sum() / s.instances
    assume(s.cost.max() > U)
    lb = lower_bound(s)
    for name, p in planners(s, theta, 10_000).items():
        check_routing(s, p)
        assert p.status in ("best_effort", "infeasible"), (name, p.status)
        assert p.loads.max() <= 1.1 * lb + EPS, (name, p.loads.max() / lb)
        if p.status == "best_effort":
            assert p.loads.max() <= (1 + theta) * lb + EPS, name
            assert within_bounds(s, p.owner, theta)                   # what the re-plan trigger tests
        b = bounds(s, p.owner, theta)                                 # every giant on an instance of its own
        homes = [int(p.owner[k]) for k in b.home]
        assert len(set(homes)) == len(homes) and all(p.owner[k] == d for k, d in b.home.items()), name
    assert mixed(s, theta, 10_000, best_effort=False).status == "infeasible"


def brute_min_max(s: Stats) -> float:
    """The least maximum load of any assignment (brute force)."""
    best = np.inf
    for F in itertools.product(range(s.instances), repeat=s.keys):
        best = min(best, np.bincount(F, weights=s.cost, minlength=s.instances).max())
    return float(best)


@settings(max_examples=300, deadline=None)
@given(any_instance(max_keys=6))
def test_brute_force_small_instances(inst):
    """Small instances, every assignment: the lower bound is one (≤ the optimum), and a
    best-effort plan is within (1 + θmax) of the optimum."""
    s, theta, amax = inst
    assume(s.instances <= 4)
    opt = brute_min_max(s)
    assert lower_bound(s) <= opt + EPS
    for name, p in planners(s, theta, amax).items():
        if p.status == "best_effort":
            assert p.loads.max() <= (1 + theta) * opt + EPS, (name, p.loads.tolist(), opt)


@settings(max_examples=60, deadline=None)
@given(st.integers(2, 8), st.integers(0, 2**31 - 1), st.sampled_from(["mixed", "mintable", "minmig"]))
def test_partitioner_stream_never_loses_a_tuple(P, seed, name):
    """A routing-table partitioner on a random drifting stream with giants: every tuple of every
    batch in exactly one block (the key's owner), and the re-plan trigger leaves a best-effort
    table alone while it still meets its bounds."""
    rng = np.random.default_rng(seed)
    part = get_partitioner(name, theta_max=0.08, plan_on="previous", window=3)
    for b in range(6):
        n = int(rng.integers(5, 200))
        counts = rng.zipf(1.3, n).clip(1, 10_000)
        batch = KeyCounts.from_mapping({f"k{int(rng.integers(0, 300))}-{i}": int(x) for i, x in enumerate(counts)})
        plan = part.plan(batch, P)
        fk, fb, fc = plan.fragments.key, plan.fragments.block, plan.fragments.count
        assert np.array_equal(np.sort(fk), np.arange(batch.num_keys))      # each key once
        assert np.array_equal(fc[np.argsort(fk)], batch.counts)             # with all its tuples
        assert ((fb >= 0) & (fb < P)).all()
        assert part.last.status in VALID + ("infeasible", "table_violation")
