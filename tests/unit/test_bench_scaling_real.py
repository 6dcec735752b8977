"""``bench scaling-real``: its metrics on hand-made samples (exact), and the CLI's input checks.

The real-cluster loop itself (policy, appliers, standalone cluster) is exercised by
tests/integration/test_demo_cluster.py (the demo runs the same job and cluster); the benchmark takes minutes and is run by hand
(``spark-governor bench scaling-real``)."""
import pytest
from click.testing import CliRunner

from spark_governor.api.cli import main
from spark_governor.bench.scaling_real import executor_seconds, format_real_table, run_metrics, schedule_rows


def test_schedule_rows_integrates_a_piecewise_constant_rate():
    grid, cum = schedule_rows([(0.0, 100.0), (2.0, 300.0)], 5.0)
    assert grid[0] == 0 and grid[-1] == pytest.approx(5.0)
    assert cum[200] == pytest.approx(200.0) and cum[-1] == pytest.approx(200 + 900)


def test_executor_seconds_is_the_step_integral_of_samples():
    samples = [{"t": 99.0, "executors": 1}, {"t": 101.0, "executors": 2}, {"t": 104.0, "executors": 3}]
    # [100, 101): 1, [101, 104): 2, [104, 110]: 3
    assert executor_seconds(samples, 100.0, 110.0) == pytest.approx(1 + 6 + 18)


def test_run_metrics_on_a_tiny_run():
    # 1000 rows/s; batches triggered every 4 s from t0 = 1000 s, each taking 1 s: rows of (4k, 4k+4] leave
    # at 4k+5, a 4 s span's mean latency is 5 − 2 = 3 s; one decision up, one down 8 s later
    t0 = 1000.0
    progress = [{"batch": k, "rows": 4000, "trigger_ms": int((t0 + 4 * k) * 1000), "processing_ms": 1000}
                for k in range(1, 6)]
    samples = [{"t": t0 + i, "executors": 1 if i < 10 else 2} for i in range(0, 21)]
    decisions = [{"created_ms": int((t0 + 6) * 1000), "old_value": 1, "new_value": 2},
                 {"created_ms": int((t0 + 14) * 1000), "old_value": 2, "new_value": 1}]
    m = run_metrics([(0.0, 1000.0)], t0, t0 + 20.0, progress, samples, decisions, bound_s=3.5, span_s=4.0,
                    oscillation_window_s=48.0)
    assert m["windows"] == 5 and m["batches"] == 5
    assert m["slo_attainment_windows"] == 1.0 and m["window_latency_p95_s"] == pytest.approx(3.0, abs=0.01)
    assert m["executor_seconds"] == pytest.approx(10 + 20) and m["actions"] == 2 and m["oscillations"] == 1
    tight = run_metrics([(0.0, 1000.0)], t0, t0 + 20.0, progress, samples, decisions, bound_s=2.5, span_s=4.0,
                        oscillation_window_s=48.0)
    assert tight["slo_attainment_windows"] == 0.0
    report = {"results": [dict(m, policy="kingman", plane_attainment=None, ratio_vs_static=None, slo_met=True)],
              "bound_s": 3.5, "span_s": 4.0, "levels": [1000.0], "level_s": 20.0}
    assert "kingman" in format_real_table(report) and "met" in format_real_table(report)


def test_cli_rejects_bad_input():
    r = CliRunner().invoke(main, ["bench", "scaling-real", "--levels", "1000,x"])
    assert r.exit_code != 0 and "--levels" in r.output
    r = CliRunner().invoke(main, ["bench", "scaling-real", "--policies", "kingman,magic"])
    assert r.exit_code != 0 and "magic" in r.output
    r = CliRunner().invoke(main, ["bench", "scaling-real", "--static-executors", "5", "--max-executors", "4"])
    assert r.exit_code != 0 and "--static-executors" in r.output
    # a jar-only job has no attach(): its probe and warm-up cannot be asked for (refused before any cluster starts)
    for flag in ("--probe", "--warm"):
        r = CliRunner().invoke(main, ["bench", "scaling-real", "--jar-only", flag, "--workdir", "/nonexistent/sg"])
        assert r.exit_code == 2 and f"Invalid value for {flag}" in r.output and "--jar-only" in r.output


