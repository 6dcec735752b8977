"""``bench overhead``'s black-hole and drip rows (issue #16, Faults): a tiny run (3 measured batches, one run per
row, real local Spark in a fresh process per run, real TCP servers on 127.0.0.1) has both rows with batch times,
reports given up and counted as dropped, and no reporter thread left after ``detach()``; and the hostile servers
behave as named against the reporter's own poster."""
import shutil
import socket
import threading
import time

import pytest

from spark_governor.bench.hostile_servers import BlackHoleServer, DripServer
from spark_governor.bench.overhead import HostileSettings, format_table, run_overhead_bench
from spark_governor.collectors.http_post import DeadlinePoster, PostError
from tests.conftest import require


@pytest.mark.parametrize("server", [BlackHoleServer, lambda: DripServer(0.2)], ids=["black-hole", "drip"])
def test_hostile_servers_hold_a_post_until_its_deadline_and_stop_cleanly(server):
    srv = server()
    poster = DeadlinePoster(srv.url + "/api/v1/reports", deadline_s=1.0, connect_timeout_s=1.0, read_timeout_s=5.0)
    try:
        t0 = time.monotonic()
        with pytest.raises(PostError):
            poster.post(b"x" * 5000, {"Content-Type": "application/json"}, 1.0)
        took = time.monotonic() - t0
        assert 0.9 <= took <= 2.0, took  # neither answered nor refused: only the total deadline ended the post
        assert srv.connections == 1 and srv.requests == 1 and srv.bytes_received > 5000
        if isinstance(srv, DripServer):
            assert 2 <= srv.bytes_sent <= 6  # a byte every 0.2 s for about 1 s, never a whole answer
    finally:
        poster.close()
        t0 = time.monotonic()
        srv.stop()
    assert time.monotonic() - t0 < 2.0
    assert not [t for t in threading.enumerate() if f"Server-{srv.port}" in t.name]
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", srv.port), timeout=1).close()


def test_drip_interval_must_be_positive():
    with pytest.raises(ValueError, match="drip_s"):
        DripServer(0)
    with pytest.raises(ValueError, match="post_deadline_s"):
        HostileSettings(post_deadline_s=0)


@pytest.mark.spark
def test_tiny_bench_has_a_black_hole_row_with_drops_and_no_thread_left(tmp_path):
    """The black-hole row on real Spark (the drip server's hold on a post is checked above against the reporter's
    own poster, and the reporter's deadline under a dripping server in tests/unit/test_reporter_delivery.py: a
    Spark run of the drip row would prove nothing more)."""
    require(shutil.which("java") is not None, "java")
    hostile = HostileSettings(post_deadline_s=0.5, max_retries=0, drip_s=0.2, stop_timeout_s=1.0)
    result = run_overhead_bench(runs=1, batches=3, rows=2000, ingest_tasks=0, log=lambda m: None,
                                variants=["black-hole"], hostile=hostile)
    table = {r["variant"]: r for r in result["summary"]["table"]}
    assert list(table) == ["without", "black-hole"]
    for name in ("black-hole",):
        row = table[name]
        assert len(result["batch_ms"][name]) == 3 and row["batch_ms_median"] > 0 and row["ratio_batch_ms_to_without"] > 0
        assert row["dropped_per_run"][0] > 0 and row["dropped_reports_per_run"][0] >= 1, row
        assert row["sent_reports_per_run"] == [0] and row["failed_posts_per_run"][0] >= 1
        assert row["reporter_threads_after_stop"] == []
        assert row["detach_s_per_run"][0] <= hostile.stop_timeout_s + 1.5  # stop()'s bound: timeout + 1 s
        (stats,) = [r for r in result["reporter_stats"] if r["variant"] == name]
        assert stats["server"]["requests"] >= 1  # the reports did reach the hostile server
    assert "with" not in table and "with" not in result["runs"] and result["ingest"] is None
    loads = result["load_average"]
    assert len(loads) == 3 and all(s["load1"] >= 0 for s in loads)  # before, and after each of the 2 runs
    assert result["summary"]["load_average_1min"]["max"] >= result["summary"]["load_average_1min"]["min"]
    assert result["hostile_settings"]["post_deadline_s"] == 0.5
    assert "| black-hole |" in format_table(result["summary"]["table"])


def test_unknown_variant_is_refused_naming_the_option_and_nothing_is_written(tmp_path):
    from click.testing import CliRunner

    from spark_governor.api.cli.bench import bench

    out = tmp_path / "o.json"
    res = CliRunner().invoke(bench, ["overhead", "--variants", "with,black-hole,blackhole", "--out", str(out)])
    assert res.exit_code == 2 and "--variants" in res.output and "unknown blackhole" in res.output
    assert not out.exists()
