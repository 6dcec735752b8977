"""The trigger interval read back from a query's batch starts (``collectors.trigger_inference``), against runs
scheduled as Spark's ``ProcessingTimeExecutor`` schedules them."""
from hypothesis import given, settings, strategies as st

from spark_governor.collectors.trigger_inference import WAITED_MS, TriggerInference, interval_from_starts, trigger_interval_ms


def spark_schedule(interval_ms: int, durations: list[int], start_ms: int, late_ms: list[int]) -> list[tuple[int, int]]:
    """(trigger start, trigger execution) of batches run under ``ProcessingTime(interval_ms)``: a batch that ends
    before the next multiple of the interval waits for it (and starts up to ``late`` ms after it); one that ends
    after starts the next at once (a few ms of overhead)."""
    out, t = [], start_ms
    for d, late in zip(durations, late_ms):
        out.append((t, d))
        nxt = t // interval_ms * interval_ms + interval_ms
        t = nxt + late if t + d < nxt else t + d + 3
    return out


def test_worked_example_from_a_real_log():
    # replay-lz4 of tests/spark/event_log_writer.py (trigger 400 ms), 2026-12-07: starts and trigger executions
    runs = [(1796625611053, 878), (1796625612000, 825), (1796625613201, 716), (1796625614000, 704)]
    assert trigger_interval_ms(runs) == 400


def test_never_waiting_gives_none():
    runs = [(1000, 500), (1503, 400), (1906, 700), (2648, 100)]  # each batch ran into the next (42 ms at worst)
    assert trigger_interval_ms(runs) is None
    assert trigger_interval_ms([(1000, 10), (2000, 10)]) is None  # one wait: too few to read an interval from


@settings(max_examples=200, deadline=None)
@given(interval=st.integers(2, 200).map(lambda k: 50 * k),
       load=st.lists(st.floats(0.05, 1.8), min_size=8, max_size=40),
       start=st.integers(1_700_000_000_000, 1_800_000_000_000),
       late=st.lists(st.integers(0, 5), min_size=40, max_size=40))
def test_the_interval_spark_scheduled_is_read_back(interval, load, start, late):
    durations = [max(1, int(f * interval)) for f in load]
    runs = spark_schedule(interval, durations, start, late)
    waits = sum(1 for (t0, d0), (t1, _) in zip(runs, runs[1:]) if t1 - (t0 + d0) > WAITED_MS)
    got = trigger_interval_ms(runs)
    if waits < 2:
        assert got is None
    else:
        # the interval itself, or a multiple of it when every waited start happens to fall on that multiple
        assert got is not None and got % interval == 0, (got, interval)
        waited = [t1 for (t0, d0), (t1, _) in zip(runs, runs[1:]) if t1 - (t0 + d0) > WAITED_MS]
        assert got <= min(b - a for a, b in zip(waited, waited[1:])) + 20


def test_idle_triggers_count_as_waited_starts():
    """A query that idled (``QueryIdleEvent`` at trigger starts), then ran overloaded batches back to back: the
    idle triggers give the interval the batches never show (the replayed ``phases`` run, 2026-12-07)."""
    t = TriggerInference()
    for at in (1_000_036_000, 1_000_038_000, 1_000_039_000, 1_000_040_000):
        t.idle(at)
    t.batch(1_000_043_000, 11_173)
    t.batch(1_000_054_180, 3_885)  # ran into the next: not a waited start
    assert t.interval_ms == 1000 and t.starts == [1_000_036_000, 1_000_038_000, 1_000_039_000, 1_000_040_000,
                                                  1_000_043_000]
    assert trigger_interval_ms([(1_000_043_000, 11_173), (1_000_054_180, 3_885)]) is None  # the batches alone


def test_a_stray_start_on_a_fraction_of_the_interval_does_not_shorten_it():
    """A static run's first batches (2026-12-07, 8 s trigger): a backlogged batch's successor started 80 ms after it
    ended — "waited" — at 6 400 ms past a multiple of 8 s, which 1.6 s aligns too: the interval is still 8 s."""
    base = 1_796_637_600_000  # a multiple of 8 000 ms
    starts = [base - 17600] + [base + 8000 * k + (k % 2) for k in range(30)]  # 17.6 s before: 6.4 s past a multiple
    assert interval_from_starts(starts) == 8000
