"""``bench scaling --calibrate``: the simulator run with what a real ``bench scaling-real`` run measured.

The fixture ``tests/data/scaling-real-2026-11-25.json`` is the JSON of a real run, unedited, not
invented numbers: ``spark-governor bench scaling-real --policies kingman,static --level-seconds 30`` on
the project's 2-core development machine on 2026-11-25, 09:29–09:42 UTC, while other engineers' test
runs loaded it (load average 15–30). The control plane's ``/cluster`` endpoint answered: provisioning,
warm-up and driver overhead of the kingman run come from it (``sources`` = control-plane), the static
run's provisioning and warm-up from the bench (no scale-up there)."""
import json
import statistics
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from spark_governor.api.cli import main
from spark_governor.bench.calibration_cluster import cluster_params, fit_split
from spark_governor.bench.scaling_calibrate import format_calibration, load_report, run_calibration, sim_params

FIXTURE = Path(__file__).resolve().parent.parent / "data" / "scaling-real-2026-11-25.json"
# ``spark-governor bench scaling-real --policies kingman,threshold,utilization-target,static`` (defaults: staircase
# 2000,8000,16000,8000,2000 rows/s, 50 s levels, bound 14 s, trigger 8 s, max 4 executors) on the same 2-core
# machine on 2026-11-25, 13:16–13:36 UTC, quiet; the JSON as written, re-serialised without indentation
QUIET = Path(__file__).resolve().parent.parent / "data" / "scaling-real-2026-11-25-1336.json"
# the same four-policy command without kingman (``--policies threshold,utilization-target,static``) on the sharper
# staircase 2000,4000,16000,4000,2000 rows/s × 50 s, same machine, 2026-11-25 15:39–15:57 UTC, while other
# engineers' work loaded it (load average 5–8); the JSON as written
LOADED = Path(__file__).resolve().parent.parent / "data" / "scaling-real-2026-11-25-1539.json"
# 2026-11-26 17:19, quiet, the default staircase with the job's source probed and surge evaluations (run 15)
PROBED = Path(__file__).resolve().parent.parent / "data" / "scaling-real-2026-11-26-1719.json"
# 2026-11-26 20:04 and 20:26, quiet, sharp steps with the night's defaults: 2k,4k,16k,4k,2k x 50 s, Kingman alone
# (run 27); 2k,16k,2k x 60 s, all four policies (run 31)
SHARP = Path(__file__).resolve().parent.parent / "data" / "scaling-real-2026-11-26-2004.json"
SPIKE = Path(__file__).resolve().parent.parent / "data" / "scaling-real-2026-11-26-2026.json"
# 2026-11-26 21:08, quiet, the default staircase, all four policies with every policy's config stored (run 32)
NIGHT = Path(__file__).resolve().parent.parent / "data" / "scaling-real-2026-11-26-2108.json"
# 2026-11-26 23:18, quiet, 2k,16k,2k x 60 s, all four policies, the source offering rows on the schedule and the
# staircase started on a trigger boundary (run 35): the spike where the baselines lose spans
ALIGNED = Path(__file__).resolve().parent.parent / "data" / "scaling-real-2026-11-26-2318.json"
# run 43 (2026-11-27 02:08): the 8x spike, Kingman at its defaults, utilization-target at target 0.3 and threshold
# every 8 s at 0.5 / 0.1 (baselines given more executor-seconds); their first scale-out came 8 s after a batch
# ended 0.1 s before an evaluation
ISOCOST = Path(__file__).resolve().parent.parent / "data" / "scaling-real-2026-11-27-0208.json"
# run 44 (02:36): the sharp staircase 2k,4k,16k,4k,2k x 50 s, kingman, threshold and utilization-target at their
# defaults; run 45 (03:29): the 8x spike, the same three, with the backlog trend read at each batch's end
SHARP3 = Path(__file__).resolve().parent.parent / "data" / "scaling-real-2026-11-27-0236.json"
SPIKE3 = Path(__file__).resolve().parent.parent / "data" / "scaling-real-2026-11-27-0329.json"
#: run 52, Kingman without its spare on the spike (``spare_when: slow``, ``max_utilization`` 0.98): one span lost
LEAN_SPIKE = Path(__file__).resolve().parent.parent / "data" / "scaling-real-2026-11-27-0602.json"
#: run 49, run 43's configs after the schedule's slack (the baselines' second scale-out at 88 s, as simulated)
ISOCOST49 = Path(__file__).resolve().parent.parent / "data" / "scaling-real-2026-11-27-0534.json"


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
    fit = fit_split(pts, 4, p["driver_overhead_s"])
    assert (p["task_overhead_s"], p["task_overhead_per_slot_s"], p["row_cost_s"]) == pytest.approx(
        (fit["task_overhead_s"], fit["task_overhead_per_slot_s"], fit["row_cost_s"]))
    assert p["task_overhead_s"] >= 0 and p["task_overhead_per_slot_s"] >= 0 and p["row_cost_s"] > 0
    assert p["task_overhead_s"] + p["task_overhead_per_slot_s"] > 0
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
    from spark_governor.bench.calibration_cluster import cluster_params
    from spark_governor.bench.scaling_calibrate import sim_params, start_executors

    report = load_report(FIXTURE)
    params, _ = sim_params(report, cluster_params(report))
    run = next(x for x in report["results"] if x["policy"] == "kingman")
    at_t0 = [n for t, n in run["timeline"] if t <= 0][-1]
    assert run["initial_executors"] == 1 and at_t0 == 4
    assert start_executors(run, params) == 4
    assert start_executors({"initial_executors": 2}, params) == 2
    assert start_executors({"timeline": [[0.4, 3], [1.4, 2]]}, params) == 3


