"""The spark-governor command line: serve, db, stats, dashboards."""
import json
import signal
import subprocess
import sys
import threading

import requests
from click.testing import CliRunner
from werkzeug.serving import make_server
from werkzeug.wrappers import Request, Response

from spark_governor.api.cli import main
from spark_governor.bench.reports import gz, make_report
from spark_governor.dashboards import load_all, panel_queries
from spark_governor.api.processes import free_port, wait_for


def run(*args):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def test_db_upgrade_current_downgrade(sqlite_url):
    r = run("db", "upgrade", "--db", sqlite_url)
    assert r.exit_code == 0 and "upgraded" in r.output
    from spark_governor.api.server import head_revision

    assert run("db", "current", "--db", sqlite_url).output.strip() == head_revision()
    assert run("db", "downgrade", "--db", sqlite_url).exit_code == 0
    assert run("db", "current", "--db", sqlite_url).output.strip() == "(empty)"


def test_read_only_commands_never_create_a_database(tmp_path, monkeypatch):
    """Issue #15: `db current` (and `token list`, `db downgrade`) run where there is no database say so
    and exit non-zero; they do not leave an empty spark-governor.db behind."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SPARK_GOVERNOR_DB", raising=False)
    for args in (["db", "current"], ["db", "downgrade"], ["token", "list"],
                 ["db", "current", "--db", f"sqlite:///{tmp_path / 'other.db'}"]):
        r = CliRunner().invoke(main, args)
        assert r.exit_code == 1, (args, r.output)
        assert "no database at" in r.output and "spark-governor db upgrade" in r.output, r.output
        assert r.exception is None or isinstance(r.exception, SystemExit)  # a message, not a traceback
    assert list(tmp_path.iterdir()) == []


def test_serve_runs_until_sigterm_and_migrates_sqlite(tmp_path):
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "spark_governor", "serve", "--port", str(port),
                             "--db", f"sqlite:///{tmp_path / 'x.db'}", "--token", "rep:report=report-secret"],
                            stderr=subprocess.PIPE, text=True)
    try:
        url = f"http://127.0.0.1:{port}"

        def up():
            try:
                return requests.get(url + "/healthz", timeout=1).json()["status"] == "ok"
            except requests.RequestException:
                return False

        wait_for(up, 60, what="serve healthy")
        r = requests.post(url + "/api/v1/reports", data=gz(make_report(n_tasks=4)),
                          headers={"Content-Encoding": "gzip"}, timeout=10)
        assert r.status_code == 401  # serve requires a report token unless --anonymous-reports
        r = requests.post(url + "/api/v1/reports", data=gz(make_report(n_tasks=4)),
                          headers={"Content-Encoding": "gzip", "Authorization": "Bearer report-secret"}, timeout=10)
        assert r.status_code == 200
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(20) == 0


def test_serve_refuses_an_unmigrated_postgres(fresh_postgres_db):
    r = CliRunner().invoke(main, ["serve", "--port", "0", "--db", fresh_postgres_db])
    assert r.exit_code == 1 and "spark-governor db upgrade" in r.output


def test_serve_reports_a_busy_port(sqlite_url):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        r = CliRunner().invoke(main, ["serve", "--port", str(s.getsockname()[1]), "--db", sqlite_url])
    assert r.exit_code == 1 and "in use" in r.output
    # the workers' metrics directory serve made is gone with it: left in the environment, every later
    # Flask app of this process would expose /metrics from multiprocess files (CI, 2026-11-25)
    import os

    assert "PROMETHEUS_MULTIPROC_DIR" not in os.environ


def test_stats_prints_a_table_and_errors_clearly(control_plane):
    requests.post(control_plane.url + "/api/v1/reports", data=gz(make_report(n_tasks=40, batches=3)),
                  headers={"Content-Encoding": "gzip"}, timeout=10).raise_for_status()
    r = run("stats", "job-a", "--endpoint", control_plane.url)
    assert r.exit_code == 0
    assert "s0 t-map" in r.output and "service ms" in r.output and "batches" in r.output
    r = run("stats", "job-a", "--endpoint", control_plane.url, "--json")
    assert json.loads(r.output)["stages"][0]["key"] == "t-map"
    r = CliRunner().invoke(main, ["stats", "missing", "--endpoint", control_plane.url])
    assert r.exit_code == 1 and "job 'missing' not found" in r.output
    r = CliRunner().invoke(main, ["stats", "job-a", "--endpoint", f"http://127.0.0.1:{free_port()}"])
    assert r.exit_code == 1 and "cannot reach" in r.output


def test_overview_dashboard_covers_the_required_panels():
    (overview,) = [d for d in load_all() if d["uid"] == "spark-governor-job-overview"]
    assert overview["title"] == "spark-governor / job overview"
    exprs = " ".join(e for _t, e in panel_queries(overview))
    for metric in ("stage_service_time_seconds", "stage_task_latency_seconds", "stage_task_interarrival_cv",
                   "stage_utilization_ratio", "input_rows_per_second", "processed_rows_per_second",
                   "batch_duration_seconds", "reporter_dropped_total", "health"):
        assert f"spark_governor_{metric}" in exprs, metric
    assert all('spark_job="$job"' in e for _t, e in panel_queries(overview))
    assert [v["name"] for v in overview["templating"]["list"]] == ["datasource", "job"]


class GrafanaStandIn:
    """Answers Grafana's dashboard API on 127.0.0.1 and records what it received."""

    def __init__(self, status=200):
        self.status, self.received = status, []
        self._srv = make_server("127.0.0.1", 0, self._app, threaded=True)
        self.url = f"http://127.0.0.1:{self._srv.server_port}"
        threading.Thread(target=self._srv.serve_forever, daemon=True).start()

    def _app(self, environ, start_response):
        req = Request(environ)
        self.received.append((req.method, req.path, req.headers.get("Authorization"), req.get_json(silent=True)))
        if self.status != 200:
            body = {"message": "invalid API key"}
        else:
            body = {"status": "success", "uid": req.get_json()["dashboard"]["uid"], "version": 1}
        return Response(json.dumps(body), status=self.status, content_type="application/json")(environ, start_response)

    def stop(self):
        self._srv.shutdown()
        self._srv.server_close()


