"""Per-batch partition statistics (Prompt, digest 000 §4): storing what jobs report, reading it back."""
from __future__ import annotations

from typing import Optional

from sqlalchemy import insert, select
from sqlalchemy.engine import Connection

from spark_governor.aggregators.models import partition_stats
from spark_governor.policies.base import PartitionBatchStats
from spark_governor.policies.wire import Report

_FIELDS = ("batch_id", "query_id", "algorithm", "source", "partitions", "reduce", "tuples", "keys", "exact",
           "other_keys", "other_tuples", "bsi", "bci", "ksr", "mpi", "max_mean_load", "bsi_buckets", "split_keys",
           "stats_ms", "planning_ms", "processing_ms")


def partition_rows(job_id: int, report: Report, now_ms: int) -> list[dict]:
    """The ``partition_stats`` rows of the report (one per partitioned batch it describes)."""
    rows = []
    for p in report.partitions:
        row = {f: getattr(p, f) for f in _FIELDS}
        row.update(job_id=job_id, received_ms=now_ms, key_counts=[[k, c] for k, c in p.key_counts],
                   block_loads=list(p.block_loads), block_cardinalities=list(p.block_cardinalities),
                   bucket_loads=list(p.bucket_loads))
        rows.append(row)
    return rows


def store_partition_stats(conn: Connection, job_id: int, report: Report, now_ms: int) -> int:
    if not report.partitions:
        return 0
    rows = partition_rows(job_id, report, now_ms)
    conn.execute(insert(partition_stats), rows)
    return len(rows)


def recent_partition_stats(conn: Connection, job_id: int, limit: int = 50, keys_for_last: Optional[int] = 1) -> list[dict]:
    """The job's latest ``limit`` partitioned batches, oldest first; key counts only for the last
    ``keys_for_last`` of them (None: all), the others get an empty list."""
    cols = [c for c in partition_stats.c if c.name != "key_counts"]
    rows = [dict(r) for r in reversed(conn.execute(
        select(*cols).where(partition_stats.c.job_id == job_id)
        .order_by(partition_stats.c.received_ms.desc(), partition_stats.c.id.desc()).limit(limit)).mappings().all())]
    wanted = [r["id"] for r in (rows if keys_for_last is None else rows[len(rows) - keys_for_last:])]
    keys = dict(conn.execute(select(partition_stats.c.id, partition_stats.c.key_counts)
                             .where(partition_stats.c.id.in_(wanted))).all()) if wanted else {}
    for r in rows:
        r["key_counts"] = keys.get(r["id"], [])
    return rows


def view_stats(rows: list[dict]) -> tuple[PartitionBatchStats, ...]:
    """JobView form of ``recent_partition_stats`` rows."""
    return tuple(PartitionBatchStats(
        batch_id=r["batch_id"], received_ms=r["received_ms"], algorithm=r["algorithm"],
        partitions=r["partitions"], reduce=r["reduce"], tuples=r["tuples"], keys=r["keys"],
        key_counts=tuple((str(k), int(c)) for k, c in (r.get("key_counts") or [])),
        other_keys=r["other_keys"], other_tuples=r["other_tuples"], exact=bool(r["exact"]),
        block_loads=tuple(r["block_loads"] or ()), max_mean_load=r["max_mean_load"], mpi=r["mpi"],
        processing_s=r["processing_ms"] / 1000.0 if r["processing_ms"] is not None else None) for r in rows)
