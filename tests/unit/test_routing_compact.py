"""Fang et al.'s algorithms on compact records (policies.partitioning.routing_compact, digest 003
§3.8): the digest's oracles again, load-equivalence with the per-key algorithms on random
instances, validity properties, and the partitioner / policy switch."""
import numpy as np
import pytest
from hypothesis import given, settings

from spark_governor.policies.partitioning.routing_compact import (CompactRecords, KeySpace, llfd_compact, min_mig_compact,
                                                                  min_table_compact)
from spark_governor.policies.partitioning.routing_llfd import llfd
from spark_governor.policies.partitioning.routing_planners import min_mig, min_table, mixed
from spark_governor.policies.partitioning.routing_table import Stats
from tests.unit.test_routing_table import O1, O2, instances


def same(a, b):
    return (a.table, a.loads.tolist(), sorted(a.moved.tolist()), a.migration, a.status) == \
        (b.table, b.loads.tolist(), sorted(b.moved.tolist()), b.migration, b.status)


@pytest.mark.parametrize("theta", [0.0, 0.2])
def test_oracles_1_and_2_give_the_per_key_plans(theta):
    for s in (O1, O2):
        assert same(min_table_compact(s, theta), min_table(s, theta))
        assert same(min_mig_compact(s, theta), min_mig(s, theta))
        assert same(llfd_compact(s, theta, "cost"), llfd(s, theta, "cost"))
        for amax in range(6):
            a, b = mixed(s, theta, amax, compact=True), mixed(s, theta, amax)
            assert same(a, b) and a.trials == b.trials


def test_oracle3_infeasible_on_records():
    s = Stats([10, 1, 1], [1, 1, 1], [0, 0, 1], 2, {})
    for p in (llfd_compact(s, 0.1, best_effort=False), min_mig_compact(s, 0.1, best_effort=False),
              min_table_compact(s, 0.1, best_effort=False), mixed(s, 0.1, 5, compact=True, best_effort=False)):
        assert p.status == "infeasible" and p.table == {} and p.loads.tolist() == [11, 1] and p.migration == 0
    for p in (llfd_compact(s, 0.1), min_mig_compact(s, 0.1), min_table_compact(s, 0.1), mixed(s, 0.1, 5, compact=True)):
        assert same(p, mixed(s, 0.1, 5)) and p.status == "best_effort" and p.loads.tolist() == [10, 2]


def test_records_merge_equal_keys():
    """10 000 keys with 5 distinct (owner, hash, c, S) combinations are 5 records."""
    K = 10_000
    h = np.arange(K) % 2
    c = np.where(np.arange(K) < 10, 50.0, 1.0)
    s = Stats(c, np.ones(K), h, 2, {0: 1})
    space = KeySpace(s)
    recs = space.records()
    assert isinstance(recs, CompactRecords) and recs.keys == K and len(recs) == 5
    assert sorted(recs.records.values()) == [1, 4, 5, 4995, 4995]


@settings(max_examples=600, deadline=None)
@given(instances())
def test_same_loads_and_validity_as_per_key(inst):
    """MinTable, MinMig and LLFD take the same decisions on records as on keys, up to which of
    several interchangeable keys moves: the loads and statuses are equal; Mixed keeps every
    property (its C_mem ties may pick other keys)."""
    s, theta, amax = inst
    U = (1 + theta) * s.cost.sum() / s.instances
    for compact, per_key in ((min_table_compact(s, theta), min_table(s, theta)),
                             (min_mig_compact(s, theta), min_mig(s, theta)),
                             (llfd_compact(s, theta), llfd(s, theta))):
        assert compact.loads.tolist() == pytest.approx(per_key.loads.tolist())
        assert compact.status == per_key.status
    mx = mixed(s, theta, amax, compact=True)
    assert mx.size <= amax and all(d != s.hashed[k] for k, d in mx.table.items())
    if mx.status in ("ok", "fallback_mintable", "exact"):
        assert mx.loads.max() <= U + 1e-9
    mt = min_table_compact(s, theta)
    if mt.status == "ok" and mt.size <= amax:
        assert mx.migration <= mt.migration + 1e-9


