"""Issue #44: the ablation of the executor policies' options (``bench.scaling_ablation``), at a small size."""
from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from spark_governor.api.cli import main
from spark_governor.bench.scaling_ablation import (EXTENSIONS, JOB_SIDE, PEAK, STATIC, THESIS, _params, clusters,
                                                   feasible, run_ablation, shapes, summarize, variants, verdict)
from spark_governor.bench.scaling_calibrate import load_report
from spark_governor.policies.registry import get_policy, validate_config

DATA = Path(__file__).resolve().parent.parent / "data"
REPORT = str(DATA / "scaling-real-2026-12-07-0956.json")


def test_every_shape_reaches_the_same_peak_from_the_start():
    for name, (switches, duration) in shapes().items():
        rates = [r for _, r in switches]
        assert switches[0][0] == 0 and duration > switches[-1][0], name
        assert max(rates) == pytest.approx(PEAK) and min(rates) > 0, name
        assert [t for t, _ in switches] == sorted(t for t, _ in switches), name
    assert shapes(seed=1)["random walk"] != shapes(seed=2)["random walk"]
    assert shapes(seed=1)["random walk"] == shapes(seed=1)["random walk"]
    assert max(r for _, r in shapes(peak=8000)["burst train"][0]) == 8000


def test_every_off_value_is_a_valid_config_of_its_policy():
    for policy, exts in EXTENSIONS.items():
        cls = get_policy(policy)
        for name, cfg in exts.items():
            assert set(cfg) <= set(cls.Config.model_fields), (policy, name)
            validate_config(cls, {"min_value": 1, "max_value": 4, **cfg})
    v = variants(("kingman", "threshold"))
    assert f"kingman: {THESIS}" in v and "threshold: defaults" in v and "utilization-target: defaults" not in v
    assert all(f"kingman: {n} off" in v for n in JOB_SIDE)
    assert not any(x["job"] for k, x in v.items() if k.startswith("threshold"))


def test_derived_clusters_are_slower_and_faster_than_the_measured_one():
    grid = clusters([REPORT])
    assert [n for n, _, _ in grid][0] == "2026-12-07-0956" and len(grid) == 5
    report = load_report(REPORT)
    base = _params(report, {})
    slow = _params(report, {"registration": 2.0})
    assert slow.up_delays_s == tuple(2 * d for d in base.up_delays_s) and slow.up_delay_s == 2 * base.up_delay_s
    heavy = _params(report, {"service": 1.5})
    assert heavy.row_cost_s == pytest.approx(1.5 * base.row_cost_s)
    assert heavy.driver_overhead_s == pytest.approx(1.5 * base.driver_overhead_s)
    assert clusters([REPORT], derive=False) == grid[:1]


def test_the_rule_earns_only_what_buys_without_costing():
    row = {"buys_points": 0.03, "saves": -0.1, "costs_points": 0.0}
    assert verdict(row) == "earns"
    assert verdict({**row, "buys_points": 0.0, "saves": 0.06}) == "earns"
    assert verdict({**row, "costs_points": 0.05}) == "mixed"
    assert verdict({**row, "buys_points": 0.01, "costs_points": 0.05}) == "costs"
    assert verdict({**row, "buys_points": 0.01}) == "nothing"


def test_summary_reads_gains_and_costs_per_cell():
    vmap = {"kingman: defaults": {"policy": "kingman"}, "kingman: x off": {"policy": "kingman"}}

    def cell(name, ref, off, static=1.0):
        return {"cluster": "c", "shape": name, "variants": {
            STATIC: {"attainment": static, "attainment_worst": static, "executor_seconds": 1000.0,
                     "static_executor_seconds": 1000.0},
            "kingman: defaults": {"attainment": ref[0], "attainment_worst": ref[0], "executor_seconds": ref[1],
                                  "static_executor_seconds": 1000.0},
            "kingman: x off": {"attainment": off[0], "attainment_worst": off[0], "executor_seconds": off[1],
                               "static_executor_seconds": 1000.0}}}

    cells = [cell("a", (1.0, 600.0), (0.9, 500.0)), cell("b", (0.95, 600.0), (0.98, 600.0)),
             cell("c", (0.1, 600.0), (0.0, 600.0), static=0.5)]  # beyond any size: not counted
    s = summarize(cells, vmap)
    x = s["kingman: x off"]
    assert x["cells"] == 2
    # per shape: a buys 10 points, b costs 3; over the cluster's two shapes the worst case goes 0.95 → 0.9
    assert x["buys_points"] == pytest.approx(0.1) and x["costs_points"] == pytest.approx(0.03)
    assert x["where_buys"] == "shape a" and x["where_costs"] == "shape b"
    assert x["spends"] == pytest.approx(0.2) and x["where_spends"] == "shape a" and x["saves"] == pytest.approx(0.0)
    assert x["worst"] == 0.95 and x["worst_off"] == 0.9 and x["verdict"] == "mixed"
    assert feasible(cells) == cells[:2]


