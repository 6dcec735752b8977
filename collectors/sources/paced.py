"""Paced Python streaming sources: micro-batches cut by time, as the ``batch_interval`` directive says.

Two PySpark 4 data sources (``DataSourceStreamReader``), each gated by
:class:`collectors.sources.pacing.Gate`; run the query with the **default trigger** (no
``trigger(...)``): the gate, not the trigger, decides when a batch forms.

``zipf-paced`` — the synthetic Zipf source (``collectors.sources.zipf``: same rows, same columns,
same options ``rowsPerSecond``, ``rateFile``, ``keys``, ``skew``, ``seed``, ``numPartitions``)
whose rows *arrive* at ``rowsPerSecond`` (re-read from ``rateFile`` at every call; a new rate counts
from the file's write, ``collectors.sources.rate_file``) and are cut at
the gate's boundaries: batch i holds exactly the rows that arrived in ``[B_{i-1}, B_i)``. Extra
options: ``intervalFile`` (the gate's control file), ``totalRows`` (stop offering rows after this
many, so two runs can be compared on the same rows), ``maxQueueingSeconds`` (see
``collectors.sources.pacing``: absorb a backlog older than this in one batch). Offsets:
``{"rows", "t_ms", "interval_ms", "queueing_ms"}``.

``paced-files`` — a pacing wrapper over a directory of text files (option ``path``): a file
*arrives* when the reader first lists it; batch i holds the files that arrived before ``B_i``.
Files must be immutable once visible (write elsewhere, then rename into the directory) and their
names must sort after every earlier file (e.g. zero-padded sequence numbers or timestamps): the
offset is the last file name (``{"last", "t_ms", "interval_ms", "queueing_ms"}``), so a replayed
batch reads exactly the same files. Columns: ``value`` (one line) and ``file`` (its file name).
An admission cap (pid-rate) is not applied to files.

Usage::

    from spark_governor.collectors.sources.paced import register_paced_sources
    register_paced_sources(spark)
    df = (spark.readStream.format("zipf-paced").option("rowsPerSecond", 2000)
          .option("intervalFile", "/tmp/job.interval").load())
    handle = attach(spark, job, endpoint, appliers={"batch_interval": BatchIntervalApplier("/tmp/job.interval")})
"""
from __future__ import annotations

import math
import os
import time
from typing import Iterator, Optional

from spark_governor.collectors.sources.pacing import Gate
from spark_governor.collectors.sources.rate_file import ArrivalCurve, read_rate
from spark_governor.collectors.sources.zipf import SCHEMA as ZIPF_SCHEMA, row_ranges, zipf_cdf, zipf_record_batch

FILES_SCHEMA = "value string, file string"


def gate_from_options(options: dict) -> Gate:
    """The gate of a paced reader: options ``intervalFile`` and ``maxQueueingSeconds``."""
    max_q = options.get("maxQueueingSeconds")
    return Gate(options.get("intervalFile"), max_queueing_s=float(max_q) if max_q else None)


