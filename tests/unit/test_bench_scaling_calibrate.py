"""``bench scaling --calibrate``: the simulator run with what a real ``bench scaling-real`` run measured.

The fixture ``tests/data/scaling-real-2026-11-25.json`` is the JSON of a real run, unedited, not
invented numbers: ``spark-governor bench scaling-real --policies kingman,static --level-seconds 30`` on
the project's 2-core development machine on 2026-11-25, 09:29–09:42 UTC, while other engineers' test
runs loaded it (load average 15–30). The control plane's ``/cluster`` endpoint answered: provisioning,
warm-up and driver overhead of the kingman run come from it (``sources`` = control-plane), the static
run's provisioning and warm-up from the bench (no scale-up there)."""
import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from spark_governor.api.cli import main
from spark_governor.bench.scaling_calibrate import load_report, run_calibration

FIXTURE = Path(__file__).resolve().parent.parent / "data" / "scaling-real-2026-11-25.json"
# ``spark-governor bench scaling-real --policies kingman,threshold,utilization-target,static`` (defaults: staircase
# 2000,8000,16000,8000,2000 rows/s, 50 s levels, bound 14 s, trigger 8 s, max 4 executors) on the same 2-core
# machine on 2026-11-25, 13:16–13:36 UTC, quiet; the JSON as written, re-serialised without indentation
QUIET = Path(__file__).resolve().parent.parent / "data" / "scaling-real-2026-11-25-1336.json"


def test_calibrate_simulates_every_policy_of_a_real_run_with_its_measured_parameters(tmp_path):
    real = json.loads(FIXTURE.read_text())
    out = tmp_path / "cal.json"
    r = CliRunner().invoke(main, ["bench", "scaling", "--calibrate", str(FIXTURE), "--out", str(out)])
    assert r.exit_code == 0, r.output
    cal = json.loads(out.read_text())
    assert [x["policy"] for x in cal["results"]] == [x["policy"] for x in real["results"]]
    for row, run in zip(cal["results"], real["results"]):
        assert row["real"]["slo_attainment_windows"] == run["slo_attainment_windows"]
        assert row["real"]["executor_seconds"] == run["executor_seconds"]
        assert 0.0 <= row["sim"]["slo_attainment_windows"] <= 1.0
        assert row["gap_points"] == pytest.approx(100 * (row["sim"]["slo_attainment_windows"]
                                                         - run["slo_attainment_windows"]))
        assert row["policy"] in r.output
    # the job, the constraint and the control plane as the real run had them
    p = cal["params"]
    assert (p["trigger_s"], p["partitions"], p["max_executors"], p["cores_per_executor"]) == \
        (real["trigger_s"], 4, real["max_executors"], 1)
    assert (p["constraint_bound_s"], p["constraint_span_s"], p["eval_interval_s"], p["window_ms"]) == \
        (real["bound_s"], real["span_s"], real["evaluation_interval_s"], real["window_ms"])
    assert p["live_view"] is True and p["overhead_s"] == 0.0
    # the measured cluster: provisioning from the runs' register delays, the batch model fitted on all batches
    prov = [(x["cluster"]["provisioning"]["register_s"]["median"], x["cluster"]["provisioning"]["samples"])
            for x in real["results"] if x["cluster"]["provisioning"]["samples"]]
    assert prov and p["up_delay_s"] == pytest.approx(sum(v * n for v, n in prov) / sum(n for _, n in prov))
    # the driver overhead outside the tasks is the control plane's (batch − its tasks' span); the rest of
    # each batch is fitted as waves × (task overhead + rows per task × row cost)
    plane = [(x["cluster"]["driver_overhead"]["mean_s"], x["cluster"]["driver_overhead"]["samples"])
             for x in real["results"] if x["cluster"]["sources"]["driver_overhead"] == "control-plane"]
    assert plane and p["driver_overhead_s"] == pytest.approx(sum(v * n for v, n in plane) / sum(n for _, n in plane))
    pts = [b for x in real["results"] for b in x["batch_points"]]
    waves = np.array([np.ceil(4 / min(n, 4)) for _, _, n, _ in pts])
    work = waves * np.array([rows / 4 for _, rows, _, _ in pts])
    (f, b), *_ = np.linalg.lstsq(np.vstack([waves, work]).T,
                                 np.array([d for *_, d in pts]) - p["driver_overhead_s"], rcond=None)
    assert p["task_overhead_s"] == pytest.approx(f) and p["row_cost_s"] == pytest.approx(b) and f > 0
    assert 0 < p["driver_overhead_s"] < real["trigger_s"] and 0 < p["up_delay_s"] < real["level_s"] * len(real["levels"])
    warm = [x["cluster"]["warmup"] for x in real["results"] if x["cluster"]["warmup"]["samples"]]
    stages = len(real["results"][0]["service"]["templates"])  # the job's map and aggregation stages
    assert stages == 2 and cal["cluster"]["stages_per_batch"] == 2
    assert warm and p["warmup_factor"] == pytest.approx(warm[0]["factor"])
    assert p["warmup_tasks"] == round(warm[0]["tasks"] / stages) and p["warmup_s"] == 0.0
    assert cal["defaults"] == []
    # a static run keeps its executors registered the whole run: exactly N × duration executor-seconds
    static = next(x for x in cal["results"] if x["policy"].startswith("static-"))
    run = next(x for x in real["results"] if x["policy"] == static["policy"])
    assert static["sim"]["executor_seconds"] == pytest.approx(int(static["policy"][7:]) * run["duration_s"], abs=0.005)
    assert "largest gap" in r.output and "points" in r.output


