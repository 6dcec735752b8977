"""The driver-side query tracker: running batch, liveness and source backlog between micro-batches
(``collectors.query_state``), and the reporter that ships its state at least once a second."""
import gzip
import json
from datetime import datetime, timezone

import pytest

from spark_governor.collectors.query_state import (QueryTracker, offset_rows, offset_time_ms, parse_time_ms,
                                                   trigger_interval_ms)
from spark_governor.collectors.reporter import Reporter
from spark_governor.policies.wire import QueryStateRecord, parse_report

Q, RUN = "q-1", "run-1"
T0 = 1_800_000_000_000  # epoch ms


def iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def progress(batch_id, trigger_ms, duration_ms, end, start=None, latest=None, rows=0, **source):
    return {"id": Q, "runId": RUN, "name": "clicks", "batchId": batch_id, "timestamp": iso(trigger_ms),
            "batchDuration": duration_ms, "numInputRows": rows,
            "sources": [{"description": "zipf", "startOffset": start, "endOffset": end, "latestOffset": latest,
                         "numInputRows": rows, "inputRowsPerSecond": 0.0, **source}]}


def job_start(batch_id, at_ms, query_id=Q):
    return {"Event": "SparkListenerJobStart", "Job ID": 1, "Submission Time": at_ms,
            "Properties": {"sql.streaming.queryId": query_id, "streaming.sql.batchId": str(batch_id)}}


def valid(records):
    for r in records:
        QueryStateRecord.model_validate(r)
    return records


def zipf_tracker(rate=1000):
    """Three completed 1 s batches of a source offering ``rate`` rows/s; offsets as the project's
    sources write them ({"rows", "t_ms"}, t_ms = when the rows were offered)."""
    tr = QueryTracker()
    for b in range(3):
        t = T0 + b * 1000
        tr.on_progress(progress(b, t, 400, end={"rows": (b + 1) * rate, "t_ms": t},
                                start={"rows": b * rate, "t_ms": t - 1000} if b else None))
    return tr


# -- offsets ------------------------------------------------------------------------------------
def test_offset_rows_counts_rows_where_offsets_count_them():
    assert offset_rows({"rows": 12, "t_ms": 5}) == 12
    assert offset_rows('{"rows": 7, "t_ms": 5, "interval_ms": 100}') == 7
    assert offset_rows({"events": {"0": 100, "1": 250}, "other": {"0": 5}}) == 355  # Kafka: summed
    assert offset_rows(42) == 42 and offset_rows("42") == 42
    assert offset_rows({"last": "file-0007.txt", "t_ms": 3}) is None  # paced-files: names, not rows
    assert offset_rows(None) is None and offset_rows({}) is None and offset_rows("opaque") is None
    assert offset_time_ms({"rows": 1, "t_ms": 99}) == 99 and offset_time_ms({"a": {"0": 1}}) is None


def test_trigger_and_timestamps():
    assert trigger_interval_ms("ProcessingTimeTrigger(1000)") == 1000
    assert trigger_interval_ms("ProcessingTimeTrigger(0)") == 0  # the default trigger
    assert trigger_interval_ms("AvailableNowTrigger") is None and trigger_interval_ms(None) is None
    assert parse_time_ms(iso(T0)) == T0 and parse_time_ms("yesterday") is None


# -- running batch ------------------------------------------------------------------------------
def test_a_running_batch_is_seen_from_its_first_job_with_age_backlog_and_oldest_record():
    tr = zipf_tracker()
    tr.on_job_start(job_start(3, T0 + 3100))
    tr.on_job_start(job_start(3, T0 + 3600))  # a later job of the same batch keeps the first start
    (s,) = valid(tr.snapshot(T0 + 9000))
    assert s["status"] == "running" and s["running_batch_id"] == 3 and s["running_batch_start_ms"] == T0 + 3100
    assert s["last_batch_id"] == 2 and s["last_batch_end_ms"] == T0 + 2400
    (src,) = s["sources"]
    # 3000 rows processed, offered at 1000 rows/s up to t = T0 + 2000, so 7 s later 10 000 are available
    assert src["processed_rows"] == 3000 and src["arrival_rows_per_second"] == pytest.approx(1000)
    assert src["available_rows"] == 10_000 and src["backlog_rows"] == 7000 == s["backlog_rows"]
    # the oldest unprocessed row is the first one offered after the processed offset
    assert src["oldest_unprocessed_ms"] == T0 + 2000 == s["oldest_unprocessed_ms"]
    assert json.loads(src["processed_offset"]) == {"rows": 3000, "t_ms": T0 + 2000}


