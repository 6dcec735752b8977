"""Shared fixtures: real Spark (local mode), real PostgreSQL and Prometheus servers on 127.0.0.1.

A component that is missing makes its tests skip locally, but fail under ``CI=true``.
"""
from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import requests

from spark_governor.api.processes import free_port, wait_for

os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)

ROOT = Path(__file__).resolve().parent.parent


def require(ok: bool, what: str) -> None:
    """Skip (locally) or fail (CI=true) when a real component is missing."""
    if ok:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"required component missing in CI: {what}")
    pytest.skip(f"missing component: {what}")


@pytest.fixture
def sqlite_url(tmp_path) -> str:
    return f"sqlite:///{tmp_path / 'sg.db'}"


@pytest.fixture
def control_plane(sqlite_url):
    """An in-process control plane on a free port with a fresh SQLite file."""
    from spark_governor.api.server import ControlPlane

    plane = ControlPlane(db_url=sqlite_url, port=0).start()
    yield plane
    plane.stop()


@pytest.fixture
def start_plane(sqlite_url):
    """Start in-process control planes on free ports with a fresh SQLite file: ``start_plane(token,
    window_ms=..., evaluation_interval_s=...)``; the token is stored under the name ``ops``. All are
    stopped after the test."""
    from spark_governor.api.app import Settings
    from spark_governor.api.server import ControlPlane

    planes = []

    def start(token: str, **settings):
        plane = ControlPlane(db_url=sqlite_url, port=0, tokens={"ops": token}, settings=Settings(**settings)).start()
        planes.append(plane)
        return plane

    yield start
    for plane in planes:
        plane.stop()


@pytest.fixture(scope="session")
def spark():
    require(shutil.which("java") is not None, "java")
    from spark_governor.collectors.demo_job import build_session

    session = build_session("local[2]", shuffle_partitions=4, app_name="spark-governor-tests")
    yield session
    session.stop()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def both_databases(request, sqlite_url):
    """A migrated engine on a fresh SQLite file and, as the second parameter, on a fresh database of the
    real PostgreSQL server."""
    from spark_governor.aggregators import db

    url = sqlite_url if request.param == "sqlite" else request.getfixturevalue("fresh_postgres_db")
    db.upgrade(url)
    eng = db.make_engine(url)
    yield eng
    eng.dispose()


# -- PostgreSQL ------------------------------------------------------------------------------
def _pg_bin() -> str | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    return os.path.dirname(found[-1]) if found else None


@pytest.fixture(scope="session")
def postgres_url():
    """A throw-away PostgreSQL cluster started with initdb/pg_ctl on a free port."""
    bindir = _pg_bin()
    require(bindir is not None, "PostgreSQL server (Debian package postgresql)")
    tmp = tempfile.mkdtemp(prefix="sg-pg-")
    port = free_port()
    as_user: list[str] = []
    if os.geteuid() == 0:  # initdb refuses to run as root
        shutil.chown(tmp, "postgres")
        as_user = ["runuser", "-u", "postgres", "--"]
    data = os.path.join(tmp, "data")
    subprocess.run(as_user + [f"{bindir}/initdb", "-D", data, "-A", "trust", "-U", "postgres"],
                   check=True, capture_output=True)
    subprocess.run(as_user + [f"{bindir}/pg_ctl", "-D", data, "-l", os.path.join(tmp, "log"), "-w", "-o",
                              f"-h 127.0.0.1 -p {port} -k {tmp}", "start"], check=True, capture_output=True)
    try:
        yield f"postgresql+psycopg://postgres@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run(as_user + [f"{bindir}/pg_ctl", "-D", data, "-m", "immediate", "stop"], capture_output=True)
        shutil.rmtree(tmp, ignore_errors=True)


