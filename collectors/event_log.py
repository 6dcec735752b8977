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
so skipping the many events an import does not use costs a prefix match, not a JSON parse. JSON is
parsed by ``orjson`` (about 2.5 times Python's ``json`` on these lines); a line it refuses (``NaN``, an
integer beyond 64 bits, which Python's ``json`` accepts) is parsed again by ``json``, so both give the same
events. With ``lean=True`` the parts of task and stage events that ``collectors.events`` never reads
are cut from the line before parsing (:func:`slim`): a ``SparkListenerTaskEnd``'s accumulables are
about 80 % of its line.
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

import orjson

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
_ACCUMULABLES = b',"Accumulables":['
_INPUT_ACCUMULABLE = b'"internal.metrics.input.'
#: one input-metric accumulable as JsonProtocol.accumulableInfoToJson writes it (Spark 3.x, 4.x)
_INPUT_OBJECT = re.compile(rb'\{"ID":\d+,"Name":"internal\.metrics\.input\.[A-Za-z]+"(?:,"Update":-?\d+)?'
                           rb'(?:,"Value":-?\d+)?,"Internal":true,"Count Failed Values":true\}')
_SLIMMED = frozenset({"SparkListenerTaskEnd", "SparkListenerStageCompleted", "SparkListenerStageSubmitted"})
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


def _framed(f, stats: ReadStats, where: str, offset: int, head_size: int, unit: str, frame: Callable) -> Iterator:
    """The decompressed blocks of a framed stream (lz4-java's blocks, snappy-java's chunks) from byte
    ``offset`` on: each a header of ``head_size`` bytes then the compressed bytes. ``frame(header)`` gives
    ``(compressed length, decompress)``, None for a header without data (an end-of-stream mark), or
    raises ``ValueError`` for a damaged header (nothing tells where the next block starts: the rest of the
    file is skipped). A block that does not decompress is skipped (``CUT``) and reading goes on at the
    next one; a file that ends inside a header or a block stops there. ``unit`` names a block in notes."""
    while True:
        head = f.read(head_size)
        if not head:
            return
        clen, data, short_at = 0, b"", offset  # short_at: where the file ends too early, if it does
        if len(head) == head_size:
            try:
                spec = frame(head)
            except ValueError as exc:
                stats.skip(SKIP_CORRUPT, where=f"{where} at byte {offset} ({exc}; rest of file skipped)")
                yield CUT
                return
            if spec is None:
                offset += head_size
                continue
            clen, decompress = spec
            data, short_at = f.read(clen), offset + head_size
        if len(head) < head_size or len(data) < clen:
            stats.skip(SKIP_TRUNCATED_BLOCK, where=f"{where} at byte {short_at}")
            yield CUT
            return
        try:
            out = decompress(data)
        except Exception:
            stats.skip(SKIP_CORRUPT, where=f"{where} {unit} at byte {offset}")
            out = CUT
        offset += head_size + clen
        yield out


def _lz4(f, stats: ReadStats, where: str) -> Iterator:
    import cramjam

    def frame(head: bytes):
        magic, token, clen, dlen, _checksum = _LZ4_HEADER.unpack(head)
        if magic != _LZ4_MAGIC or clen < 0 or dlen < 0 or clen > 1 << 26 or dlen > 1 << 26:
            raise ValueError("bad block header")
        if dlen == 0:  # the end mark of one stream; Spark may append another (reopened file)
            return None
        method = token & 0xF0

        def decompress(data: bytes) -> bytes:
            if method == 0x10:
                out = data
            elif method == 0x20:
                out = bytes(cramjam.lz4.decompress_block(data, output_len=dlen))
            else:
                raise ValueError(f"unknown block method {method:#x}")
            if len(out) != dlen:
                raise ValueError("length mismatch")
            return out

        return clen, decompress

    return _framed(f, stats, where, 0, _LZ4_HEADER.size, "block", frame)


def _snappy(f, stats: ReadStats, where: str) -> Iterator:
    import cramjam

    head = f.read(16)
    if len(head) < 16 or head[:8] != _SNAPPY_MAGIC:
        if head:
            stats.skip(SKIP_CORRUPT, where=f"{where}: no snappy-java stream header (file skipped)")
        return iter(())

    def frame(n: bytes):
        (clen,) = struct.unpack(">i", n)
        if clen < 0 or clen > 1 << 28:
            raise ValueError("bad chunk length")
        return clen, lambda data: bytes(cramjam.snappy.decompress_raw(data))

    return _framed(f, stats, where, 16, 4, "chunk", frame)


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


_NAME_AT = len(_PREFIX)
_NAMES: dict[bytes, str] = {}  # event names seen, as bytes -> str (a few dozen; unknown ones capped)


def _event_name(line: bytes) -> Optional[str]:
    """The ``Event`` of a line Spark wrote (it always writes that field first), without parsing it."""
    if line.startswith(_PREFIX):
        end = line.find(b'"', len(_PREFIX))
        if end > 0:
            raw = line[len(_PREFIX):end]
            name = _NAMES.get(raw)
            if name is None:
                name = raw.decode("utf-8", "replace")
                if len(_NAMES) < 1024:
                    _NAMES[raw] = name
            return name
    return None


def loads(line: bytes):
    """One JSON value: ``orjson``, or Python's ``json`` for what orjson refuses and json accepts (``NaN``,
    ``Infinity``, integers beyond 64 bits); ``ValueError`` if neither parses it."""
    try:
        return orjson.loads(line)
    except orjson.JSONDecodeError:
        return json.loads(line)


def _cut(line: bytes, key: bytes, follower: bytes, closing: bytes, kept: Optional[re.Pattern] = None) -> bytes:
    """``line`` with the array value of its first ``key`` (``,"Name":[``) emptied up to the last ``follower``
    key, which must come right after ``closing`` (the array's ``]`` and what closes around it); with
    ``kept``, the elements matching it stay, and the line is left whole unless every mention of
    ``kept``'s name in the array is such an element. Unchanged line if anything differs from that."""
    start = line.find(key)
    end = line.rfind(follower)
    if start < 0 or end < start or line[end - len(closing):end] != closing:
        return line
    start += len(key)
    stop = end - len(closing)
    objects = []
    if kept is not None:  # each mention of the kept name must lie in a whole element of kept's shape
        at = line.find(_INPUT_ACCUMULABLE, start, stop)
        while at >= 0:
            begin = line.rfind(b'{"ID":', start, at)
            m = kept.match(line, begin, stop) if begin >= 0 else None
            if m is None or m.end() <= at:
                return line
            objects.append(m.group())
            at = line.find(_INPUT_ACCUMULABLE, m.end(), stop)
    return line[:start] + b",".join(objects) + line[stop:]


def slim(name: str, line: bytes) -> bytes:
    """The event ``line`` (named ``name``) without the parts ``collectors.events`` never reads, or the line
    unchanged when that is not certain (everything it reads is then still there):

    * ``SparkListenerTaskEnd``: ``Task Info.Accumulables`` (every SQL metric of the task, most of the
      line) except the ``internal.metrics.input.*`` accumulables (:data:`_INPUT_OBJECT`), which the
      translation reads for tasks whose input metrics are only there;
    * ``SparkListenerStageCompleted``: ``Stage Info.Accumulables``;
    * ``SparkListenerStageSubmitted``: ``Properties`` (the job's properties, read from its JobStart).

    Why cutting bytes is safe: inside a JSON string every ``"`` is escaped, so byte sequences such as
    ``,"Accumulables":[`` are keys of the structure, never text. Spark's ``JsonProtocol`` (3.x, 4.x) writes
    ``Accumulables`` as the last field of ``Task Info`` (then the top-level ``Task Executor Metrics``),
    ``Stage Info.Accumulables`` right before ``Resource Profile Id``, and a stage submission's
    ``Properties`` last; no other object of these events has those keys. The cut is made only if the
    bytes around it are exactly that (:func:`_cut`)."""
    if name == "SparkListenerTaskEnd":
        return _cut(line, _ACCUMULABLES, b',"Task Executor Metrics":', b"]}", _INPUT_OBJECT)
    if name == "SparkListenerStageCompleted":
        return _cut(line, _ACCUMULABLES, b',"Resource Profile Id":', b"]")
    if name == "SparkListenerStageSubmitted":
        at = line.rfind(b',"Properties":{')
        if at > 0 and line.endswith(b"}}"):
            return line[:at] + b',"Properties":{}}'
    return line


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

    def _not_wanted(self, name: str) -> None:
        """Count a complete line whose event is not wanted (an event, or an unknown event type)."""
        if name in SPARK_EVENTS:
            self.stats.events += 1
        else:
            self.stats.skip(SKIP_UNKNOWN)
            self.stats.unknown_events[name[:200]] += 1

    def lines(self, wanted: Optional[frozenset] = None) -> Iterator[tuple[Optional[str], bytes, bool]]:
        """``(event name or None, line, is_last_unterminated)`` for every non-empty line, in order; with
        ``wanted``, complete lines of other events are counted (:meth:`_not_wanted`) instead of yielded."""
        stats, names = self.stats, _NAMES
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
                        if not line or line.isspace():  # (not strip(): it would copy every line)
                            continue
                        # _event_name, with the name of a known event looked up in place (most lines)
                        name = names.get(line[_NAME_AT:line.find(b'"', _NAME_AT)]) if line.startswith(_PREFIX) else None
                        if name is None:
                            name = _event_name(line)
                        if wanted is not None and name is not None and name not in wanted:
                            if name in SPARK_EVENTS:
                                stats.events += 1
                            else:
                                self._not_wanted(name)
                            continue
                        yield name, line, False
                if tail and not tail.isspace() and not dropping:
                    yield _event_name(tail), tail, True

    def events(self, wanted: Optional[Iterable[str]] = None, lean: bool = False) -> Iterator[dict]:
        """Parsed events in log order; with ``wanted`` (event names), only those are parsed and yielded
        (the others are still counted and checked against Spark's event names); ``lean``: without the
        parts ``collectors.events`` never reads (:func:`slim`)."""
        wanted = None if wanted is None else frozenset(wanted)
        for name, line, unterminated in self.lines(wanted):
            if lean and name in _SLIMMED:
                line = slim(name, line)
            try:
                ev = loads(line)
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
