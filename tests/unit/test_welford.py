"""Welford moments and the exact parallel merge (digest 004 §9.7 oracles + random instances)."""
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spark_governor.policies.moments import Moments


def test_digest_oracle_sample():
    m = Moments.of([2, 4, 4, 4, 5, 5, 7, 9])
    assert m.n == 8 and m.mean == 5.0 and m.m2 == pytest.approx(32.0)
    assert m.variance == pytest.approx(4.5714286, rel=1e-7)
    assert m.cv == pytest.approx(0.4276179, rel=1e-6)


def test_digest_oracle_merge():
    a, b = Moments.of([2, 4, 4, 4]), Moments.of([5, 5, 7, 9])
    assert (a.n, a.mean, a.m2) == (4, 3.5, 3.0)
    assert (b.n, b.mean, b.m2) == (4, 6.5, 11.0)
    m = a.merge(b)
    assert (m.n, m.mean, m.m2) == (8, 5.0, 32.0)


def test_eq_4_2_merge_is_not_mean_of_means():
    merged = Moments.of([2, 4]).merge(Moments.of([9]))
    assert merged.mean == pytest.approx(5.0)  # a mean of means would give 6.0


def test_online_update_equals_batch():
    xs = [0.3, 1.7, 2.2, 9.1, 4.4]
    m = Moments()
    for x in xs:
        m = m.add(x)
    ref = Moments.of(xs)
    assert m.n == ref.n and m.mean == pytest.approx(ref.mean) and m.m2 == pytest.approx(ref.m2)


def test_undefined_statistics():
    assert Moments().variance is None and Moments().cv is None
    assert Moments.of([3.0]).variance is None
    assert Moments.of([0.0, 0.0]).cv is None
    assert Moments().merge(Moments.of([1, 2])) == Moments.of([1, 2])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(-1e6, 1e6, allow_nan=False), min_size=1, max_size=60), st.data())
def test_merge_of_random_partition_equals_direct(xs, data):
    cuts = sorted(data.draw(st.lists(st.integers(0, len(xs)), max_size=5)))
    parts, prev = [], 0
    for c in cuts + [len(xs)]:
        parts.append(xs[prev:c])
        prev = c
    merged = Moments.merge_all(Moments.of(p) for p in parts)
    direct = Moments.of(xs)
    assert merged.n == direct.n
    assert merged.mean == pytest.approx(direct.mean, rel=1e-9, abs=1e-6)
    assert merged.m2 == pytest.approx(direct.m2, rel=1e-7, abs=1e-3)
    if direct.n > 1:
        assert merged.variance == pytest.approx(float(np.var(xs, ddof=1)), rel=1e-6, abs=1e-3)
        assert math.isfinite(merged.variance)
