"""Prompt against brute force on small random instances and the digest's always-held properties
(000 §7.7, §9.4) on random Zipf batches."""
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spark_governor.bench.partition_data import zipf_counts
from spark_governor.policies.partitioning.base import KeyCounts, stable_hash
from spark_governor.policies.partitioning.metrics import plan_metrics
from spark_governor.policies.partitioning.prompt_reduce import allocate_task
from spark_governor.policies.partitioning.registry import get_partitioner
from tests.unit.test_partitioning_oracles import literal_algorithm3


def literal_algorithm2(items, P, zigzag_start="first", overflow="spread"):
    """The digest's implementable Algorithm 2 (§2.4), one key at a time: {(key, block): tuples}."""
    N = sum(n for _, n in items); K = len(items)
    cap = math.ceil(N / P); frag = N // K
    heavy = [(k, n) for k, n in items if n * K > N]
    light = [(k, n) for k, n in items if n * K <= N]
    load = [0] * P; out = {}

    def put(b, k, n):
        if n > 0:
            out[(k, b)] = out.get((k, b), 0) + n; load[b] += n

    rlist, home = [], {}
    for i, (k, n) in enumerate(heavy):
        put(i % P, k, frag); rlist.append((k, n - frag)); home[k] = i % P
    start = 0 if zigzag_start == "first" else len(heavy) % P
    order = [(start + j) % P for j in range(P)]
    seq = []
    while len(seq) < len(light):
        seq += order if (len(seq) // P) % 2 == 0 else order[::-1]
    for (k, n), b in zip(light, seq):
        put(b, k, n)
    for k, res in rlist:
        b = home[k]; rem = max(cap - load[b], 0)
        if res <= rem:
            put(b, k, res); continue
        put(b, k, rem); rest = res - rem
        fit = [x for x in range(P) if cap - load[x] >= rest]
        if fit:
            put(min(fit, key=lambda x: (cap - load[x], x)), k, rest)
        elif overflow == "spread":
            while rest > 0:
                x = min(range(P), key=lambda x: (-max(cap - load[x], 0), x))
                n = min(max(cap - load[x], 0), rest); put(x, k, n); rest -= n
        else:
            put(min(range(P), key=lambda x: (-(cap - load[x]), x)), k, rest)
    return out


counts_st = st.lists(st.integers(1, 60), min_size=1, max_size=40)


@settings(max_examples=150, deadline=None)
@given(counts=counts_st, P=st.integers(1, 9), zig=st.sampled_from(["first", "continue"]),
       overflow=st.sampled_from(["spread", "single"]))
def test_algorithm2_equals_literal_reference(counts, P, zig, overflow):
    batch = KeyCounts.from_mapping({f"k{i:03d}": c for i, c in enumerate(counts)})
    plan = get_partitioner("prompt", zigzag_start=zig, overflow=overflow).plan(batch, P)
    items = [(batch.keys[i], int(batch.counts[i])) for i in batch.descending()]
    expected = literal_algorithm2(items, P, zig, overflow)
    got = {(k, b): n for k, e in plan.assignment().items() for b, n in e["blocks"]}
    assert got == expected
    # invariants of §9.4
    N, K = batch.total, batch.num_keys
    heavy = {k for k, n in items if n * K > N}
    assert all(k in heavy for k in plan.split_keys())  # a non-heavy key is never split
    assert plan.block_loads().sum() == N
    if len(heavy) == 0:
        assert plan.split_keys() == []


@settings(max_examples=150, deadline=None)
@given(sizes=st.lists(st.integers(1, 20), max_size=60), splits=st.lists(st.integers(1, 30), max_size=5),
       r=st.integers(1, 7), data=st.data())
def test_algorithm3_equals_literal_loop(sizes, splits, r, data):
    sizes = sorted(sizes, reverse=True)
    split_buckets = [data.draw(st.integers(0, r - 1)) for _ in splits]
    chosen, load = allocate_task(np.array(sizes, dtype=np.int64), np.array(split_buckets, dtype=np.int64),
                                 np.array(splits, dtype=np.int64), r)
    ref, ref_load = literal_algorithm3(sizes, split_buckets, splits, r)
    assert chosen.tolist() == ref and load.tolist() == ref_load


def test_every_key_reaches_one_bucket_and_split_keys_are_hashed():
    batch = zipf_counts(1.2, 2000, 50_000, seed=4)
    plan = get_partitioner("prompt").plan(batch, 8, 5)
    split = set(plan.split_keys())
    assert split
    for k in split:
        assert plan.bucket[plan.keys.index(k)] == stable_hash(k) % 5
    assert plan.bucket_loads().sum() == batch.total


CASES = [(z, support, P, seed) for z in (0.1, 0.5, 1.0, 1.5, 2.0) for support in (200, 2000, 20000)
         for P in (4, 8, 16) for seed in (0,)]


@pytest.mark.parametrize("z,support,P,seed", CASES)
def test_always_held_properties_on_zipf(z, support, P, seed):
    batch = zipf_counts(z, support, 20_000, seed=seed, arrival=True)
    m = {name: plan_metrics(get_partitioner(name).plan(batch, P)) for name in ("prompt", "hash", "shuffle", "pk2", "pk5")}
    assert m["prompt"].mpi < m["hash"].mpi
    assert m["prompt"].ksr < m["shuffle"].ksr
    assert m["prompt"].ksr <= m["pk5"].ksr
    assert m["prompt"].bsi <= m["pk2"].bsi
    assert m["prompt"].bsi <= m["hash"].bsi
    assert m["hash"].ksr == 1.0