@pytest.mark.parametrize("path", [QUIET, PROBED, NIGHT, ALIGNED])
def test_calibrated_simulator_is_within_5_points_of_the_real_run_for_every_policy(path):
    """Issue 14: "the gap between simulated and real attainment is at most 5 points" — one model for every
    policy of a quiet real run (no per-policy factor), each simulated with 5 seeds; also the run whose
    job's source was probed, with the control plane's surge evaluations (run 15 of 2026-11-26), and an 8x
    spike replayed at the run's trigger and evaluation phases (run 35: threshold and utilization-target
    0.870 real; at phase 0 for both the simulator gave them -8.7 and +1.7 points off, before the
    evaluation phase was modelled)."""
    out = run_calibration(load_report(path), seed=0, seeds=5)
    assert [r["policy"] for r in out["results"]] == ["kingman", "threshold", "utilization-target", "static-4"]
    for r in out["results"]:
        assert abs(r["gap_points"]) <= 5.0, r
        # and the executors they spent: within 15 % of the real run's
        assert 0.85 <= r["exec_seconds_ratio"] <= 1.15, r
    assert out["within_goal"] is True
    assert 0 < out["params"]["task_overhead_s"] < out["params"]["trigger_s"]


@pytest.mark.parametrize("path", [SHARP, SPIKE])
def test_calibrated_simulator_follows_kingman_on_sharp_steps(path):
    """Issue 14's 5 points on 4x and 8x rate steps (runs 27 and 31): Kingman 0.0 and +4.3 points, its
    executor-seconds within 10 %. Not asserted: threshold on run 31 (+20.9 points), whose real run scaled
    1 -> 2 on the backlog trend of the job's start-up batches and then 2 -> 1 at the 8x step (docs/benchmarks.md)."""
    out = run_calibration(load_report(path), seed=0, seeds=5)
    (k,) = [r for r in out["results"] if r["policy"] == "kingman"]
    assert abs(k["gap_points"]) <= 5.0, k
    assert 0.9 <= k["exec_seconds_ratio"] <= 1.1, k
    static = [r for r in out["results"] if r["policy"].startswith("static-")]
    assert all(r["gap_points"] == 0.0 for r in static)


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

    from spark_governor.bench.calibration_cluster import cluster_params
    from spark_governor.bench.scaling_calibrate import sim_params
    from spark_governor.bench.scaling_real_measure import fit_batches

    report = load_report(QUIET)
    real = next(x for x in report["results"] if x["policy"] == "utilization-target")
    assert not [d for d in real["decisions"] if 50 <= d["t_s"] < 100 and d["new"] < d["old"]]
    params, _ = sim_params(report, cluster_params(report))
    assert _util_target_scale_ins_at_8000(params, report) == []
    # the simulated tasks' busy time per row (8 000 rows/s: 16 000 rows per task) is the real tasks' own
    per_row = (params.task_fixed_s(2) + 16_000 * params.row_cost_s) / 16_000  # it ran on 2 executors
    assert per_row == pytest.approx(real["service"]["row_cost_s"], rel=0.15)
    # the earlier split on the same batches: everything beyond the per-row slope outside the tasks
    fit = fit_batches([b for x in report["results"] for b in x["batch_points"]], 4)
    outside = replace(params, task_overhead_s=0.0, task_overhead_per_slot_s=0.0, driver_overhead_s=fit["overhead_s"], row_cost_s=fit["row_cost_s"])
    assert fit["row_cost_s"] < 0.85 * real["service"]["row_cost_s"]
    assert len(_util_target_scale_ins_at_8000(outside, report)) >= 1


def _single_fixed_cost(params, points):
    """The earlier batch model on the same points: one fixed time per task for every executor count,
    plain least squares (what ``fit_split`` did before the per-slot part)."""
    from dataclasses import replace

    waves = np.array([np.ceil(4 / min(n, 4)) for _, _, n, _ in points])
    work = waves * np.array([rows / 4 for _, rows, _, _ in points])
    (f, b), *_ = np.linalg.lstsq(np.vstack([waves, work]).T,
                                 np.array([d for *_, d in points]) - params.driver_overhead_s, rcond=None)
    return replace(params, task_overhead_s=float(f), task_overhead_per_slot_s=0.0, row_cost_s=float(b))


def _median_abs_log_error(params, points) -> float:
    return float(np.median([abs(np.log(d / params.processing_s(rows, n))) for _, rows, n, d in points]))


