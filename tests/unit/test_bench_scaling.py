"""``bench scaling``: the micro-batch simulator, the policy comparison and its CLI command."""
import json
import math
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from spark_governor.api.cli import main
from spark_governor.bench.scaling import (
    ATTAINMENT_METRIC,
    BASELINE,
    KINGMAN_CONFIG,
    MIN_STATIC,
    POLICIES,
    PROFILES,
    bench_params,
    configured,
    count_oscillations,
    format_table,
    goal,
    governed,
    metrics,
    min_static,
    run_scaling_bench,
    static,
)
from spark_governor.bench.scaling_sim import Simulation, simulate
from spark_governor.bench.scaling_sim_control import Controller, StaticPolicy
from spark_governor.bench.scaling_sim_model import Action, SimParams, list_schedule
from spark_governor.collectors.reporter import STATE_INTERVAL_S
from spark_governor.policies.base import Policy, Proposal
from spark_governor.policies.safety import SafetyConfig

DURATION = 600.0


@pytest.fixture(scope="module")
def report():
    return run_scaling_bench(duration_s=DURATION, seed=1)


def rows_of(report, profile):
    return {r["policy"]: r for r in report["results"] if r["profile"] == profile}


def constant(rate):
    return lambda t: np.full_like(t, rate, dtype=float)


def static_controller(n):
    return Controller(StaticPolicy(), SafetyConfig(min_value=1, max_value=12), n)


class FixedTarget(Policy):
    """Always proposes the same number of executors (a real, trivial policy)."""

    name = "fixed-target"
    knobs = ("executors",)
    Config = SafetyConfig

    def __init__(self, target):
        self.target = target

    def evaluate(self, view, config):
        return [Proposal("executors", self.target, f"fixed at {self.target}")]


EXACT = {"trigger_s": 4.0, "overhead_s": 1.0, "noise_sigma": 0.0, "task_noise_sigma": 0.0, "up_delay_s": 10.0,
         "eval_interval_s": 10.0}


def test_trigger_and_latency_semantics_on_time():
    # 100 rows/s, T = 4 s; 400 rows per batch take 1 + 400 × 0.005 / 1 = 3 s: on time
    params = SimParams(row_cost_s=0.005, **EXACT)
    sim = Simulation(constant(100), 20, static_controller(1), params)
    res = sim.run()
    # the trigger at 0 finds no rows and runs no batch; batch k starts at 4(k+1), holds (4k, 4k+4]
    assert [(b.start_s, b.end_s, b.cut_s, b.rows) for b in res.batches] == [
        (4.0, 7.0, 0.0, 400), (8.0, 11.0, 4.0, 400), (12.0, 15.0, 8.0, 400), (16.0, 19.0, 12.0, 400),
        (20.0, 23.0, 16.0, 400)]  # the last one is in flight at 20 s and finished for the metrics
    assert [b.latency_s for b in res.batches] == [7.0] * 5  # T + processing
    assert [(s.trigger_ms, s.processing_s, s.num_input_rows) for s in sim.stats][:2] == [(4000, 3.0, 400),
                                                                                      (8000, 3.0, 400)]
    assert res.executor_seconds == 20.0 and res.unprocessed_rows == 0 and res.actions == []


def test_trigger_and_latency_semantics_overrun():
    # 400 rows take 1 + 400 × 0.0125 = 6 s > T: the next batch starts when the previous ends
    params = SimParams(row_cost_s=0.0125, **EXACT)
    res = simulate(constant(100), 20, static_controller(1), params)
    assert [(b.start_s, b.end_s, b.rows) for b in res.batches] == [
        (4.0, 10.0, 400),  # on the boundary, rows of (0, 4]
        (10.0, 18.5, 600),  # at once (boundary 8 passed), rows of (4, 10]: 1 + 7.5 s
        (18.5, 30.125, 850)]  # rows of (10, 18.5]: 1 + 10.625 s, in flight at the end
    assert [b.latency_s for b in res.batches] == [10.0, 14.5, 20.125]
    assert res.unprocessed_rows == 150  # arrived in (18.5, 20]


