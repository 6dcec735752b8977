"""The demo's text report and figure, from hand-built API answers (no Spark, no server)."""
import pytest

from spark_governor.api.demo_report import decision_line, recommendation_report
from spark_governor.api.run_figure import plot_run, run_series

T0 = 1_800_000_000_000
JOB = {"name": "zipf-demo", "slots": 2, "executors": 0, "not_actuatable": {"executors": "local mode"}}
CONSTRAINT = {"name": "record-latency", "bound_ms": 3000.0, "span_s": 5.0, "attainment": 1.0, "source": "event-time",
              "latest": {"latency_ms": 2000.0, "attained": True},
              "spans": [{"start_ms": T0 + 5000 * i, "latency_ms": 2000.0 + 10 * i, "source": "event-time"}
                        for i in range(4)]}


def decision(old=2, new=1, predicted=2.2, measured=2.0, bound=3.0, created=T0 + 10_000, bottleneck=False):
    stages = {"k0": {"p": 2, "p_max": 2, "rho": 0.14, "e": 10.0, "S": 0.33, "A": 2.3, "cA": 0.0, "cS": 0.5, "w": 0.09},
              "k1": {"p": 2, "p_max": 4, "rho": 0.10, "e": 10.0, "S": 0.12, "A": 1.2, "cA": 1.0, "cS": 0.4, "w": 0.18}}
    plan = {"constraints": {"record-latency": {"measured_latency_s": measured, "bound_s": bound,
                                               "bottleneck": bottleneck, "feasible": True, "slots": new,
                                               "executors": new, "stages": stages}}}
    prediction = {"constraints": {"record-latency": predicted}, "utilization": 0.29}
    if predicted is not None:
        prediction["latency_s"] = predicted
    return {"id": created, "policy": "kingman", "knob": "executors", "old_value": old, "new_value": new,
            "reason": f"{old} → {new} task slots …; local mode: 2 task slots; not actuatable",
            "inputs": {"latency_s": measured, "executors": old, "utilization": 0.14, "unit": "task slots", "plan": plan},
            "prediction": prediction, "mode": "dry-run", "status": "recorded", "status_message": "dry-run",
            "created_ms": created}


def test_decision_line_names_the_prediction_and_the_bound():
    assert decision_line(decision()) == ("kingman (dry run): 2 → 1 task slots — predicted 2,200 ms vs bound "
                                         "3,000 ms (measured 2,000 ms)")
    assert decision_line(decision(new=4, predicted=None, bottleneck=True)).endswith("— bound 3,000 ms (measured 2,000 ms)")


def test_report_shows_the_latest_recommendation_with_its_model_inputs():
    text = recommendation_report([decision(created=T0 + 20_000, predicted=2.1), decision()], CONSTRAINT, JOB,
                                 {"k0": "s0 MicroBatchScan", "k1": "s1 StateStoreSave"})
    assert "2 recommendation(s) recorded (dry run: recorded, no directive)" in text
    assert "RECOMMENDATION: 2 → 1 task slots" in text
    assert "measured latency   2,000 ms at 2 task slots (bound met)" in text
    assert "predicted latency  2,100 ms at 1 task slots vs bound 3,000 ms (meets the bound)" in text
    assert "local mode (2 task slots, no executors)" in text
    assert "s0 MicroBatchScan" in text and "s1 StateStoreSave" in text  # stage names, not keys
    assert "constraint attained in 100% of the last 4 spans (source: event-time)" in text


def test_report_without_a_decision_says_why():
    text = recommendation_report([], CONSTRAINT, JOB)
    assert "no recommendation recorded: the latest measured latency 2,000 ms is within the bound 3,000 ms" in text
    assert "no latency measured yet" in recommendation_report([], {**CONSTRAINT, "latest": None, "spans": []}, JOB)
    bottleneck = recommendation_report([decision(new=4, predicted=None, bottleneck=True)], CONSTRAINT, JOB)
    assert "RECOMMENDATION: 2 → 4 task slots" in bottleneck and "a bottleneck" in bottleneck


def test_figure_series_and_png(tmp_path):
    batches = [{"trigger_ms": T0 + 2000 * i, "batch_duration_ms": 800, "durations_ms": {"triggerExecution": 700},
                "num_input_rows": 4000, "input_rows_per_second": 2000.0, "record_wait_s": 1.0} for i in range(10)]
    s = run_series(batches, [decision()], CONSTRAINT, JOB)
    assert (s.unit, s.capacity, s.bound_ms) == ("task slots", 2, 3000.0)
    assert s.batch_t[0] == pytest.approx(0.7) and s.batch_latency_ms[0] == pytest.approx(1700.0)
    assert s.decision_t == [10.0] and s.decision_new == [1] and s.decision_predicted_ms == [pytest.approx(2200.0)]
    assert s.spans[0] == (0.0, 5.0, 2000.0, True)
    path = plot_run(s, str(tmp_path / "run.png"), "test run")
    data = (tmp_path / "run.png").read_bytes()
    assert path.endswith("run.png") and data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000
