"""The rate file (``collectors.sources.rate_file``): a new rate counts from when the file was written,
so the rows a source offers follow the schedule of writes whatever the phase of the calls."""
import os
import time

import pytest

from spark_governor.collectors.sources.rate_file import ArrivalCurve, read_rate


def test_a_new_rate_counts_from_the_write_clamped_between_the_calls():
    curve = ArrivalCurve(0.0, 100, 1000.0)
    curve.update(8.0, 1000.0)
    curve.update(16.0, 4000.0, changed_s=10.0)  # written 2 s after the call at 8 s
    assert curve.rows_at(10.0) == 10_100 and curve.rows_at(16.0) == 10_100 + 6 * 4000
    curve.update(24.0, 2000.0, changed_s=3.0)  # a write stamped before the previous call: from that call
    assert curve.rows_at(24.0) == curve.rows_at(16.0) + 8 * 2000
    curve.update(30.0, 500.0, changed_s=99.0)  # stamped in the future: from this call
    assert curve.rows_at(30.0) == curve.rows_at(24.0) + 6 * 2000
    before = list(curve.points)
    curve.update(20.0, 7.0, changed_s=20.0)  # a clock going back changes nothing
    assert curve.points == before and curve.rate == 500.0


def test_read_rate_gives_the_rate_and_when_it_was_written(tmp_path):
    path = tmp_path / "rate"
    assert read_rate(str(path), 5.0) == (5.0, None)
    path.write_text("250")
    os.utime(path, (1_000.0, 1_000.0))
    assert read_rate(str(path), 5.0) == (250.0, 1_000.0)
    path.write_text("-3")
    assert read_rate(str(path), 5.0)[0] == 0.0
    path.write_text("x")
    assert read_rate(str(path), 5.0) == (5.0, None)


def test_the_zipf_source_offers_the_old_rate_up_to_the_write():
    """The first batch after a step holds the rows of the schedule, not a whole interval at the new rate
    (the source before 2026-11-27 offered 1.0 s × 10 000 here)."""
    pytest.importorskip("pyspark")
    import tempfile

    from spark_governor.collectors.sources.zipf import _source_classes

    with tempfile.TemporaryDirectory() as d:
        rate = os.path.join(d, "rate")
        with open(rate, "w") as f:
            f.write("1000")
        reader = _source_classes()({"rowsPerSecond": 1, "rateFile": rate}).streamReader(None)
        start = reader.initialOffset()
        first = reader.latestOffset(start)
        time.sleep(0.8)
        with open(rate, "w") as f:
            f.write("10000")
        written = os.stat(rate).st_mtime
        time.sleep(0.2)
        end = reader.latestOffset(first)
        t_first, t_end = reader.curve.points[0][0], end["t_ms"] / 1000.0
        expected = 1000 * (written - t_first) + 10_000 * (t_end - written)
        assert end["rows"] == pytest.approx(expected, abs=60)
        assert end["rows"] < 1000 * (t_end - t_first) + 0.5 * 9000 * (t_end - t_first)