def test_next_trigger_waits_for_the_boundary_after_an_off_boundary_start():
    # 400 rows take 1 + 400 × 0.00875 = 4.5 s: the batch at 4 ends at 8.5 and the next starts at
    # once; the rate drops to 1 row/s at 6 s, so that one (~202 rows, ~2.8 s) is on time and
    # the one after waits for the boundary at 12 (the next multiple of T after its start, 8.5)
    params = SimParams(row_cost_s=0.00875, **EXACT)
    res = simulate(lambda t: np.where(t < 6, 100.0, 1.0), 30, static_controller(1), params)
    assert [b.start_s for b in res.batches[:3]] == [4.0, 8.5, 12.0]
    assert res.batches[1].end_s < 12.0


def test_scale_up_registers_after_the_provisioning_delay_and_counts_while_provisioning():
    params = SimParams(row_cost_s=0.005, **EXACT)
    res = simulate(constant(100), 30, Controller(FixedTarget(4), SafetyConfig(min_value=1, max_value=12), 2), params)
    assert [(a.t_s, a.old, a.new) for a in res.actions] == [(10.0, 2, 4)]  # then the directive is applied
    assert res.timeline == [(0.0, 2, 2), (10.0, 2, 4), (20.0, 4, 4)]  # (t, registered, allocated)
    assert res.executor_seconds == 2 * 10 + 4 * 20
    assert {b.executors for b in res.batches if b.start_s >= 20} == {4}
    assert {b.executors for b in res.batches if b.start_s < 20} == {2}


def test_scale_down_releases_executors_when_the_running_batch_ends():
    # 400 rows take 1 + 400 × 0.02 / 4 = 3 s on 4 executors: batches run [4, 7], [8, 11]; the
    # decision at 10 s takes effect when [8, 11] ends; on 2 executors a batch takes 5 s
    params = SimParams(row_cost_s=0.02, **EXACT)
    res = simulate(constant(100), 20, Controller(FixedTarget(2), SafetyConfig(min_value=1, max_value=12), 4), params)
    assert [(a.t_s, a.old, a.new) for a in res.actions] == [(10.0, 4, 2)]
    assert res.timeline == [(0.0, 4, 4), (11.0, 2, 2)]
    assert res.executor_seconds == 4 * 11 + 2 * 9
    assert [(b.start_s, b.end_s, b.executors) for b in res.batches[:3]] == [(4.0, 7.0, 4), (8.0, 11.0, 4),
                                                                          (12.0, 17.0, 2)]


def test_deterministic_given_a_seed():
    a = run_scaling_bench(profiles=("step", "spike"), duration_s=DURATION, seed=7)
    b = run_scaling_bench(profiles=("step", "spike"), duration_s=DURATION, seed=7)
    c = run_scaling_bench(profiles=("step", "spike"), duration_s=DURATION, seed=8)
    assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)
    assert json.dumps(a["results"], sort_keys=True) != json.dumps(c["results"], sort_keys=True)


def test_static_allocations_never_change(report):
    params = SimParams()
    for profile in PROFILES:
        rows = rows_of(report, profile)
        for policy in ("static-min", "static-mean", "static-max"):
            r = rows[policy]
            assert r["actions"] == 0 and r["oscillations"] == 0
            assert r["min_executors"] == r["max_executors"]
            assert r["executor_seconds"] == pytest.approx(r["max_executors"] * DURATION)
            assert report["timelines"][profile][policy] == [[0.0, r["max_executors"], r["max_executors"]]]
        assert rows["static-min"]["max_executors"] == params.min_executors
        assert rows["static-max"]["max_executors"] == params.max_executors
        assert rows[BASELINE]["ratio_vs_baseline"] == 1.0


def test_static_at_mean_misses_the_slo_at_the_peak(report):
    for profile in PROFILES:
        info = report["profiles"][profile]
        assert info["executors_for_mean"] < info["executors_for_peak"]
        assert rows_of(report, profile)["static-mean"]["slo_attainment_rows"] < 0.9


