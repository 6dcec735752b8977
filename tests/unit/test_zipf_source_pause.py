"""The Zipf source's rate file: a pause (rate 0) produces no rows and no batch, and the rows after
it carry event times from when they started to flow, not from before the pause (the demo pauses
the source while Spark warms up; otherwise its first rows would look seconds late)."""
import time

import pytest

pytest.importorskip("pyspark")


def test_rows_after_a_pause_start_their_event_times_at_the_resumption(tmp_path):
    from spark_governor.collectors.sources.zipf import _source_classes

    rate = tmp_path / "rate"
    rate.write_text("0")
    reader = _source_classes()({"rowsPerSecond": 1000, "rateFile": str(rate), "numPartitions": 2}).streamReader(None)
    start = reader.initialOffset()
    first = reader.latestOffset(start)
    assert first == start  # paused: no rows, no new offset
    time.sleep(0.3)
    assert reader.latestOffset(start) == start
    resumed_ms = int(time.time() * 1000)
    rate.write_text("1000")
    time.sleep(0.2)
    end = reader.latestOffset(start)
    assert end["rows"] > 0 and end["from_ms"] >= resumed_ms - 50 > int(start["t_ms"])
    parts = reader.partitions(start, end)
    assert all(p.rng.t0_ms == end["from_ms"] for p in parts)
    # the next batch follows directly: its event times start at the previous end
    time.sleep(0.1)
    nxt = reader.latestOffset(end)
    assert "from_ms" not in nxt and all(p.rng.t0_ms == end["t_ms"] for p in reader.partitions(end, nxt))