@pytest.mark.parametrize("path", [QUIET, LOADED])
def test_a_tasks_fixed_time_grows_with_the_slots_sharing_the_2_core_machine(path):
    """The executors share the machine's 2 cores: a task's fixed time (its CPU work) grows with the slots,
    the per-row cost (the job's sleep) does not. Fitted with one fixed time for every executor count, the
    4-executor batches pulled it up for 1 and 2 executors; the per-slot model (robust, relative) predicts
    the reactive policies' 1–2-executor batches — those their decisions are made on — better on both runs."""
    from spark_governor.bench.calibration_cluster import cluster_params
    from spark_governor.bench.scaling_calibrate import sim_params

    report = load_report(path)
    params, _ = sim_params(report, cluster_params(report))
    assert params.task_overhead_per_slot_s > 0.08
    assert params.task_fixed_s(4) > params.task_fixed_s(1)
    assert 0.8e-4 < params.row_cost_s < 1.2e-4  # the job's nominal 100 µs per row (row_cost_us)
    old = _single_fixed_cost(params, [b for x in report["results"] for b in x["batch_points"]])
    for run in report["results"]:
        few = [b for b in run["batch_points"] if b[2] <= 2]
        if len(few) >= 10:
            assert _median_abs_log_error(params, few) < _median_abs_log_error(old, few), run["policy"]
    if path == QUIET:  # quiet: the per-slot part is nearly all of it (0.19 s a task on 1 executor, 0.54 s on 4)
        assert params.task_overhead_s < params.task_overhead_per_slot_s
        assert _median_abs_log_error(params, [b for x in report["results"] for b in x["batch_points"]]) < 0.1


def test_calibration_of_the_loaded_sharper_staircase_run():
    """The 15:39 run (loaded machine): every policy is simulated with the pooled parameters; the static
    run is within 5 points. The reactive policies are not (threshold +18, utilization-target +26 points,
    5 seeds): what their real runs met is not in the model (the machine's load during the
    utilization-target run; a threshold scale-in on a ratio 0.01 under its limit, whose 60 s scaling
    interval then covered the 16 000 rows/s level) — see ``bench.scaling_calibrate``."""
    out = run_calibration(load_report(LOADED), seed=0, seeds=2)
    rows = {r["policy"]: r for r in out["results"]}
    assert list(rows) == ["threshold", "utilization-target", "static-4"]
    assert abs(rows["static-4"]["gap_points"]) <= 5.0
    assert rows["static-4"]["exec_seconds_ratio"] == pytest.approx(1.0, abs=0.01)
    delays = out["params"]["up_delays_s"]  # threshold 5.2–6.8 s, utilization-target 6.7, 30.8, 20.9, 13.0 s
    assert len(delays) == 7 and max(delays) > 30 and out["params"]["up_delay_s"] == pytest.approx(np.median(delays))
    assert out["params"]["task_overhead_per_slot_s"] > 0


def test_release_delays_run_from_the_batch_end_to_the_executor_leaving_the_list():
    """The applier kills only between batches: a scale-in decided while a batch runs is released at
    that batch's end; gone is half a sample before the first sample at the new size. A scale-in
    overtaken by the next decision before its sample is skipped."""
    from spark_governor.bench.calibration_cluster import release_delays

    run = {"timeline": [[0.0, 4], [30.0, 4], [37.0, 2], [60.0, 2], [67.0, 1], [80.0, 1], [85.0, 2]],
           "batch_points": [[24.0, 1000, 4, 6.0], [32.0, 1000, 2, 2.0], [56.0, 1000, 2, 2.0]],
           "decisions": [{"t_s": 26.0, "old": 4, "new": 2}, {"t_s": 61.0, "old": 2, "new": 1},
                         {"t_s": 70.0, "old": 1, "new": 2}, {"t_s": 75.0, "old": 2, "new": 1},
                         {"t_s": 76.0, "old": 1, "new": 2}]}
    # 26 s: inside the batch of 24–30 s, released at 30, gone by 37 (36.5): 6.5 s; 61 s: between batches,
    # gone by 67: 5.5 s; 75 s: overtaken at 76 before a sample shows it
    assert release_delays(run) == pytest.approx([6.5, 5.5])
    # the real runs: every release the quiet run 49 made took 5–7.5 s (the median of 113 was 5.5 s)
    report = load_report(ISOCOST49)
    delays = [d for r in report["results"] for d in release_delays(r)]
    assert delays and all(5.0 <= d <= 7.5 for d in delays)
    assert 5.0 <= cluster_params(report)["release_delay_s"] <= 7.5


