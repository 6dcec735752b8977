"""Synthetic streaming source of Zipf-distributed keys (PySpark 4 Python data source).

Usage::

    from spark_governor.collectors.sources.zipf import register_zipf_source
    register_zipf_source(spark)
    df = (spark.readStream.format("zipf")
          .option("rowsPerSecond", 2000).option("keys", 1000).option("skew", 1.2)
          .option("numPartitions", 2).option("seed", 7).load())

Columns: ``key`` (string, ``k<rank>``, rank 1 is the most frequent), ``value`` (long in
[1, 100]) and ``event_time`` (timestamp at which the row became available).

Rows are a pure function of their global index and the seed: row ``i`` is drawn from the
random block ``i // BLOCK_ROWS`` (numpy ``default_rng([seed, block])``), so a replayed or
re-partitioned micro-batch yields exactly the same rows. Offsets are
``{"rows": n, "t_ms": wall-clock ms}``; event times are spread linearly between the start and
end offsets' ``t_ms``, so they are deterministic on replay as well.

The number of rows offered grows with wall-clock time at ``rowsPerSecond`` from the first
``latestOffset`` call of a run; ``maxRowsPerBatch`` (option) caps one micro-batch. With the
option ``rateFile`` (a path holding a number), the rate is re-read at every ``latestOffset``
call, so a test or a demo can change the input rate of a running query; a new rate counts from
when the file was written (``collectors.sources.rate_file``), not from the previous call; after a
pause (rate 0) the rows' event times start when the rows flow again (the end offset's
``from_ms``), not at the previous batch's end.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Iterator, Optional

import numpy as np

from spark_governor.collectors.sources.rate_file import ArrivalCurve, read_rate

BLOCK_ROWS = 4096
SCHEMA = "key string, value long, event_time timestamp"


def zipf_cdf(keys: int, skew: float) -> np.ndarray:
    """Cumulative distribution of a finite Zipf law: P(rank k) ∝ 1 / k**skew, k = 1..keys."""
    if keys < 1:
        raise ValueError("keys must be >= 1")
    if skew < 0:
        raise ValueError("skew must be >= 0")
    weights = 1.0 / np.arange(1, keys + 1, dtype=np.float64) ** skew
    cdf = np.cumsum(weights)
    return cdf / cdf[-1]


def zipf_ranks(start: int, end: int, keys: int, skew: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Ranks (1-based) and values of rows ``[start, end)``; deterministic per row index."""
    if end <= start:
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
    cdf = zipf_cdf(keys, skew)
    ranks, values = [], []
    first_block, last_block = start // BLOCK_ROWS, (end - 1) // BLOCK_ROWS
    for block in range(first_block, last_block + 1):
        rng = np.random.default_rng([seed, block])
        u = rng.random(BLOCK_ROWS)
        v = rng.integers(1, 101, BLOCK_ROWS)
        lo = max(start, block * BLOCK_ROWS) - block * BLOCK_ROWS
        hi = min(end, (block + 1) * BLOCK_ROWS) - block * BLOCK_ROWS
        ranks.append(np.searchsorted(cdf, u[lo:hi], side="right") + 1)
        values.append(v[lo:hi])
    r = np.minimum(np.concatenate(ranks), keys).astype(np.int64)
    return r, np.concatenate(values).astype(np.int64)


@dataclass(frozen=True)
class RowRange:
    """One input partition: rows [start, end) with event times interpolated over [t0_ms, t1_ms]."""

    start: int
    end: int
    t0_ms: int
    t1_ms: int
    first: int  # first row of the whole micro-batch (for event-time interpolation)
    last: int   # end row of the whole micro-batch


def zipf_record_batch(r: RowRange, keys: int, skew: float, seed: int):
    """The rows of one partition as a pyarrow RecordBatch (columns of ``SCHEMA``)."""
    import pyarrow as pa

    ranks, values = zipf_ranks(r.start, r.end, keys, skew, seed)
    idx = np.arange(r.start, r.end, dtype=np.float64)
    span = max(1, r.last - r.first)
    ts_ms = r.t0_ms + (idx - r.first + 1) * (r.t1_ms - r.t0_ms) / span
    key_names = np.char.add("k", ranks.astype(str))
    return pa.RecordBatch.from_arrays(
        [pa.array(key_names, pa.string()), pa.array(values, pa.int64()),
         pa.array((ts_ms * 1000).astype(np.int64), pa.timestamp("us", tz="UTC"))],
        names=["key", "value", "event_time"],
    )


