"""The control plane between micro-batches (``aggregators.liveness``): oldest-record age and backlog
in rows and seconds of work from the reporters' query states, the backlog trend, and latency
constraints that count spans without a completed batch as violated when work in flight already
exceeds the bound (``aggregators.constraints``). SQLite, no server."""
import pytest
from sqlalchemy import insert, select

from spark_governor.aggregators import constraints, db, ingest, liveness
from spark_governor.aggregators.ingest import ingest_report
from spark_governor.aggregators.models import jobs, latency_constraints
from spark_governor.aggregators.view import build_view
from spark_governor.policies.base import LiveStats
from spark_governor.policies.wire import Report

JOB, Q, RUN = "live-job", "q-1", "run-1"
T0 = 1_800_000_000_000  # epoch ms, a multiple of the spans used below


@pytest.fixture
def engine(sqlite_url):
    db.upgrade(sqlite_url)
    eng = db.make_engine(sqlite_url)
    yield eng
    eng.dispose()


class Feed:
    """Reports as a reporter sends them: batches and query states, one report per call, received by
    the control plane at ``at`` (default: when the latest state was observed; the clocks agree)."""

    def __init__(self, engine):
        self.engine, self.seq = engine, 0

    def send(self, batches=(), queries=(), at=None):
        self.seq += 1
        rep = Report.model_validate({"schema_version": 2, "job": JOB, "reporter": {"id": "r", "seq": self.seq},
                                     "batches": list(batches), "queries": list(queries)})
        at = at if at is not None else max([q["observed_ms"] for q in queries], default=T0)
        saved, ingest._now_ms = ingest._now_ms, lambda: at
        try:
            with self.engine.begin() as conn:
                return ingest_report(conn, rep)
        finally:
            ingest._now_ms = saved

    def job_id(self):
        with self.engine.connect() as conn:
            return conn.execute(select(jobs.c.id).where(jobs.c.name == JOB)).scalar()


def batch(b, trigger_ms, processing_ms=500, rows=1000):
    return {"query_id": Q, "run_id": RUN, "batch_id": b, "trigger_ms": trigger_ms, "batch_duration_ms": processing_ms,
            "durations_ms": {"triggerExecution": processing_ms}, "num_input_rows": rows,
            "input_rows_per_second": 1000.0, "processed_rows_per_second": rows * 1000.0 / processing_ms}


def state(observed_ms, status="waiting", last=5, running=None, backlog=None, oldest=None, rate=1000.0, **kw):
    return {"query_id": Q, "run_id": RUN, "name": "clicks", "observed_ms": observed_ms, "status": status,
            "running_batch_id": None if running is None else running[0],
            "running_batch_start_ms": None if running is None else running[1],
            "last_batch_id": last, "last_batch_end_ms": T0 + last * 1000 + 500, "trigger_interval_ms": 1000,
            "backlog_rows": backlog, "oldest_unprocessed_ms": oldest, "arrival_rows_per_second": rate,
            "sources": [{"description": "zipf", "backlog_rows": backlog} if backlog is not None else {}], **kw}


def steady(feed, n=6):
    """``n`` 1 s batches of 1000 rows processed in 0.5 s each: 2000 rows per second of processing."""
    feed.send(batches=[batch(b, T0 + b * 1000) for b in range(n)])


def constraint(engine, job_id, bound_ms, span_s):
    with engine.begin() as conn:
        conn.execute(insert(latency_constraints).values(job_id=job_id, name="e2e", vertices=None, bound_ms=bound_ms,
                                                        span_s=span_s, event_time_metric=True, updated_ms=T0))
        return constraints.find(conn, job_id, "e2e")


