"""``spark-governor bench replay --dir N``: a generated History Server directory (renamed copies of a real Spark
event log) replayed as ``replay DIR`` does; the JSON counts every event of every application. Each spans more
than 256 s of log time: more query states than one report may carry (the replay flushes before)."""
import json

from click.testing import CliRunner

TEMPLATE = "tests/data/replay_template.jsonl.gz"


def test_bench_replay_dir_replays_every_generated_application(tmp_path):
    from spark_governor.api.cli import main

    out = tmp_path / "dir.json"
    res = CliRunner().invoke(main, ["bench", "replay", "--template", TEMPLATE, "--dir", "3", "--mb-each", "16",
                                    "--workers", "2", "--codec", "zstd", "--out", str(out)])
    assert res.exit_code == 0, res.output
    r = json.loads(out.read_text())
    assert r["apps"] == 3 and r["failed"] == 0 and r["workers"] == 2
    assert r["events"] == r["events_generated"] > 0 and r["events_per_second"] > 0
    assert sum(r["verdicts"].values()) == 3 and "null" not in r["verdicts"]
    assert 0 < r["peak_rss_mib_worker"] < 2048
