"""Source probes (``collectors.source_probe``): the tracker reads a source's rows between micro-batches,
so a rate step shows in the live arrival rate within a snapshot, not one completed batch late."""
import os

import pytest

from spark_governor.collectors.query_state import QueryTracker
from spark_governor.collectors.source_probe import RateFileProbe, SourceProbe
from spark_governor.policies.wire import QueryStateRecord

from test_query_state import T0, job_start, progress


class Counter(SourceProbe):
    """A producer's counter set by the test (rows offered so far)."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self.value = 0.0

    def rows(self, now_s):
        return self.value


def _tracker(probe, rate=1000):
    """Three completed 1 s batches at ``rate`` rows/s (the offsets' rate), then a batch running."""
    tr = QueryTracker([probe])
    for b in range(3):
        t = T0 + b * 1000
        tr.on_progress(progress(b, t, 400, end={"rows": (b + 1) * rate, "t_ms": t}))
    tr.on_job_start(job_start(3, T0 + 3000))
    return tr


def test_a_rate_step_shows_in_the_probed_rate_and_backlog_before_a_batch_completes():
    probe = Counter()
    tr = _tracker(probe)
    # the producer offered 3000 rows by T0 + 2000 (the latest offset), then 4000 rows/s from T0 + 3000
    samples = [(2000, 3000.0), (3000, 4000.0), (4000, 8000.0), (5000, 12000.0)]
    for ms, rows in samples:
        probe.value = rows
        (s,) = tr.snapshot(T0 + ms)
    QueryStateRecord.model_validate(s)
    (src,) = s["sources"]
    assert src["arrival_probed"] is True
    assert src["arrival_rows_per_second"] == pytest.approx(4000)  # the last second; the offsets say 1000
    assert src["available_rows"] == 3000 + (12000 - 3000)  # the latest offset + the counter's growth since
    assert src["backlog_rows"] == 12000 - 3000


def test_without_a_probe_the_offsets_extrapolate_the_old_rate():
    tr = _tracker(Counter(source="kafka"))  # matches no source ("zipf")
    for ms in (2000, 3000, 4000, 5000):
        (s,) = tr.snapshot(T0 + ms)
    (src,) = s["sources"]
    assert "arrival_probed" not in src and src["arrival_rows_per_second"] == pytest.approx(1000)
    assert src["available_rows"] == 3000 + 3000


def test_a_failing_probe_falls_back_to_the_offsets_and_never_raises():
    class Broken(SourceProbe):
        def rows(self, now_s):
            raise OSError("producer unreachable")

    tr = _tracker(Broken())
    for ms in (2000, 3000):
        (s,) = tr.snapshot(T0 + ms)
    (src,) = s["sources"]
    assert "arrival_probed" not in src and src["arrival_rows_per_second"] == pytest.approx(1000)


def test_a_counter_that_goes_back_starts_over():
    probe = Counter()
    tr = _tracker(probe)
    for ms, rows in [(2000, 5000.0), (3000, 6000.0), (4000, 10.0)]:
        probe.value = rows
        (s,) = tr.snapshot(T0 + ms)
    assert "arrival_probed" not in s["sources"][0]  # one sample since the reset: not yet a rate
    probe.value = 2010.0
    (s,) = tr.snapshot(T0 + 5000)
    assert s["sources"][0]["arrival_rows_per_second"] == pytest.approx(2000)


def test_probes_match_by_query_name_and_source_description():
    assert SourceProbe().matches("q", None) and SourceProbe(query="q").matches("q", "x")
    assert not SourceProbe(query="q").matches("other", "x")
    assert SourceProbe(source="Kafka").matches(None, "KafkaV2[Subscribe[t]]")
    assert not SourceProbe(source="Kafka").matches(None, None)


def test_the_rate_file_probe_integrates_the_rate_the_file_holds(tmp_path):
    path = tmp_path / "rate"
    path.write_text("100")
    probe = RateFileProbe(str(path))
    assert probe.rows(10.0) == 0.0
    assert probe.rows(12.0) == pytest.approx(200)
    path.write_text("400")  # a step written at 12.5: 100 rows/s up to the write, 400 after it
    os.utime(path, (12.5, 12.5))
    assert probe.rows(13.0) == pytest.approx(250 + 200)
    path.write_text("not a number")
    assert RateFileProbe(str(path), rows_per_second=50).rate() == 50
    assert probe.rows(12.5) == pytest.approx(450)  # never decreasing, even with a clock going back
