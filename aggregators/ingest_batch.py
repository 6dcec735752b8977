"""Apply several validated reports in one transaction (group commit, issue #16).

``ingest_reports`` stores a batch of reports with the same result as ``aggregators.ingest.ingest_report``
applied to each of them in order, in one transaction owned by the caller; ``current_directives_of`` reads
the pending directives of every job of the batch.

A report that cannot be applied (``ReporterConflict``: its reporter is bound to another job or token)
raises ``BatchItemError`` naming its index: the caller rolls the transaction back and applies the batch
again without it (``api.ingest_queue``), so one bad report never costs the others their answer.

The reports of one batch must have distinct ``reporter.id`` (a reporter sends one report at a time and
waits for its answer, so this holds for every well-behaved reporter; ``api.ingest_queue`` defers a
second report of the same reporter to the next batch).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

from sqlalchemy.engine import Connection

from spark_governor.aggregators.directives import current_directives
from spark_governor.aggregators.ingest import DEFAULT_WINDOW_MS, IngestResult, ReporterConflict, ingest_report
from spark_governor.policies.wire import Report


@dataclass
class Pending:
    """One report of a batch: the validated report, the name of the caller's token (None: anonymous) and
    the bookkeeping time in ms since the epoch (None: the wall clock, see ``ingest_report``)."""
    report: Report
    token: Optional[str] = None
    now_ms: Optional[int] = None


class BatchItemError(Exception):
    """The report at ``index`` of the batch cannot be applied (``cause``: the ``ReporterConflict``)."""

    def __init__(self, index: int, cause: Exception):
        super().__init__(f"report {index} of the batch: {cause}")
        self.index = index
        self.cause = cause


def ingest_reports(conn: Connection, items: Sequence[Pending],
                   window_ms: int = DEFAULT_WINDOW_MS) -> list[IngestResult]:
    """Store ``items`` using ``conn`` (the caller owns the transaction); one ``IngestResult`` per item, in
    order. Raises ``BatchItemError`` for an item that cannot be applied and ``ValueError`` when two items
    share a ``reporter.id``."""
    ids = [it.report.reporter.id for it in items]
    if len(set(ids)) != len(ids):
        raise ValueError("reporter.id: a batch holds at most one report per reporter")
    results = []
    for index, it in enumerate(items):
        try:
            results.append(ingest_report(conn, it.report, window_ms, it.token, it.now_ms))
        except ReporterConflict as exc:
            raise BatchItemError(index, exc) from exc
    return results


def current_directives_of(conn: Connection, job_ids: Sequence[int]) -> dict[int, list[dict]]:
    """The directives of each job in ``job_ids`` (``aggregators.directives.current_directives``)."""
    return {job_id: current_directives(conn, job_id) for job_id in dict.fromkeys(job_ids)}
