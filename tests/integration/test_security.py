"""Issue #16, security: report tokens, reporters bound to their token and job, scopes and job patterns, tokens
removed from the configuration, bounded audit bodies, closed reads, ``spark-governor token`` without a restart,
and a /healthz that does not leak the database's address."""
from __future__ import annotations

import json
import time

import pytest
import requests
from click.testing import CliRunner
from sqlalchemy import func, select

from spark_governor.aggregators.db import make_engine
from spark_governor.aggregators.models import api_tokens, audit_log, reporters
from spark_governor.api.app import Settings
from spark_governor.api.auth import TokenSpec
from spark_governor.api.cli import main
from spark_governor.api.server import ControlPlane
from spark_governor.bench.reports import gz, make_report

REPORT_A = "report-secret-a"
REPORT_B = "report-secret-b"
OPS = "ops-secret-123"
TEAM_A = "team-a-writer-1"
READER = "reader-secret-1"
TOKENS = {
    "rep-a": TokenSpec(REPORT_A, ("report",), ("team-a-*",)),
    "rep-b": TokenSpec(REPORT_B, ("report",)),
    "ops": TokenSpec(OPS),
    "team-a": TokenSpec(TEAM_A, ("write",), ("team-a-*",)),
    "reader": TokenSpec(READER, ("read",)),
}


def bearer(secret: str) -> dict:
    return {"Authorization": f"Bearer {secret}"}


def post(plane, report: dict, secret: str | None = None, **headers) -> requests.Response:
    h = {"Content-Encoding": "gzip", **headers, **(bearer(secret) if secret else {})}
    return requests.post(plane.url + "/api/v1/reports", data=gz(report), headers=h, timeout=10)


@pytest.fixture
def secure_plane(sqlite_url):
    plane = ControlPlane(db_url=sqlite_url, port=0, tokens=TOKENS,
                         settings=Settings(require_report_token=True, token_refresh_s=0.2)).start()
    yield plane
    plane.stop()


def test_reports_need_a_report_token_for_the_job(secure_plane):
    rep = make_report(job="team-a-clicks", n_tasks=4)
    r = post(secure_plane, rep)
    assert r.status_code == 401 and "bearer token" in r.json()["error"]
    assert post(secure_plane, rep, "not-a-token").status_code == 401
    assert post(secure_plane, rep, READER).status_code == 403  # read scope does not report
    assert post(secure_plane, make_report(job="team-b-clicks", n_tasks=4), REPORT_A).status_code == 403
    r = post(secure_plane, rep, REPORT_A)
    assert r.status_code == 200 and r.json()["accepted"]["tasks"] == 4
    assert post(secure_plane, rep, OPS).status_code == 403  # another token: the reporter is bound to rep-a


def test_no_other_caller_can_advance_a_reporters_sequence(secure_plane):
    """The hijack of the issue: seq 2**63-1 under the real reporter's id would make its later reports duplicates."""
    real = make_report(job="team-a-pay", n_tasks=4, seq=1, reporter_id="r-real")
    assert post(secure_plane, real, REPORT_A).status_code == 200
    forged = make_report(job="team-a-pay", n_tasks=4, seq=2**63 - 1, reporter_id="r-real")
    r = post(secure_plane, forged, REPORT_B)  # a valid report token, but not the one the reporter is bound to
    assert r.status_code == 403 and "reporter.id" in r.json()["error"]
    other_job = make_report(job="team-b-pay", n_tasks=4, seq=2**62, reporter_id="r-real")
    assert post(secure_plane, other_job, REPORT_B).status_code == 403
    r = post(secure_plane, make_report(job="team-a-pay", n_tasks=4, seq=2, reporter_id="r-real"), REPORT_A)
    assert r.status_code == 200 and r.json()["duplicate"] is False and r.json()["accepted"]["tasks"] == 4
    eng = make_engine(secure_plane.db_url)
    with eng.connect() as conn:
        row = conn.execute(select(reporters).where(reporters.c.id == "r-real")).one()
    eng.dispose()
    assert (row.last_seq, row.token_name) == (2, "rep-a")