# -- ages and backlog -----------------------------------------------------------------------------
def test_a_long_batch_has_age_oldest_record_and_backlog_in_rows_and_seconds(engine):
    feed = Feed(engine)
    steady(feed)
    start = T0 + 6000
    for i in range(1, 11):  # batch 6 runs for 10 s; the source keeps offering 1000 rows/s
        t = start + i * 1000
        feed.send(queries=[state(t, "running", running=(6, start), backlog=1000 * (i + 1), oldest=start - 500)])
    now = start + 10_500
    with engine.connect() as conn:
        live = liveness.live(conn, feed.job_id(), now, window_s=10)
    assert live["status"] == "running" and live["running_batch_id"] == 6
    assert live["running_batch_age_s"] == pytest.approx(10.5)
    assert live["oldest_record_age_s"] == pytest.approx(11.0) and live["oldest_record_source"] == "source"
    # the latest state said 11 000 rows; 0.5 s later 500 more have arrived
    assert live["backlog_rows"] == pytest.approx(11_500)
    assert live["processing_rows_per_second"] == pytest.approx(2000)
    assert live["backlog_s"] == pytest.approx(11_500 / 2000)
    assert live["trigger_interval_s"] == 1.0 and live["completed_batches"] == 0
    (q,) = live["queries"]
    assert q["query_id"] == Q and q["sources"] == [{"description": "zipf", "backlog_rows": 11_000}]


def test_without_a_source_that_counts_rows_the_running_batch_age_is_the_lower_bound(engine):
    feed = Feed(engine)
    steady(feed)
    feed.send(queries=[state(T0 + 9000, "running", running=(6, T0 + 6000))])
    with engine.connect() as conn:
        live = liveness.live(conn, feed.job_id(), T0 + 9000)
    assert live["oldest_record_age_s"] == pytest.approx(3.0) and live["oldest_record_source"] == "running-batch"
    assert live["backlog_rows"] is None and live["backlog_s"] is None


def test_an_idle_query_has_no_age_and_no_backlog(engine):
    feed = Feed(engine)
    steady(feed)
    feed.send(queries=[state(T0 + 20_000, "idle", backlog=0, last_idle_ms=T0 + 19_000)])
    with engine.connect() as conn:
        live = liveness.live(conn, feed.job_id(), T0 + 40_000)
        view_live = liveness.live_stats(conn, feed.job_id(), T0 + 40_000, 30)
    assert live["status"] == "idle" and live["running_batch_age_s"] is None and live["oldest_record_age_s"] is None
    assert live["backlog_rows"] == 0 and live["backlog_s"] == 0
    assert view_live.idle and not view_live.exceeds(0.001) and not view_live.backlog_growing(0.0)


def test_ages_are_carried_on_the_control_planes_clock(engine):
    """A driver whose clock is 60 s behind: ages come from its own clock at observation, plus the
    time since the state arrived, so they do not depend on the skew."""
    feed = Feed(engine)
    steady(feed)
    skew = 60_000
    observed = T0 + 9000 - skew  # the driver's clock
    feed.send(queries=[state(observed, "running", running=(6, T0 + 6000 - skew), backlog=3000,
                             oldest=T0 + 5500 - skew)], at=T0 + 9000)
    with engine.connect() as conn:
        live = liveness.live(conn, feed.job_id(), T0 + 10_000)
    assert live["running_batch_age_s"] == pytest.approx(4.0) and live["oldest_record_age_s"] == pytest.approx(4.5)
    assert live["backlog_rows"] == pytest.approx(3000 + 1000 * 1.0)


def test_states_older_than_the_staleness_limit_are_not_current(engine):
    feed = Feed(engine)
    feed.send(queries=[state(T0, "running", running=(6, T0 - 1000))])
    with engine.connect() as conn:
        assert liveness.live(conn, feed.job_id(), T0 + liveness.LIVE_STALE_MS + 1) is None
        assert liveness.live(conn, feed.job_id(), T0 + 60_000, max_age_ms=600_000)["status"] == "running"


# -- backlog trend --------------------------------------------------------------------------------
def test_backlog_growth_is_the_trend_right_after_each_batch_not_the_saw_tooth(engine):
    feed = Feed(engine)
    steady(feed)
    # steady: after every batch 500 rows wait, growing to 1500 before the next one completes
    for b in range(6, 16):
        for k, rows in enumerate((500, 1000, 1500)):
            feed.send(queries=[state(T0 + b * 1000 + k * 300, "waiting", last=b, backlog=rows)])
    with engine.connect() as conn:
        flat = liveness.live_stats(conn, feed.job_id(), T0 + 16_000, 30)
    assert flat.backlog_growth_rows_per_second == pytest.approx(0.0, abs=1e-9)
    assert not flat.backlog_growing(0.05)
    # falling behind: each batch leaves 400 more rows than the previous one
    feed2 = Feed(engine)
    feed2.seq = feed.seq
    for b in range(40, 50):  # later than the trend window (30 s) reaches back
        base = 500 + 400 * (b - 40)
        for k, rows in enumerate((base, base + 500, base + 1000)):
            feed2.send(queries=[state(T0 + b * 1000 + k * 300, "waiting", last=b, backlog=rows)])
    with engine.connect() as conn:
        growing = liveness.live_stats(conn, feed.job_id(), T0 + 50_000, 10)
    assert growing.backlog_growth_rows_per_second == pytest.approx(400.0)
    assert growing.backlog_growth_ratio() == pytest.approx(400 / 2000)
    assert growing.backlog_growing(0.05) and not growing.backlog_growing(0.5)


