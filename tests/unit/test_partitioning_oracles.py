"""Prompt's worked examples (digest 000 §7.1–7.6), exactly."""
import math

import numpy as np
import pytest

from spark_governor.policies.partitioning.accumulator import Accumulator
from spark_governor.policies.partitioning.base import Fragments, KeyCounts, PartitionPlan, PlanError, stable_hash
from spark_governor.policies.partitioning.elasticity import Elasticity, ElasticityConfig
from spark_governor.policies.partitioning.metrics import plan_metrics
from spark_governor.policies.partitioning.prompt_reduce import allocate_task
from spark_governor.policies.partitioning.registry import get_partitioner, partitioners

EXAMPLE_A = dict(A=22, B=19, C=13, D=10, E=9, F=8, G=7, H=5, I=4, J=3)
EXAMPLE_B = dict(A=30, B=14, C=10, D=8, E=7, F=6, G=4, H=1)


def blocks(plan):
    """[{key: tuples}] per block, 1-based in the digest = index + 1 here."""
    out = [dict() for _ in range(plan.partitions)]
    for k, entry in plan.assignment().items():
        for b, n in entry["blocks"]:
            out[b][k] = n
    return out


def metrics4(plan):
    m = plan_metrics(plan)
    return (m.bsi, m.bci, m.ksr, m.mpi)


def test_example_a_zigzag_first():
    plan = get_partitioner("prompt").plan(KeyCounts.from_mapping(EXAMPLE_A), 4)
    assert blocks(plan) == [{"A": 15, "D": 10}, {"B": 13, "E": 9, "J": 3}, {"C": 13, "F": 8, "I": 4},
                            {"G": 7, "H": 5, "A": 7, "B": 6}]
    assert plan.split_keys() == ["A", "B"]
    assert plan.block_cardinalities().tolist() == [2, 3, 3, 4]
    assert metrics4(plan) == pytest.approx((0, 1.0, 1.2, 0.7333333333))


def test_example_a_zigzag_continue():
    plan = get_partitioner("prompt", zigzag_start="continue").plan(KeyCounts.from_mapping(EXAMPLE_A), 4)
    assert blocks(plan) == [{"A": 13, "E": 9, "J": 3}, {"B": 13, "F": 8, "I": 4}, {"C": 13, "G": 7, "H": 5},
                            {"D": 10, "A": 9, "B": 6}]
    assert metrics4(plan) == pytest.approx((0, 0, 1.2, 0.4))


def test_example_a_baselines():
    batch = KeyCounts.from_mapping(EXAMPLE_A)  # arrival grouped by key: AAA...BBB...JJJ
    shuffle = get_partitioner("shuffle").plan(batch, 4)
    assert shuffle.block_loads().tolist() == [25] * 4
    assert shuffle.block_cardinalities().tolist() == [9, 10, 10, 10]
    assert metrics4(shuffle) == pytest.approx((0, 0.25, 3.9, 1.3833333333))
    time_based = get_partitioner("time").plan(batch, 4)
    assert blocks(time_based) == [{"A": 22, "B": 3}, {"B": 16, "C": 9}, {"C": 4, "D": 10, "E": 9, "F": 2},
                                  {"F": 6, "G": 7, "H": 5, "I": 4, "J": 3}]
    assert metrics4(time_based) == pytest.approx((0, 1.75, 1.3, 1.0166666667))
    # the digest's illustrative hash mapping (alphabetical index mod 4) through the plan type
    keys = list(EXAMPLE_A)
    illustrative = PartitionPlan("hash", 4, 4, tuple(keys), np.array(list(EXAMPLE_A.values())),
                                 Fragments.from_lists(range(10), [i % 4 for i in range(10)], list(EXAMPLE_A.values())),
                                 np.zeros(10, dtype=np.int64))
    assert illustrative.block_loads().tolist() == [35, 30, 20, 15]
    assert metrics4(illustrative) == pytest.approx((10, 0.5, 1.0, 3.8333333333))
    # the real hash partitioner keeps every key whole
    assert plan_metrics(get_partitioner("hash").plan(batch, 4)).ksr == 1.0