def test_threshold_scales_up_after_the_step_and_beats_static(report):
    rows = rows_of(report, "step")
    params = SimParams()
    res = simulate(PROFILES["step"](DURATION), DURATION, governed("threshold")(params, 5000), params, seed=1)
    step_at = DURATION / 2
    ups_after = [a for a in res.actions if a.t_s > step_at and a.new > a.old]
    assert ups_after
    before = max((r for t, r, _ in res.timeline if t <= step_at), default=None)
    assert max(r for _, r, _ in res.timeline) > before
    th = rows["threshold"]
    assert th["slo_attainment"] > rows["static-min"]["slo_attainment"]
    assert th["slo_attainment_rows"] > rows["static-min"]["slo_attainment_rows"]
    assert th["executor_seconds"] < rows["static-max"]["executor_seconds"]
    assert 0 < th["ratio_vs_baseline"] < 1
    assert th["actions"] == len(res.actions)


def test_executors_stay_within_bounds(report):
    params = SimParams()
    for profile in PROFILES:
        for timeline in report["timelines"][profile].values():
            for _, registered, allocated in timeline:
                assert params.min_executors <= registered <= params.max_executors
                assert params.min_executors <= allocated <= params.max_executors
    for profile in PROFILES:  # also the registered extremes the metrics report
        r = rows_of(report, profile)["threshold"]
        assert params.min_executors <= r["min_executors"] <= r["max_executors"] <= params.max_executors


def test_oscillations_are_quick_direction_reversals():
    acts = [Action(10, 1, 3, ""), Action(70, 3, 2, ""), Action(130, 2, 4, ""), Action(400, 4, 3, ""),
            Action(460, 3, 2, "")]
    # up→down within 60 s, down→up within 60 s; up→down after 270 s is not; down→down is not
    assert count_oscillations(acts, 120) == 2
    assert count_oscillations(acts, 30) == 0
    assert count_oscillations([], 120) == 0


def test_adding_a_policy_is_one_entry():
    entries = [e for e in POLICIES if e.name in ("static-max", "threshold")]
    assert {e.name for e in entries} == {"static-max", "threshold"}
    rep = run_scaling_bench(profiles=("spike",), duration_s=300, policies=entries)
    assert [r["policy"] for r in rep["results"]] == ["static-max", "threshold", MIN_STATIC]