def _source_classes():
    """Built lazily so that importing this module never needs pyspark."""
    from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

    class RangePartition(InputPartition):
        def __init__(self, rng):
            super().__init__(rng)
            self.rng = rng

    class PacedZipfStreamReader(DataSourceStreamReader):
        def __init__(self, options: dict):
            self.rate = float(options.get("rowsPerSecond", 1000))
            self.rate_file = options.get("rateFile")
            self.keys = int(options.get("keys", 1000))
            self.skew = float(options.get("skew", 1.0))
            self.seed = int(options.get("seed", 0))
            self.num_partitions = int(options.get("numPartitions", 2))
            self.total_rows = int(options["totalRows"]) if options.get("totalRows") else None
            if self.rate < 0 or self.num_partitions < 1:
                raise ValueError("zipf-paced: rowsPerSecond must be >= 0 and numPartitions >= 1")
            zipf_cdf(self.keys, self.skew)
            self.gate = gate_from_options(options)
            self.curve: Optional[ArrivalCurve] = None

        def _begin(self, now: float, rows: int) -> None:
            self.curve = ArrivalCurve(now, rows, read_rate(self.rate_file, self.rate)[0])
            self.gate.start(now)

        def initialOffset(self) -> dict:
            now = time.time()
            self._begin(now, 0)
            return {"rows": 0, "t_ms": int(now * 1000)}

        def latestOffset(self, start: dict = None, limit=None) -> dict:
            now = time.time()
            start = start or {"rows": 0, "t_ms": int(now * 1000)}
            start_rows = int(start["rows"])
            if self.curve is None:  # resumed from a checkpoint: arrivals restart now
                self._begin(now, start_rows)
            self.curve.update(now, *read_rate(self.rate_file, self.rate))
            cut = self.gate.poll()
            if cut is None:
                return start
            end_rows = math.floor(self.curve.rows_at(cut.boundary_s) + 1e-9)
            if cut.max_rows is not None:
                end_rows = min(end_rows, start_rows + math.floor(cut.max_rows))
            if self.total_rows is not None:
                end_rows = min(end_rows, self.total_rows)
            if end_rows <= start_rows:
                self.gate.pending = False  # nothing arrived in this interval: no batch
                return start
            return {"rows": end_rows, **cut.offset_fields()}

        def partitions(self, start: dict, end: dict):
            return [RangePartition(r) for r in row_ranges(int(start["rows"]), int(end["rows"]), int(start["t_ms"]),
                                                          int(end["t_ms"]), self.num_partitions)]

        def read(self, partition) -> Iterator:
            yield zipf_record_batch(partition.rng, self.keys, self.skew, self.seed)

        def commit(self, end: dict) -> None:
            pass

    class PacedFilesStreamReader(DataSourceStreamReader):
        def __init__(self, options: dict):
            self.path = options.get("path")
            if not self.path or not os.path.isdir(self.path):
                raise ValueError(f"paced-files: option path must name a directory, got {self.path!r}")
            self.gate = gate_from_options(options)
            self.seen: dict[str, float] = {}  # file name -> when the reader first listed it (s)
            self.lines: dict[str, int] = {}  # file name -> rows, counted only under a pid-rate cap

        def _rows(self, name: str) -> int:
            if name not in self.lines:
                with open(os.path.join(self.path, name), "rb") as f:
                    self.lines[name] = sum(1 for _ in f)
            return self.lines[name]

        def _admit(self, ready: list[str], max_rows: float) -> list[str]:
            """The oldest files whose rows fit in ``max_rows`` (at least one file, so that a file
            larger than the cap still gets through); the rest wait for the next batch."""
            out, total = [], 0
            for name in ready:
                total += self._rows(name)
                if out and total > max_rows:
                    break
                out.append(name)
            return out

        def _files(self) -> list[str]:
            return sorted(n for n in os.listdir(self.path)
                          if not n.startswith((".", "_")) and os.path.isfile(os.path.join(self.path, n)))

        def _scan(self, now: float) -> None:
            for name in self._files():
                self.seen.setdefault(name, now)

        def initialOffset(self) -> dict:
            now = time.time()
            self.gate.start(now)
            self._scan(now)
            return {"last": "", "t_ms": int(now * 1000)}

        def latestOffset(self, start: dict = None, limit=None) -> dict:
            now = time.time()
            start = start or {"last": "", "t_ms": int(now * 1000)}
            if self.gate.last_boundary_s is None:
                self.gate.start(now)
            self._scan(now)
            cut = self.gate.poll()
            if cut is None:
                return start
            ready = sorted(n for n, t in self.seen.items() if t <= cut.boundary_s and n > start["last"])
            if not ready:
                self.gate.pending = False
                return start
            if cut.max_rows is not None:
                ready = self._admit(ready, cut.max_rows)
            for name in [n for n in self.seen if n <= start["last"]]:
                del self.seen[name]  # committed: no longer needed
                self.lines.pop(name, None)
            return {"last": ready[-1], **cut.offset_fields()}

        def partitions(self, start: dict, end: dict):
            names = [n for n in self._files() if start["last"] < n <= end["last"]]
            return [RangePartition(os.path.join(self.path, n)) for n in names]

        def read(self, partition) -> Iterator:
            name = os.path.basename(partition.rng)
            with open(partition.rng) as f:
                for line in f:
                    yield (line.rstrip("\n"), name)

        def commit(self, end: dict) -> None:
            pass

    def data_source(format_name: str, schema_ddl: str, reader):
        class PacedDataSource(DataSource):
            @classmethod
            def name(cls) -> str:
                return format_name

            def schema(self) -> str:
                return schema_ddl

            def streamReader(self, schema):
                return reader(self.options)

        return PacedDataSource

    return (data_source("zipf-paced", ZIPF_SCHEMA, PacedZipfStreamReader),
            data_source("paced-files", FILES_SCHEMA, PacedFilesStreamReader))


def register_paced_sources(spark) -> None:
    """Register the ``zipf-paced`` and ``paced-files`` formats on ``spark`` (idempotent)."""
    for cls in _source_classes():
        spark.dataSource.register(cls)