def test_anonymous_reports_are_opt_in_and_cannot_take_over_a_bound_reporter(control_plane):
    """Settings() (embedded planes) accepts anonymous reports, but a reporter bound to a token stays bound."""
    from spark_governor.api.auth import store_tokens

    store_tokens(control_plane.engine, {"rep": TokenSpec(REPORT_A, ("report",))})
    assert post(control_plane, make_report(n_tasks=2, reporter_id="anon")).status_code == 200
    time.sleep(1.1)  # the token cache's refresh
    assert post(control_plane, make_report(n_tasks=2, reporter_id="bound"), REPORT_A).status_code == 200
    assert post(control_plane, make_report(n_tasks=2, seq=9, reporter_id="bound")).status_code == 403
    assert post(control_plane, make_report(n_tasks=2, seq=9, reporter_id="anon"), REPORT_A).status_code == 403


def test_scopes_and_job_patterns_for_writes_and_reads(sqlite_url):
    plane = ControlPlane(db_url=sqlite_url, port=0, tokens=TOKENS,
                         settings=Settings(require_report_token=True, open_reads=False)).start()
    try:
        for job in ("team-a-x", "team-b-x"):
            assert post(plane, make_report(job=job, n_tasks=2, reporter_id=job), REPORT_B).status_code == 200
        body = {"enabled": True, "mode": "dry-run", "config": {}}

        def put(job, secret):
            return requests.put(f"{plane.url}/api/v1/jobs/{job}/policies/threshold?register=true", json=body,
                                headers=bearer(secret), timeout=10)

        assert put("team-a-x", TEAM_A).status_code == 200
        assert put("team-b-x", TEAM_A).status_code == 403  # limited to team-a-*
        assert put("team-a-x", REPORT_B).status_code == 403  # report scope does not write
        assert put("team-a-x", READER).status_code == 403
        assert put("team-b-x", OPS).status_code == 200  # admin
        # reads are closed: a token is needed, a job-limited one sees only its jobs
        assert requests.get(plane.url + "/api/v1/jobs", timeout=10).status_code == 401
        names = [j["name"] for j in requests.get(plane.url + "/api/v1/jobs", headers=bearer(READER), timeout=10)
                 .json()["jobs"]]
        assert sorted(names) == ["team-a-x", "team-b-x"]
        names = [j["name"] for j in requests.get(plane.url + "/api/v1/jobs", headers=bearer(TEAM_A), timeout=10)
                 .json()["jobs"]]
        assert names == ["team-a-x"]
        assert requests.get(plane.url + "/api/v1/jobs/team-b-x/stages", headers=bearer(TEAM_A),
                            timeout=10).status_code == 403
        assert requests.get(plane.url + "/metrics", timeout=10).status_code == 401
        assert requests.get(plane.url + "/metrics", headers=bearer(TEAM_A), timeout=10).status_code == 403
        assert requests.get(plane.url + "/metrics", headers=bearer(READER), timeout=10).status_code == 200
        assert requests.get(plane.url + "/healthz", timeout=10).status_code == 200  # always open
        assert requests.get(plane.url + "/api/v1/openapi.json", timeout=10).status_code == 200
    finally:
        plane.stop()


def test_tokens_removed_from_the_configuration_stop_working_after_a_restart(sqlite_url):
    from spark_governor.api.auth import create_token

    settings = Settings(require_report_token=True)
    plane = ControlPlane(db_url=sqlite_url, port=0, tokens={"old": TokenSpec(OPS), "keep": TokenSpec(REPORT_B)},
                         settings=settings).start()
    cli_secret = create_token(plane.engine, "from-cli", ["report"])
    port = plane.port
    plane.stop()
    plane = ControlPlane(db_url=sqlite_url, port=port, tokens={"keep": TokenSpec(REPORT_B)}, settings=settings).start()
    try:
        assert post(plane, make_report(n_tasks=1, reporter_id="a"), OPS).status_code == 401
        assert post(plane, make_report(n_tasks=1, reporter_id="b"), REPORT_B).status_code == 200
        assert post(plane, make_report(n_tasks=1, reporter_id="c"), cli_secret).status_code == 200  # kept
    finally:
        plane.stop()
    plane = ControlPlane(db_url=sqlite_url, port=port, settings=settings).start()  # no token configured at all
    try:
        assert post(plane, make_report(n_tasks=1, reporter_id="d"), REPORT_B).status_code == 401
    finally:
        plane.stop()


