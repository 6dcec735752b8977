"""``spark-governor plan`` and ``bench partitioners`` (tiny sizes)."""
import json

import pytest
from click.testing import CliRunner

from spark_governor.api.cli import main
from spark_governor.policies.partitioning.registry import partitioners

EXAMPLE_A = "key,count\nA,22\nB,19\nC,13\nD,10\nE,9\nF,8\nG,7\nH,5\nI,4\nJ,3\n"


def run(*args):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


@pytest.fixture
def counts_file(tmp_path):
    p = tmp_path / "counts.csv"
    p.write_text(EXAMPLE_A)
    return str(p)


def test_plan_prompt_json_example_a(counts_file):
    r = run("plan", "prompt", "--counts", counts_file, "--partitions", "4", "--reduce", "3", "--json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert out["block_loads"] == [25, 25, 25, 25]
    assert out["assignment"]["A"]["blocks"] == [[0, 15], [3, 7]]
    assert out["assignment"]["C"]["blocks"] == [[2, 13]]
    assert all(0 <= e["bucket"] < 3 for e in out["assignment"].values())
    assert out["metrics"]["mpi"] == pytest.approx(0.733333, rel=1e-5)
    assert out["metrics"]["ksr"] == pytest.approx(1.2)


def test_plan_option_changes_the_plan(counts_file):
    r = run("plan", "prompt", "--counts", counts_file, "-p", "4", "-o", "zigzag_start=continue", "--json")
    assert json.loads(r.output)["metrics"]["mpi"] == pytest.approx(0.4)


@pytest.mark.parametrize("name", sorted(partitioners()))
def test_every_partitioner_runs_through_plan(counts_file, name):
    r = run("plan", name, "--counts", counts_file, "-p", "4", "--arrival", "shuffled", "--json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert sum(out["block_loads"]) == 100 and out["algorithm"] == name


def test_plan_text_output(counts_file):
    r = run("plan", "hash", "--counts", counts_file, "-p", "4")
    assert r.exit_code == 0 and "KSR 1.0000" in r.output


@pytest.mark.parametrize("content,message", [
    ("key,count\nA,3\nB,x\n", "counts.csv:3: count 'x' is not an integer"),
    ("A,3\nB,0\n", "counts.csv:2: count 0 must be > 0"),
    ("A,3\nB\n", "counts.csv:2: expected 2 fields"),
    ("A,3\nA,4\n", "counts.csv:2: key 'A' repeats line 1"),
    ("A,3\n,4\n", "counts.csv:2: empty key"),
])
def test_bad_counts_file_names_the_line(tmp_path, content, message):
    p = tmp_path / "counts.csv"
    p.write_text(content)
    r = CliRunner().invoke(main, ["plan", "prompt", "--counts", str(p), "-p", "2"])
    assert r.exit_code != 0 and message in r.output


def test_unknown_algorithm_and_option(counts_file):
    r = CliRunner().invoke(main, ["plan", "nope", "--counts", counts_file, "-p", "2"])
    assert r.exit_code != 0 and "unknown partitioner 'nope'" in r.output
    r = CliRunner().invoke(main, ["plan", "prompt", "--counts", counts_file, "-p", "2", "-o", "zigzag_start=x"])
    assert r.exit_code != 0 and "zigzag_start" in r.output
    r = CliRunner().invoke(main, ["plan", "prompt", "--counts", "/nonexistent.csv", "-p", "2"])
    assert r.exit_code != 0 and "/nonexistent.csv" in r.output


def test_bench_partitioners_tiny(tmp_path):
    out = tmp_path / "p.json"
    r = run("bench", "partitioners", "--z", "1.0,2.0", "--supports", "500", "--tuples", "5000", "--partitions", "4",
            "--out", str(out), "--plot", str(tmp_path / "p.png"))
    assert r.exit_code == 0, r.output
    report = json.loads(out.read_text())
    algos = {row["algorithm"] for row in report["rows"]}
    assert {"prompt", "hash", "shuffle", "time", "pk2", "pk5", "cam"} <= algos
    prompt = [row for row in report["rows"] if row["algorithm"] == "prompt"]
    assert len(prompt) == 2 and all(row["max_mean_load"] <= 1.05 for row in prompt)
    assert all(row["max_mean_vs_hash"] is not None for row in report["rows"])
    assert (tmp_path / "p.png").stat().st_size > 0
    assert "prompt: worst max/mean load" in r.output
