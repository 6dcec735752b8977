"""collectors.event_log without Spark: layouts, codec names, bad input, on a real Spark 4.3 log
(``tests/data/replay_template.jsonl.gz``: the uncompressed event log of one short streaming query).
Compressed logs written by Spark are tested in tests/spark/test_replay_spark.py."""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from spark_governor.collectors.event_log import EventLogError, EventLogReader, codec_of, log_files, slim

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


# -- compressed framings, written here as lz4-java and snappy-java write them ---------------------------------------
def _lz4_java(data: bytes, block: int = 32 << 10) -> list[bytes]:
    """``LZ4BlockOutputStream`` blocks: magic, token (0x20: LZ4; low nibble log2(block) - 10), compressed
    and decompressed lengths, checksum (not checked by the reader; 0 here), block; then the end mark."""
    import struct

    import cramjam

    out = []
    for i in range(0, len(data), block):
        raw = data[i:i + block]
        comp = bytes(cramjam.lz4.compress_block(raw, store_size=False))
        out.append(struct.pack("<8sBiii", b"LZ4Block", 0x20 | 5, len(comp), len(raw), 0) + comp)
    out.append(struct.pack("<8sBiii", b"LZ4Block", 0x10 | 5, 0, 0, 0))
    return out


def _snappy_java(data: bytes, block: int = 32 << 10) -> list[bytes]:
    """``SnappyOutputStream``: magic, version 1, compatible version 1, then [big-endian length, raw block]*."""
    import struct

    import cramjam

    out = [b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)]
    for i in range(0, len(data), block):
        comp = bytes(cramjam.snappy.compress_raw(data[i:i + block]))
        out.append(struct.pack(">i", len(comp)) + comp)
    return out


FRAMINGS = {"lz4": _lz4_java, "snappy": _snappy_java}


@pytest.mark.parametrize("codec", sorted(FRAMINGS))
def test_lz4_and_snappy_framings(plain_log, tmp_path, codec):
    raw = plain_log.read_bytes()
    want = list(EventLogReader(plain_log).events())
    parts = FRAMINGS[codec](raw)
    good = tmp_path / f"local-1.{codec}"
    good.write_bytes(b"".join(parts))
    r = EventLogReader(good)
    assert list(r.events()) == want and r.stats.skipped == {} and r.stats.bytes_read == good.stat().st_size
    # a block that does not decompress: skipped, reading goes on at the next one
    first = 1 if codec == "snappy" else 0  # (snappy: parts[0] is the stream header)
    head = 21 if codec == "lz4" else 4
    bad_block = parts[first + 1][:head] + bytes(len(parts[first + 1]) - head)
    bad = tmp_path / f"local-2.{codec}"
    bad.write_bytes(b"".join(parts[:first + 1] + [bad_block] + parts[first + 2:]))
    r = EventLogReader(bad)
    got = list(r.events())
    assert r.stats.skipped["corrupt compressed block"] == 1
    assert r.stats.skipped["unparseable line"] == 2  # the lines the bad block cut, before and after it
    assert 0 < len(got) < len(want) and got[0] == want[0] and got[-1] == want[-1]
    # the file ends inside a block: what came before is read, the rest reported
    cut = tmp_path / f"local-3.{codec}"
    cut.write_bytes(b"".join(parts[:first + 2]) + parts[first + 2][:head + 10])
    r = EventLogReader(cut)
    got = list(r.events())
    assert r.stats.skipped["truncated compressed block"] == 1 and 0 < len(got) < len(want)
    assert got == want[:len(got)]


