"""DS2's rate model (``policies.rate_model``): whole task waves in a stage's load, and the fewest slots
against brute force."""
import math

from hypothesis import given, settings
from hypothesis import strategies as st

from spark_governor.policies.rate_model import effective_slots, slots_needed, stage_load


def test_effective_slots_count_whole_waves():
    assert effective_slots(3, 4) == 3 and effective_slots(3, 4, waves=True) == 2  # 2 waves, as on 2
    assert effective_slots(4, 4, waves=True) == 4 and effective_slots(6, 4, waves=True) == 4
    assert effective_slots(7, 200, waves=True) == 7  # 29 waves either way
    assert effective_slots(5, 8, waves=True) == 4 and effective_slots(8, 8, waves=True) == 8
    assert effective_slots(3, None, waves=True) == 3  # tasks unknown: every slot


def model(stages):
    return {"target_rate": None, "stages": {f"s{i}": {"target_rate": r, "tpr_per_slot": t, "max_tasks": m}
                                            for i, (r, t, m) in enumerate(stages)}}


@settings(max_examples=300, deadline=None)
@given(stages=st.lists(st.tuples(st.floats(10, 5e4), st.floats(100, 1e4), st.integers(1, 40)), min_size=1,
                       max_size=3),
       target=st.floats(0.2, 1.0), waves=st.booleans())
def test_slots_needed_is_the_fewest_within_the_target(stages, target, waves):
    m = model(stages)
    top = max(t for _, _, t in stages)
    # brute force: the first count whose load is within the target, else the most any stage can use
    want = next((c for c in range(1, top + 1) if stage_load(m, c, waves) <= target + 1e-9), top)
    assert slots_needed(m, target, waves) == want
    if waves:  # never a count that leaves slots idle in every stage's last wave
        got = slots_needed(m, target, waves)
        assert any(effective_slots(got, t, True) == min(got, t) for _, _, t in stages) or got == top
        assert got >= slots_needed(m, target, False)
    assert math.isfinite(stage_load(m, 1, waves))
