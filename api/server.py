"""Run the control plane: the Flask app behind a WSGI server, plus the scheduler in exactly one process.

* :class:`ControlPlane` runs everything in this process (Werkzeug's threaded server in a thread):
  tests, the demo and benchmarks that embed a control plane.
* :func:`run_production` is ``spark-governor serve``: gunicorn with ``workers`` pre-forked processes
  of ``threads`` threads each (``gthread``). Each worker builds its own engine and app and competes
  for leadership (``api.leader``); only the leader's scheduler evaluates policies and purges old
  statistics. Prometheus counters of the workers are shared through ``PROMETHEUS_MULTIPROC_DIR``,
  so ``/metrics`` answers the same from any worker.

Each process stores reports through one ingest writer thread (group commit, ``api.ingest_queue``), started
with the first report and closed when the process stops (``ControlPlane.stop``, gunicorn's ``worker_exit``):
the reports still queued are written first.
"""
from __future__ import annotations

import logging
import os
import shutil
import sys
import tempfile
import threading
from dataclasses import dataclass, field
from typing import Optional

from spark_governor.aggregators.db import DEFAULT_DB_URL, current_revision, make_engine, upgrade

log = logging.getLogger("spark_governor.server")


class SchemaNotCurrent(RuntimeError):
    pass


def head_revision() -> str:
    from alembic.script import ScriptDirectory

    from spark_governor.aggregators.db import alembic_config

    return ScriptDirectory.from_config(alembic_config(DEFAULT_DB_URL)).get_current_head()


def prepare_database(db_url: str, migrate: Optional[bool], tokens: dict) -> None:
    """Migrate (SQLite by default) or check that the schema is current; make the configured tokens
    exactly ``tokens`` (removed ones stop working)."""
    from spark_governor.api.auth import store_tokens

    migrate = db_url.startswith("sqlite") if migrate is None else migrate
    if migrate:
        upgrade(db_url)
    elif current_revision(db_url) != head_revision():
        raise SchemaNotCurrent(f"database schema is not current; run: spark-governor db upgrade --db {db_url}")
    engine = make_engine(db_url)
    try:
        store_tokens(engine, tokens)
    finally:
        engine.dispose()


def leader_poll_s(evaluation_interval_s: float) -> float:
    """How often followers try to take over: half an evaluation interval, between 0.1 and 5 s."""
    return min(5.0, max(0.1, evaluation_interval_s / 2))


@dataclass
class ControlPlane:
    """The whole control plane in one process; ``start()`` returns once it accepts requests."""

    db_url: str = DEFAULT_DB_URL
    host: str = "127.0.0.1"
    port: int = 8787
    settings: "object" = None  # api.app.Settings
    retention_s: float = 24 * 3600.0
    retention_interval_s: float = 60.0
    migrate: Optional[bool] = None  # None: automatically for SQLite only
    tokens: dict = field(default_factory=dict)  # API token name -> secret or auth.TokenSpec (stored hashed)

    def start(self) -> "ControlPlane":
        from werkzeug.serving import make_server

        from spark_governor.api.app import Settings, create_app
        from spark_governor.api.leader import Leader
        from spark_governor.api.scheduler import build_scheduler

        if self.settings is None:
            self.settings = Settings()
        prepare_database(self.db_url, self.migrate, self.tokens)
        self.engine = make_engine(self.db_url)
        self.app = create_app(self.engine, self.settings)
        self._server = make_server(self.host, self.port, self.app, threaded=True)
        self.port = self._server.server_port
        self._thread = threading.Thread(target=self._server.serve_forever, name="spark-governor-http", daemon=True)
        self._thread.start()
        self.leader = Leader(self.engine, leader_poll_s(self.settings.evaluation_interval_s),
                             name=f"{os.getpid()}:{self.port}").start()
        self.scheduler = build_scheduler(self.engine, self.retention_s, self.retention_interval_s,
                                         governor=self.app.extensions["spark_governor.governor"], leader=self.leader,
                                         metrics=self.app.extensions["spark_governor.scheduler_metrics"])
        self.scheduler.start()
        return self

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def stop(self) -> None:
        self.scheduler.shutdown(wait=False)
        self.leader.stop()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(10)
        self.app.extensions["spark_governor.ingest_queue"].close()
        self.engine.dispose()

    def __enter__(self) -> "ControlPlane":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


@dataclass
class ProductionConfig:
    """``spark-governor serve``'s settings (flags and environment variables; docs/deployment.md)."""

    db_url: str = DEFAULT_DB_URL
    host: str = "127.0.0.1"
    port: int = 8787
    workers: int = 2
    threads: int = 8
    settings: "object" = None  # api.app.Settings
    retention_s: float = 24 * 3600.0
    retention_interval_s: float = 60.0
    migrate: Optional[bool] = None
    tokens: dict = field(default_factory=dict)
    timeout_s: float = 60.0  # a worker silent this long is restarted
    graceful_timeout_s: float = 20.0
    keepalive_s: float = 75.0  # longer than the reporters' 1 s interval: connections are reused
    backlog: int = 256


