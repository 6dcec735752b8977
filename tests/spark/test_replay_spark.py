"""Replay of event logs written by real Spark (``event_log_writer.py``, once per session, in its own JVM).

Oracles: Spark's own ``StreamingQuery.recentProgress`` of each run (``truth.json``) for the imported
batches and input rows; the live reporter's statistics of the same run (``live.db``) for "a replayed
run and the live run produce the same statistics".
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from sqlalchemy import func, select

from tests.conftest import require

pytestmark = pytest.mark.spark

WRITER = Path(__file__).with_name("event_log_writer.py")
STREAMING = ("plain", "lz4", "zstd", "snappy", "rolling")


@pytest.fixture(scope="session")
def event_logs(tmp_path_factory):
    require(shutil.which("java") is not None, "java")
    out = tmp_path_factory.mktemp("event-logs")
    proc = subprocess.run(["nice", "-n", "10", sys.executable, str(WRITER), str(out)], capture_output=True, text=True,
                          timeout=300, env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    logs = json.loads(proc.stdout.strip().splitlines()[-1])
    logs["truth"] = json.loads((out / "truth.json").read_text())
    logs["live_db"] = f"sqlite:///{out / 'live.db'}"
    return logs


@pytest.fixture
def engine(tmp_path):
    from spark_governor.aggregators.db import make_engine, upgrade

    url = f"sqlite:///{tmp_path / 'replay.db'}"
    upgrade(url)
    eng = make_engine(url)
    yield eng
    eng.dispose()


def stored(engine, job: str) -> dict:
    """Everything the statistics API shows of ``job``, without ids and the bookkeeping stamps (a live run's
    are its reports' arrival times, a replay's the log's event times)."""
    from spark_governor.aggregators import queries
    from spark_governor.aggregators.models import batches, jobs, tasks

    with engine.connect() as conn:
        jid = conn.execute(select(jobs.c.id).where(jobs.c.name == job)).scalar_one()
        templates = [{k: v for k, v in t.items() if k not in ("first_ms", "last_ms", "id")}
                     for t in queries.template_stats(conn, job, windows=10_000)]
        rows = [dict(r) for r in conn.execute(select(batches).where(batches.c.job_id == jid)
                                              .order_by(batches.c.run_id, batches.c.batch_id)).mappings()]
        for r in rows:
            for k in ("id", "job_id", "job_run_id"):
                r.pop(k, None)
        n_tasks = conn.execute(select(func.count()).select_from(tasks).where(tasks.c.job_id == jid)).scalar()
    return {"templates": templates, "batches": rows, "tasks": n_tasks}


def close(x, y, rel: float = 1e-9) -> bool:
    """``x == y`` with floats equal to ``rel``: the live reporter cut its reports elsewhere, so windows
    were merged in another order (Chan/Welford merges agree to rounding only)."""
    if isinstance(x, float) and isinstance(y, float):
        return x == pytest.approx(y, rel=rel, abs=1e-15)
    if isinstance(x, dict) and isinstance(y, dict):
        return x.keys() == y.keys() and all(close(x[k], y[k], rel) for k in x)
    if isinstance(x, (list, tuple)) and isinstance(y, (list, tuple)):
        return len(x) == len(y) and all(close(a, b, rel) for a, b in zip(x, y))
    return x == y


def log_lines(path: str, needle: str) -> int:
    with open(path, encoding="utf-8") as f:
        return sum(1 for line in f if needle in line)


@pytest.mark.parametrize("variant", STREAMING)
def test_import_counts_equal_sparks_progress(event_logs, engine, variant):
    from spark_governor.api.replay import replay

    r = replay(engine, event_logs[variant], job=f"j-{variant}")
    truth = event_logs["truth"][variant]
    assert r.streaming and [q["name"] for q in r.queries] == ["replay_counts"]
    assert r.batches == len(truth) and r.batches >= 3
    assert r.rows == sum(t["rows"] for t in truth) > 0
    got = stored(engine, f"j-{variant}")
    assert sorted(b["batch_id"] for b in got["batches"]) == sorted(t["batch_id"] for t in truth)
    assert {b["batch_id"]: b["num_input_rows"] for b in got["batches"]} == {t["batch_id"]: t["rows"] for t in truth}
    assert got["tasks"] == r.tasks > 0 and r.stages > 0
    assert r.read["skipped"] == {} and r.reports_failed == 0
    assert r.first_ms < r.last_ms  # the log's own clock
    assert min(b["trigger_ms"] for b in got["batches"]) >= r.first_ms


def test_lean_reading_translates_as_whole_reading(event_logs):
    """Every Spark-written variant: the events read lean (what the translation never reads cut from the
    lines before parsing, ``collectors.event_log.slim``) translate into exactly the records of the whole
    events, and the cut does happen."""
    from spark_governor.api.replay import TRANSLATED
    from spark_governor.collectors.event_log import EventLogReader
    from spark_governor.collectors.events import EventTranslator

    for variant in STREAMING:
        records, sizes = [], []
        for lean in (False, True):
            tr, reader = EventTranslator(), EventLogReader(event_logs[variant])
            events = list(reader.events(TRANSLATED, lean=lean))
            records.append([rec for ev in events for rec in tr.handle(ev)])
            sizes.append(sum(len(json.dumps(ev)) for ev in events))
        assert records[0] == records[1] and any(kind == "task" for kind, _ in records[0]), variant
        assert sizes[1] < sizes[0] / 2, (variant, sizes)


def test_plain_log_task_count_and_batch_application(event_logs, engine):
    from spark_governor.api.replay import replay

    r = replay(engine, event_logs["plain"], job="p")
    assert r.tasks == log_lines(event_logs["plain"], '"Event":"SparkListenerTaskEnd"')
    b = replay(engine, event_logs["batch"])  # default job name: the app name
    assert b.job == "replay-batch" and not b.streaming and b.batches == 0
    assert b.tasks == log_lines(event_logs["batch"], '"Event":"SparkListenerTaskEnd"') > 0
    assert b.stages == log_lines(event_logs["batch"], '"Event":"SparkListenerStageCompleted"') > 0


def test_replayed_equals_live_statistics(event_logs, engine):
    """The plain run was also reported live: same stages, windows, tasks and batches."""
    from spark_governor.aggregators.db import make_engine
    from spark_governor.api.replay import replay

    replay(engine, event_logs["plain"], job="live-plain")
    live_engine = make_engine(event_logs["live_db"])
    try:
        live = stored(live_engine, "live-plain")
    finally:
        live_engine.dispose()
    replayed = stored(engine, "live-plain")
    assert replayed["tasks"] == live["tasks"] > 0
    assert replayed["batches"] == live["batches"]
    assert close(replayed["templates"], live["templates"])
    assert replayed["templates"] and not close(replayed["templates"][0]["summary"], {})  # close() can fail


def test_kingman_decides_the_same_on_replayed_and_live_statistics(event_logs, engine, tmp_path):
    """Kingman evaluated on the live job's view and on the replayed job's view, at the same instants
    (each batch's completion, log time) with the same latency constraint: the same proposals and
    predictions (to floating-point merge order, see ``close``) from the same statistics. The views' query states
    (``live``) are left out of both: the live reporter's come from status polls and the source probe every second,
    a replay's from the log's job starts, progress and query events only, so they differ by construction (and
    Kingman reads them: the running batch's age, the probed arrival rate)."""
    from dataclasses import replace

    from sqlalchemy import insert

    from spark_governor.aggregators.db import make_engine
    from spark_governor.aggregators.models import batches, jobs, latency_constraints
    from spark_governor.aggregators.view import build_view
    from spark_governor.api.replay import replay
    from spark_governor.policies.kingman import KingmanPolicy
    from spark_governor.policies.kingman_config import KingmanConfig

    replay(engine, event_logs["plain"], job="live-plain")
    live_file = tmp_path / "live.db"
    shutil.copy(event_logs["live_db"].removeprefix("sqlite:///"), live_file)
    live_engine = make_engine(f"sqlite:///{live_file}")
    try:
        for e in (engine, live_engine):
            with e.begin() as conn:
                jid = conn.execute(select(jobs.c.id).where(jobs.c.name == "live-plain")).scalar_one()
                conn.execute(insert(latency_constraints).values(job_id=jid, name="slo", vertices=None, bound_ms=100,
                                                                span_s=1, event_time_metric=True, updated_ms=0))
        with engine.connect() as conn:
            instants = sorted(r.trigger_ms + r.batch_duration_ms + 1 for r in conn.execute(select(batches)))
        cfg = KingmanConfig(warmup_windows=1)
        decided = 0
        for now in instants:
            got = []
            for e in (live_engine, engine):
                with e.connect() as conn:
                    view = build_view(conn, "live-plain", 10, 5000, now)
                view = replace(view, live=None)
                got.append([(p.knob, p.value, p.prediction) for p in KingmanPolicy().evaluate(view, cfg)])
            assert close(got[0], got[1]), (now, got)
            decided += bool(got[0])
        assert decided >= 1  # the comparison covered real decisions, not only empty ones
    finally:
        live_engine.dispose()


def test_replay_twice_gives_identical_statistics(event_logs, engine):
    from spark_governor.api.replay import replay

    replay(engine, event_logs["lz4"], job="first")
    replay(engine, event_logs["lz4"], job="second")
    assert stored(engine, "first") == stored(engine, "second")


def _copy_lines(src: str, dst: Path, edit) -> None:
    lines = Path(src).read_bytes().split(b"\n")
    dst.write_bytes(b"\n".join(edit(lines)))


def test_truncated_last_line_and_unknown_event(event_logs, engine, tmp_path):
    from spark_governor.api.replay import replay

    src = event_logs["plain"]
    full = replay(engine, src, job="full")
    progress = b"QueryProgressEvent"

    def edit(lines):
        lines = [ln for ln in lines if ln]
        last = max(i for i, ln in enumerate(lines) if progress in ln)  # cut the last batch's progress in half
        kept = lines[:last] + [b'{"Event":"com.example.CustomEvent","x":1}'] + [lines[last][: len(lines[last]) // 2]]
        return kept

    cut = tmp_path / "local-running.inprogress"
    _copy_lines(src, cut, edit)
    r = replay(engine, str(cut), job="cut")
    assert r.read["skipped"] == {"truncated last line": 1, "unknown event type": 1}
    assert r.read["unknown_events"] == {"com.example.CustomEvent": 1}
    assert r.batches == full.batches - 1  # that batch is not written at all
    got, whole = stored(engine, "cut"), stored(engine, "full")
    assert got["batches"] == whole["batches"][:-1] or got["batches"] == [
        b for b in whole["batches"] if b["batch_id"] != max(x["batch_id"] for x in whole["batches"])]


def _corrupt_second_block(path: str, dst: Path, codec: str) -> None:
    import struct

    data = bytearray(Path(path).read_bytes())
    if codec == "lz4":  # LZ4Block header: magic(8) token(1) clen(4) dlen(4) checksum(4)
        clen = struct.unpack_from("<i", data, 9)[0]
        second = 21 + clen
        assert data[second:second + 8] == b"LZ4Block"
        payload = second + 21
        n = struct.unpack_from("<i", data, second + 9)[0]
    else:  # snappy-java: magic(8) version(4) compatible(4), then [length(4, big-endian) chunk]*
        clen = struct.unpack_from(">i", data, 16)[0]
        second = 20 + clen
        payload = second + 4
        n = struct.unpack_from(">i", data, second)[0]
    for i in range(payload, payload + min(n, 64)):
        data[i] = 0xFF
    dst.write_bytes(bytes(data))


@pytest.mark.parametrize("codec", ["lz4", "snappy"])
def test_corrupt_block_is_skipped_and_reported(event_logs, engine, tmp_path, codec):
    from spark_governor.api.replay import replay

    src = event_logs[codec]
    bad = tmp_path / Path(src).name
    _corrupt_second_block(src, bad, codec)
    full = replay(engine, src, job=f"full-{codec}")
    r = replay(engine, str(bad), job=f"bad-{codec}")
    assert r.read["skipped"].get("corrupt compressed block") == 1
    assert r.read["events"] < full.read["events"]
    assert 0 < r.tasks <= full.tasks and r.batches <= full.batches and r.reports_failed == 0
    # nothing half-written: every stored batch is one of the full import's, unchanged
    whole = {b["batch_id"]: b for b in stored(engine, f"full-{codec}")["batches"]}
    for b in stored(engine, f"bad-{codec}")["batches"]:
        assert b == whole[b["batch_id"]]


def test_truncated_zstd_file(event_logs, engine, tmp_path):
    from spark_governor.api.replay import replay

    src = event_logs["zstd"]
    data = Path(src).read_bytes()
    cut = tmp_path / (Path(src).name + ".inprogress")
    cut.write_bytes(data[: len(data) * 2 // 3])
    r = replay(engine, str(cut), job="zcut")
    assert sum(r.read["skipped"].values()) >= 1
    assert set(r.read["skipped"]) <= {"truncated compressed block", "corrupt compressed block", "truncated last line"}
    assert r.tasks > 0


def test_rolling_directory_read_in_order(event_logs, engine, tmp_path):
    """Spark writes one ``events_1_*`` file below its 10 MiB minimum roll size; the plain log split into
    three numbered files (out of order on disk) must import exactly like the single file."""
    from spark_governor.api.replay import replay

    lines = Path(event_logs["plain"]).read_bytes().splitlines(keepends=True)
    d = tmp_path / "eventlog_v2_local-1"
    d.mkdir()
    thirds = [lines[: len(lines) // 3], lines[len(lines) // 3: 2 * len(lines) // 3], lines[2 * len(lines) // 3:]]
    for n in (3, 1, 2):  # created out of order; 10 sorts before 2 as text, so use 10 for the last
        (d / f"events_{n if n != 3 else 10}_local-1").write_bytes(b"".join(thirds[n - 1]))
    (d / "appstatus_local-1").write_bytes(b"")
    replay(engine, event_logs["plain"], job="single")
    r = replay(engine, str(d), job="split")
    assert r.read["files"] == 3 and r.read["skipped"] == {}
    assert stored(engine, "split") == stored(engine, "single")


def test_cli_replay_with_kingman_dry_run(event_logs, tmp_path):
    from sqlalchemy import select as sel

    from spark_governor.aggregators.db import make_engine
    from spark_governor.aggregators.models import decisions, jobs, policy_configs
    from spark_governor.api.cli import main

    url = f"sqlite:///{tmp_path / 'cli.db'}"
    cfg = {"warmup_windows": 1, "constraint": {"bound_ms": 100, "span_s": 1}}
    res = CliRunner().invoke(main, ["replay", event_logs["lz4"], "--db", url, "--job", "what-if", "--policy", "kingman",
                                    "--config", json.dumps(cfg), "--window-seconds", "1", "--evaluation-seconds", "1"])
    assert res.exit_code == 0, res.output
    assert "streaming application, replay_counts" in res.output and "skipped: nothing" in res.output
    assert "what-if: policy kingman (dry-run)" in res.output
    assert "task-slot-seconds: actual" in res.output and "SLO replay" in res.output
    eng = make_engine(url)
    try:
        with eng.connect() as conn:
            jid = conn.execute(sel(jobs.c.id).where(jobs.c.name == "what-if")).scalar_one()
            rows = conn.execute(sel(decisions).where(decisions.c.job_id == jid)).all()
            pc = conn.execute(sel(policy_configs).where(policy_configs.c.job_id == jid)).one()
    finally:
        eng.dispose()
    assert pc.mode == "dry-run" and not pc.enabled  # disabled once replayed: no live scheduler evaluates it
    assert rows, res.output
    assert all(r.prediction and r.knob == "executors" for r in rows)
    assert f"actions: {len(rows)} (executors: {len(rows)})" in res.output
    # bad input: clear message naming the field, nothing written
    bad = CliRunner().invoke(main, ["replay", event_logs["lz4"], "--db", url, "--job", "x", "--policy", "kingman",
                                    "--config", '{"constraint": {"bound_ms": -1}}'])
    assert bad.exit_code == 2 and "config.constraint.bound_ms" in bad.output
    again = CliRunner().invoke(main, ["replay", event_logs["lz4"], "--db", url, "--job", "what-if"])
    assert again.exit_code == 2 and "already exists" in again.output


#: bench scaling-real's static run (4 executors, 2 000 → 8 000 → 16 000 → 8 000 → 2 000 rows/s × 50 s), 2026-12-07
STANDALONE_LOG = Path(__file__).parents[1] / "data" / "standalone-static-log" / "eventlog_v2_app-20261207095644-0000"


@pytest.fixture
def history_dir(event_logs, tmp_path):
    """A History Server directory of the real logs: plain, lz4, zstd, rolling, batch, one copy of the plain log
    still being written (``.inprogress``, renamed as another application) and one corrupt (cut) snappy log."""
    d = tmp_path / "history"
    d.mkdir()
    for variant in ("plain", "lz4", "zstd", "rolling", "batch"):
        src = Path(event_logs[variant])
        (shutil.copytree if src.is_dir() else shutil.copy)(src, d / src.name)
    plain = Path(event_logs["plain"]).read_text()
    app_id = json.loads(next(line for line in plain.splitlines() if "ApplicationStart" in line))["App ID"]
    (d / "local-1000000000000.inprogress").write_text(plain.replace(app_id, "local-1000000000000"))
    (d / "local-2000000000000.snappy").write_bytes(Path(event_logs["snappy"]).read_bytes()[:3000])
    # a static run of bench scaling-real's job on the standalone cluster (rolling, zstd): executors to predict for
    shutil.copytree(STANDALONE_LOG, d / STANDALONE_LOG.name)
    return d


def test_a_history_directory_replays_into_one_table_worst_first(event_logs, history_dir, tmp_path):
    """Issue #43: every readable application a row with its progress events' batch and row counts, a verdict at
    its end and its SLO; the corrupt log a row with its reason; the CLI's table and its --json agree."""
    from spark_governor.aggregators.db import upgrade
    from spark_governor.api.cli import main
    from spark_governor.api.replay_dir import SEVERITY

    url = f"sqlite:///{tmp_path / 'dir.db'}"
    upgrade(url)
    res = CliRunner().invoke(main, ["replay", str(history_dir), "--db", url, "--json", "--workers", "2"])
    assert res.exit_code == 0, res.output
    rows = json.loads(res.output)["applications"]
    assert len(rows) == 8
    by_path = {Path(r["path"]).name: r for r in rows}
    # the standalone run: every executor policy predicted, the run as it was reproduced by the calibrated simulator
    standalone = by_path[STANDALONE_LOG.name]
    assert standalone["unit"] == "executors" and standalone["prediction"], standalone.get("prediction_reason")
    p = standalone["prediction"]
    assert set(p["policies"]) == {"as run", "kingman", "threshold", "utilization-target"}
    assert abs(p["policies"]["as run"]["attainment"] - p["measured_attainment"]) <= 0.05
    assert p["partitions"] == 4 and p["max_executors"] == 4 and p["trigger_s"] == 8.0
    for name in ("kingman", "threshold", "utilization-target"):
        x = p["policies"][name]
        assert 0 < x["executor_seconds"] < p["executor_seconds"] and x["attainment"] >= 0.9, (name, x)
    assert by_path[Path(event_logs["zstd"]).name]["prediction_reason"].startswith("local mode")
    for variant in ("lz4", "zstd", "rolling"):
        r = by_path[Path(event_logs[variant]).name]
        truth = event_logs["truth"][variant]
        assert r["error"] is None and r["queries"] == ["replay_counts"], r
        assert r["batches"] == len(truth) and r["rows"] == sum(t["rows"] for t in truth)
        assert r["verdict"] in SEVERITY and r["verdict"] != "unknown", r
        assert r["timeline"] and r["timeline"][-1]["state"] == r["verdict"]
        assert r["executor_seconds"] > 0 and r["unit"] == "task slots"
        # the writer's trigger is 400 ms: where the batches show it, the implied bound is 2 x 400 ms (or a multiple:
        # collectors.trigger_inference reads a multiple of the interval from too few waited starts)
        assert r["slo"]["bound_ms"] is None or r["slo"]["bound_ms"] % 800 == 0, r["slo"]
    inprog = by_path["local-1000000000000.inprogress"]
    assert inprog["in_progress"] and inprog["batches"] == len(event_logs["truth"]["plain"])
    assert inprog["job"] != by_path[Path(event_logs["plain"]).name]["job"]  # same app name, two jobs
    batch = by_path[Path(event_logs["batch"]).name]
    assert not batch["streaming"] and batch["batches"] == 0 and batch["tasks"] > 0 and batch["slo"] is None
    corrupt = by_path["local-2000000000000.snappy"]
    assert corrupt["error"] and "truncated" in corrupt["error"], corrupt
    assert rows[-1] is corrupt or rows[-1] == corrupt  # unreadable logs last
    ranks = [SEVERITY.index(r["verdict"]) if r["verdict"] in SEVERITY else len(SEVERITY) for r in rows[:-1]]
    assert ranks == sorted(ranks)  # worst first

    page = tmp_path / "report.html"
    table = CliRunner().invoke(main, [
        "replay", str(history_dir), "--db", f"sqlite:///{tmp_path / 't.db'}", "--no-progress", "--bound-ms", "5000",
        "--report", str(page)])
    assert table.exit_code == 0, table.output
    lines = table.stdout.splitlines()
    assert lines[0].split()[:2] == ["job", "(application)"] and len(lines) == 9
    assert "kingman exec-s (SLO)" in lines[0] and lines[0].rstrip().endswith("saving")
    assert "unreadable" in lines[-1] and "truncated" in lines[-1]
    assert sum("(5000 ms, bound-ms)" in line for line in lines) == 6  # every streaming application
    line = next(x for x in lines if x.startswith("sg-scaling-test"))
    assert line.count("%)") == 3, line  # each policy's executor-seconds (attainment)
    _check_report(page, sections=7, figures=6)  # every readable application; a figure where it has micro-batches


def _check_report(page: Path, sections: int, figures: int) -> None:
    """The --report page parses, needs nothing from the network and holds a figure per run with micro-batches."""
    from html.parser import HTMLParser

    class Page(HTMLParser):
        def __init__(self):
            super().__init__()
            self.tags, self.external = {}, []

        def handle_starttag(self, tag, attrs):
            self.tags[tag] = self.tags.get(tag, 0) + 1
            self.external += [v for k, v in attrs if k in ("src", "href") and v and not v.startswith("#")
                              and not v.startswith("data:")]

    parser = Page()
    text = page.read_text()
    parser.feed(text)
    assert parser.external == [] and "http" not in text.split("<svg", 1)[0]
    assert parser.tags.get("h2") == sections and parser.tags.get("svg") == figures, parser.tags
    for words in ("executors (as run)", "kingman (predicted)", "bound 5 s", "processed rows/s", "batch duration"):
        assert words in text, words


def test_a_replayed_run_is_judged_on_the_logs_clock(event_logs, tmp_path):
    """The verdict of a replayed run at its end, in the replay's result, in GET …/health (by default and with
    ?run=) and in the runs listing, is the same, taken at the log's last event."""
    import requests

    from spark_governor.aggregators.db import make_engine, upgrade
    from spark_governor.api.replay import replay
    from spark_governor.api.server import ControlPlane

    url = f"sqlite:///{tmp_path / 'health.db'}"
    upgrade(url)
    engine = make_engine(url)
    try:
        r = replay(engine, event_logs["plain"], job="judged", slo_bound_ms=1500.0)
    finally:
        engine.dispose()
    # judged at its end: just before the query's termination (a stopped query ends a run, it is not a fault)
    end = r.health["evaluated_ms"]
    assert r.health["state"] not in ("unknown", None) and r.first_ms < end < r.last_ms
    assert r.slo["source"] == "--bound-ms" and r.slo["bound_ms"] == 1500.0 and r.slo["spans"] >= 1
    assert r.timeline[0]["from_ms"] > r.first_ms and r.timeline[-1]["to_ms"] == end
    assert all(a["to_ms"] < b["from_ms"] and a["state"] != b["state"] for a, b in zip(r.timeline, r.timeline[1:]))
    plane = ControlPlane(db_url=url, port=0).start()
    try:
        base = f"{plane.url}/api/v1/jobs/judged"
        h = requests.get(f"{base}/health", timeout=30).json()
        assert h["state"] == r.health["state"] and h["at"] == "run end" and h["evaluated_ms"] == end
        h2 = requests.get(f"{base}/health?run={r.app_id}&timeline=true", timeout=30).json()
        assert h2["state"] == h["state"] and h2["timeline"] == r.timeline
        runs = requests.get(f"{base}/runs", timeout=30).json()["runs"]
        assert [x["health"]["state"] for x in runs] == [h["state"]]
        bad = requests.get(f"{base}/health?run=all", timeout=30)
        assert bad.status_code == 400 and "run" in bad.json()["error"]
        assert requests.get(f"{base}/health?run=nope", timeout=30).status_code == 404
        assert requests.get(f"{base}/health?timeline=yes", timeout=30).status_code == 400
    finally:
        plane.stop()


def test_a_replayed_run_that_idles_then_falls_behind_is_judged_so_over_its_life(event_logs, engine):
    """Issue #43: the ``phases`` run (8 s without data, then files arriving faster than a slot reads them) is idle
    while nothing arrives, underprovisioned or without progress after the load came, and so at its end."""
    from spark_governor.api.replay import replay

    r = replay(engine, event_logs["phases"], job="phases", health_window_s=10.0, slo_bound_ms=6000.0)
    assert r.health["state"] in ("underprovisioned", "no-progress"), r.health
    states = [seg["state"] for seg in r.timeline]
    assert "idle" in states, r.timeline
    idle = r.timeline[states.index("idle")]
    behind = [seg for seg in r.timeline[states.index("idle") + 1:] if seg["state"] in ("underprovisioned", "no-progress")]
    assert behind, r.timeline
    loaded = min(b["trigger_ms"] for b in stored(engine, "phases")["batches"] if b["num_input_rows"] > 0)
    # the change where the load changed: idle before the first file's batch, behind after it started
    assert idle["from_ms"] < loaded and behind[0]["from_ms"] > loaded