def test_cli_writes_json_and_plot(tmp_path):
    out, png = tmp_path / "scaling.json", tmp_path / "scaling.png"
    r = CliRunner().invoke(main, ["bench", "scaling", "--profiles", "step,spike", "--duration", "300",
                                  "--seed", "2", "--out", str(out), "--plot", str(png)], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    data = json.loads(out.read_text())
    assert {"summary", "results", "baseline", "duration_s", "seed", "slo_s", "oscillation_window_s", "params",
            "profiles", "timelines"} <= set(data)
    assert {(x["profile"], x["policy"]) for x in data["results"]} == {
        (p, name) for p in ("step", "spike") for name in [e.name for e in POLICIES] + [MIN_STATIC]}
    for x in data["results"]:
        assert {"slo_attainment", "executor_seconds", "ratio_vs_baseline", "ratio_vs_min_static", "actions",
                "oscillations", "mean_executors", "max_executors", "batches", "goal"} <= set(x)
    for name in ("threshold", "static-max", "kingman", "utilization-target", "min-static=", "goal:"):
        assert name in r.output
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    bad = CliRunner().invoke(main, ["bench", "scaling", "--profiles", "nope", "--out", str(out)])
    assert bad.exit_code != 0 and "nope" in bad.output


# -- the micro-batch stage: tasks in waves, statistics as the control plane keeps them -------------
STAGE = {"trigger_s": 5.0, "overhead_s": 1.0, "row_cost_s": 0.002, "partitions": 8, "noise_sigma": 0.0,
         "task_noise_sigma": 0.0, "window_ms": 5000, "eval_interval_s": 10.0}


def test_tasks_run_in_waves_on_the_slot_that_frees_first():
    launch, finish = list_schedule(np.array([1.0, 1.0, 1.0, 0.5, 0.5]), 2)
    assert launch.tolist() == [0.0, 0.0, 1.0, 1.0, 1.5] and finish.tolist() == [1.0, 1.0, 2.0, 1.5, 2.0]
    launch, finish = list_schedule(np.array([1.0, 2.0]), 4)  # more slots than tasks: one wave
    assert launch.tolist() == [0.0, 0.0] and finish.tolist() == [1.0, 2.0]


def test_stage_statistics_and_constraint_in_the_view():
    # 400 rows/s, T = 5 s = the window: each window holds one batch of 2000 rows = 8 tasks of 250 rows
    # (0.5 s) on 2 slots: 4 waves, makespan 2 s, processing 1 + 2 = 3 s
    params = SimParams(**STAGE)
    sim = Simulation(constant(400), 60, static_controller(2), params)
    res = sim.run()
    assert {b.processing_s for b in res.batches} == {3.0}
    v = sim.view(60_000)
    (st,) = v.stages
    assert st.parallelism == 2 and st.max_tasks == 8 and st.span_s == 30.0
    assert st.utilization == pytest.approx(8 * 0.5 / (2 * 5.0))  # busy / (min(tasks, slots) · window)
    assert st.utilization_windows == pytest.approx((0.4,) * 6)
    assert st.records_in_per_second == pytest.approx(400)
    assert st.service_mean_s == pytest.approx(0.5) and st.service_cv == pytest.approx(0.0, abs=1e-9)
    assert st.latency_mean_s == pytest.approx((0.5 + 1.0 + 1.5 + 2.0) / 4)  # finish − submission
    assert st.wait_mean_s == pytest.approx(2.0 - 0.5)  # makespan − service (aggregators.view._wait)
    gaps = np.tile(np.diff([0, 0, 500, 500, 1000, 1000, 1500, 1500]) / 1000.0, 6)  # 6 stages' launch gaps
    assert st.arrival_cv == pytest.approx(gaps.std(ddof=1) / gaps.mean())
    (c,) = v.constraints
    assert c.bound_s == params.slo == 10.0 and c.span_s == 5.0 and c.source == "estimated"
    assert c.latency_s == pytest.approx(5.0 / 2 + 3.0) and c.batching_wait_s == pytest.approx(2.5)
    assert c.attainment == 1.0
    assert SimParams(**STAGE, constraint_bound_s=4.0).constraint_bound == 4.0


def test_processing_time_keeps_the_earlier_model_when_tasks_divide_evenly():
    # 1 slot: overhead + rows × cost, whatever the partitioning; 12 slots of 200 tasks: 17 waves
    p = SimParams()
    assert p.processing_s(16_000, 1) == pytest.approx(p.overhead_s + 16_000 * p.row_cost_s)
    assert p.processing_s(16_000, 12) == pytest.approx(p.overhead_s + 17 * 80 * p.row_cost_s)
    res = simulate(constant(2000), 40, static_controller(2), SimParams(noise_sigma=0, task_noise_sigma=0))
    assert [b.processing_s for b in res.batches] == pytest.approx([p.processing_s(8000, 2)] * len(res.batches))


def test_min_static_is_the_smallest_size_meeting_the_target():
    seen = []

    def fake(n):
        seen.append(n)
        return {"slo_attainment_windows": {1: 0.2, 2: 0.94, 3: 0.96, 4: 0.99}.get(n, 1.0), "slo_attainment": 1.0}

    params = SimParams()
    assert ATTAINMENT_METRIC == "slo_attainment_windows"  # the goal: constraint spans (Eq. 4.1)
    assert min_static(fake, params) == (3, fake(3)) and seen[:3] == [1, 2, 3]
    assert min_static(fake, params, metric="slo_attainment")[0] == 1
    assert min_static(lambda n: {"slo_attainment_windows": 0.5}, params) == (None, None)


def test_min_static_on_a_real_tiny_case():
    # 3000 rows/s, T = 4 s: 12 000 rows take 0.3 + 6 s on 1 executor (falls behind), 3.3 s on 2
    params = SimParams(noise_sigma=0, task_noise_sigma=0)

    def run_static(n):
        return metrics(simulate(constant(3000), 120, static(lambda p, mean: n)(params, 0.0), params), params, 120)

    n, m = min_static(run_static, params)
    assert n == 2 and m[ATTAINMENT_METRIC] >= 0.95 and run_static(1)[ATTAINMENT_METRIC] < 0.95


def test_min_static_row_and_ratios(report):
    for profile in PROFILES:
        rows = rows_of(report, profile)
        n = report["profiles"][profile]["min_static"]
        least = rows[MIN_STATIC]
        assert least["static_executors"] == n and least["executor_seconds"] == pytest.approx(n * DURATION)
        assert least[ATTAINMENT_METRIC] >= 0.95 and least["ratio_vs_min_static"] == 1.0
        assert rows["static-max"]["ratio_vs_min_static"] == pytest.approx(12 / n)
        params = SimParams()
        assert n > params.min_executors  # one executor fewer misses (the search is upwards)
        fewer = simulate(PROFILES[profile](DURATION), DURATION, static(lambda p, mean: n - 1)(params, 0.0), params,
                         seed=1)
        assert metrics(fewer, params, report["oscillation_window_s"])[ATTAINMENT_METRIC] < 0.95


def test_goal_verdicts():
    threshold = {"slo_attainment_windows": 0.9, "executor_seconds": 100.0, "ratio_vs_min_static": 1.2}
    good = {"slo_attainment_windows": 0.96, "executor_seconds": 90.0, "ratio_vs_min_static": 1.05}
    assert goal(good, threshold) == {"slo_met": True, "within_slack_of_min_static": True, "beats_threshold": True,
                                     "met": True}
    assert goal(threshold, threshold) == {"slo_met": False, "within_slack_of_min_static": False, "met": False}
    costly = dict(good, executor_seconds=120.0, ratio_vs_min_static=1.11)
    assert goal(costly, threshold)["within_slack_of_min_static"] is False and not goal(costly, threshold)["met"]


def test_kingman_and_utilization_target_rows(report):
    params = SimParams()
    assert KINGMAN_CONFIG == {}  # the policy's defaults (documented in bench.scaling)
    for profile in PROFILES:
        rows = rows_of(report, profile)
        for policy in ("kingman", "utilization-target"):
            r = rows[policy]
            assert params.min_executors <= r["min_executors"] <= r["max_executors"] <= params.max_executors
            assert r["actions"] > 0 and r["goal"] is not None and "beats_threshold" in r["goal"]
            assert r["executor_seconds"] < rows["static-max"]["executor_seconds"]
        assert rows["threshold"]["goal"] is not None and "beats_threshold" not in rows["threshold"]["goal"]
        assert rows["static-max"]["goal"] is None
    table = format_table(report)
    assert "kingman" in table and "utilization-target" in table and "vs min-static" in table


def test_kingman_decides_from_the_simulated_stage_and_constraint():
    # the step: Kingman scales up after it (bottleneck or constraint), from stage statistics it received
    params = SimParams()
    sim = Simulation(PROFILES["step"](DURATION), DURATION, governed("kingman", KINGMAN_CONFIG)(params, 5000),
                     params, seed=1)
    res = sim.run()
    ups = [a for a in res.actions if a.t_s > DURATION / 2 and a.new > a.old]
    assert ups and all("executors for 1 constraint" in a.reason for a in res.actions)
    assert max(a.new for a in ups) >= params.executors_for_rate(8000)
    v = sim.view(round(DURATION * 1000))
    assert v.stages and v.constraints[0].latency_s is not None


def test_kingman_and_utilization_target_are_deterministic():
    entries = [e for e in POLICIES if e.name in ("kingman", "utilization-target")]
    a = run_scaling_bench(profiles=("sinusoid",), duration_s=300, seed=3, policies=entries)
    b = run_scaling_bench(profiles=("sinusoid",), duration_s=300, seed=3, policies=entries)
    assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def test_span_truth_is_the_exact_mean_record_latency_of_each_span():
    # 2000 rows/s, T = 4 s, 2 executors, no noise: a batch of 8000 rows takes 0.3 + 2 s; the rows arriving
    # in (4k, 4k+4] leave at 4k+4+2.3, so a 5 s span's rows have latency = 6.3 − (arrival − 4k) mean
    params = SimParams(noise_sigma=0, task_noise_sigma=0)
    res = simulate(constant(2000), 40, static_controller(2), params)
    p = params.processing_s(8000, 2)
    assert p == pytest.approx(2.3)

    def exact(a, b):  # mean over arrivals τ in [a, b) of (batch end − τ); batch of τ ends at ⌈τ/4⌉·4 + p
        taus = np.arange(a, b, 0.001) + 0.0005
        return float(np.mean(np.ceil(taus / 4) * 4 + p - taus))

    spans = {round(x.start_s): x for x in res.spans}
    for start in (5, 10, 15, 20, 25, 30):
        assert spans[start].latency_s == pytest.approx(exact(start, start + 5), abs=0.01)
        assert spans[start].rows == pytest.approx(10_000) and spans[start].pending_rows == 0
    m = metrics(res, params, 120)
    assert m["windows"] == len(res.spans) and m["slo_attainment_windows"] == 1.0
    # a run ending at 38 s: the rows of (36, 38] are not processed; they count with (end of run − arrival)
    cut = simulate(constant(2000), 38, static_controller(2), params).spans[-1]
    assert cut.start_s == 35 and cut.pending_rows == pytest.approx(4000, abs=1)
    processed = 2000 * exact(35, 36)  # rows of (35, 36] leave at 36 + 2.3
    assert cut.latency_s == pytest.approx((processed + 4000 * 1.0) / 6000, abs=0.01)  # pending: mean 38 − τ = 1 s


def test_windows_attainment_counts_spans_over_the_bound():
    # one executor at 3000 rows/s falls behind: every span's mean latency grows past any bound
    params = SimParams(noise_sigma=0, task_noise_sigma=0, constraint_bound_s=6.0)
    behind = metrics(simulate(constant(3000), 120, static_controller(1), params), params, 120)
    keeps = metrics(simulate(constant(3000), 120, static_controller(2), params), params, 120)
    assert behind["slo_attainment_windows"] < 0.5 and keeps["slo_attainment_windows"] == 1.0


def test_executors_registering_during_a_batch_take_its_pending_tasks():
    # one executor, 16 000 rows (200 tasks of 80 rows × 0.5 ms = 40 ms each: 8 s of work); at t = 10 s the
    # policy asks for 4, which register at 20 s while the batch that started at 12.3 s still runs
    params = SimParams(noise_sigma=0, task_noise_sigma=0, partitions=200)
    res = simulate(constant(4000), 40, Controller(FixedTarget(4), SafetyConfig(min_value=1, max_value=12), 1), params)
    b = next(x for x in res.batches if x.start_s < 20 < x.end_s)
    alone = params.processing_s(b.rows, 1)
    assert b.executors == 1 and b.processing_s < alone - 1.0  # the joiners shortened it
    # tasks launched before 20 s ran on the one slot; the rest on 4 slots from 20 s on
    done_by_20 = math.floor((20 - b.start_s - params.overhead_s) / (b.rows / 200 * params.row_cost_s))
    left = 200 - done_by_20
    expected = 20 - b.start_s + math.ceil(left / 4) * b.rows / 200 * params.row_cost_s
    assert b.processing_s == pytest.approx(expected, abs=0.05)


# -- the live state and config overrides (bench scaling --live-state, --config) ----------------------
def test_the_bench_simulates_the_control_planes_live_state_by_default():
    live, plain = bench_params(), bench_params(live_state=False)
    assert (live.live_view, live.cluster_profile, live.state_interval_s) == (True, True, STATE_INTERVAL_S)
    assert plain == SimParams()
    rate = PROFILES["spike"](300)
    for policy in ("threshold", "utilization-target"):  # Kingman has no in-flight rule since issue #44
        with_state = simulate(rate, 300, governed(policy)(live, 5000), live, seed=0)
        without = simulate(rate, 300, governed(policy)(plain, 5000), plain, seed=0)
        # the in-flight rules act only on the live state (the running batch, the backlog)
        assert any("in flight" in a.reason or "backlog" in a.reason for a in with_state.actions), policy
        assert not any("in flight" in a.reason or "backlog" in a.reason for a in without.actions), policy
    rep = run_scaling_bench(profiles=("spike",), duration_s=300, policies=[e for e in POLICIES if e.name == "kingman"])
    assert rep["live_state"] is True and rep["params"]["live_view"] is True and rep["configs"] == {}


def test_configured_overrides_one_governed_policy():
    entries = configured({"kingman": {"spare_executors": 0}})
    assert [e.name for e in entries] == [e.name for e in POLICIES]
    assert all(a is b for a, b in zip(entries, POLICIES) if a.name != "kingman")
    params = bench_params()
    ctrl = next(e for e in entries if e.name == "kingman").build(params, 5000)
    assert ctrl.config.spare_executors == 0 and ctrl.config.max_value == params.max_executors
    default = next(e for e in POLICIES if e.name == "kingman").build(params, 5000)
    assert default.config.spare_executors == 1
    rate = PROFILES["staircase"](600)
    lean = simulate(rate, 600, ctrl, params, seed=0)
    assert not any("spare" in a.reason for a in lean.actions)
    assert any("spare" in a.reason for a in simulate(rate, 600, default, params, seed=0).actions)
    with pytest.raises(ValueError, match="static-max"):
        configured({"static-max": {}})


def test_cli_live_state_and_config(tmp_path):
    out = tmp_path / "s.json"
    r = CliRunner().invoke(main, ["bench", "scaling", "--profiles", "spike", "--duration", "300", "--no-live-state",
                                  "--config", 'kingman={"spare_executors": 0}', "--config",
                                  'threshold={"scale_up_ratio": 0.8}', "--out", str(out), "--plot", ""],
                           catch_exceptions=False)
    assert r.exit_code == 0, r.output
    data = json.loads(out.read_text())
    assert data["live_state"] is False and data["params"]["live_view"] is False
    assert data["configs"] == {"kingman": {"spare_executors": 0}, "threshold": {"scale_up_ratio": 0.8}}
    expected = run_scaling_bench(profiles=("spike",), duration_s=300, params=bench_params(False),
                                 configs={"kingman": {"spare_executors": 0}, "threshold": {"scale_up_ratio": 0.8}})
    assert data["results"] == json.loads(json.dumps(expected["results"]))
    for bad, words in ((['kingman={"spare_executors": -1}'], ["kingman", "spare_executors"]),
                       (["nope={}"], ["nope"]), (['kingman=[1]'], ["JSON object"]),
                       (['kingman={}', 'kingman={}'], ["twice"])):
        gone = tmp_path / "bad.json"
        args = [x for c in bad for x in ("--config", c)]
        res = CliRunner().invoke(main, ["bench", "scaling", "--profiles", "spike", "--duration", "300", *args,
                                        "--out", str(gone), "--plot", ""])
        assert res.exit_code == 2 and all(w in res.output for w in words), res.output
        assert not gone.exists()
    fixture = Path(__file__).parent.parent / "data" / "scaling-real-2026-11-27-1143.json"
    res = CliRunner().invoke(main, ["bench", "scaling", "--calibrate", str(fixture), "--config", "kingman={}",
                                    "--out", str(tmp_path / "c.json")])
    assert res.exit_code == 2 and "--calibrate" in res.output and not (tmp_path / "c.json").exists()


def test_a_probed_source_lets_utilization_target_size_a_step_before_its_batch_completes(tmp_path):
    """``bench scaling --probe``: the source is probed between batches, so utilization-target's target rate is the
    rate arriving now (``live_rate`` unset: on when probed) and the spike's step is sized for sooner; more of its
    spans are kept than with the same live state unprobed (0.929 → 0.979 at seed 0, 1200 s)."""
    probed, plain = bench_params(probe=True), bench_params()
    assert probed.live_probe and not plain.live_probe and probed.surge_ratio
    with pytest.raises(ValueError, match="live state"):
        bench_params(live_state=False, probe=True)
    entries = [e for e in POLICIES if e.name == "utilization-target"]
    with_probe = run_scaling_bench(profiles=("spike",), params=probed, policies=entries)
    without = run_scaling_bench(profiles=("spike",), params=plain, policies=entries)
    att = {name: next(r for r in rep["results"] if r["policy"] == "utilization-target")["slo_attainment_windows"]
           for name, rep in (("probe", with_probe), ("plain", without))}
    assert att["probe"] >= 0.95 > att["plain"]
    assert with_probe["probe"] is True and without["probe"] is False
    out = tmp_path / "p.json"
    r = CliRunner().invoke(main, ["bench", "scaling", "--profiles", "spike", "--duration", "300", "--probe",
                                  "--out", str(out), "--plot", ""], catch_exceptions=False)
    assert r.exit_code == 0 and json.loads(out.read_text())["probe"] is True
    for bad in (["--no-live-state", "--probe"], ["--calibrate", "x.json", "--probe"]):
        gone = tmp_path / "gone.json"
        res = CliRunner().invoke(main, ["bench", "scaling", *bad, "--out", str(gone), "--plot", ""])
        assert res.exit_code == 2 and "--probe" in res.output and not gone.exists(), res.output