def test_example_b_spread_first():
    plan = get_partitioner("prompt").plan(KeyCounts.from_mapping(EXAMPLE_B), 4)
    assert blocks(plan) == [{"A": 10, "C": 10}, {"B": 12, "D": 8}, {"E": 7, "H": 1, "A": 12},
                            {"F": 6, "G": 4, "A": 8, "B": 2}]
    assert metrics4(plan) == pytest.approx((0, 1.25, 1.375, 0.875))


def test_example_b_single_overflows_one_block():
    plan = get_partitioner("prompt", overflow="single").plan(KeyCounts.from_mapping(EXAMPLE_B), 4)
    assert plan.block_loads()[2] == 28
    assert plan_metrics(plan).bsi > 0


def test_example_b_spread_continue():
    plan = get_partitioner("prompt", zigzag_start="continue").plan(KeyCounts.from_mapping(EXAMPLE_B), 4)
    assert blocks(plan) == [{"A": 12, "E": 7, "H": 1}, {"B": 10, "F": 6, "G": 4}, {"C": 10, "A": 6, "B": 4},
                            {"D": 8, "A": 12}]
    assert metrics4(plan) == pytest.approx((0, 0.25, 1.375, 0.5416666667))


def test_fewer_keys_than_blocks_literal_and_flag():
    batch = KeyCounts.from_mapping(dict(X=50, Y=50))
    literal = get_partitioner("prompt").plan(batch, 4)
    assert blocks(literal) == [{"X": 50}, {"Y": 50}, {}, {}]
    assert plan_metrics(literal).bsi == 25
    fixed = get_partitioner("prompt", split_above_capacity=True).plan(batch, 4)
    assert fixed.block_loads().tolist() == [25, 25, 25, 25]


def literal_algorithm3(sizes, split_buckets, split_sizes, r):
    """The digest's implementable Algorithm 3, one cluster at a time (brute-force reference)."""
    load = [0] * r
    for b, s in zip(split_buckets, split_sizes):
        load[b] += s
    cand, out = set(range(r)), []
    for s in sizes:
        b = min(cand, key=lambda x: (load[x], x))
        out.append(b)
        load[b] += s
        cand.remove(b)
        if not cand:
            cand = set(range(r))
    return out, load


def test_algorithm3_example():
    sizes = [10, 8, 7, 5, 4, 2, 1]  # D E F G H I J; split A:9 → 0, B:6 → 2 (injected hash)
    chosen, load = allocate_task(np.array(sizes), np.array([0, 2]), np.array([9, 6]), 3)
    assert chosen.tolist() == [1, 2, 0, 1, 2, 0, 1]
    assert load.tolist() == [18, 16, 18]
    assert (literal_algorithm3(sizes, [0, 2], [9, 6], 3)[0]) == chosen.tolist()
    assert max(load) - sum(load) / 3 == pytest.approx(0.6666667)


def test_algorithm4_trace():
    e = Elasticity(4, 4, ElasticityConfig(d=3))
    trace = [(0.85, 1000, 100, 4, 4, "none"), (0.95, 1200, 100, 4, 4, "none"), (0.97, 1300, 100, 4, 4, "none"),
             (0.99, 1400, 100, 5, 4, "out"), (0.92, 1400, 130, 5, 4, "none"), (0.93, 1400, 150, 5, 4, "none"),
             (0.91, 1450, 160, 6, 5, "out"), (0.70, 1450, 160, 6, 5, "none"), (0.60, 1200, 160, 6, 5, "none"),
             (0.65, 1000, 160, 6, 5, "blocked"), (0.60, 900, 150, 5, 4, "in"), (0.85, 900, 150, 5, 4, "none")]
    for w, n, k, p, r, action in trace:
        step = e.observe(w, n, k)
        assert (step.p, step.r, step.action) == (p, r, action), step
    assert e.over == e.under == 0


