"""The ``spark-governor`` command line."""
from __future__ import annotations

import json
import logging
import signal
import sys
import threading

import click
import requests

from spark_governor.aggregators.db import DEFAULT_DB_URL

DEFAULT_ENDPOINT = "http://127.0.0.1:8787"


@click.group()
@click.option("-v", "--verbose", is_flag=True, help="Log at INFO level.")
def main(verbose: bool) -> None:
    """spark-governor: observability and autoscaling for Spark Structured Streaming."""
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")


@main.command()
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
    import os

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


@main.group()
def db() -> None:
    """Database schema migrations (Alembic)."""


@db.command("upgrade")
@click.option("--db", "db_url", default=DEFAULT_DB_URL, show_default=True)
@click.option("--revision", default="head", show_default=True)
def db_upgrade(db_url: str, revision: str) -> None:
    """Upgrade the schema to REVISION."""
    from spark_governor.aggregators.db import upgrade

    upgrade(db_url, revision)
    click.echo(f"upgraded {db_url} to {revision}")


@db.command("downgrade")
@click.option("--db", "db_url", default=DEFAULT_DB_URL, show_default=True)
@click.option("--revision", default="base", show_default=True)
def db_downgrade(db_url: str, revision: str) -> None:
    """Downgrade the schema to REVISION (default: empty)."""
    from spark_governor.aggregators.db import downgrade

    downgrade(db_url, revision)
    click.echo(f"downgraded {db_url} to {revision}")


@db.command("current")
@click.option("--db", "db_url", default=DEFAULT_DB_URL, show_default=True)
def db_current(db_url: str) -> None:
    """Print the schema revision of the database."""
    from spark_governor.aggregators.db import current_revision

    click.echo(current_revision(db_url) or "(empty)")


def _get(endpoint: str, path: str) -> dict:
    try:
        resp = requests.get(endpoint.rstrip("/") + path, timeout=10)
    except requests.RequestException as exc:
        raise click.ClickException(f"cannot reach {endpoint}: {exc.__class__.__name__}") from None
    if resp.status_code != 200:
        try:
            message = resp.json().get("error", resp.text)
        except ValueError:
            message = resp.text
        raise click.ClickException(f"{path}: HTTP {resp.status_code}: {message}")
    return resp.json()


@main.command()
@click.argument("job")
@click.option("--endpoint", default=DEFAULT_ENDPOINT, show_default=True)
@click.option("--windows", default=12, show_default=True, type=click.IntRange(1, 1000),
              help="Number of recent windows to summarise.")
@click.option("--json", "as_json", is_flag=True, help="Print the API's JSON instead of a table.")
def stats(job: str, endpoint: str, windows: int, as_json: bool) -> None:
    """Print per-stage statistics of JOB from a running control plane."""
    from spark_governor.api.tables import batches_table, stages_table

    stages = _get(endpoint, f"/api/v1/jobs/{job}/stages?windows={windows}")
    batches = _get(endpoint, f"/api/v1/jobs/{job}/batches?limit=1000")
    if as_json:
        click.echo(json.dumps({"stages": stages["stages"], "batches": batches}, indent=2))
        return
    click.echo(stages_table(stages["stages"]))
    click.echo()
    click.echo(batches_table(batches))


if __name__ == "__main__":  # pragma: no cover
    # ``python -m api.cli``: run the importable ``api.cli`` (the command modules below register on
    # it and import it back; registering them on ``__main__`` would import this file twice)
    from spark_governor.api.cli import main as _main

    sys.exit(_main())

from spark_governor.api import cli_extra  # noqa: E402,F401  (registers demo, dashboards and bench commands)
from spark_governor.api import cli_plan  # noqa: E402,F401  (registers plan and bench partitioners / spark-skew)
from spark_governor.api import cli_batch  # noqa: E402,F401  (registers bench batch-sizing)
from spark_governor.api import cli_scaling_real  # noqa: E402,F401  (registers bench scaling-real)
from spark_governor.api import cli_routing  # noqa: E402,F401  (registers bench partitioners-drift)