def test_registration_delays_pair_executors_with_requests_first_in_first_out():
    """Spark grants executor requests in order: the k-th executor to register answers the oldest request
    still outstanding; a scale-in cancels the newest outstanding requests first. Times are half a sample
    (0.5 s) before the first per-second sample counting the executor."""
    from spark_governor.bench.calibration_cluster import registration_delays

    run = {"timeline": [[-1.0, 1], [0.0, 1], [11.0, 2], [31.0, 3], [32.0, 3], [50.0, 2], [61.0, 3]],
           "decisions": [{"t_s": 5.0, "old": 1, "new": 2}, {"t_s": 10.0, "old": 2, "new": 4},
                         {"t_s": 20.0, "old": 4, "new": 3}, {"t_s": 45.0, "old": 3, "new": 2},
                         {"t_s": 55.0, "old": 2, "new": 3}]}
    # 5 s: one asked (registered 10.5: 5.5 s); 10 s: two more asked; 20 s: the newest of them cancelled;
    # the other registers at 30.5 (20.5 s); 45 s: one released; 55 s: one asked, registered at 60.5
    assert registration_delays(run) == pytest.approx([5.5, 20.5, 5.5])
    assert registration_delays({"timeline": [[0.0, 2]], "decisions": []}) == []
    # the loaded run: utilization-target asked at 82.4, 98.4 and 114.3 s and got its executors 13–31 s
    # later, in order — the control plane's register_s (6.5 s median) paired them with later decisions
    report = load_report(LOADED)
    run = next(x for x in report["results"] if x["policy"] == "utilization-target")
    d = registration_delays(run)
    assert len(d) == 4 and d[0] < 8 and d[1:] == pytest.approx([30.8, 20.9, 13.0], abs=0.3)
    assert run["cluster"]["provisioning"]["register_s"]["median"] < 7
    quiet = [x for r in load_report(QUIET)["results"] for x in registration_delays(r)]
    assert len(quiet) == 8 and 1.0 < min(quiet) and max(quiet) < 3.5  # ExecutorAdded medians 2.1–2.4 s


def test_a_replay_uses_each_policys_stored_config_and_the_old_rules_where_a_report_has_none():
    """``bench scaling-real`` stores every option of every governed policy (``policy_configs``); a replay
    uses it, and fills what older reports lack with the rules of their day (no projected backlog, the
    cool-down after any change also after a scale-down)."""
    from spark_governor.bench.calibration_cluster import cluster_params
    from spark_governor.bench.scaling_calibrate import controller, sim_params
    from spark_governor.bench.scaling_real import full_config

    stored = full_config("threshold", None)
    assert stored["backlog_projected"] is False and "min_value" not in stored and "trigger_interval_s" not in stored
    assert full_config("kingman", {"spare_executors": 2})["spare_executors"] == 2
    report = load_report(SPIKE)
    params, _ = sim_params(report, cluster_params(report))
    run = next(x for x in report["results"] if x["policy"] == "threshold")
    old = controller(report, run, params, replay=True).config
    assert old.backlog_projected is False and old.cooldown_up_after_down is True
    newer = {**report, "policy_configs": {"threshold": full_config("threshold", {"backlog_projected": True})}}
    cfg = controller(newer, run, params, replay=True).config
    assert cfg.backlog_projected is True and cfg.cooldown_up_after_down is False


def test_a_run_whose_source_followed_the_schedule_is_replayed_at_its_trigger_phase():
    """Reports of the source before 2026-11-27 (no ``source_arrivals``) keep phase 0, as calibrated."""
    from spark_governor.bench.scaling_calibrate import trigger_phase

    run = {"batch_points": [[13.25, 16000, 1, 2.4], [21.25, 16000, 1, 2.4]]}
    assert trigger_phase({"trigger_s": 8.0, "source_arrivals": "schedule"}, run) == pytest.approx(5.25)
    assert trigger_phase({"trigger_s": 8.0}, run) == 0.0
    assert trigger_phase({"trigger_s": 8.0, "source_arrivals": "schedule"}, {"batch_points": []}) == 0.0


def test_the_evaluation_phase_is_the_measured_one_else_that_of_the_runs_regular_decisions():
    from spark_governor.bench.scaling_calibrate import evaluation_phase

    schedule = {"evaluation_interval_s": 8.0, "source_arrivals": "schedule"}
    run = {"decisions": [{"t_s": 62.9}, {"t_s": 76.5}, {"t_s": 140.5}]}  # one surge evaluation, two regular
    assert evaluation_phase(schedule, run) == pytest.approx(4.5)
    assert evaluation_phase(schedule, {**run, "evaluation_phase_s": 2.25}) == 2.25
    assert evaluation_phase(schedule, {"decisions": [{"t_s": 62.9}, {"t_s": 76.5}]}) == pytest.approx(4.5)
    assert evaluation_phase(schedule, {"decisions": []}) == 0.0
    assert evaluation_phase({"evaluation_interval_s": 8.0}, run) == 0.0  # before the source followed the schedule
    assert evaluation_phase(schedule, {"decisions": [{"t_s": 15.97}]}) == 0.0  # 7.97 rounds to the interval


def test_a_completed_batch_reaches_the_simulated_plane_with_the_reporters_next_state():
    """Run 43: the real threshold and utilization-target did not yet have the batch that ended 0.1 s before the
    evaluation at 72 s and scaled out at 80 s. With the reporter's 1 s cadence (the calibrated default) the
    simulated threshold is within 5 points of the real run; seeing the batch end at once, as the simulator did
    before, it was 13 points above. The runs' own configs are replayed (``policy_configs``)."""
    from dataclasses import replace

    from spark_governor.bench.calibration_cluster import cluster_params
    from spark_governor.bench.scaling_calibrate import sim_params, simulate_run

    report = load_report(ISOCOST)
    params, _ = sim_params(report, cluster_params(report))
    assert params.state_interval_s == 1.0
    run = next(r for r in report["results"] if r["policy"] == "threshold")
    assert report["policy_configs"]["threshold"]["scaling_interval_s"] == 8.0
    real = run["slo_attainment_windows"]
    seeds = list(range(5))
    now = simulate_run(report, run, params, seeds, replay=True)["slo_attainment_windows"]
    at_once = simulate_run(report, run, replace(params, state_interval_s=0.0), seeds, replay=True)
    assert abs(now - real) <= 0.05, (now, real)
    assert at_once["slo_attainment_windows"] - real > 0.10
    kingman = next(r for r in run_calibration(report, seeds=3)["results"] if r["policy"] == "kingman")
    assert kingman["gap_points"] == 0.0