def _worker_app(cfg: ProductionConfig):
    """Build one worker's app, leader election and scheduler (called in the worker, after fork)."""
    from spark_governor.api.app import create_app
    from spark_governor.api.leader import Leader
    from spark_governor.api.scheduler import build_scheduler

    engine = make_engine(cfg.db_url, pool_size=cfg.threads + 2, max_overflow=4) \
        if not cfg.db_url.startswith("sqlite") else make_engine(cfg.db_url)
    app = create_app(engine, cfg.settings)
    leader = Leader(engine, leader_poll_s(cfg.settings.evaluation_interval_s)).start()
    scheduler = build_scheduler(engine, cfg.retention_s, cfg.retention_interval_s,
                                governor=app.extensions["spark_governor.governor"], leader=leader,
                                metrics=app.extensions["spark_governor.scheduler_metrics"])
    scheduler.start()
    app.extensions["spark_governor.leader"] = leader
    app.extensions["spark_governor.scheduler"] = scheduler
    return app


def use_worker_metrics_dir() -> Optional[str]:
    """Set ``PROMETHEUS_MULTIPROC_DIR`` (a new temporary directory, returned) unless it is set. Must run
    before ``prometheus_client`` is first imported, which picks its value class at import."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        return None
    import sys

    if "prometheus_client" in sys.modules:
        log.warning("prometheus_client was imported before PROMETHEUS_MULTIPROC_DIR was set: "
                    "/metrics counters of the workers will not be summed")
    path = tempfile.mkdtemp(prefix="spark-governor-metrics-")
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = path
    return path


def _die_with_parent() -> None:
    """Linux: a worker gets SIGKILL when the master dies, so ``kill -9`` of the master frees the port at once
    (gunicorn's own orphan check lets a gthread worker finish its keep-alive connections first, and a restarted
    ``serve`` could not bind meanwhile). Elsewhere a no-op."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes
    import signal

    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # pragma: no cover - no libc prctl
        log.warning("spark-governor: cannot tie workers to the master (prctl unavailable)")


def run_production(cfg: ProductionConfig, on_ready=None) -> None:
    """Run gunicorn in the foreground until SIGTERM/SIGINT (graceful: requests in flight finish)."""
    from gunicorn.app.base import BaseApplication
    from gunicorn.arbiter import Arbiter
    from gunicorn.errors import HaltServer

    from spark_governor.api.app import Settings

    if cfg.settings is None:
        cfg.settings = Settings()
    prepare_database(cfg.db_url, cfg.migrate, cfg.tokens)
    own_dir = use_worker_metrics_dir()
    from spark_governor.api.leader import REPLICA_ENV, replica_id

    os.environ.setdefault(REPLICA_ENV, replica_id())  # the master's: its workers are one replica (api.leader)

    def child_exit(_server, worker) -> None:
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(worker.pid)

    def worker_exit(_server, worker) -> None:
        app = getattr(worker, "wsgi", None)
        ext = getattr(app, "extensions", {}) if app is not None else {}
        if "spark_governor.scheduler" in ext:
            ext["spark_governor.scheduler"].shutdown(wait=False)
            ext["spark_governor.leader"].stop()
        if "spark_governor.ingest_queue" in ext:  # requests in flight are done: write what is still queued
            ext["spark_governor.ingest_queue"].close()

    def post_fork(_server, _worker) -> None:
        _die_with_parent()

    def when_ready(server) -> None:
        log.info("spark-governor: %d workers on %s:%d", cfg.workers, cfg.host, cfg.port)
        if on_ready is not None:
            on_ready(server)

    options = {
        "bind": f"{cfg.host}:{cfg.port}", "workers": cfg.workers, "threads": cfg.threads,
        "worker_class": "gthread", "timeout": int(cfg.timeout_s), "graceful_timeout": int(cfg.graceful_timeout_s),
        "keepalive": int(cfg.keepalive_s), "backlog": cfg.backlog, "preload_app": False,
        "limit_request_line": 8190, "limit_request_fields": 100, "limit_request_field_size": 8190,
        "accesslog": None, "errorlog": "-", "loglevel": "warning", "proc_name": "spark-governor",
        "child_exit": child_exit, "worker_exit": worker_exit, "when_ready": when_ready, "post_fork": post_fork,
        "control_socket_disable": True,
    }

    class StoppableArbiter(Arbiter):
        stopping = False

        def handle_term(self):
            self.stopping = True
            super().handle_term()

        def handle_int(self):
            self.stopping = True
            super().handle_int()

    class Server(BaseApplication):
        def load_config(self):
            for key, value in options.items():
                if key in self.cfg.settings:
                    self.cfg.set(key, value)

        def load(self):
            return _worker_app(cfg)

        def run(self):
            arbiter = StoppableArbiter(self)
            try:
                arbiter.run()
            except HaltServer as exc:  # a worker still booting when SIGTERM came is not an error
                if not (arbiter.stopping and exc.exit_status == Arbiter.WORKER_BOOT_ERROR):
                    raise

    try:
        Server().run()
    finally:
        if own_dir is not None:
            shutil.rmtree(own_dir, ignore_errors=True)
            os.environ.pop("PROMETHEUS_MULTIPROC_DIR", None)
