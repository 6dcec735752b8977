"""Read a Spark event log — the files the History Server reads — as a stream of events, in bounded memory.

Layouts (Spark's ``EventLogFileWriters``):

* a single file ``<appId>[.<codec>][.inprogress]``;
* a rolling log, a directory ``eventlog_v2_<appId>`` holding ``events_<N>_<appId>[.<codec>]`` files
  (read in order of ``N``; when compaction left ``events_<N>_<appId>[.<codec>].compact`` files, reading
  starts at the latest of them, as the History Server does) and an ``appstatus_<appId>`` marker.

Codecs (Spark's ``org.apache.spark.io.CompressionCodec``; the file name ends with the codec's short name):

* ``lz4``: lz4-java's ``LZ4BlockOutputStream``: blocks of ``"LZ4Block"`` (8 bytes), a token byte
  (high nibble 0x10 raw / 0x20 LZ4, low nibble: block size 2^(10+n)), compressed length, decompressed
  length and xxhash32 checksum (little-endian int32 each), then the block; a block of length 0 ends a stream;
* ``snappy``: snappy-java's ``SnappyOutputStream``: the 8-byte magic ``\\x82SNAPPY\\x00``, version and
  compatible version (big-endian int32), then chunks of a big-endian int32 length and a raw snappy block;
* ``zstd``: standard zstd frames (zstd-jni's ``ZstdOutputStream``).
* ``lzf`` is not supported (Spark has not written it by default since 1.x): a clear error.

Bad input never stops reading what can be read; everything skipped is counted, by reason
(``ReadStats.skipped``):

* a last line without a newline that does not parse: ``truncated last line`` (a running application);
* a line that does not parse elsewhere: ``unparseable line``;
* an event whose ``Event`` name is neither Spark 3.x's nor 4.x's: ``unknown event type``
  (names in ``ReadStats.unknown_events``);
* a compressed block that does not decompress (lz4, snappy: the block is skipped and reading resumes at
  the next one, dropping the line cut by the bad block), a zstd stream that breaks (the rest of that
  file is skipped), or a stream that ends inside a block: ``corrupt compressed block`` /
  ``truncated compressed block``.

Memory: one compressed block (lz4 ≤ 32 MiB, Spark writes 32 KiB; snappy chunk; zstd 1 MiB reads) plus
the current line (bounded by ``max_line_bytes``) at a time. ``bytes_read`` counts compressed bytes of
the files consumed so far (for a progress bar over ``total_bytes``).

Only :meth:`EventLogReader.events` parses JSON, and only of the events a caller asks for (``wanted``),
so skipping the many events an import does not use costs a prefix match, not a JSON parse.
"""
from __future__ import annotations

import json
import os
import re
import struct
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Callable, Iterable, Iterator, Optional

CODECS = ("lz4", "snappy", "zstd", "lzf")
CHUNK = 1 << 20  # bytes per read of a plain or zstd file
DEFAULT_MAX_LINE = 256 << 20  # a SQL plan can be large; a longer line is skipped

