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
    pts = [b for x in real["results"] for b in x["batch_points"]]
    work = np.array([np.ceil(4 / min(n, 4)) * rows / 4 for _, rows, n, _ in pts])
    (a, b), *_ = np.linalg.lstsq(np.vstack([np.ones_like(work), work]).T, np.array([d for *_, d in pts]), rcond=None)
    assert p["driver_overhead_s"] == pytest.approx(a) and p["row_cost_s"] == pytest.approx(b)
    assert 0 < p["driver_overhead_s"] < real["trigger_s"] and 0 < p["up_delay_s"] < real["level_s"] * len(real["levels"])
    # the control plane's own driver overhead (batch − its tasks' span) is kept in the file, not used: the fit is
    assert any(x["cluster"]["sources"]["driver_overhead"] == "control-plane" for x in real["results"])
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
