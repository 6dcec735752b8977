"""collectors.event_log without Spark: layouts, codec names, bad input, on a real Spark 4.3 log
(``tests/data/replay_template.jsonl.gz``: the uncompressed event log of one short streaming query).
Compressed logs written by Spark are tested in tests/spark/test_replay_spark.py."""
from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from spark_governor.collectors.event_log import (EventLogError, EventLogReader, codec_of, log_files)

TEMPLATE = Path(__file__).resolve().parents[1] / "data" / "replay_template.jsonl.gz"


@pytest.fixture
def plain_log(tmp_path) -> Path:
    p = tmp_path / "local-1795598588754"
    p.write_bytes(gzip.decompress(TEMPLATE.read_bytes()))
    return p


def test_codec_from_file_name():
    assert codec_of("local-1.lz4") == "lz4"
    assert codec_of("local-1.zstd.inprogress") == "zstd"
    assert codec_of("events_3_local-1.snappy.compact") == "snappy"
    assert codec_of("local-1") is None and codec_of("app-20261125.1") is None


def test_rolling_files_in_numeric_order_from_latest_compact(tmp_path):
    d = tmp_path / "eventlog_v2_app-1"
    d.mkdir()
    for name in ("events_1_app-1.zstd", "events_2_app-1.zstd.compact", "events_2_app-1.zstd", "events_10_app-1.zstd",
                 "events_3_app-1.zstd", "appstatus_app-1.inprogress"):
        (d / name).write_bytes(b"")
    assert [f.name for f in log_files(d)] == ["events_2_app-1.zstd.compact", "events_3_app-1.zstd",
                                              "events_10_app-1.zstd"]


def test_bad_paths_are_named(tmp_path):
    with pytest.raises(EventLogError, match="does not exist"):
        log_files(tmp_path / "nope")
    with pytest.raises(EventLogError, match="without events_<N>_<appId>"):
        log_files(tmp_path)
    (tmp_path / "local-1.lzf").write_bytes(b"x")
    with pytest.raises(EventLogError, match="lzf"):
        EventLogReader(tmp_path / "local-1.lzf")


def test_reads_every_event_of_a_real_log(plain_log):
    lines = [ln for ln in plain_log.read_bytes().split(b"\n") if ln.strip()]
    r = EventLogReader(plain_log)
    events = list(r.events())
    assert len(events) == len(lines) == r.stats.events
    assert r.stats.bytes_read == plain_log.stat().st_size == r.total_bytes
    assert r.stats.skipped == {}
    # with ``wanted``, only those are parsed and yielded; the rest is still counted
    r2 = EventLogReader(plain_log)
    ends = list(r2.events(wanted={"SparkListenerTaskEnd"}))
    assert len(ends) == sum(b'"Event":"SparkListenerTaskEnd"' in ln for ln in lines) > 0
    assert r2.stats.events == len(lines)


def test_truncated_last_line_unparseable_line_and_unknown_event(plain_log, tmp_path):
    lines = [ln for ln in plain_log.read_bytes().split(b"\n") if ln.strip()]
    bad = tmp_path / "local-2.inprogress"
    body = lines[:10] + [b'{"Event":"SparkListenerTaskEnd","Stage ID":', b'{"Event":"com.example.Mine"}'] + lines[10:]
    bad.write_bytes(b"\n".join(body) + b"\n" + lines[-1][:50])  # the last line is cut (no newline)
    r = EventLogReader(bad)
    n = sum(1 for _ in r.events(wanted={"SparkListenerTaskEnd", "SparkListenerApplicationEnd"}))
    assert r.stats.skipped == {"unparseable line": 1, "unknown event type": 1, "truncated last line": 1}
    assert r.stats.unknown_events == {"com.example.Mine": 1}
    assert n == sum(b'"Event":"SparkListenerTaskEnd"' in ln or b'"Event":"SparkListenerApplicationEnd"' in ln
                    for ln in lines)
    assert r.stats.events == len(lines)  # every complete event; the cut copy of the last one is skipped