def test_dashboards_push_with_grafana_client():
    g = GrafanaStandIn()
    try:
        r = run("dashboards", "push", "--grafana-url", g.url, "--token", "secret", "--datasource-uid", "prom1")
        assert r.exit_code == 0 and "spark-governor-job-overview: success" in r.output
        method, path, auth, body = g.received[0]
        assert (method, path, auth) == ("POST", "/api/dashboards/db", "Bearer secret")
        assert body["overwrite"] is True and body["dashboard"]["title"] == "spark-governor / job overview"
        ds = body["dashboard"]["templating"]["list"][0]
        assert ds["current"]["value"] == "prom1"
    finally:
        g.stop()


def test_dashboards_push_reports_grafana_errors():
    g = GrafanaStandIn(status=401)
    try:
        r = CliRunner().invoke(main, ["dashboards", "push", "--grafana-url", g.url, "--token", "bad"])
        assert r.exit_code == 1 and "401" in r.output
    finally:
        g.stop()
    r = CliRunner().invoke(main, ["dashboards", "push", "--grafana-url", f"http://127.0.0.1:{free_port()}"])
    assert r.exit_code == 1 and "cannot reach Grafana" in r.output


def test_dashboards_list_and_export():
    assert "spark-governor-job-overview" in run("dashboards", "list").output
    assert json.loads(run("dashboards", "export", "spark-governor-job-overview").output)["panels"]
    assert CliRunner().invoke(main, ["dashboards", "export", "nope"]).exit_code == 1
