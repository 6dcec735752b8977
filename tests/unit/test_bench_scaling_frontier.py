"""bench scaling-frontier: Kingman's defaults against each baseline over a grid of its configs, at equal
executor-seconds, simulated on a measured cluster."""
import json
from pathlib import Path

from click.testing import CliRunner

from spark_governor.api.cli import main
from spark_governor.bench.scaling_calibrate import load_report
from spark_governor.bench.scaling_frontier import (GRID, REFERENCE, format_frontier, frontier_rows, grid_variants,
                                                   run_frontier)
from spark_governor.policies.registry import get_policy, validate_config

# run 97 on the standalone cluster: all four policies on the spike, the profile split into cold and idle executors
REAL = Path(__file__).resolve().parents[1] / "data" / "scaling-real-2026-11-28-0445-reprofiled.json"
SMALL = {"threshold": {"scaling_interval_s": (8.0, 60.0), "scale_up_ratio": (0.5, 0.9), "scale_down_ratio": (0.1, 0.5)},
         "utilization-target": {"target_utilization": (0.3, 0.7)}}


def test_grid_variants_are_every_combination_the_config_accepts():
    variants = grid_variants(SMALL)
    # threshold: 2 × 2 × 2 less the two with scale_down_ratio 0.5 ≥ scale_up_ratio 0.5; utilization-target: 2
    assert len(variants) == 6 + 2
    assert not any(v["policy"] == "threshold" and v["scale_down_ratio"] >= v["scale_up_ratio"]
                   for v in variants.values())
    for cfg in variants.values():
        validate_config(get_policy(cfg["policy"]), {"min_value": 1, "max_value": 4,
                                                    **{k: v for k, v in cfg.items() if k != "policy"}})
    assert len(grid_variants()) == 33 + 21  # the default grid
    assert set(GRID) == {"threshold", "utilization-target"}


def _row(variant, policy, attainment, exec_s, levels=(2000, 16000, 2000)):
    return {"levels": list(levels), "level_s": 60.0, "variant": variant,
            "config": {} if policy == "kingman" else {"policy": policy}, "attainment": attainment,
            "executor_seconds": exec_s, "ratio_vs_static": exec_s / 720.0}


def test_frontier_rows_read_each_baseline_at_the_references_budget():
    out = {"results": [
        _row(REFERENCE, "kingman", 0.95, 500.0),
        # threshold: the config within budget keeps less; one keeps as much only at more executor-seconds
        _row("t1", "threshold", 0.70, 300.0), _row("t2", "threshold", 0.90, 500.0), _row("t3", "threshold", 1.0, 700.0),
        # utilization-target: one config within budget keeps as much, cheaper
        _row("u1", "utilization-target", 0.95, 450.0), _row("u2", "utilization-target", 0.80, 400.0),
        # another staircase: every baseline config spends more than Kingman; and one where a baseline is ahead
        _row(REFERENCE, "kingman", 0.90, 300.0, (8000, 16000)), _row("t1", "threshold", 0.99, 350.0, (8000, 16000)),
        _row("u1", "utilization-target", 0.99, 290.0, (8000, 16000)),
    ]}
    rows = {(tuple(r["levels"]), r["policy"]): r for r in frontier_rows(out)}
    t = rows[((2000, 16000, 2000), "threshold")]
    assert t["verdict"] == "ahead" and t["best_at_budget"]["variant"] == "t2" and t["cheapest_as_good"]["variant"] == "t3"
    assert t["configs"] == 3 and t["reference_attainment"] == 0.95
    u = rows[((2000, 16000, 2000), "utilization-target")]
    assert u["verdict"] == "level" and u["best_at_budget"]["variant"] == "u1" and u["cheapest_as_good"]["variant"] == "u1"
    t2 = rows[((8000, 16000), "threshold")]
    assert t2["verdict"] == "ahead" and t2["best_at_budget"] is None and t2["cheapest_as_good"]["variant"] == "t1"
    u2 = rows[((8000, 16000), "utilization-target")]
    assert u2["verdict"] == "behind" and u2["best_at_budget"]["attainment"] == 0.99


def test_run_frontier_on_the_measured_cluster_agrees_with_its_own_runs():
    out = run_frontier(load_report(REAL), staircases=(((2000, 16000, 2000), 60.0),), grid=SMALL, seeds=1)
    assert out["reference"] == REFERENCE and out["variants"][REFERENCE] == {}
    assert len(out["results"]) == 1 + 8 and len(out["frontier"]) == 2
    ref = next(r for r in out["results"] if r["variant"] == REFERENCE)
    for row in out["frontier"]:
        mine = [r for r in out["results"] if r["config"].get("policy") == row["policy"]]
        within = [r["attainment"] for r in mine if r["executor_seconds"] <= ref["executor_seconds"]]
        if within:
            assert row["best_at_budget"]["attainment"] == max(within)
            assert row["verdict"] == ("ahead" if ref["attainment"] > max(within) + 1e-9 else
                                      "level" if ref["attainment"] >= max(within) - 1e-9 else "behind")
        else:
            assert row["best_at_budget"] is None and row["verdict"] == "ahead"
        good = [r["executor_seconds"] for r in mine if r["attainment"] >= ref["attainment"]]
        assert (row["cheapest_as_good"] is None) == (not good)
    text = format_frontier(out)
    assert "2k,16k,2k × 60 s" in text and "threshold" in text and "utilization-target" in text
    json.dumps(out)  # JSON-ready


def test_cli_writes_the_report_and_the_plot_and_refuses_bad_input(tmp_path):
    out, png = tmp_path / "f.json", tmp_path / "f.png"
    grid = json.dumps({"utilization-target": {"target_utilization": [0.5, 0.7]}})
    r = CliRunner().invoke(main, ["bench", "scaling-frontier", "--calibrate", str(REAL), "--staircases", "2000,16000,2000x60",
                                  "--grid", grid, "--seeds", "1", "--out", str(out), "--plot", str(png),
                                  "--launch-hold"])
    assert r.exit_code == 0, r.output
    report = json.loads(out.read_text())
    # run 97 ran without the launch hold; --launch-hold simulates its cluster with it (the plugin's rule, the slot hold)
    assert report["params"]["launch_hold"] is True and report["params"]["launch_hold_waves"] == 1.0
    assert report["overrides"] == {"launch_hold": True, "launch_hold_waves": 1.0, "slot_hold": True}
    assert [row["policy"] for row in report["frontier"]] == ["utilization-target"]
    assert png.stat().st_size > 0 and "verdict" in r.output
    for bad, where in ((["--grid", "{"], "--grid"), (["--grid", '{"kingman": {"spare_executors": [0]}}'], "--grid"),
                       (["--grid", '{"threshold": {"scale_up_ratio": [0.1], "scale_down_ratio": [0.3]}}'], "--grid"),
                       (["--grid", '{"threshold": {"scale_up_ratio": "0.5"}}'], "--grid"),
                       (["--staircases", "x"], "--staircases")):
        r = CliRunner().invoke(main, ["bench", "scaling-frontier", "--calibrate", str(REAL), *bad, "--out", str(out)])
        assert r.exit_code == 2 and where in r.output, (bad, r.output)
    r = CliRunner().invoke(main, ["bench", "scaling-frontier", "--calibrate", str(tmp_path / "none.json")])
    assert r.exit_code != 0 and "--calibrate" in r.output