#: event names Spark 3.x and 4.x write (core scheduler, SQL, streaming, environment); anything else is
#: reported as an unknown event type. Short SQL names are Spark's ``org.apache.spark.sql.*`` classes.
SPARK_EVENTS = frozenset({
    "SparkListenerLogStart", "SparkListenerApplicationStart", "SparkListenerApplicationEnd",
    "SparkListenerEnvironmentUpdate", "SparkListenerResourceProfileAdded",
    "SparkListenerBlockManagerAdded", "SparkListenerBlockManagerRemoved", "SparkListenerBlockUpdated",
    "SparkListenerExecutorAdded", "SparkListenerExecutorRemoved", "SparkListenerExecutorBlacklisted",
    "SparkListenerExecutorExcluded", "SparkListenerExecutorUnblacklisted", "SparkListenerExecutorUnexcluded",
    "SparkListenerNodeBlacklisted", "SparkListenerNodeExcluded", "SparkListenerNodeUnblacklisted",
    "SparkListenerNodeUnexcluded", "SparkListenerExecutorBlacklistedForStage",
    "SparkListenerExecutorExcludedForStage", "SparkListenerNodeBlacklistedForStage",
    "SparkListenerNodeExcludedForStage", "SparkListenerExecutorMetricsUpdate", "SparkListenerStageExecutorMetrics",
    "SparkListenerJobStart", "SparkListenerJobEnd", "SparkListenerStageSubmitted", "SparkListenerStageCompleted",
    "SparkListenerTaskStart", "SparkListenerTaskGettingResult", "SparkListenerTaskEnd",
    "SparkListenerSpeculativeTaskSubmitted", "SparkListenerUnschedulableTaskSetAdded",
    "SparkListenerUnschedulableTaskSetRemoved", "SparkListenerUnpersistRDD", "SparkListenerMiscellaneousProcessAdded",
    "org.apache.spark.sql.execution.ui.SparkListenerSQLExecutionStart",
    "org.apache.spark.sql.execution.ui.SparkListenerSQLExecutionEnd",
    "org.apache.spark.sql.execution.ui.SparkListenerSQLAdaptiveExecutionUpdate",
    "org.apache.spark.sql.execution.ui.SparkListenerSQLAdaptiveSQLMetricUpdates",
    "org.apache.spark.sql.execution.ui.SparkListenerDriverAccumUpdates",
    "org.apache.spark.sql.streaming.StreamingQueryListener$QueryStartedEvent",
    "org.apache.spark.sql.streaming.StreamingQueryListener$QueryProgressEvent",
    "org.apache.spark.sql.streaming.StreamingQueryListener$QueryIdleEvent",
    "org.apache.spark.sql.streaming.StreamingQueryListener$QueryTerminatedEvent",
    "org.apache.spark.sql.hive.thriftserver.ui.SparkListenerThriftServerSessionCreated",
    "org.apache.spark.sql.hive.thriftserver.ui.SparkListenerThriftServerSessionClosed",
    "org.apache.spark.sql.hive.thriftserver.ui.SparkListenerThriftServerOperationStart",
    "org.apache.spark.sql.hive.thriftserver.ui.SparkListenerThriftServerOperationParsed",
    "org.apache.spark.sql.hive.thriftserver.ui.SparkListenerThriftServerOperationCanceled",
    "org.apache.spark.sql.hive.thriftserver.ui.SparkListenerThriftServerOperationTimeout",
    "org.apache.spark.sql.hive.thriftserver.ui.SparkListenerThriftServerOperationError",
    "org.apache.spark.sql.hive.thriftserver.ui.SparkListenerThriftServerOperationFinish",
    "org.apache.spark.sql.hive.thriftserver.ui.SparkListenerThriftServerOperationClosed",
    "org.apache.spark.sql.connect.service.SparkListenerConnectOperationStarted",
    "org.apache.spark.sql.connect.service.SparkListenerConnectOperationAnalyzed",
    "org.apache.spark.sql.connect.service.SparkListenerConnectOperationReadyForExecution",
    "org.apache.spark.sql.connect.service.SparkListenerConnectOperationCanceled",
    "org.apache.spark.sql.connect.service.SparkListenerConnectOperationFailed",
    "org.apache.spark.sql.connect.service.SparkListenerConnectOperationFinished",
    "org.apache.spark.sql.connect.service.SparkListenerConnectOperationClosed",
    "org.apache.spark.sql.connect.service.SparkListenerConnectSessionStarted",
    "org.apache.spark.sql.connect.service.SparkListenerConnectSessionClosed",
})

SKIP_TRUNCATED_LINE = "truncated last line"
SKIP_UNPARSEABLE = "unparseable line"
SKIP_UNKNOWN = "unknown event type"
SKIP_CORRUPT = "corrupt compressed block"
SKIP_TRUNCATED_BLOCK = "truncated compressed block"
SKIP_LONG_LINE = "line too long"

_LZ4_MAGIC = b"LZ4Block"
_LZ4_HEADER = struct.Struct("<8sBiii")
_SNAPPY_MAGIC = b"\x82SNAPPY\x00"
_PREFIX = b'{"Event":"'
_ROLLING_FILE = re.compile(r"^events_(\d+)_.+?(\.compact)?$")


class EventLogError(ValueError):
    """The path is not a readable Spark event log (message names the path and why)."""


@dataclass
class ReadStats:
    """What reading saw so far: events (lines with an event), bytes, and what was skipped, by reason."""

    files: int = 0
    events: int = 0
    bytes_read: int = 0
    skipped: Counter = field(default_factory=Counter)
    unknown_events: Counter = field(default_factory=Counter)
    notes: list = field(default_factory=list)  # where each skip happened (file and offset), first 20

    def skip(self, reason: str, n: int = 1, where: str = "") -> None:
        self.skipped[reason] += n
        if where and len(self.notes) < 20:
            self.notes.append(f"{reason}: {where}")

    def to_json(self) -> dict:
        return {"files": self.files, "events": self.events, "bytes_read": self.bytes_read,
                "skipped": dict(self.skipped), "unknown_events": dict(self.unknown_events), "notes": list(self.notes)}


class _Cut:
    """Marker between decompressed chunks: data was lost here, so the line it cuts is dropped."""


CUT = _Cut()