@pytest.mark.parametrize("path", [SHARP3, SPIKE3, ISOCOST49])
def test_the_baselines_steps_are_simulated_within_5_points(path):
    """Runs 44, 45 and 49: the baselines lose 17–26 points of a step's spans on the cluster; the simulator, with
    the reporter's cadence and the backlog read at each batch's end, within 5 points of each policy (run 44's
    threshold was +9.4 reading the backlog at the state's time: one seed scaled out at 80 s on a trend at the
    rule's own threshold; run 43's utilization-target +8.7 and run 47's threshold +6.1 before the schedule's
    slack, when 7.999 s after a scale-out held the next one for an interval)."""
    out = run_calibration(load_report(path), seed=0, seeds=5)
    assert [r["policy"] for r in out["results"]] == ["kingman", "threshold", "utilization-target"]
    real = {r["policy"]: r["real"]["slo_attainment_windows"] for r in out["results"]}
    assert real["kingman"] == 1.0 and max(real["threshold"], real["utilization-target"]) < 0.85
    for r in out["results"]:
        assert abs(r["gap_points"]) <= 5.0, r


def test_a_new_executors_slow_first_task_is_simulated():
    """Run 52: Kingman without a spare met the 8× step with one executor, its new executors ran their first
    task ×2.3 slower, and one span of 23 was lost. One slow task of the job's first stage (of two) is one slow
    simulated task (a partition's whole batch), not round(1/2) = 0: the simulator loses spans too."""
    report = load_report(LEAN_SPIKE)
    cluster = cluster_params(report)
    assert cluster["warmup_factor"] > 2 and cluster["warmup_tasks"] == 1
    (row,) = run_calibration(report, seed=0, seeds=5)["results"]
    # the real run lost a span; today's Kingman (issue #44's lean options, replayed on the run's cluster) keeps
    # them all in the simulator: within the 5 points all the same
    assert row["real"]["slo_attainment_windows"] < 1.0
    assert abs(row["gap_points"]) <= 5.0


#: run 66 (2026-11-27 11:43, quiet): the 8x spike, all four policies at their defaults. Threshold's batch at 64 s on
#: 1 executor ended at 71.9 s and reached the control plane before the evaluation at 72 s: it scaled out 8 s
#: earlier than in most simulated seeds and kept 0.913 of the spans; the JSON as written, re-serialised compactly
KNIFE_EDGE = Path(__file__).resolve().parent.parent / "data" / "scaling-real-2026-11-27-1143.json"


def test_real_rank_is_the_mid_rank_among_the_simulated_seeds():
    from spark_governor.bench.scaling_calibrate import real_rank
    assert real_rank(0.9, [0.7, 0.8, 0.95, 1.0]) == 0.5
    assert real_rank(0.8, [0.7, 0.8, 0.8, 1.0]) == (1 + 0.5 * 2) / 4
    assert real_rank(1.0, [0.7, 0.9]) == 1.0 and real_rank(0.5, [0.7, 0.9]) == 0.0
    with pytest.raises(ValueError):
        real_rank(0.9, [])


def test_calibrate_seeds_sets_the_seeds_and_the_real_rank_is_reported(tmp_path):
    out = tmp_path / "cal.json"
    r = CliRunner().invoke(main, ["bench", "scaling", "--calibrate", str(FIXTURE), "--calibrate-seeds", "3",
                                  "--seed", "4", "--out", str(out)])
    assert r.exit_code == 0, r.output
    cal = json.loads(out.read_text())
    assert cal["seeds"] == [4, 5, 6]
    for row in cal["results"]:
        sims = [x["slo_attainment_windows"] for x in row["sim"]["runs"]]
        assert len(sims) == 3
        real = row["real"]["slo_attainment_windows"]
        assert row["real_rank"] == (sum(x < real - 1e-9 for x in sims) + 0.5 * sum(abs(x - real) <= 1e-9 for x in sims)) / 3
    assert "real rank" in r.output
    r = CliRunner().invoke(main, ["bench", "scaling", "--calibrate", str(FIXTURE), "--calibrate-seeds", "0",
                                  "--out", str(tmp_path / "none.json")])
    assert r.exit_code == 2 and "--calibrate-seeds" in r.output and not (tmp_path / "none.json").exists()


