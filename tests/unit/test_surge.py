"""When a probed rate has surged (``policies.surge.SurgeBaselines``): above the baseline by the ratio,
settled (not still rising), at most once per gap per job; the baseline follows the rate down."""
import pytest
from hypothesis import given
from hypothesis import strategies as st

from spark_governor.policies.surge import SurgeBaselines


def test_a_step_is_a_surge_once_it_settled():
    b = SurgeBaselines(0.25, min_gap_s=2.0)
    looks = [(0, 1000.0), (1000, 1100.0), (2000, 2500.0), (3000, 4000.0), (4000, 4000.0), (5000, 4100.0)]
    assert [b.surged("j", r, t) for t, r in looks] == [False, False, False, False, True, False]
    assert b.baseline["j"] == 4000.0
    # down: the baseline follows; up again past the gap
    assert not b.surged("j", 2000.0, 6000) and b.baseline["j"] == 2000.0
    assert not b.surged("j", 3000.0, 7000) and b.surged("j", 3000.0, 8000)


def test_the_gap_and_other_jobs():
    b = SurgeBaselines(0.25, min_gap_s=2.0)
    for t, r in [(0, 100.0), (1000, 200.0), (2000, 200.0)]:
        b.surged("a", r, t)
        b.surged("b", r, t)
    assert b.last_ms == {"a": 2000, "b": 2000}
    assert not b.surged("a", 300.0, 3000) and not b.surged("a", 300.0, 3500)  # settled, but within 2 s
    assert b.surged("a", 300.0, 4000)
    b.forget(["a"])
    assert set(b.baseline) == {"a"} and "b" not in b.last_ms
    with pytest.raises(ValueError, match="surge_ratio"):
        SurgeBaselines(0)


@given(st.lists(st.floats(0, 1e6, allow_nan=False), min_size=1, max_size=40), st.floats(0.05, 2.0))
def test_a_surge_is_always_above_the_baseline_and_settled(rates, ratio):
    b = SurgeBaselines(ratio, min_gap_s=0.0)
    prev = base = None
    for i, r in enumerate(rates):
        was_base = b.baseline.get("j")
        if b.surged("j", r, i * 1000):
            assert was_base is not None and r > was_base * (1 + ratio) and prev is not None and r <= prev * (1 + ratio)
            assert b.baseline["j"] == r
        base = b.baseline["j"]
        assert base <= max(rates[: i + 1])
        prev = r
