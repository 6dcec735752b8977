"""A History Server directory's applications (``api.replay_dir``): what counts as an application, job names,
and the table's order."""
from pathlib import Path

import pytest

from spark_governor.api.replay_dir import (SEVERITY, _names, application_logs, is_application_directory, job_name,
                                           worst_first)
from spark_governor.collectors.event_log import EventLogError


def test_application_logs_are_files_and_rolling_directories(tmp_path):
    (tmp_path / "local-1").write_text("{}\n")
    (tmp_path / "app-2.zstd.inprogress").write_bytes(b"")
    (tmp_path / ".hidden").write_text("")
    (tmp_path / "local-1.crc").write_text("")
    (tmp_path / "eventlog_v2_app-3").mkdir()
    (tmp_path / "eventlog_v2_app-3" / "events_1_app-3").write_text("{}\n")
    (tmp_path / "other-dir").mkdir()
    assert [p.name for p in application_logs(tmp_path)] == ["app-2.zstd.inprogress", "eventlog_v2_app-3", "local-1"]
    assert is_application_directory(tmp_path) and not is_application_directory(tmp_path / "eventlog_v2_app-3")
    assert not is_application_directory(tmp_path / "local-1")
    with pytest.raises(EventLogError, match="not a directory"):
        application_logs(tmp_path / "local-1")


def test_job_names_are_valid_and_unique():
    assert job_name("my app: v2/prod", "app-1", "f") == "my-app-v2-prod"
    assert job_name(None, "app-1", "f") == "app-1" and job_name("///", None, "f") == "app"
    scans = [(Path("a"), {"app_name": "clicks", "app_id": "app-1"}), (Path("b"), {"app_name": "clicks", "app_id": "app-2"}),
             (Path("c"), {"app_name": "views", "app_id": "app-3"}), (Path("d"), {"app_name": "taken", "app_id": "app-4"})]
    names = _names(scans, {"taken"})
    assert names == {Path("a"): "clicks-app-1", Path("b"): "clicks-app-2", Path("c"): "views",
                     Path("d"): "taken-app-4"}


def test_worst_first():
    rows = [{"path": "ok", "verdict": "optimal", "slo": {"attainment": 1.0}, "executor_seconds": 5.0},
            {"path": "bad", "error": "truncated"},
            {"path": "under-1", "verdict": "underprovisioned", "slo": {"attainment": 0.9}, "executor_seconds": 1.0},
            {"path": "under-2", "verdict": "underprovisioned", "slo": {"attainment": 0.2}, "executor_seconds": 1.0},
            {"path": "sick", "verdict": "unhealthy", "slo": None, "executor_seconds": 2.0},
            {"path": "idle", "verdict": "idle", "slo": None, "executor_seconds": 9.0}]
    assert [r["path"] for r in worst_first(rows)] == ["sick", "under-2", "under-1", "idle", "ok", "bad"]
    assert SEVERITY.index("unhealthy") < SEVERITY.index("optimal")


@pytest.mark.parametrize("config, message", [
    ('{"constraint": {"bound_ms": 0}}', "constraint.bound_ms: must be a positive number"),
    ('{"constraint": {"bound_ms": 100, "span_s": "5"}}', "constraint.span_s: must be a positive number"),
    ('{"constraint": {"bound_ms": 100, "vertices": []}}', "constraint.vertices: unknown field"),
    ('{"warmup_windows": 1}', "unknown field 'warmup_windows'"),
    ('[1]', "must be a JSON object"),
])
def test_a_directorys_config_is_its_constraint_and_nothing_else(tmp_path, config, message):
    """A directory takes ``--config`` for the constraint every application is judged by; anything else is refused,
    naming the field, before anything is imported."""
    from click.testing import CliRunner

    from spark_governor.api.cli import main

    d = tmp_path / "history"
    d.mkdir()
    (d / "local-1").write_text("{}\n")
    (d / "local-2").write_text("{}\n")
    db = tmp_path / "r.db"
    res = CliRunner().invoke(main, ["replay", str(d), "--db", f"sqlite:///{db}", "--config", config])
    assert res.exit_code == 2 and "--config" in res.output and message in res.output, res.output
    assert not db.exists()  # refused before the database was created