def test_a_knife_edge_real_outcome_is_rare_among_the_simulated_seeds_not_outside_them():
    """Run 66's threshold: 19 points above the simulator's mean, yet inside the simulated outcomes over 40
    seeds, at their top (the seeds where the batch's end reached the plane before the evaluation, as it
    did on the cluster); Kingman, utilization-target and static-4 within 5 points of their mean."""
    out = run_calibration(load_report(KNIFE_EDGE), seed=0, seeds=40)
    rows = {r["policy"]: r for r in out["results"]}
    t = rows["threshold"]
    assert t["real"]["slo_attainment_windows"] == pytest.approx(21 / 23)
    assert t["gap_points"] < -10
    assert t["sim"]["slo_attainment_range"][1] >= t["real"]["slo_attainment_windows"] - 1e-9
    assert t["real_rank"] >= 0.9
    for name in ("kingman", "utilization-target", "static-4"):
        assert abs(rows[name]["gap_points"]) <= 5, (name, rows[name]["gap_points"])


LIVE_SPIKE = Path(__file__).resolve().parent.parent / "data" / "scaling-real-2026-11-27-1613.json"
LIVE_SHARP = Path(__file__).resolve().parent.parent / "data" / "scaling-real-2026-11-27-1626.json"


@pytest.mark.parametrize("path, seeds", [(LIVE_SPIKE, 5), (LIVE_SHARP, 20)])
def test_calibrated_simulator_follows_utilization_target_with_the_live_rate(path, seeds):
    """Runs 70 and 72 (2026-11-27): utilization-target sizing for the probed live arrival rate, on the spike
    (0.957 real) and the sharp staircase (0.875 real; a bimodal outcome — whether a scale-down lands just
    before the 4x step — so over 20 seeds). The replay keeps the run's own config (live_rate unset: on,
    the source being probed); the executor-seconds within 10 %."""
    out = run_calibration(load_report(path), seed=0, seeds=seeds)
    (u,) = out["results"]
    assert u["policy"] == "utilization-target" and u["real"]["slo_attainment_windows"] < 0.96
    assert abs(u["gap_points"]) <= 5.0, u
    assert 0.9 <= u["exec_seconds_ratio"] <= 1.1, u


def test_the_work_factor_slows_the_simulated_executors_and_the_policies_see_the_planes_factor():
    """Reports from 2026-11-27 20:00 UTC carry the profile's ``work_factor`` (the slow tasks' run time over
    a steady one's): it slows the simulated new executors, while the simulated control plane reports the
    measured ``factor`` to the policies, as the real one did. Without it, ``factor`` does both."""
    report = load_report(LEAN_SPIKE)
    before = cluster_params(report)
    assert before["reported_warmup_factor"] is None
    for r in report["results"]:
        w = r["cluster"]["warmup"]
        if w["samples"]:
            w["work_factor"] = 2 * w["factor"]
    after = cluster_params(report)
    assert after["warmup_factor"] == pytest.approx(2 * before["warmup_factor"])
    assert after["reported_warmup_factor"] == pytest.approx(before["warmup_factor"])
    out = run_calibration(report, seed=0, seeds=3)
    assert out["params"]["warmup_factor"] == pytest.approx(after["warmup_factor"])
    assert out["params"]["reported_warmup_factor"] == pytest.approx(before["warmup_factor"])
    slower = out["results"][0]["sim"]["slo_attainment_windows"]
    same = run_calibration(load_report(LEAN_SPIKE), seed=0, seeds=3)["results"][0]["sim"]["slo_attainment_windows"]
    assert slower <= same


def test_the_simulated_plane_reports_the_reported_warmup_factor():
    from dataclasses import replace

    from spark_governor.bench.scaling import governed
    from spark_governor.bench.scaling_sim_control import SimControlPlane
    from spark_governor.bench.scaling_sim_model import DEFAULT_PARAMS

    p = replace(DEFAULT_PARAMS, cluster_profile=True, warmup_factor=3.0, warmup_tasks=1)
    plane = SimControlPlane(governed("kingman", {})(p, 0.0), p)
    plane.provisioning = [5.0]
    assert plane.cluster().warmup_factor == 3.0
    reported = replace(p, reported_warmup_factor=1.2)
    plane = SimControlPlane(governed("kingman", {})(reported, 0.0), reported)
    plane.provisioning = [5.0]
    assert plane.cluster().warmup_factor == 1.2


def test_start_up_contention_is_calibrated_from_reports_that_carry_it():
    """Reports from 2026-11-27 22:00 UTC carry the profile's ``contention_factor`` and ``startup_s``: the
    simulator slows the working executors by it for that long after each registration (at least ×1: a
    factor under 1 is noise). A report without them calibrates as before."""
    plain = sim_params(load_report(LEAN_SPIKE), cluster_params(load_report(LEAN_SPIKE)))[0]
    assert plain.startup_contention == 1.0 and plain.startup_s == 0.0
    results = {}
    for factor in (0.9, 2.0):
        report = load_report(LEAN_SPIKE)
        for r in report["results"]:
            w = r["cluster"]["warmup"]
            if w["samples"]:
                w.update(contention_factor=factor, startup_s=6.0)
        p, defaults = sim_params(report, cluster_params(report))
        assert p.startup_contention == max(1.0, factor) and p.startup_s == pytest.approx(6.0) and not defaults
        results[factor] = run_calibration(report, seed=0, seeds=3)
    assert "start-up contention ×2.00 for 6.0 s" in format_calibration(results[2.0])
    assert "start-up contention" not in format_calibration(results[0.9])
    slowed = results[2.0]["results"][0]["sim"]
    same = results[0.9]["results"][0]["sim"]
    assert slowed["slo_attainment_windows"] <= same["slo_attainment_windows"]
    assert slowed["batches"] <= same["batches"]