# -- lean reading: what the translation never reads is cut before parsing ------------------------------------------
def test_lean_events_translate_exactly_as_the_whole_events(plain_log):
    from spark_governor.collectors.events import EventTranslator

    wanted = {"SparkListenerJobStart", "SparkListenerStageSubmitted", "SparkListenerStageCompleted",
              "SparkListenerTaskEnd"}
    whole, lean = EventTranslator(), EventTranslator()
    a = [rec for ev in EventLogReader(plain_log).events(wanted) for rec in whole.handle(ev)]
    b = [rec for ev in EventLogReader(plain_log).events(wanted, lean=True) for rec in lean.handle(ev)]
    assert a == b and sum(kind == "task" for kind, _ in a) > 0
    assert sum(r["input_records"] for kind, r in b if kind == "task") > 0  # read from the kept accumulables
    lines = [ln for ln in plain_log.read_bytes().split(b"\n") if ln.strip()]
    for name in ("SparkListenerTaskEnd", "SparkListenerStageCompleted", "SparkListenerStageSubmitted"):
        mine = [ln for ln in lines if ln.startswith(b'{"Event":"%s"' % name.encode())]
        assert mine and all(len(slim(name, ln)) < len(ln) for ln in mine), name


def test_slim_leaves_a_line_whole_unless_the_cut_is_certain():
    task = {"Event": "SparkListenerTaskEnd", "Stage ID": 1, "Stage Attempt ID": 0, "Task Type": "ResultTask",
            "Task End Reason": {"Reason": "Success"},
            "Task Info": {"Task ID": 7, "Launch Time": 1, "Finish Time": 2, "Killed": False, "Accumulables": [
                {"ID": 1, "Name": 'tricky ],"Task Executor Metrics":{} {"ID":3}', "Update": "]}",
                 "Value": "x", "Internal": False, "Count Failed Values": True},
                {"ID": 2, "Name": "internal.metrics.input.recordsRead", "Update": 5, "Value": 9, "Internal": True,
                 "Count Failed Values": True}]},
            "Task Executor Metrics": {"JVMHeapMemory": 1},
            "Task Metrics": {"Executor Run Time": 3, "Input Metrics": {"Bytes Read": 0, "Records Read": 0}}}
    line = json.dumps(task, separators=(",", ":")).encode()
    out = json.loads(slim("SparkListenerTaskEnd", line))
    # the user's accumulable is cut (its text cannot be mistaken for structure), the input one kept
    assert out["Task Info"]["Accumulables"] == [task["Task Info"]["Accumulables"][1]]
    assert {k: v for k, v in out.items() if k != "Task Info"} == {k: v for k, v in task.items() if k != "Task Info"}
    # a mention of an input metric that is not an accumulable of that shape (here in a user's name, or an
    # input accumulable with metadata): nothing is cut
    named = json.loads(line)
    named["Task Info"]["Accumulables"][0]["Name"] = 'my "internal.metrics.input.recordsRead"'
    named_line = json.dumps(named, separators=(",", ":")).encode()
    assert slim("SparkListenerTaskEnd", named_line) is named_line
    odd = json.loads(line)
    odd["Task Info"]["Accumulables"][1]["Metadata"] = "sql"
    odd_line = json.dumps(odd, separators=(",", ":")).encode()
    assert slim("SparkListenerTaskEnd", odd_line) is odd_line
    # fields in another order than Spark's: nothing is cut
    moved = json.dumps({**{k: v for k, v in task.items() if k != "Task Executor Metrics"},
                        "Task Executor Metrics": {}}, separators=(",", ":")).encode()
    reordered = moved.replace(b',"Task Metrics"', b',"X":0,"Task Metrics"')
    assert slim("SparkListenerTaskEnd", reordered) is reordered
    assert slim("SparkListenerJobEnd", line) is line


def test_values_orjson_refuses_are_parsed_as_json_parses_them(tmp_path):
    p = tmp_path / "local-3"
    p.write_bytes(b'{"Event":"SparkListenerLogStart","Spark Version":"4.0.0","x":NaN,"big":%d}\n' % (1 << 70))
    ev = next(EventLogReader(p).events())
    assert ev["big"] == 1 << 70 and ev["x"] != ev["x"]