def test_live_stats_helpers():
    live = LiveStats(status="running", observed_ms=0, running_batch_age_s=4.0, oldest_record_age_s=6.0)
    assert live.in_flight_age_s == 6.0 and live.exceeds(5.0) and not live.exceeds(6.0)
    assert LiveStats(status="waiting", observed_ms=0).in_flight_age_s is None
    assert LiveStats(status="idle", observed_ms=0, oldest_record_age_s=60.0).exceeds(5.0) is False


# -- span attainment --------------------------------------------------------------------------------
def test_spans_without_a_completed_batch_count_as_violated_when_work_in_flight_exceeds_the_bound(engine):
    """Bound 3 s, spans of 2 s. Batches complete every second until T0 + 6 s; then batch 6 runs for
    12 s. Spans in which its age (or the oldest record's) passed 3 s are violated; earlier spans of
    that batch are not judged (nothing known to be late yet)."""
    feed = Feed(engine)
    steady(feed)
    start = T0 + 6000
    for i in range(1, 13):
        feed.send(queries=[state(start + i * 1000, "running", running=(6, start), backlog=1000 * i,
                                 oldest=start - 500)])
    c = constraint(engine, feed.job_id(), bound_ms=3000, span_s=2)
    now = start + 12_500
    with engine.connect() as conn:
        m = constraints.measure(conn, JOB, feed.job_id(), c, now, spans=12)
    by_start = {s["start_ms"] - T0: s for s in m["spans"]}
    # batches completing at 0.5 .. 5.5 s: measured (estimated) spans, within the bound
    assert [k for k, s in by_start.items() if s["source"] == "estimated"] == [0, 2000, 4000]
    assert all(by_start[k]["attained"] for k in (2000, 4000))
    # span [6, 8): the oldest record is 2.5 s old at most, not yet late: not judged
    assert 6000 not in by_start
    # from 8 s on every span is violated, with the in-flight age as a lower bound on latency
    flight = {k: s for k, s in by_start.items() if s["source"] == "in-flight"}
    assert sorted(flight) == [8000, 10_000, 12_000, 14_000, 16_000]
    assert all(not s["attained"] and s["batches"] == 0 for s in flight.values())
    assert flight[8000]["latency_ms"] == pytest.approx(3500)  # state at 9 s: oldest record from 5.5 s
    assert flight[16_000]["latency_ms"] == pytest.approx(11_500)
    assert m["attainment"] == pytest.approx(sum(s["attained"] for s in m["spans"]) / len(m["spans"]))
    assert m["attainment"] < 0.5 and m["latest"]["source"] == "in-flight"
    # the policies' view: attainment counts them, the mean measured latency does not mix in lower bounds
    with engine.connect() as conn:
        view = build_view(conn, JOB, window_s=24, window_ms=5000, now_ms=now)
    (cs,) = view.constraints
    assert cs.attainment == pytest.approx(m["attainment"])
    assert cs.latency_s < 3.0
    assert view.live.status == "running" and view.live.exceeds(cs.bound_s)


def test_idle_or_short_gaps_without_batches_stay_out_of_attainment(engine):
    feed = Feed(engine)
    steady(feed)
    for i in range(1, 13):  # idle for 12 s: no data, no batch
        feed.send(queries=[state(T0 + 6000 + i * 1000, "idle", backlog=0, last_idle_ms=T0 + 6000 + i * 1000)])
    c = constraint(engine, feed.job_id(), bound_ms=3000, span_s=2)
    with engine.connect() as conn:
        m = constraints.measure(conn, JOB, feed.job_id(), c, T0 + 18_500, spans=12)
    assert {s["source"] for s in m["spans"]} == {"estimated"}
    assert m["attainment"] == 1.0


