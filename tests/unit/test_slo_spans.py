"""The latency SLO's counters (``aggregators.slo_spans``): each complete span judged once, good or bad, as the API
judges it (in-flight spans included), only once settled, never twice when two processes judge at once. SQLite."""
from sqlalchemy import select, update

from spark_governor.aggregators import constraints, slo_spans
from spark_governor.aggregators.models import jobs, latency_constraints
from tests.unit.test_liveness import JOB, T0, Feed, batch, constraint, engine, state  # noqa: F401 (fixture)

SPAN_MS = 2000


def _row(engine, c):
    with engine.connect() as conn:
        return conn.execute(select(latency_constraints).where(latency_constraints.c.id == c.id)).first()


def _start_counting(engine, c, at_ms):
    """The constraint's first pass at ``at_ms`` (it counts from the next span on)."""
    assert slo_spans.judge(engine, at_ms) == {(JOB, "e2e"): (0, 0)}
    return _row(engine, c)


def _feed_mixed(feed, start_ms, n=20):
    """Batches every second from ``start_ms``: 0.5 s of processing (latency 1 s), but every fourth one runs 3.5 s
    (latency 4 s: its span over a 2 s bound)."""
    feed.send(batches=[batch(b, start_ms + b * 1000, processing_ms=3500 if b % 4 == 3 else 500) for b in range(n)],
              at=start_ms + n * 1000)


def test_each_settled_span_counts_once_as_the_api_judges_it(engine):
    feed = Feed(engine)
    feed.send(batches=[batch(1000, T0 - 1000)], at=T0 - 500)
    c = constraint(engine, feed.job_id(), bound_ms=2000, span_s=SPAN_MS / 1000)
    first = _start_counting(engine, c, T0 + 10_000)
    since = first.judged_until_ms
    assert since == T0  # T0 + 10 s minus the 10 s settle, on a span boundary
    _feed_mixed(feed, T0)
    now = T0 + 25_000
    counted = slo_spans.judge(engine, now)
    row = _row(engine, c)
    until = row.judged_until_ms
    assert until == T0 + 14_000  # the span boundary before now minus the settle wait
    with engine.connect() as conn:
        spans = constraints.judged_spans(conn, JOB, feed.job_id(), row, since, until)
    good = sum(s["attained"] for s in spans)
    assert 0 < good < len(spans) and counted[(JOB, "e2e")] == (good, len(spans) - good)
    assert (row.spans_good, row.spans_bad) == (good, len(spans) - good)
    # the API's attainment over the same spans is the counters' share
    with engine.connect() as conn:
        m = constraints.measure(conn, JOB, feed.job_id(), row, now, (until - since) // SPAN_MS, until_ms=until)
    assert m["attainment"] == row.spans_good / (row.spans_good + row.spans_bad)
    assert m["slo"] == {"spans_good": good, "spans_bad": len(spans) - good, "judged_until_ms": until}
    # a second pass at the same instant counts nothing again; later passes only the newer spans
    assert slo_spans.judge(engine, now) == {}
    slo_spans.judge(engine, now + 30_000)
    later = _row(engine, c)
    assert later.spans_good + later.spans_bad > row.spans_good + row.spans_bad
    with engine.connect() as conn:
        every = constraints.judged_spans(conn, JOB, feed.job_id(), later, since, later.judged_until_ms)
    assert later.spans_good == sum(s["attained"] for s in every)
    assert later.spans_bad == len(every) - later.spans_good


def test_a_span_is_judged_only_once_its_batches_can_have_arrived(engine):
    feed = Feed(engine)
    feed.send(batches=[batch(1000, T0 - 1000)], at=T0 - 500)
    c = constraint(engine, feed.job_id(), bound_ms=2000, span_s=SPAN_MS / 1000)
    _start_counting(engine, c, T0 + 10_000)
    # batches 0..3 arrive; a pass 9 s after the span [T0 + 2 s, T0 + 4 s) ended must not judge it yet
    feed.send(batches=[batch(b, T0 + b * 1000) for b in range(3)], at=T0 + 3_600)
    slo_spans.judge(engine, T0 + 13_000)
    assert _row(engine, c).judged_until_ms == T0 + 2000
    # batch 3 (2.5 s, ending at T0 + 5.5 s) arrives late; its span is counted with it
    feed.send(batches=[batch(3, T0 + 3000, processing_ms=2500)], at=T0 + 15_000)
    slo_spans.judge(engine, T0 + 16_000)
    row = _row(engine, c)
    assert row.judged_until_ms == T0 + 6000
    assert (row.spans_good, row.spans_bad) == (2, 1)  # [0, 2): batches 0 and 1; [2, 4): 2; [4, 6): 3, 3 s


def test_spans_without_a_batch_count_bad_when_work_in_flight_is_late(engine):
    """A batch running for 12 s: its spans have no completed batch, and once its age passes the bound they are bad
    (``source`` in-flight), as the attainment counts them."""
    feed = Feed(engine)
    feed.send(batches=[batch(b, T0 - 6000 + b * 1000) for b in range(6)], at=T0)
    c = constraint(engine, feed.job_id(), bound_ms=3000, span_s=2)
    _start_counting(engine, c, T0 + 10_000)
    for i in range(1, 13):
        feed.send(queries=[state(T0 + i * 1000, "running", running=(6, T0), backlog=1000 * i, oldest=T0 - 500)])
    slo_spans.judge(engine, T0 + 22_000)
    row = _row(engine, c)
    assert (row.spans_good, row.spans_bad) == (0, 5)  # [2, 4) .. [10, 12): the oldest record 2.5 s .. 11.5 s old


def test_two_passes_at_once_count_a_span_once(engine):
    """Two processes read the constraint before either writes: the second's compare-and-set finds the range moved
    and adds nothing."""
    feed = Feed(engine)
    feed.send(batches=[batch(1000, T0 - 1000)], at=T0 - 500)
    c = constraint(engine, feed.job_id(), bound_ms=2000, span_s=SPAN_MS / 1000)
    _start_counting(engine, c, T0 + 10_000)
    _feed_mixed(feed, T0)
    stale = _row(engine, c)
    with engine.connect() as conn:
        job = conn.execute(select(jobs.c.id, jobs.c.name, jobs.c.last_report_ms)).first()
    with engine.begin() as conn:
        first = slo_spans._judge_one(conn, stale, job, T0 + 40_000, 5000)
    with engine.begin() as conn:
        second = slo_spans._judge_one(conn, stale, job, T0 + 40_000, 5000)
    assert first is not None and sum(first) > 0 and second is None
    row = _row(engine, c)
    assert (row.spans_good, row.spans_bad) == first


def test_a_silent_job_moves_the_range_without_counting(engine):
    """Spans nobody can judge (no report since) are skipped, not counted good; counting resumes with the job."""
    feed = Feed(engine)
    feed.send(batches=[batch(1000, T0 - 1000)], at=T0 - 500)
    c = constraint(engine, feed.job_id(), bound_ms=2000, span_s=SPAN_MS / 1000)
    _start_counting(engine, c, T0 + 10_000)
    slo_spans.judge(engine, T0 + 3_600_000)
    row = _row(engine, c)
    assert (row.spans_good, row.spans_bad, row.judged_until_ms) == (0, 0, T0 + 3_600_000 - 10_000)
    with engine.begin() as conn:  # a constraint changed to another span keeps its counts
        conn.execute(update(latency_constraints).where(latency_constraints.c.id == c.id).values(span_s=5))
    slo_spans.judge(engine, T0 + 3_700_000)
    assert _row(engine, c).judged_until_ms == T0 + 3_690_000
