"""``spark-governor serve``: the control plane (HTTP API, /metrics and the scheduler) in this process."""
from __future__ import annotations

import os
import signal
import threading

import click

from spark_governor.aggregators.db import DEFAULT_DB_URL


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind.")
@click.option("--port", default=8787, show_default=True, type=click.IntRange(0, 65535))
@click.option("--db", "db_url", default=DEFAULT_DB_URL, show_default=True, help="SQLAlchemy URL.")
@click.option("--window-seconds", default=5.0, show_default=True, type=click.FloatRange(0.1, 3600),
              help="Length of a statistics window.")
@click.option("--retention-hours", default=24.0, show_default=True, type=click.FloatRange(0.001),
              help="Statistics older than this are deleted.")
@click.option("--migrate/--no-migrate", default=None,
              help="Run migrations at start (default: only for SQLite).")
@click.option("--evaluation-seconds", default=10.0, show_default=True, type=click.FloatRange(0.1, 3600),
              help="Policy evaluation interval.")
@click.option("--token", "tokens", multiple=True, metavar="NAME=SECRET",
              help="API token for write endpoints (repeatable; also SPARK_GOVERNOR_TOKENS=n1=s1,n2=s2).")
def serve(host: str, port: int, db_url: str, window_seconds: float, retention_hours: float, migrate,
          evaluation_seconds: float, tokens: tuple[str, ...]) -> None:
    """Start the control plane (HTTP API, /metrics and the scheduler)."""
    from spark_governor.api.app import Settings
    from spark_governor.api.server import ControlPlane, SchemaNotCurrent

    named = {}
    for item in [*tokens, *filter(None, os.environ.get("SPARK_GOVERNOR_TOKENS", "").split(","))]:
        name, sep, secret = item.partition("=")
        if not sep or not name or len(secret) < 8:
            raise click.BadParameter("expected NAME=SECRET with a secret of at least 8 characters",
                                     param_hint="--token")
        named[name] = secret
    settings = Settings(window_ms=int(window_seconds * 1000), evaluation_interval_s=evaluation_seconds)
    plane = ControlPlane(db_url=db_url, host=host, port=port, settings=settings,
                         retention_s=retention_hours * 3600, migrate=migrate, tokens=named)
    try:
        plane.start()
    except SchemaNotCurrent as exc:
        raise click.ClickException(str(exc)) from None
    except OSError as exc:
        raise click.ClickException(f"cannot listen on {host}:{port}: {exc}") from None
    click.echo(f"spark-governor control plane on {plane.url} (db {db_url})", err=True)
    done = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: done.set())
    done.wait()
    plane.stop()