@pytest.mark.parametrize("config, says", [
    ("utilization-target={\"target_utilization\": 2}", "target_utilization"),   # out of its range
    ("utilization-target={\"bogus\": 1}", "bogus"),                             # not a field
    ("utilization-target=[1]", "JSON object"),
    ("utilization-target={oops", "not JSON"),
    ("magic={}", "POLICY=JSON"),
    ("static={}", "POLICY=JSON"),                                                 # not governed
    ("threshold={}", "not in --policies"),
])
def test_cli_rejects_a_bad_policy_config_before_starting_anything(config, says, tmp_path):
    r = CliRunner().invoke(main, ["bench", "scaling-real", "--policies", "kingman,utilization-target",
                                  "--config", config, "--workdir", str(tmp_path / "w")])
    assert r.exit_code == 2 and "--config" in r.output and says in r.output
    assert not (tmp_path / "w").exists()  # no cluster, no control plane started


def test_cli_rejects_a_policy_configured_twice(tmp_path):
    r = CliRunner().invoke(main, ["bench", "scaling-real", "--policies", "kingman", "--config", "kingman={}",
                                  "--config", "kingman={\"spare_executors\": 0}", "--workdir", str(tmp_path / "w")])
    assert r.exit_code == 2 and "twice" in r.output


def test_the_bench_checks_configs_before_starting_a_cluster(tmp_path):
    from spark_governor.bench.scaling_real import run_real_scaling_bench

    with pytest.raises(ValueError, match="static"):
        run_real_scaling_bench(configs={"static": {}}, workdir=tmp_path / "w")
    with pytest.raises(ValueError, match="max_utilization"):
        run_real_scaling_bench(configs={"kingman": {"max_utilization": 1.5}}, workdir=tmp_path / "w")
    assert not (tmp_path / "w").exists()


def test_the_staircase_starts_on_a_trigger_boundary():
    import time

    from spark_governor.bench.scaling_real import align_to_trigger

    for _ in range(2):
        before = time.time()
        t0 = align_to_trigger(2.0)
        assert before < t0 <= before + 2.3 and t0 % 2.0 < 0.25  # Spark's trigger fires at multiples since the epoch


def test_the_evaluation_phase_is_read_off_the_control_planes_scheduler(tmp_path):
    import time

    from spark_governor.api.app import Settings
    from spark_governor.api.server import ControlPlane
    from spark_governor.bench.scaling_real import evaluation_phase_s

    plane = ControlPlane(db_url=f"sqlite:///{tmp_path / 'plane.db'}", port=0,
                         settings=Settings(evaluation_interval_s=8.0)).start()
    try:
        started = time.time()
        phase = evaluation_phase_s(plane, started - 3.0)  # a run that began 3 s before the plane
        assert phase == pytest.approx(3.0, abs=0.5)  # the first evaluation 8 s after the start: 11 s = 3 mod 8
    finally:
        plane.stop()


def test_the_evaluations_are_moved_onto_the_trigger_boundaries(tmp_path):
    import time

    from spark_governor.api.app import Settings
    from spark_governor.api.server import ControlPlane
    from spark_governor.bench.scaling_real import align_evaluations, evaluation_phase_s

    plane = ControlPlane(db_url=f"sqlite:///{tmp_path / 'plane.db'}", port=0,
                         settings=Settings(evaluation_interval_s=8.0)).start()
    try:
        align_evaluations(plane, 8.0, 2.0)
        nxt = plane.scheduler.get_job("policies").next_run_time.timestamp()
        assert nxt % 8.0 == pytest.approx(0.0, abs=1e-3) and time.time() < nxt <= time.time() + 8.0
        assert evaluation_phase_s(plane, 80.0) == pytest.approx(0.0, abs=1e-3)  # a run started on the grid
        align_evaluations(plane, 10.0, 8.0)  # lcm: runs start on multiples of 8 s, evaluations of 10 s
        assert plane.scheduler.get_job("policies").next_run_time.timestamp() % 40.0 == pytest.approx(0.0, abs=1e-3)
    finally:
        plane.stop()


def test_bench_warmup_refuses_a_bad_repetition_count_before_starting_a_cluster():
    res = CliRunner().invoke(main, ["bench", "warmup", "--reps", "0"])
    assert res.exit_code == 2 and "--reps" in res.output