def test_audit_log_never_stores_unbounded_bodies(secure_plane):
    big = json.dumps({"enabled": True, "config": {"pad": "x" * 2_000_000}})
    url = secure_plane.url + "/api/v1/jobs/job-a/policies/threshold"
    for _ in range(5):  # unauthenticated: 401 before the body is read, recorded without it
        r = requests.put(url, data=big, headers={"Content-Type": "application/json"}, timeout=30)
        assert r.status_code == 401
    r = requests.put(url, data=big, headers={"Content-Type": "application/json", **bearer(OPS)}, timeout=30)
    assert r.status_code in (400, 404)
    eng = make_engine(secure_plane.db_url)
    with eng.connect() as conn:
        rows = conn.execute(select(audit_log).order_by(audit_log.c.id)).all()
    eng.dispose()
    assert len(rows) == 6
    assert all(r.who is None and r.body is None and r.status == 401 for r in rows[:5])
    assert rows[5].who == "ops" and rows[5].body["bytes"] == len(big) and len(rows[5].body["excerpt"]) <= 512
    assert sum(len(json.dumps(r.body)) for r in rows) < 2_000


def test_token_cli_creates_lists_and_revokes_without_a_restart(secure_plane):
    db = secure_plane.db_url
    r = CliRunner().invoke(main, ["token", "create", "team-c", "--scope", "report", "--job", "team-c-*", "--db", db])
    assert r.exit_code == 0, r.output
    secret = r.output.strip()
    assert len(secret) > 30
    time.sleep(0.5)
    assert post(secure_plane, make_report(job="team-c-1", n_tasks=2, reporter_id="c1"), secret).status_code == 200
    listed = json.loads(CliRunner().invoke(main, ["token", "list", "--json", "--db", db]).output)
    row = next(t for t in listed if t["name"] == "team-c")
    assert row["scopes"] == ["report"] and row["jobs"] == ["team-c-*"] and row["source"] == "cli"
    assert secret not in json.dumps(listed)
    r = CliRunner().invoke(main, ["token", "create", "team-c", "--scope", "report", "--db", db])
    assert r.exit_code == 1 and "exists" in r.output
    assert CliRunner().invoke(main, ["token", "revoke", "team-c", "--db", db]).exit_code == 0
    time.sleep(0.5)
    assert post(secure_plane, make_report(job="team-c-1", n_tasks=2, seq=2, reporter_id="c1"),
                secret).status_code == 401
    assert CliRunner().invoke(main, ["token", "revoke", "team-c", "--db", db]).exit_code == 1
    eng = make_engine(db)
    with eng.connect() as conn:
        hashes = [r.token_sha256 for r in conn.execute(select(api_tokens))]
        assert conn.execute(select(func.count()).select_from(api_tokens)).scalar() == len(TOKENS) + 1
    eng.dispose()
    assert secret not in hashes and all(len(h) == 64 for h in hashes)


def test_healthz_and_a_database_outage_do_not_leak_the_database_address():
    """An unreachable database: 503 with Retry-After and no host or port, for /healthz and for ingest."""
    from spark_governor.api.app import create_app

    pytest.importorskip("psycopg")
    eng = make_engine("postgresql+psycopg://nobody:pw@127.0.0.1:1/absent", connect_args={"connect_timeout": 2})
    client = create_app(eng, Settings()).test_client()
    r = client.get("/healthz")
    assert r.status_code == 503 and r.headers["Retry-After"]
    assert "127.0.0.1" not in r.get_data(as_text=True) and ":1" not in r.get_data(as_text=True)
    r = client.post("/api/v1/reports", data=gz(make_report(n_tasks=2)), headers={"Content-Encoding": "gzip"})
    assert r.status_code == 503 and r.headers["Retry-After"] and "127.0.0.1" not in r.get_data(as_text=True)
    eng.dispose()


def test_a_chunked_body_over_the_limit_is_413(secure_plane):
    def chunks():
        for _ in range(40):
            yield b"x" * (1024 * 1024)

    settings_limit = Settings().max_body_bytes
    r = requests.post(secure_plane.url + "/api/v1/reports", data=chunks(), headers=bearer(REPORT_B), timeout=60)
    assert 40 * 1024 * 1024 > settings_limit
    assert r.status_code == 413, r.text