def test_progress_ends_the_running_batch_and_late_jobs_of_completed_batches_are_ignored():
    tr = zipf_tracker()
    tr.on_job_start(job_start(3, T0 + 3100))
    tr.on_progress(progress(3, T0 + 3000, 900, end={"rows": 4000, "t_ms": T0 + 3000}))
    tr.on_job_start(job_start(3, T0 + 3200))  # delivered late by another listener queue
    (s,) = valid(tr.snapshot(T0 + 4000))
    assert s["status"] == "waiting" and s["running_batch_id"] is None and s["last_batch_id"] == 3
    # the next batch's job may arrive before the previous batch's progress (separate listener queues)
    tr.on_job_start(job_start(5, T0 + 5100))
    tr.on_progress(progress(4, T0 + 4000, 1000, end={"rows": 5000, "t_ms": T0 + 4000}))
    (s,) = valid(tr.snapshot(T0 + 6000))
    assert s["status"] == "running" and s["running_batch_id"] == 5


def test_a_batch_without_a_job_yet_is_seen_running_from_the_status_poll():
    """foreachBatch code that sleeps before its first action starts no Spark job: the query's status
    (trigger active, data available) still shows the batch, first seen by a poll."""
    tr = zipf_tracker()
    poll = {"id": Q, "run_id": RUN, "name": "clicks", "trigger": "ProcessingTimeTrigger(1000)",
            "message": "Processing new data", "isDataAvailable": True, "isTriggerActive": True}
    tr.on_status([poll], T0 + 3500)
    (s,) = valid(tr.snapshot(T0 + 8000))
    assert (s["status"], s["running_batch_id"], s["running_batch_start_ms"]) == ("running", 3, T0 + 3500)
    assert s["trigger_interval_ms"] == 1000
    tr.on_job_start(job_start(3, T0 + 3200))  # its first job, delivered later, moves the start back
    assert tr.snapshot(T0 + 8000)[0]["running_batch_start_ms"] == T0 + 3200
    # the poll seeing the trigger inactive ends it even before the progress arrives
    tr.on_status([{**poll, "message": "Waiting for next trigger", "isTriggerActive": False}], T0 + 9000)
    assert tr.snapshot(T0 + 9000)[0]["status"] == "waiting"


# -- liveness -----------------------------------------------------------------------------------
def test_an_idle_query_is_idle_with_no_backlog_not_stuck():
    tr = zipf_tracker()
    tr.on_query_event("idle", {"id": Q, "runId": RUN, "timestamp": iso(T0 + 12_000)}, T0 + 12_050)
    (s,) = valid(tr.snapshot(T0 + 30_000))
    assert s["status"] == "idle" and s["last_idle_ms"] == T0 + 12_000
    assert s["backlog_rows"] == 0 and s["oldest_unprocessed_ms"] is None
    assert s["sources"][0]["arrival_rows_per_second"] is not None  # the old rate is kept, not extrapolated
    # new data: a batch runs again and the query is no longer idle
    tr.on_job_start(job_start(3, T0 + 31_000))
    assert tr.snapshot(T0 + 31_500)[0]["status"] == "running"


def test_the_status_poll_alone_tells_an_idle_query():
    tr = zipf_tracker()
    idle = {"id": Q, "run_id": RUN, "trigger": "ProcessingTimeTrigger(1000)", "message": "Waiting for next trigger",
            "isDataAvailable": False, "isTriggerActive": False}
    tr.on_status([idle], T0 + 5000)
    (s,) = valid(tr.snapshot(T0 + 20_000))
    assert s["status"] == "idle" and s["backlog_rows"] == 0
    # after a batch with data the same message is "waiting" (data may be queued for the next trigger)
    tr.on_status([{**idle, "isDataAvailable": True}], T0 + 21_000)
    assert tr.snapshot(T0 + 21_000)[0]["status"] == "waiting"


def test_terminated_queries_are_reported_a_few_times_then_forgotten():
    tr = zipf_tracker()
    tr.on_job_start(job_start(3, T0 + 3100))
    tr.on_query_event("terminated", {"id": Q, "runId": RUN, "exception": None}, T0 + 4000)
    states = [tr.snapshot(T0 + 4000 + i) for i in range(5)]
    assert [len(s) for s in states] == [1, 1, 1, 0, 0]
    assert states[0][0]["status"] == "terminated" and states[0][0]["running_batch_start_ms"] is None
    assert not tr.active()
    # a query the poll stops listing has terminated too
    tr2 = zipf_tracker()
    tr2.on_status([{"id": Q, "run_id": RUN, "isDataAvailable": True, "isTriggerActive": False}], T0 + 3000)
    tr2.on_status([], T0 + 4000)
    assert tr2.snapshot(T0 + 4000)[0]["status"] == "terminated"