@pytest.mark.parametrize("name", ["scaling-real-2026-11-27-2307.json", "scaling-real-2026-11-27-2220-reprofiled.json"])
def test_a_spike_met_with_and_without_the_spare_calibrates_within_5_points(name):
    """Issue 14 on the 8x spike with the warm-up measured on the time a task holds its slot, against a steady
    task of the same size: run 88 (Kingman's defaults, 1.000 real, as ``bench scaling-real`` wrote it) and run
    85 (without the spare, 0.957 real; its profile measured again from the run's ``plane.db`` with the code
    of 2026-11-27 23:15 UTC, which the run predates). Both carry ``startup_s`` and ``contention_factor``."""
    report = load_report(Path(__file__).resolve().parent.parent / "data" / name)
    (run,) = report["results"]
    w = run["cluster"]["warmup"]
    assert w["work_factor"] > 2 and w["startup_s"] > 0 and 0.9 < w["contention_factor"] < 1.1
    out = run_calibration(report, seed=0, seeds=5)
    (k,) = out["results"]
    assert abs(k["gap_points"]) <= 5.0, k
    assert 0.85 <= k["exec_seconds_ratio"] <= 1.15, k
    assert out["params"]["warmup_factor"] == pytest.approx(w["work_factor"])


def test_a_run_that_warmed_its_executors_calibrates_the_warm_up_job_and_the_cold_executor():
    """Run 91 (2026-11-28, Kingman without the spare on the spike, executors warmed by ``attach``; its profile
    measured again from its ``plane.db`` for the ``cold_*`` fields): the simulator runs the warm-up job for the
    median of the run's ``warm_job_s``, slows the executor that took a waiting task by that executor's work
    factor and the warmed ones' first task by theirs; the gap stays within 5 points. Without ``warm_executors`` the same report
    calibrates with no warm-up job but the same split of cold and idle new executors; without the ``cold_*`` fields
    (profiles measured before them) every new executor is slowed by the median work factor."""
    report = load_report(Path(__file__).resolve().parent.parent / "data" / "scaling-real-2026-11-28-0204-reprofiled.json")
    (run,) = report["results"]
    w = run["cluster"]["warmup"]
    assert report["warm_executors"] and w["cold_samples"] == 1 and w["cold_work_factor"] > w["work_factor"]
    out = run_calibration(report, seed=0, seeds=5)
    assert out["params"]["prewarm_s"] == pytest.approx(statistics.median(run["warm_job_s"]))
    assert out["params"]["warmup_factor"] == pytest.approx(w["cold_work_factor"])
    assert out["params"]["warmup_tasks"] == w["cold_tasks"] == 1
    assert out["params"]["prewarm_factor"] == pytest.approx(w["idle_work_factor"]) and w["idle_work_factor"] > 1
    assert f"warm-up job {out['params']['prewarm_s']:.1f} s" in format_calibration(out)
    (k,) = out["results"]
    assert abs(k["gap_points"]) <= 5.0, k
    unwarmed = dict(report, warm_executors=False)
    p, _ = sim_params(unwarmed, cluster_params(unwarmed))
    assert p.prewarm_s == 0.0 and p.prewarm_factor == pytest.approx(w["idle_work_factor"])
    assert p.warmup_factor == pytest.approx(w["cold_work_factor"])
    assert f"an idle new executor's first task ×{w['idle_work_factor']:.2f}" in format_calibration(
        run_calibration(unwarmed, seed=0, seeds=1))
    plain = {k: v for k, v in w.items() if not k.startswith(("cold_", "idle_"))}
    before = dict(unwarmed, results=[dict(run, cluster=dict(run["cluster"], warmup=plain))])
    p, _ = sim_params(before, cluster_params(before))
    assert p.prewarm_s == 0.0 and p.prewarm_factor == 1.0 and p.warmup_factor == pytest.approx(w["work_factor"])


def test_a_report_of_several_policies_takes_each_runs_own_warm_up_where_the_profile_splits():
    """Run 97 (2026-11-28 04:45, the spike, every policy at its defaults with the warm-up; profiles measured
    again from its ``plane.db``): utilization-target's one cold executor read ×4.1 (two warm-up jobs beside
    it), threshold's new executors none. Pooled, that ×4.1 slowed the simulated threshold's cold executors
    and its gap was −9.6 points; each run with its own warm-up, every policy is within 7 points, and the
    runs without new executors (static) or alone in their report are simulated with the pooled figures."""
    from spark_governor.bench.calibration_cluster import run_warmup

    report = load_report(Path(__file__).resolve().parent.parent / "data" / "scaling-real-2026-11-28-0445-reprofiled.json")
    by = {r["policy"]: r for r in report["results"]}
    assert by["utilization-target"]["cluster"]["warmup"]["cold_samples"] == 1
    assert by["threshold"]["cluster"]["warmup"]["cold_samples"] == 0
    cluster = cluster_params(report)
    assert cluster["split"] and cluster["warmup_factor"] == pytest.approx(
        by["utilization-target"]["cluster"]["warmup"]["cold_work_factor"])
    own = run_warmup(report, by["threshold"], cluster)
    assert own["warmup_factor"] == pytest.approx(by["threshold"]["cluster"]["warmup"]["work_factor"])
    assert own["up_delay_s"] == cluster["up_delay_s"]  # only the warm-up is the run's own
    assert run_warmup(report, by["static-4"], cluster) is cluster
    assert run_warmup(dict(report, results=[by["threshold"]]), by["threshold"], cluster) is cluster
    out = run_calibration(report, seed=0, seeds=5)
    gaps = {r["policy"]: r["gap_points"] for r in out["results"]}
    assert all(abs(g) <= 7.0 for g in gaps.values()), gaps
    assert gaps["kingman"] == pytest.approx(0.0) and gaps["static-4"] == pytest.approx(0.0)