def test_calibration_is_reproducible_per_seed_and_varies_with_it():
    report = load_report(FIXTURE)
    a, b = run_calibration(report, seed=0, seeds=2), run_calibration(report, seed=0, seeds=2)
    assert a == b
    c = run_calibration(report, seed=7, seeds=2)
    assert [r["sim"]["runs"][0]["seed"] for r in c["results"]] == [7, 7]


def _write(tmp_path, obj) -> str:
    f = tmp_path / "bad.json"
    f.write_text(obj if isinstance(obj, str) else json.dumps(obj))
    return str(f)


@pytest.mark.parametrize("mutate, needle", [
    (lambda r: r.pop("trigger_s"), "'trigger_s'"),
    (lambda r: r.update(levels=[]), "'levels'"),
    (lambda r: r.update(results=[]), "'results'"),
    (lambda r: r["results"][0].update(policy="magic"), "'policy'"),
    (lambda r: r["results"][1].update(policy="static-99"), "'policy'"),
    (lambda r: r["results"][0].pop("executor_seconds"), "'executor_seconds'"),
])
def test_calibrate_names_the_bad_field_and_writes_nothing(tmp_path, mutate, needle):
    real = json.loads(FIXTURE.read_text())
    mutate(real)
    out = tmp_path / "cal.json"
    r = CliRunner().invoke(main, ["bench", "scaling", "--calibrate", _write(tmp_path, real), "--out", str(out)])
    assert r.exit_code != 0 and needle in r.output and "--calibrate" in r.output
    assert not out.exists()


def test_calibrate_rejects_a_missing_or_non_json_file(tmp_path):
    out = tmp_path / "cal.json"
    r = CliRunner().invoke(main, ["bench", "scaling", "--calibrate", str(tmp_path / "nope.json"), "--out", str(out)])
    assert r.exit_code != 0 and "nope.json" in r.output and "cannot read" in r.output
    r = CliRunner().invoke(main, ["bench", "scaling", "--calibrate", _write(tmp_path, "{not json"), "--out", str(out)])
    assert r.exit_code != 0 and "not JSON" in r.output
    assert not out.exists()


