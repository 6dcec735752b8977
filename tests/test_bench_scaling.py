"""``bench scaling``: the micro-batch simulator, the policy comparison and its CLI command."""
import json

import numpy as np
import pytest
from click.testing import CliRunner

from api.cli import main
from bench.scaling import (
    BASELINE,
    POLICIES,
    PROFILES,
    count_oscillations,
    governed,
    run_scaling_bench,
)
from bench.scaling_sim import (
    Action,
    Controller,
    SimParams,
    Simulation,
    StaticPolicy,
    simulate,
)
from policies.base import Policy, Proposal
from policies.safety import SafetyConfig

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


EXACT = {"trigger_s": 4.0, "overhead_s": 1.0, "noise_sigma": 0.0, "up_delay_s": 10.0, "eval_interval_s": 10.0}


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
    assert [r["policy"] for r in rep["results"]] == ["static-max", "threshold"]


def test_cli_writes_json_and_plot(tmp_path):
    out, png = tmp_path / "scaling.json", tmp_path / "scaling.png"
    r = CliRunner().invoke(main, ["bench", "scaling", "--profiles", "step,spike", "--duration", "300",
                                  "--seed", "2", "--out", str(out), "--plot", str(png)], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    data = json.loads(out.read_text())
    assert {"summary", "results", "baseline", "duration_s", "seed", "slo_s", "oscillation_window_s", "params",
            "profiles", "timelines"} <= set(data)
    assert {(x["profile"], x["policy"]) for x in data["results"]} == {
        (p, e.name) for p in ("step", "spike") for e in POLICIES}
    for x in data["results"]:
        assert {"slo_attainment", "executor_seconds", "ratio_vs_baseline", "actions", "oscillations",
                "mean_executors", "max_executors", "batches"} <= set(x)
    assert "threshold" in r.output and "static-max" in r.output
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    bad = CliRunner().invoke(main, ["bench", "scaling", "--profiles", "nope", "--out", str(out)])
    assert bad.exit_code != 0 and "nope" in bad.output