def test_the_seven_level_staircase_calibrates_within_the_goal():
    """Run 98 (2026-11-28 07:07, 2k, 4k, 8k, 16k, 8k, 4k, 2k × 40 s, every policy at its defaults): a staircase no
    real run had tried before. The simulator calibrated on it follows each policy within the goal's 5 points, each
    real attainment inside its seeds' range, and each run's executor-seconds within 5 %."""
    report = load_report(Path(__file__).resolve().parent.parent / "data" / "scaling-real-2026-11-28-0707.json")
    assert report["levels"] == [2000, 4000, 8000, 16000, 8000, 4000, 2000] and report["level_s"] == 40
    out = run_calibration(report, seed=0, seeds=10)
    assert out["within_goal"] is True, out["max_abs_gap_points"]
    for r in out["results"]:
        low, high = r["sim"]["slo_attainment_range"]
        assert low - 1e-9 <= r["real"]["slo_attainment_windows"] <= high + 1e-9, r["policy"]
        assert r["exec_seconds_ratio"] == pytest.approx(1.0, abs=0.05), r["policy"]


def test_the_launch_hold_is_simulated_as_the_run_had_it():
    """Runs 99 and 101 (2026-11-28, 8k, 16k, 8k × 50 s, every policy at its defaults): without the listener jar's
    launch hold Kingman kept 0.895 (its added executors took the step batch's waiting tasks cold) and the
    simulator calibrated on the run puts it under the goal too; with the hold (run 101, ``launch_hold`` and its
    rule ``launch_hold_waves`` in the report) it kept every span and every policy is simulated within 5 points.
    Run 99's cluster simulated with the hold keeps Kingman over the goal."""
    data = Path(__file__).resolve().parent.parent / "data"
    without = load_report(data / "scaling-real-2026-11-28-0734.json")
    held = load_report(data / "scaling-real-2026-11-28-0811.json")
    assert not without.get("launch_hold") and held["launch_hold"] and held["launch_hold_waves"] == 1.0
    p, _ = sim_params(held, cluster_params(held))
    assert p.launch_hold and p.launch_hold_waves == 1.0
    gaps = {r["policy"]: r for r in run_calibration(without, seed=0, seeds=10)["results"]}
    assert gaps["kingman"]["real"]["slo_attainment_windows"] < 0.95 and gaps["kingman"]["sim"]["slo_attainment_windows"] < 0.95
    out = run_calibration(held, seed=0, seeds=10)
    assert out["within_goal"] is True, out["max_abs_gap_points"]
    king = next(r for r in out["results"] if r["policy"] == "kingman")
    assert king["real"]["slo_attainment_windows"] == 1.0
    # run 99's cluster and job simulated with the hold: Kingman over the goal (its run without: under)
    on = run_calibration(dict(without, launch_hold=True, launch_hold_waves=1.0), seed=0, seeds=10)
    assert next(r for r in on["results"] if r["policy"] == "kingman")["sim"]["slo_attainment_windows"] >= 0.95


def test_the_slot_hold_is_simulated_as_the_run_had_it():
    """Run 104 (2026-11-28 11:19 UTC, the default staircase, every policy at its defaults) ran the launch hold
    with the warm-up's slot hold (``slot_hold`` in the report): Kingman's 2 warmed executors kept their slots
    2.4 s while the step batch's waiting tasks launched on the old ones. The simulator reads it and follows every
    policy within 5 points; reports written before it (run 101) are simulated without it."""
    data = Path(__file__).resolve().parent.parent / "data"
    slot = load_report(data / "scaling-real-2026-11-28-1119.json")
    assert slot["slot_hold"] is True and slot["launch_hold"] is True
    king_run = next(r for r in slot["results"] if r["policy"] == "kingman")
    assert sorted(king_run["slot_held_s"].values())[-2:] == [pytest.approx(2.45, abs=0.01)] * 2
    p, _ = sim_params(slot, cluster_params(slot))
    assert p.slot_hold and p.launch_hold
    older, _ = sim_params(load_report(data / "scaling-real-2026-11-28-0811.json"), cluster_params(slot))
    assert older.launch_hold and not older.slot_hold
    out = run_calibration(slot, seed=0, seeds=10)
    assert out["within_goal"] is True, out["max_abs_gap_points"]
    assert all(r["real"]["slo_attainment_windows"] == 1.0 for r in out["results"])