def log_files(path: str | os.PathLike) -> list[Path]:
    """The files of the event log at ``path`` in reading order (one for a single-file log)."""
    p = Path(path)
    if not p.exists():
        raise EventLogError(f"path: {p} does not exist")
    if p.is_file():
        return [p]
    if not p.is_dir():
        raise EventLogError(f"path: {p} is neither a file nor a directory")
    numbered = []
    for f in p.iterdir():
        m = _ROLLING_FILE.match(f.name)
        if m and f.is_file():
            numbered.append((int(m.group(1)), bool(m.group(2)), f))
    if not numbered:
        raise EventLogError(f"path: {p} is a directory without events_<N>_<appId> files "
                            "(expected a rolling event log, eventlog_v2_<appId>)")
    numbered.sort(key=lambda t: (t[0], not t[1]))
    compacts = [i for i, (_n, compact, _f) in enumerate(numbered) if compact]
    start = compacts[-1] if compacts else 0
    out, seen = [], set()
    for n, _compact, f in numbered[start:]:
        if n not in seen:  # the compact file of an index replaces the plain one
            seen.add(n)
            out.append(f)
    return out


def codec_of(name: str) -> Optional[str]:
    """The compression codec a log file's name says (None: uncompressed)."""
    base = name[:-len(".inprogress")] if name.endswith(".inprogress") else name
    base = base[:-len(".compact")] if base.endswith(".compact") else base
    ext = base.rsplit(".", 1)[-1] if "." in base else ""
    return ext if ext in CODECS else None


class _Counting:
    """A binary file that counts the bytes read into ``stats.bytes_read``."""

    def __init__(self, f: BinaryIO, stats: ReadStats) -> None:
        self.f, self.stats = f, stats

    def read(self, n: int = -1) -> bytes:
        b = self.f.read(n)
        self.stats.bytes_read += len(b)
        return b


def _plain(f, stats: ReadStats, where: str) -> Iterator:
    while True:
        b = f.read(CHUNK)
        if not b:
            return
        yield b


def _lz4(f, stats: ReadStats, where: str) -> Iterator:
    import cramjam

    offset = 0
    while True:
        head = f.read(_LZ4_HEADER.size)
        if not head:
            return
        if len(head) < _LZ4_HEADER.size:
            stats.skip(SKIP_TRUNCATED_BLOCK, where=f"{where} at byte {offset}")
            yield CUT
            return
        magic, token, clen, dlen, _checksum = _LZ4_HEADER.unpack(head)
        offset += len(head)
        if magic != _LZ4_MAGIC or clen < 0 or dlen < 0 or clen > 1 << 26 or dlen > 1 << 26:
            # the header itself is damaged: nothing tells where the next block starts
            stats.skip(SKIP_CORRUPT, where=f"{where} at byte {offset - len(head)} (bad block header; rest of file skipped)")
            yield CUT
            return
        if dlen == 0:  # the end mark of one stream; Spark may append another (reopened file)
            continue
        data = f.read(clen)
        offset += len(data)
        if len(data) < clen:
            stats.skip(SKIP_TRUNCATED_BLOCK, where=f"{where} at byte {offset - len(data)}")
            yield CUT
            return
        method = token & 0xF0
        try:
            if method == 0x10:
                out = data
            elif method == 0x20:
                out = bytes(cramjam.lz4.decompress_block(data, output_len=dlen))
            else:
                raise ValueError(f"unknown block method {method:#x}")
            if len(out) != dlen:
                raise ValueError("length mismatch")
        except Exception:
            stats.skip(SKIP_CORRUPT, where=f"{where} block at byte {offset - clen - len(head)}")
            yield CUT
            continue
        yield out


def _snappy(f, stats: ReadStats, where: str) -> Iterator:
    import cramjam

    head = f.read(16)
    if len(head) < 16 or head[:8] != _SNAPPY_MAGIC:
        if head:
            stats.skip(SKIP_CORRUPT, where=f"{where}: no snappy-java stream header (file skipped)")
        return
    offset = 16
    while True:
        n = f.read(4)
        if not n:
            return
        if len(n) < 4:
            stats.skip(SKIP_TRUNCATED_BLOCK, where=f"{where} at byte {offset}")
            yield CUT
            return
        (clen,) = struct.unpack(">i", n)
        offset += 4
        if clen < 0 or clen > 1 << 28:
            stats.skip(SKIP_CORRUPT, where=f"{where} at byte {offset - 4} (bad chunk length; rest of file skipped)")
            yield CUT
            return
        data = f.read(clen)
        offset += len(data)
        if len(data) < clen:
            stats.skip(SKIP_TRUNCATED_BLOCK, where=f"{where} at byte {offset - len(data)}")
            yield CUT
            return
        try:
            out = bytes(cramjam.snappy.decompress_raw(data))
        except Exception:
            stats.skip(SKIP_CORRUPT, where=f"{where} chunk at byte {offset - clen - 4}")
            yield CUT
            continue
        yield out


