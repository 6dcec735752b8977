"""The paced sources' gate with an injected clock: slow start, fixed arrival-time boundaries,
queueing, the directive's interval, fastest mode, the pid-rate cap and the backlog option."""
import pytest

from spark_governor.collectors.batch_interval import BatchIntervalApplier, parse_interval_value
from spark_governor.collectors.sources.paced import ArrivalCurve
from spark_governor.collectors.sources.pacing import Gate, read_control, write_control


class Clock:
    def __init__(self, t=1000.0):
        self.t = t

    def __call__(self):
        return self.t


def test_slow_start_doubles_until_first_completion_then_holds():
    clock = Clock()
    gate = Gate(None, clock=clock)
    gate.start()
    assert gate.poll() is None  # boundary 1000.1 not reached
    clock.t = 1000.1
    cut = gate.poll()
    assert cut.interval_s == 0.1 and cut.boundary_s == pytest.approx(1000.1) and gate.slow_start_s == 0.2
    # the engine is busy until 1000.45: the next call means batch 1 completed; boundary 2 = 1000.3 passed
    clock.t = 1000.45
    cut = gate.poll()
    assert cut.interval_s == 0.2 and cut.queueing_s == pytest.approx(0.15) and gate.completed == 1
    assert gate.slow_start_s == 0.2  # no more doubling after the first completion
    assert cut.offset_fields()["queueing_ms"] == 150


def test_directive_interval_boundaries_fixed_in_arrival_time(tmp_path):
    ctl = str(tmp_path / "c")
    clock = Clock()
    gate = Gate(ctl, clock=clock)
    gate.start()
    BatchIntervalApplier(ctl)(1.0)
    clock.t = 1000.99
    assert gate.poll() is None
    clock.t = 1001.0
    assert gate.poll().boundary_s == 1001.0
    clock.t = 1002.7  # late: the batch is cut at its boundary 1002.0 and waited 0.7 s
    cut = gate.poll()
    assert cut.boundary_s == 1002.0 and cut.queueing_s == pytest.approx(0.7)
    write_control(ctl, 0.0)  # fastest: everything up to now
    clock.t = 1002.75
    cut = gate.poll()
    assert cut.boundary_s == 1002.75 and cut.interval_s == pytest.approx(0.75)
    write_control(ctl, 0.5, max_rows_per_second=100)
    clock.t = 1003.3
    assert gate.poll().max_rows == pytest.approx(50)


def test_backlog_absorbed_only_when_asked(tmp_path):
    ctl = str(tmp_path / "c")
    write_control(ctl, 1.0)
    for max_q, boundary in ((None, 1001.0), (5.0, 1030.0)):
        clock = Clock()
        gate = Gate(ctl, max_queueing_s=max_q, clock=clock)
        gate.start()
        clock.t = 1030.0
        cut = gate.poll()
        assert cut.boundary_s == boundary


def test_control_values_and_errors(tmp_path):
    assert parse_interval_value(1) == (1.0, None)
    assert parse_interval_value({"interval_s": 2, "max_rows_per_second": 50}) == (2.0, 50.0)
    for bad, field in ((-1, "interval_s"), ("x", "batch_interval"), ({"interval_s": "a"}, "interval_s"),
                       ({"interval_s": 1, "max_rows_per_second": 0}, "max_rows_per_second"), (True, "batch_interval")):
        with pytest.raises(ValueError, match=field):
            parse_interval_value(bad)
    status, message = BatchIntervalApplier(str(tmp_path / "c"))({"interval_s": -2})
    assert status == "failed" and "interval_s" in message
    (tmp_path / "junk").write_text("not json")
    assert read_control(str(tmp_path / "junk")) is None
    (tmp_path / "num").write_text("2.5")
    assert read_control(str(tmp_path / "num")) == {"interval_s": 2.5}


def test_arrival_curve_integrates_rate_changes():
    curve = ArrivalCurve(0.0, 100, 1000.0)
    curve.update(2.0, 2000.0)
    assert curve.rows_at(1.0) == 1100 and curve.rows_at(2.0) == 2100 and curve.rows_at(3.0) == 4100


def test_paced_files_admit_only_the_rate_cap_and_keep_the_rest(tmp_path):
    """pid-rate's cap on the paced file wrapper: the oldest files whose rows fit in cap·x (at
    least one), the rest in the next batches; every file exactly once (reader without Spark)."""
    import time

    from spark_governor.collectors.sources.paced import _source_classes

    data = tmp_path / "in"
    data.mkdir()
    for i in range(6):
        (data / f"f{i}.txt").write_text("x\n" * 10)
    ctl = str(tmp_path / "ctl")
    write_control(ctl, 0.1, max_rows_per_second=250)  # 25 rows per 0.1 s batch: two 10-row files
    _, files_source = _source_classes()
    reader = files_source({"path": str(data), "intervalFile": ctl}).streamReader(None)
    offset = reader.initialOffset()
    time.sleep(0.01)
    (data / "f6.txt").write_text("x\n" * 40)  # bigger than the cap on its own
    batches = []
    deadline = time.time() + 10
    while time.time() < deadline and (not batches or batches[-1][-1] != "f6.txt"):
        end = reader.latestOffset(offset)
        if end != offset:
            batches.append([p.rng.rsplit("/", 1)[-1] for p in reader.partitions(offset, end)])
            offset = end
        time.sleep(0.02)
    assert batches == [["f0.txt", "f1.txt"], ["f2.txt", "f3.txt"], ["f4.txt", "f5.txt"], ["f6.txt"]]
    write_control(ctl, 0.1)  # no cap: everything ready in one batch
    for i in range(7, 10):
        (data / f"f{i}.txt").write_text("x\n" * 10)
    deadline = time.time() + 10
    while time.time() < deadline:
        end = reader.latestOffset(offset)
        if end != offset:
            assert [p.rng.rsplit("/", 1)[-1] for p in reader.partitions(offset, end)] == ["f7.txt", "f8.txt", "f9.txt"]
            break
        time.sleep(0.02)
    else:
        pytest.fail("no batch without the cap")


def test_a_restarted_gate_resumes_at_the_last_directed_interval(tmp_path):
    """State across query restarts: the control file outlives the query, so a new gate (a new
    query on the same checkpoint) cuts at the directed interval at once instead of slow start."""
    ctl = str(tmp_path / "c")
    BatchIntervalApplier(ctl)(1.5)
    clock = Clock()
    gate = Gate(ctl, clock=clock)
    gate.start()
    clock.t = 1001.0
    assert gate.poll() is None  # slow start would have cut at 1000.1
    clock.t = 1001.5
    cut = gate.poll()
    assert cut.interval_s == 1.5 and cut.boundary_s == pytest.approx(1001.5)