@pytest.fixture
def fresh_postgres_db(postgres_url):
    """A new empty database in the session's PostgreSQL server."""
    from sqlalchemy import create_engine, text

    name = f"sg_{os.getpid()}_{int(time.time() * 1000) % 10**9}"
    admin = create_engine(postgres_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f"CREATE DATABASE {name}"))
    yield postgres_url.rsplit("/", 1)[0] + "/" + name
    with admin.connect() as conn:
        conn.execute(text(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
    admin.dispose()


# -- Prometheus ------------------------------------------------------------------------------
@pytest.fixture
def prometheus_factory(tmp_path):
    """Start a real Prometheus scraping the given targets every second and evaluating the given rule files every
    second; stopped afterwards. The scrape config is the plain one of deploy/prometheus.yml: no ``honor_labels``
    (the Spark job is the exported ``spark_job``)."""
    binary = shutil.which("prometheus")
    require(binary is not None, "prometheus (Debian package prometheus)")
    procs = []

    def start(targets: list[str], rules: tuple = ()) -> str:
        port = free_port()
        cfg = tmp_path / "prometheus.yml"
        rule_files = "".join(f"  - {str(r)!r}\n" for r in rules)
        cfg.write_text(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
            + (f"rule_files:\n{rule_files}" if rules else "") +
            "scrape_configs:\n  - job_name: spark-governor\n"
            f"    static_configs:\n      - targets: {targets!r}\n".replace("'", '"'))
        proc = subprocess.Popen([binary, f"--config.file={cfg}", f"--web.listen-address=127.0.0.1:{port}",
                                 f"--storage.tsdb.path={tmp_path / 'tsdb'}"],
                                stdout=subprocess.DEVNULL, stderr=open(tmp_path / "prometheus.log", "w"))
        procs.append(proc)
        url = f"http://127.0.0.1:{port}"

        def ready():
            try:
                return requests.get(url + "/-/ready", timeout=1).status_code == 200
            except requests.RequestException:
                return False

        wait_for(ready, 60, what="prometheus ready")
        return url

    yield start
    for p in procs:
        p.terminate()
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            p.kill()


class PromQL:
    """PromQL over a test Prometheus's HTTP API (``prometheus_factory`` gives the URL)."""

    def __init__(self, url: str) -> None:
        self.url = url

    def query(self, expr: str, **params) -> list:
        """Instant query, or a range query when ``start`` is given; the result vector/matrix."""
        path = "query_range" if "start" in params else "query"
        r = requests.get(f"{self.url}/api/v1/{path}", params={"query": expr, **params}, timeout=5)
        assert r.status_code == 200, (expr, r.text)
        return r.json()["data"]["result"]

    def samples(self, expr: str) -> int:
        """Samples of ``expr`` (one series) scraped in the last minute."""
        result = self.query(f"count_over_time({expr}[1m])")
        return int(float(result[0]["value"][1])) if result else 0

    def empty_panels(self, dashboard: dict, job: str) -> list[str]:
        """Evaluate every panel query of ``dashboard`` for Spark job ``job``, panel by panel: the panels
        without data. Every series carries our ``spark_job`` (= ``job``) and Prometheus's own ``job``
        label (the scrape job's; no ``honor_labels``, so never an ``exported_job``)."""
        from spark_governor.dashboards import panel_queries, render_expr

        empty = []
        for title, expr in panel_queries(dashboard):
            result = self.query(render_expr(expr, {"job": job, "datasource": "prometheus"}))
            if not result:
                empty.append(f"{title}: {expr}")
            for series in result:
                assert series["metric"].get("spark_job", job) == job and "exported_job" not in series["metric"], series
                assert series["metric"].get("job", "spark-governor") == "spark-governor", series
        return empty


# -- Spark standalone cluster -------------------------------------------------------------------
@pytest.fixture(scope="session")
def standalone_cluster(tmp_path_factory):
    """A real master + one 4-core worker on 127.0.0.1 from the pyspark install (tests/standalone.py)."""
    require(shutil.which("java") is not None, "java")
    from tests.standalone import StandaloneCluster

    c = StandaloneCluster(tmp_path_factory.mktemp("standalone"), cores=4).start()
    yield c
    c.stop()
