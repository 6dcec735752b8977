"""Run the control plane: Flask app on a threaded WSGI server plus the APScheduler loop."""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Optional

from werkzeug.serving import make_server

from spark_governor.aggregators.db import DEFAULT_DB_URL, current_revision, make_engine, upgrade
from spark_governor.api.app import Settings, create_app
from spark_governor.api.auth import store_tokens
from spark_governor.api.scheduler import build_scheduler


class SchemaNotCurrent(RuntimeError):
    pass


def head_revision() -> str:
    from alembic.script import ScriptDirectory

    from spark_governor.aggregators.db import alembic_config

    return ScriptDirectory.from_config(alembic_config(DEFAULT_DB_URL)).get_current_head()


@dataclass
class ControlPlane:
    """The whole control plane in one process; ``start()`` returns once it accepts requests."""

    db_url: str = DEFAULT_DB_URL
    host: str = "127.0.0.1"
    port: int = 8787
    settings: Settings = field(default_factory=Settings)
    retention_s: float = 24 * 3600.0
    retention_interval_s: float = 60.0
    migrate: Optional[bool] = None  # None: automatically for SQLite only
    tokens: dict = field(default_factory=dict)  # API token name -> secret (stored hashed)

    def start(self) -> "ControlPlane":
        migrate = self.db_url.startswith("sqlite") if self.migrate is None else self.migrate
        if migrate:
            upgrade(self.db_url)
        elif current_revision(self.db_url) != head_revision():
            raise SchemaNotCurrent(f"database schema is not current; run: spark-governor db upgrade --db {self.db_url}")
        self.engine = make_engine(self.db_url)
        if self.tokens:
            store_tokens(self.engine, self.tokens)
        self.app = create_app(self.engine, self.settings)
        self._server = make_server(self.host, self.port, self.app, threaded=True)
        self.port = self._server.server_port
        self._thread = threading.Thread(target=self._server.serve_forever, name="spark-governor-http", daemon=True)
        self._thread.start()
        self.scheduler = build_scheduler(self.engine, self.retention_s, self.retention_interval_s,
                                         governor=self.app.extensions["spark_governor.governor"])
        self.scheduler.start()
        return self

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def stop(self) -> None:
        self.scheduler.shutdown(wait=False)
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(10)
        self.engine.dispose()

    def __enter__(self) -> "ControlPlane":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
