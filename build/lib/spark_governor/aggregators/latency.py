"""Record latency of a micro-batch query, per averaging span, for latency constraints.

Lohrmann's constraint (thesis §4.2, digest 004 §1.3) bounds the *mean* latency of the records
that leave a sequence within each span of t seconds. In Structured Streaming a record waits for
its micro-batch (queueing and batching) and is then processed with the whole batch, so

    record latency = wait until its batch starts + the batch's processing time.

The wait is *measured* when the job observes an ingestion or event-time column
(``collectors.observe.observe_event_time``: mean of batch start − event time per batch), else
*estimated* from trigger times: a batch holds the records that arrived between the previous
trigger start and its own, so with arrivals spread evenly over that gap g their mean wait is g/2
(the first batch of a run has no previous trigger and is left out of the estimate). Processing
time is ``durationMs.triggerExecution``. A span's latency is the mean over its records (batches
weighted by input rows), assigned to the span in which the batch completed. Times in seconds,
timestamps in epoch milliseconds.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Optional


@dataclass(frozen=True)
class BatchLatency:
    """Latency inputs of one micro-batch."""

    run_id: str
    trigger_ms: int
    processing_s: float
    rows: int
    wait_s: Optional[float] = None  # measured mean wait from event time, when the job observes it


@dataclass(frozen=True)
class SpanLatency:
    """Mean record latency of the records whose batch completed within ``[start_ms, start_ms + span)``."""

    start_ms: int
    span_s: float
    batches: int
    records: int
    latency_s: float
    source: str  # "event-time" | "estimated"
    wait_s: float = 0.0  # the part of latency_s spent waiting for the batch to start


def batch_latencies(batches: Iterable[BatchLatency], use_event_time: bool = True) -> list[tuple[BatchLatency, float, str]]:
    """``(batch, mean record latency s, source)`` for every batch whose latency is known."""
    out = []
    previous: dict[str, int] = {}
    for b in sorted(batches, key=lambda x: (x.trigger_ms, x.run_id)):
        prev = previous.get(b.run_id)
        previous[b.run_id] = b.trigger_ms
        if use_event_time and b.wait_s is not None:
            out.append((b, max(b.wait_s, 0.0) + b.processing_s, "event-time"))
        elif prev is not None and b.trigger_ms > prev:
            out.append((b, (b.trigger_ms - prev) / 2000.0 + b.processing_s, "estimated"))
    return out


def span_latencies(batches: Iterable[BatchLatency], span_s: float, use_event_time: bool = True) -> list[SpanLatency]:
    """Per span of ``span_s`` seconds (aligned on the epoch), oldest first; spans without records are absent."""
    span_ms = int(round(span_s * 1000))
    acc: dict[int, list] = {}
    for b, latency, source in batch_latencies(batches, use_event_time):
        if b.rows <= 0:
            continue
        end_ms = b.trigger_ms + int(round(b.processing_s * 1000))
        start = end_ms - end_ms % span_ms
        a = acc.setdefault(start, [0, 0, 0.0, 0.0, set()])
        a[0] += 1
        a[1] += b.rows
        a[2] += latency * b.rows
        a[3] += (latency - b.processing_s) * b.rows
        a[4].add(source)
    return [SpanLatency(start, span_s, n, rows, total / rows, "event-time" if sources == {"event-time"} else "estimated",
                        wait / rows) for start, (n, rows, total, wait, sources) in sorted(acc.items())]