def test_algorithm4_zone_boundaries_and_bounds():
    e = Elasticity(1, 1, ElasticityConfig(d=1, p_max=2, r_max=2))
    assert e.zone(0.90) == 2 and e.zone(0.9 + 1e-3) == 3 and e.zone(0.80) == 1 and e.zone(0.8 + 1e-3) == 2
    assert e.zone(0.9 - 0.1) == 1  # float error must not move the boundary
    e.observe(1.5, 10, 10)
    e.observe(1.5, 10, 10)
    assert (e.p, e.r) == (2, 2)  # clamped
    step = e.observe(0.1, 10, 10)  # grace: d=1 batch after the last scale-out
    assert step.action == "blocked"
    e2 = Elasticity(1, 1, ElasticityConfig(d=1))
    for _ in range(3):
        e2.observe(0.1, 10, 10)
    assert (e2.p, e2.r) == (1, 1)  # never below the minimum


def test_algorithm1_steps():
    acc = Accumulator(0.0, 2.0, budget=10, n_est=10_000, k_avg=100)
    assert acc.f == 10
    acc.add("x", 0.2)
    x = acc.table["x"]
    assert (x.current, x.updated, x.f_step) == (1, 1, 10) and x.t_step == pytest.approx(0.18)
    for i in range(489):
        acc.add(f"filler{i:03d}", 0.21)
    for i in range(9):  # x's 2nd..10th tuple: Δfreq < 10, Δtime < 0.18
        acc.add("x", 0.22 + i * 0.001)
    assert x.updated == 1 and acc.n_c == 499
    acc.add("x", 0.25)  # the 11th x, N_C = 500
    assert acc.n_c == 500 and (x.updated, x.budget) == (11, 9)
    assert x.f_step == pytest.approx(22)
    assert (11, "x") in acc.tree
    acc.add("y", 1.0)
    assert acc.table["y"].t_step == pytest.approx(0.1)
    acc.add("y", 1.15)
    y = acc.table["y"]
    assert (y.updated, y.budget) == (2, 9) and y.t_step == pytest.approx(0.85 / 9)
    order, n_c, k = acc.seal()
    assert order[0] == ("x", 11) and order[1] == ("y", 2) and n_c == 502 and k == 491


def test_algorithm1_budget_never_exceeded_and_exact_counts():
    rng = np.random.default_rng(3)
    keys = rng.zipf(1.3, 5000) % 50
    acc = Accumulator(0.0, 1.0, budget=4, n_est=5000, k_avg=50)
    for i, k in enumerate(keys.tolist()):
        acc.add(int(k), i / 5000)
    assert all(e.budget >= 0 for e in acc.table.values())
    assert acc.updates <= 4 * len(acc.table)
    order, n_c, _ = acc.seal()
    exact = dict(zip(*np.unique(keys, return_counts=True)))
    assert {k: c for k, c in order} == {int(k): int(c) for k, c in exact.items()} and n_c == 5000
    tree_counts = [c for _, c in acc.approximate_counts()]
    assert tree_counts == sorted(tree_counts, reverse=True)


def test_stable_hash_is_crc32():
    assert stable_hash("A") == 0xD3D99E8B
    assert stable_hash("A", 1) != stable_hash("A")


def test_bad_inputs_named():
    with pytest.raises(PlanError, match="key 'b'"):
        KeyCounts.from_mapping({"a": 1, "b": 0})
    with pytest.raises(PlanError, match="partitions"):
        get_partitioner("prompt").plan(KeyCounts.from_mapping({"a": 1}), 0)
    with pytest.raises(PlanError, match="unknown partitioner"):
        get_partitioner("nope")
    with pytest.raises(PlanError, match="zigzag_start"):
        get_partitioner("prompt", zigzag_start="middle")


def test_registry_has_prompt_and_baselines():
    assert {"prompt", "time", "shuffle", "hash", "pk2", "pk5", "cam"} <= set(partitioners())


def test_empty_batch_and_single_block():
    empty = get_partitioner("prompt").plan(KeyCounts((), np.zeros(0, dtype=np.int64)), 4)
    assert empty.block_loads().tolist() == [0] * 4
    one = get_partitioner("prompt").plan(KeyCounts.from_mapping(EXAMPLE_A), 1)
    assert one.block_loads().tolist() == [100] and plan_metrics(one).ksr == 1.0


def test_plan_round_trips_through_json():
    plan = get_partitioner("prompt").plan(KeyCounts.from_mapping(EXAMPLE_A), 4, 3)
    again = PartitionPlan.from_dict(plan.to_dict())
    assert again.assignment() == plan.assignment() and again.reduce == 3