def test_a_small_grid_runs_every_variant_in_the_simulator():
    out = run_ablation([REPORT], ("kingman", "threshold", "utilization-target"), ["spike"], seeds=1, derive=False,
                       workers=1)
    assert len(out["cells"]) == 1 and set(out["cells"][0]["variants"]) == set(out["variants"]) | {STATIC}
    assert out["cells"][0]["variants"][STATIC]["attainment"] == 1.0  # 4 executors keep the spike here
    s = out["summary"]
    # the thesis' rule (every extension off) spends fewer executor-seconds than the defaults on the spike
    assert s[f"kingman: {THESIS}"]["ratio_vs_static_off"] < s["kingman: defaults"]["ratio_vs_static"]
    assert all(r["verdict"] in ("earns", "mixed", "costs", "nothing") for k, r in s.items() if "defaults" not in k)
    with pytest.raises(ValueError, match="unknown load shape"):
        run_ablation([REPORT], ("kingman",), ["square wave"], seeds=1, derive=False, workers=1)


def test_the_cli_refuses_bad_input_before_running(tmp_path):
    r = CliRunner().invoke(main, ["bench", "scaling-ablation", "--reports", str(tmp_path / "none-*.json")])
    assert r.exit_code == 2 and "--reports" in r.output and "no file matches" in r.output
    r = CliRunner().invoke(main, ["bench", "scaling-ablation", "--reports", REPORT, "--policies", "pid"])
    assert r.exit_code == 2 and "--policies" in r.output
    r = CliRunner().invoke(main, ["bench", "scaling-ablation", "--reports", REPORT, "--shapes", "square"])
    assert r.exit_code == 2 and "--shapes" in r.output and "unknown load shape" in r.output
    out = tmp_path / "a.json"
    r = CliRunner().invoke(main, ["bench", "scaling-ablation", "--reports", REPORT, "--no-derived", "--shapes", "spike",
                                  "--seeds", "1", "--workers", "1", "--policies", "threshold", "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert "threshold: in flight off" in r.output and out.exists()


STORED = DATA / "scaling-ablation-2026-12-07-work.json.gz"
DOCS = Path(__file__).resolve().parent.parent.parent / "docs" / "benchmarks.md"


@pytest.fixture(scope="module")
def stored():
    import gzip
    import json

    return json.loads(gzip.open(STORED).read())


def test_the_docs_table_is_the_stored_ablations(stored):
    from spark_governor.bench.scaling_ablation import format_ablation

    assert summarize(stored["cells"], stored["variants"]) == stored["summary"]
    docs = DOCS.read_text()
    for line in format_ablation(stored, markdown=True).splitlines():
        assert line in docs, line


@pytest.mark.parametrize("cluster, shape", [("2026-12-07-0956", "spike"), ("2026-11-25", "hidden staircase"),
                                            ("2026-12-07-1437-cpu-hog", "sharp staircase")])
def test_todays_code_and_defaults_give_the_stored_cells(stored, cluster, shape):
    """The ablation's rows for the defaults are today's: the same cells, run again, give the stored figures (the
    simulator is deterministic given its seeds). A changed default or model fails here until the ablation and the
    docs' table are run again."""
    from spark_governor.bench.scaling_ablation import run_cell

    cell = next(c for c in stored["cells"] if c["cluster"] == cluster and c["shape"] == shape)
    spec = next(c for c in stored["clusters"] if c["name"] == cluster)
    chosen = {k: v for k, v in stored["variants"].items() if k.endswith(": defaults") or k == f"kingman: {THESIS}"}
    shape_spec = stored["shapes"][shape]
    got = run_cell(str(DATA / Path(spec["report"]).name), spec["derived"],
                   (shape_spec["switches"], shape_spec["duration_s"]), chosen, stored["seeds"])
    for name, r in got.items():
        assert r == pytest.approx(cell["variants"][name], rel=1e-9), name


def test_every_real_run_kept_is_in_the_data_index():
    index = (DATA / "README.md").read_text()
    for p in sorted(DATA.glob("scaling-real-*.json")) + [STORED]:
        assert f"`{p.name}`" in index, p.name