def test_a_policy_run_is_simulated_from_the_executors_it_had_at_t0():
    """The real Kingman run scaled 1 → 4 while the job warmed up, before t0: the simulation starts at 4."""
    from spark_governor.bench.scaling_calibrate import cluster_params, sim_params, start_executors

    report = load_report(FIXTURE)
    params, _ = sim_params(report, cluster_params(report))
    run = next(x for x in report["results"] if x["policy"] == "kingman")
    at_t0 = [n for t, n in run["timeline"] if t <= 0][-1]
    assert run["initial_executors"] == 1 and at_t0 == 4
    assert start_executors(run, params) == 4
    assert start_executors({"initial_executors": 2}, params) == 2
    assert start_executors({"timeline": [[0.4, 3], [1.4, 2]]}, params) == 3


def test_calibrated_simulator_is_within_5_points_of_the_real_run_for_every_policy():
    """Issue 14: "the gap between simulated and real attainment is at most 5 points" — one model for every
    policy of a quiet real run (no per-policy factor), each simulated with 5 seeds."""
    out = run_calibration(load_report(QUIET), seed=0, seeds=5)
    assert [r["policy"] for r in out["results"]] == ["kingman", "threshold", "utilization-target", "static-4"]
    for r in out["results"]:
        assert abs(r["gap_points"]) <= 5.0, r
        # and the executors they spent: within 15 % of the real run's
        assert 0.85 <= r["exec_seconds_ratio"] <= 1.15, r
    assert out["within_goal"] is True
    assert 0 < out["params"]["task_overhead_s"] < out["params"]["trigger_s"]


def _util_target_scale_ins_at_8000(params, report) -> list:
    from spark_governor.bench.scaling_calibrate import controller, run_rate
    from spark_governor.bench.scaling_sim import simulate

    run = next(x for x in report["results"] if x["policy"] == "utilization-target")
    rate, duration = run_rate(report, run)
    out = []
    for seed in range(5):
        res = simulate(rate, duration, controller(report, run, params), params, seed)
        out += [a for a in res.actions if 50 <= a.t_s < 100 and a.new < a.old]
    return out


def test_the_fixed_time_of_a_task_is_inside_the_task_where_utilization_target_sees_it():
    """What the earlier model got wrong: it put the whole intercept of the batch-duration fit outside the
    tasks, so the simulated tasks were ~25 % cheaper per record than the real ones, DS2's true processing
    rate read high and the simulated utilization-target scaled 2 → 1 at 8 000 rows/s (load < 0.4), which
    the real one never did (it stayed at 2 from 64.7 s to 112.7 s: its ``decisions``)."""
    from dataclasses import replace

    from spark_governor.bench.scaling_calibrate import cluster_params, sim_params
    from spark_governor.bench.scaling_real_measure import fit_batches

    report = load_report(QUIET)
    real = next(x for x in report["results"] if x["policy"] == "utilization-target")
    assert not [d for d in real["decisions"] if 50 <= d["t_s"] < 100 and d["new"] < d["old"]]
    params, _ = sim_params(report, cluster_params(report))
    assert _util_target_scale_ins_at_8000(params, report) == []
    # the simulated tasks' busy time per row (8 000 rows/s: 16 000 rows per task) is the real tasks' own
    per_row = (params.task_overhead_s + 16_000 * params.row_cost_s) / 16_000
    assert per_row == pytest.approx(real["service"]["row_cost_s"], rel=0.15)
    # the earlier split on the same batches: everything beyond the per-row slope outside the tasks
    fit = fit_batches([b for x in report["results"] for b in x["batch_points"]], 4)
    outside = replace(params, task_overhead_s=0.0, driver_overhead_s=fit["overhead_s"], row_cost_s=fit["row_cost_s"])
    assert fit["row_cost_s"] < 0.85 * real["service"]["row_cost_s"]
    assert len(_util_target_scale_ins_at_8000(outside, report)) >= 2