def row_ranges(start_rows: int, end_rows: int, t0_ms: int, t1_ms: int, parts: int) -> list[RowRange]:
    """Split rows [start, end) into ``parts`` contiguous input partitions."""
    bounds = np.linspace(start_rows, end_rows, parts + 1).astype(np.int64)
    return [RowRange(int(bounds[i]), int(bounds[i + 1]), t0_ms, t1_ms, start_rows, end_rows) for i in range(parts)]


def _source_classes():
    """Built lazily so that importing this module never needs pyspark."""
    from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

    class ZipfPartition(InputPartition):
        def __init__(self, rng: RowRange):
            super().__init__(rng)
            self.rng = rng

    class ZipfStreamReader(DataSourceStreamReader):
        def __init__(self, options: dict):
            self.rate = float(options.get("rowsPerSecond", 1000))
            self.keys = int(options.get("keys", 1000))
            self.skew = float(options.get("skew", 1.0))
            self.seed = int(options.get("seed", 0))
            self.num_partitions = int(options.get("numPartitions", 2))
            self.max_rows = int(options.get("maxRowsPerBatch", 0)) or None
            self.rate_file = options.get("rateFile")
            if self.rate <= 0 or self.num_partitions < 1:
                raise ValueError("zipf source: rowsPerSecond must be > 0 and numPartitions >= 1")
            zipf_cdf(self.keys, self.skew)  # validates keys and skew
            self.curve: Optional[ArrivalCurve] = None  # rows offered by time t (the rate file's writes)
            self._resumed_ms = None  # when rows started to flow again after a pause

        def initialOffset(self) -> dict:
            return {"rows": 0, "t_ms": int(time.time() * 1000)}

        def latestOffset(self, start: dict = None, limit=None) -> dict:
            now = time.time()
            start_rows = int(start["rows"]) if start else 0
            rate, written = read_rate(self.rate_file, self.rate)
            if self.curve is None:
                self.curve = ArrivalCurve(now, float(start_rows), rate)
            paused = self.curve.rate <= 0
            self.curve.update(now, rate, written)
            if paused and rate > 0:  # rows flow again, since the rate file was written
                self._resumed_ms = int(self.curve.points[-1][0] * 1000)
            target = int(self.curve.rows_at(now) + 1e-9)
            if self.max_rows is not None:
                target = min(target, start_rows + self.max_rows)
            if start is not None and target <= start_rows:
                return start
            end = {"rows": max(target, start_rows), "t_ms": int(now * 1000)}
            if start is not None and self._resumed_ms is not None and self._resumed_ms > int(start["t_ms"]):
                # after a pause (rate 0) the rows became available from the resumption on, not from the
                # previous batch's end: their event times start there
                end["from_ms"] = self._resumed_ms
            return end

        def partitions(self, start: dict, end: dict):
            t0_ms = max(int(start["t_ms"]), int(end.get("from_ms", 0)))
            return [ZipfPartition(r) for r in row_ranges(int(start["rows"]), int(end["rows"]), t0_ms,
                                                           int(end["t_ms"]), self.num_partitions)]

        def read(self, partition) -> Iterator:
            yield zipf_record_batch(partition.rng, self.keys, self.skew, self.seed)

        def commit(self, end: dict) -> None:
            pass

    class ZipfDataSource(DataSource):
        @classmethod
        def name(cls) -> str:
            return "zipf"

        def schema(self) -> str:
            return SCHEMA

        def streamReader(self, schema):
            return ZipfStreamReader(self.options)

    return ZipfDataSource


def register_zipf_source(spark) -> None:
    """Register the ``zipf`` format on ``spark`` (idempotent)."""
    spark.dataSource.register(_source_classes())