def _zstd(f, stats: ReadStats, where: str) -> Iterator:
    """Frame after frame; a stream that ends inside a frame (a running application's log, a cut file)
    is reported as a truncated block after what it decoded so far."""
    import zstandard

    dctx = zstandard.ZstdDecompressor()
    dobj, pending = dctx.decompressobj(), False  # pending: bytes fed since the last complete frame
    while True:
        data = f.read(CHUNK)
        if not data:
            break
        while data:
            try:
                out = dobj.decompress(data)
            except zstandard.ZstdError as exc:
                stats.skip(SKIP_CORRUPT, where=f"{where} near byte {stats.bytes_read} ({exc}; rest of file skipped)")
                yield CUT
                return
            pending = True
            if out:
                yield out
            if dobj.eof:
                data, pending = dobj.unused_data, False
                dobj = dctx.decompressobj()
            else:
                data = b""
    if pending:
        stats.skip(SKIP_TRUNCATED_BLOCK, where=f"{where}: the stream ends inside a zstd frame")
        yield CUT


_DECODERS: dict[Optional[str], Callable] = {None: _plain, "lz4": _lz4, "snappy": _snappy, "zstd": _zstd}


def _event_name(line: bytes) -> Optional[str]:
    """The ``Event`` of a line Spark wrote (it always writes that field first), without parsing it."""
    if line.startswith(_PREFIX):
        end = line.find(b'"', len(_PREFIX))
        if end > 0:
            return line[len(_PREFIX):end].decode("utf-8", "replace")
    return None


class EventLogReader:
    """Stream the events of one event log (file or rolling directory); see the module docstring."""

    def __init__(self, path: str | os.PathLike, max_line_bytes: int = DEFAULT_MAX_LINE) -> None:
        self.path = Path(path)
        self.files = log_files(self.path)
        for f in self.files:
            codec = codec_of(f.name)
            if codec == "lzf":
                raise EventLogError(f"path: {f} is lzf-compressed, which is not supported (lz4, snappy, zstd are)")
        self.total_bytes = sum(f.stat().st_size for f in self.files)
        self.max_line_bytes = max_line_bytes
        self.stats = ReadStats()

    def lines(self) -> Iterator[tuple[Optional[str], bytes, bool]]:
        """``(event name or None, line, is_last_unterminated)`` for every non-empty line, in order."""
        for f in self.files:
            self.stats.files += 1
            decode = _DECODERS[codec_of(f.name)]
            with open(f, "rb") as raw:
                tail = b""
                dropping = False  # after a cut: drop up to the next newline (the line lost its start)
                for chunk in decode(_Counting(raw, self.stats), self.stats, str(f)):
                    if chunk is CUT:
                        if tail:
                            self.stats.skip(SKIP_UNPARSEABLE, where=f"{f}: line cut by a bad block")
                        tail, dropping = b"", True
                        continue
                    if dropping:
                        nl = chunk.find(b"\n")
                        if nl < 0:
                            continue
                        chunk, dropping = chunk[nl + 1:], False
                        self.stats.skip(SKIP_UNPARSEABLE, where=f"{f}: line cut by a bad block")
                    data = tail + chunk if tail else chunk
                    parts = data.split(b"\n")
                    tail = parts.pop()
                    if len(tail) > self.max_line_bytes:
                        self.stats.skip(SKIP_LONG_LINE, where=str(f))
                        tail, dropping = b"", True
                    for line in parts:
                        if line.strip():
                            yield _event_name(line), line, False
                if tail.strip() and not dropping:
                    yield _event_name(tail), tail, True

    def events(self, wanted: Optional[Iterable[str]] = None) -> Iterator[dict]:
        """Parsed events in log order; with ``wanted`` (event names), only those are parsed and yielded
        (the others are still counted and checked against Spark's event names)."""
        wanted = None if wanted is None else frozenset(wanted)
        for name, line, unterminated in self.lines():
            if name is not None and wanted is not None and name not in wanted and not unterminated:
                if name in SPARK_EVENTS:
                    self.stats.events += 1
                else:
                    self.stats.skip(SKIP_UNKNOWN)
                    self.stats.unknown_events[name[:200]] += 1
                continue
            try:
                ev = json.loads(line)
                if not isinstance(ev, dict) or not isinstance(ev.get("Event"), str):
                    raise ValueError("no Event field")
            except ValueError:
                self.stats.skip(SKIP_TRUNCATED_LINE if unterminated else SKIP_UNPARSEABLE,
                                where=f"{self.path} ({len(line)} bytes)")
                continue
            name = ev["Event"]
            if name not in SPARK_EVENTS:
                self.stats.skip(SKIP_UNKNOWN)
                self.stats.unknown_events[name[:200]] += 1
                continue
            self.stats.events += 1
            if wanted is None or name in wanted:
                yield ev