# -- sources ------------------------------------------------------------------------------------
def test_a_capped_source_reports_its_older_backlog():
    """A source capped per batch (maxRowsPerBatch) falls behind: its latest offset is ahead of what
    the batch took, and the oldest unprocessed row is older than the latest offset's time."""
    tr = QueryTracker()
    for b in range(3):
        t = T0 + b * 1000
        tr.on_progress(progress(b, t, 900, end={"rows": (b + 1) * 500, "t_ms": t},
                                latest={"rows": (b + 1) * 1000, "t_ms": t}))
    (s,) = valid(tr.snapshot(T0 + 2000))
    (src,) = s["sources"]
    assert src["arrival_rows_per_second"] == pytest.approx(1000)
    assert src["backlog_rows"] == 1500  # 3000 offered, 1500 processed
    assert src["oldest_unprocessed_ms"] == T0 + 2000 - 1500  # row 1501 was offered 1.5 s before


def test_kafka_offsets_and_metrics():
    tr = QueryTracker()
    kafka = lambda off: {"events": {"0": off, "1": off}}  # noqa: E731
    for b, (end, latest) in enumerate([(100, 150), (300, 400), (500, 650)]):
        tr.on_progress(progress(b, T0 + b * 2000, 500, end=json.dumps(kafka(end)), latest=kafka(latest),
                                metrics={"minOffsetsBehindLatest": "150", "avgOffsetsBehindLatest": "150.0",
                                         "maxOffsetsBehindLatest": "150", "other": "x"}))
    (s,) = valid(tr.snapshot(T0 + 4000))
    (src,) = s["sources"]
    assert src["processed_rows"] == 1000 and src["available_rows"] == 1300 and src["backlog_rows"] == 300
    assert src["arrival_rows_per_second"] == pytest.approx((1300 - 300) / 4)
    assert (src["min_offsets_behind_latest"], src["avg_offsets_behind_latest"], src["max_offsets_behind_latest"]) == (
        150.0, 150.0, 150.0)


def test_sources_that_do_not_count_rows_have_no_backlog():
    tr = QueryTracker()
    tr.on_progress(progress(0, T0, 500, end={"last": "f-1", "t_ms": T0}))
    tr.on_job_start(job_start(1, T0 + 1000))
    (s,) = valid(tr.snapshot(T0 + 5000))
    assert s["backlog_rows"] is None and s["oldest_unprocessed_ms"] is None and s["status"] == "running"


# -- the reporter -------------------------------------------------------------------------------
def built_report(rep: Reporter) -> dict:
    rep._drain()
    rep._build_pending()
    body = json.loads(gzip.decompress(rep._pending[1]))
    parse_report(json.dumps(body))  # the control plane accepts it
    return body


def test_reports_carry_query_states_from_listener_events(monkeypatch):
    polls = [{"id": Q, "run_id": RUN, "name": "clicks", "trigger": "ProcessingTimeTrigger(1000)",
              "message": "Processing new data", "isDataAvailable": True, "isTriggerActive": True}]
    rep = Reporter("live-job", "http://127.0.0.1:9", query_status=lambda: polls)
    assert rep._interval() == rep.flush_interval_s  # nothing known yet: no state to send every second
    rep.offer("query", ("started", {"id": Q, "runId": RUN, "name": "clicks", "timestamp": iso(T0)}))
    for b in range(2):
        rep.offer("progress", progress(b, T0 + b * 1000, 300, end={"rows": 1000 * (b + 1), "t_ms": T0 + b * 1000}))
    rep.offer("spark", job_start(2, T0 + 2100))
    body = built_report(rep)
    assert body["schema_version"] == 3 and len(body["batches"]) == 2
    (q,) = body["queries"]
    assert q["status"] == "running" and q["running_batch_id"] == 2 and q["running_batch_start_ms"] == T0 + 2100
    assert rep.queries.active() and rep._interval() <= rep.state_interval_s <= 1.0
    rep._poll()
    assert rep.queries.queries[Q].trigger_ms == 1000
    # a poll that fails leaves the state as the events made it
    rep.query_status = lambda: 1 / 0
    rep._poll()
    assert "query status" in rep.last_error and rep.queries.queries[Q].running_start_ms == T0 + 2100


def test_offering_query_events_never_blocks_and_drops_are_counted():
    rep = Reporter("live-job", "http://127.0.0.1:9", max_queue=10)
    for i in range(100):
        rep.offer("query", ("idle", {"id": Q, "runId": RUN, "timestamp": iso(T0 + i)}))
    assert rep.dropped == 90 and len(rep._raw) == 10
    rep._drain()
    assert rep.queries.queries[Q].last_idle_ms == T0 + 99
    rep.offer("query", ("idle", object()))  # undecodable: counted, never raised
    rep._drain()
    assert rep.conversion_errors == 1


def test_a_progress_the_tracker_cannot_read_still_becomes_a_batch_record():
    rep = Reporter("live-job", "http://127.0.0.1:9")
    odd = {**progress(0, T0, 300, end={"rows": 10, "t_ms": T0}), "batchId": "x"}  # not a number
    rep.offer("progress", odd)
    body = built_report(rep)
    assert len(body["batches"]) == 1 and rep.conversion_errors == 0
    assert rep.last_error.startswith("query state")