def test_stage_sequence_constraints_are_not_judged_in_flight(engine):
    feed = Feed(engine)
    steady(feed)
    feed.send(queries=[state(T0 + 16_000, "running", running=(6, T0 + 6000))])
    with engine.begin() as conn:
        conn.execute(insert(latency_constraints).values(job_id=feed.job_id(), name="stages", vertices=["t-a"],
                                                        bound_ms=1000, span_s=2, event_time_metric=True,
                                                        updated_ms=T0))
        c = constraints.find(conn, feed.job_id(), "stages")
    with engine.connect() as conn:
        assert constraints.measure(conn, JOB, feed.job_id(), c, T0 + 18_000)["spans"] == []


def test_a_runs_first_batch_does_not_count_in_the_backlog_trend(engine):
    """A fresh query run: its first batch (id 0) found nothing waiting, the next ones ~6 000 rows each,
    flat. Counted, the 0 made a growth of several hundred rows per second (the run-31 threshold scaled out
    on it 3.7 s after its policy was enabled); left out, the trend is flat."""
    feed = Feed(engine)
    feed.send(batches=[batch(b, T0 + b * 1000) for b in range(4)])
    for b, rows in zip(range(4), (0, 6000, 6000, 6000)):
        for k in range(3):
            feed.send(queries=[state(T0 + b * 1000 + k * 300, "waiting", last=b, backlog=rows + 300 * k)])
    with engine.connect() as conn:
        live = liveness.live_stats(conn, feed.job_id(), T0 + 4_000, 30)
        assert liveness.first_batches(conn, feed.job_id(), [RUN, "other"]) == {RUN: 0}
    assert live.backlog_growth_rows_per_second == pytest.approx(0.0, abs=1e-9)
    states = [{"run_id": RUN, "last_batch_id": b, "backlog_rows": rows, "status": "waiting", "observed_ms": T0 + b * 1000}
              for b, rows in zip(range(4), (0, 6000, 6000, 6000))]
    assert liveness.slope(liveness.troughs(states)) > 1000  # what the trend read with the first batch


def test_the_trough_is_the_backlog_at_the_batch_end_whenever_the_state_came():
    """Batches end every second at b·1000 + 500 ms leaving 500 rows; 1 000 rows/s arrive. The reporter's state
    that names a batch comes 0.1 s, 0.2 s, … 0.9 s after its end, so its backlog holds 600, 700, … 1 400 rows: the
    smallest backlog per batch (the trough before 2026-11-27) reads a growth of about 90 rows/s where the job keeps
    up: 0.045 s of work per second at this job's 2 000 rows/s of processing, just under the backlog rule's 0.05.
    Less what arrived since each batch's end, the trend is flat; without an end or a rate, the old reading."""
    states = [state(T0 + b * 1000 + 500 + 100 * (b - 5), "waiting", last=b, backlog=500 + 100 * (b - 5))
              for b in range(6, 15)]
    assert liveness.troughs(states) == [(pytest.approx((T0 + b * 1000 + 500) / 1000.0), pytest.approx(500.0))
                                        for b in range(6, 15)]
    assert liveness.slope(liveness.troughs(states)) == pytest.approx(0.0, abs=1e-6)
    raw = [{**s, "last_batch_end_ms": None} for s in states]
    assert liveness.slope(liveness.troughs(raw)) == pytest.approx(100 / 1.1)
    # a state observed before the end it names (clocks of one driver: not expected) is not corrected
    early = [{**s, "observed_ms": s["last_batch_end_ms"] - 1} for s in states]
    assert [r for _, r in liveness.troughs(early)] == [s["backlog_rows"] for s in states]
    # the earliest state after the end is the one read; the backlog is never below 0
    two = [state(T0 + 6600, last=6, backlog=600), state(T0 + 6900, last=6, backlog=100)]
    assert liveness.troughs(two) == [(pytest.approx((T0 + 6500) / 1000.0), pytest.approx(500.0))]
    assert liveness.troughs([state(T0 + 6900, last=6, backlog=100)])[0][1] == 0.0