def test_mixed_on_records_equals_per_key_without_ties():
    """With distinct state sizes no criterion ties exist (except zero-cost keys), so Mixed on
    records is the per-key Mixed, trial for trial."""
    for seed in range(60):
        rng = np.random.default_rng(seed)
        K, N = int(rng.integers(5, 300)), int(rng.integers(2, 9))
        c = rng.integers(1, 30, K).astype(float)
        c[rng.integers(0, K)] = rng.integers(30, 200)
        S = rng.permutation(K).astype(float) + 1
        h = rng.integers(0, N, K)
        table = {int(k): int(rng.integers(0, N)) for k in rng.choice(K, min(K, 20), replace=False)}
        s = Stats(c, S, h, N, table)
        theta = float(rng.choice([0.0, 0.08, 0.2]))
        a, b = mixed(s, theta, 15, compact=True), mixed(s, theta, 15)
        assert same(a, b) and a.trials == b.trials, seed


def test_discretised_key_space_plans_on_few_records():
    """A skewed key space (10⁵ keys) discretised with HLHE(r = 4): few records, a balanced plan
    with the same loads as the per-key MinMig on the same discretised statistics."""
    rng = np.random.default_rng(1)
    K, N = 100_000, 8
    c = np.minimum(rng.zipf(2.0, K), 2000).astype(float)
    s = Stats(c, c * 3, rng.integers(0, N, K), N, {}, discretisation_r=4)
    space = KeySpace(s)
    assert len(space.records()) < 500
    a, b = min_mig_compact(s, 0.08), min_mig(s, 0.08)
    assert a.status == b.status == "ok" and a.loads.tolist() == pytest.approx(b.loads.tolist())
    assert a.loads.max() <= 1.08 * a.loads.mean() + 1e-6


def test_compact_switch_in_partitioner_and_policy():
    from spark_governor.policies.partitioning.registry import get_partitioner
    from spark_governor.policies.partitioning.routing_compact import min_table_compact as mtc
    from spark_governor.policies.partitioning.routing_planners import algorithm
    from spark_governor.policies.registry import get_policy, validate_config
    from spark_governor.policies.partitioning.spark_hash import spark_partition
    from tests.unit.test_learned_routing_policies import _spark_skew, batch, view

    assert algorithm("mintable", compact=True) is mtc and algorithm("mintable") is min_table
    with pytest.raises(ValueError, match="compact"):
        algorithm("simple", compact=True)
    counts = {f"k{i}": (500 if i < 3 else 5 + i % 7) for i in range(400)}
    per_key = get_partitioner("mixed", theta_max=0.08, plan_margin=0.0).replan(counts, 4)
    on_records = get_partitioner("mixed", theta_max=0.08, plan_margin=0.0, compact=True,
                                 discretisation_r=8).replan(counts, 4)
    assert per_key.status == on_records.status == "ok" and on_records.balanced
    cls = get_policy("mixed-routing")
    cfg = validate_config(cls, {"theta_max": 0.08, "table_max": 12, "compact": True, "discretisation_r": 16})
    kc = _spark_skew()
    [prop] = cls().evaluate(view([batch(0, kc)]), cfg)
    loads = np.zeros(4)
    for k, c in kc:
        loads[prop.value["table"].get(k, spark_partition(4, 0, k))] += c
    assert prop.value["status"] in ("ok", "fallback_mintable", "exact") and len(prop.value["table"]) <= 12
    assert loads.max() <= 1.08 * loads.mean() * 1.02  # planned on discretised costs: ≤ 2 % estimation error here


def test_bench_routing_compact_tiny(tmp_path):
    import json

    from click.testing import CliRunner

    from spark_governor.api.cli import main

    out = tmp_path / "c.json"
    r = CliRunner().invoke(main, ["bench", "routing-compact", "--keys", "2000", "--tuples", "20000",
                                  "--degrees", "0,4", "--out", str(out)])
    assert r.exit_code == 0, r.output
    rows = json.loads(out.read_text())["rows"]
    assert {(row["r"], row["algorithm"]) for row in rows} == {(0, "minmig"), (0, "mixed"), (4, "minmig"), (4, "mixed")}
    assert all(row["same_loads"] for row in rows)
    assert all(row["load_error"] == 0 for row in rows if row["r"] == 0)
    bad = CliRunner().invoke(main, ["bench", "routing-compact", "--degrees", "a"])
    assert bad.exit_code != 0 and "--degrees" in bad.output
