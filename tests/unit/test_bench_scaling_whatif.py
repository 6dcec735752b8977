"""bench scaling-whatif: Kingman variants on staircases simulated on a measured cluster."""
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from spark_governor.api.cli import main
from spark_governor.bench.scaling_calibrate import load_report
from spark_governor.bench.scaling_whatif import format_whatif, parse_staircases, run_whatif

REAL = Path(__file__).resolve().parents[1] / "data" / "scaling-real-2026-11-25.json"


def test_parse_staircases_and_its_errors():
    assert parse_staircases("2000,16000,2000x60; 4000,8000") == (((2000.0, 16000.0, 2000.0), 60.0),
                                                                 ((4000.0, 8000.0), 50.0))
    for bad in ("", "a,bx3", "2000x0", "-1,2x5"):
        with pytest.raises(ValueError):
            parse_staircases(bad)


def test_variants_on_a_staircase_with_the_measured_cluster():
    report = load_report(REAL)
    out = run_whatif(report, (((2000.0, 8000.0, 2000.0), 30.0),),
                     {"thesis": {"spare_executors": 0}, "spare": {"spare_executors": 1}}, seeds=1)
    rows = {r["variant"]: r for r in out["results"]}
    assert set(rows) == {"thesis", "spare"}
    for r in rows.values():
        assert 0.0 <= r["attainment_worst"] <= r["attainment"] <= 1.0
        assert r["static_executor_seconds"] == report["max_executors"] * 3 * 30.0
        assert 0 < r["ratio_vs_static"] <= 1.0 + 1e-9
    # the run's measured cluster is what the simulator uses (not its defaults), and one executor more than
    # the plan costs executor-seconds (attainment may go either way on one short seed)
    assert out["defaults"] == [] and out["params"]["up_delay_s"] > 0
    assert rows["spare"]["executor_seconds"] >= rows["thesis"]["executor_seconds"]
    assert "thesis" in format_whatif(out) and out["summary"]["spare"]["max_ratio_vs_static"] > 0


def test_cli_rejects_bad_input_with_the_option_named(tmp_path):
    r = CliRunner().invoke(main, ["bench", "scaling-whatif", "--calibrate", str(REAL), "--staircases", "x"])
    assert r.exit_code == 2 and "--staircases" in r.output
    r = CliRunner().invoke(main, ["bench", "scaling-whatif", "--calibrate", str(REAL), "--variants", '{"a": {"spare_executors": -1}}'])
    assert r.exit_code == 2 and "--variants" in r.output
    r = CliRunner().invoke(main, ["bench", "scaling-whatif", "--calibrate", str(tmp_path / "none.json")])
    assert r.exit_code == 1 and "--calibrate" in r.output
    out = tmp_path / "w.json"
    r = CliRunner().invoke(main, ["bench", "scaling-whatif", "--calibrate", str(REAL), "--staircases", "2000,6000x20",
                                  "--variants", '{"d": {}}', "--seeds", "1", "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert json.loads(out.read_text())["results"][0]["variant"] == "d"


def test_other_policies_run_beside_the_kingman_variants(tmp_path):
    out = tmp_path / "w.json"
    r = CliRunner().invoke(main, ["bench", "scaling-whatif", "--calibrate", str(REAL), "--staircases", "2000,6000x20",
                                  "--variants", '{"k": {}, "t": {"policy": "threshold"}}', "--seeds", "1",
                                  "--out", str(out)])
    assert r.exit_code == 0, r.output
    rows = {x["variant"]: x for x in json.loads(out.read_text())["results"]}
    assert set(rows) == {"k", "t"} and rows["t"]["config"] == {"policy": "threshold"}
    r = CliRunner().invoke(main, ["bench", "scaling-whatif", "--calibrate", str(REAL), "--variants",
                                  '{"x": {"policy": "static"}}'])
    assert r.exit_code == 2 and "--variants" in r.output and "static" in r.output
