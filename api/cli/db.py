"""``spark-governor db``: database schema migrations (Alembic)."""
from __future__ import annotations

import click

from spark_governor.aggregators.db import DEFAULT_DB_URL


_DB = click.option("--db", "db_url", default=DEFAULT_DB_URL, show_default=True, envvar="SPARK_GOVERNOR_DB",
                   help="SQLAlchemy URL of the control plane's database.")


def _no_database(exc: Exception) -> click.ClickException:
    return click.ClickException(str(exc))


@click.group()
def db() -> None:
    """Database schema migrations (Alembic)."""


@db.command("upgrade")
@_DB
@click.option("--revision", default="head", show_default=True)
def db_upgrade(db_url: str, revision: str) -> None:
    """Upgrade the schema to REVISION."""
    from spark_governor.aggregators.db import upgrade

    upgrade(db_url, revision)
    click.echo(f"upgraded {db_url} to {revision}")


@db.command("downgrade")
@_DB
@click.option("--revision", default="base", show_default=True)
def db_downgrade(db_url: str, revision: str) -> None:
    """Downgrade the schema to REVISION (default: empty)."""
    from spark_governor.aggregators.db import NoDatabase, downgrade

    try:
        downgrade(db_url, revision)
    except NoDatabase as exc:
        raise _no_database(exc) from None
    click.echo(f"downgraded {db_url} to {revision}")


@db.command("current")
@_DB
def db_current(db_url: str) -> None:
    """Print the schema revision of the database (never creates one: no database is an error)."""
    from spark_governor.aggregators.db import NoDatabase, current_revision

    try:
        click.echo(current_revision(db_url) or "(empty)")
    except NoDatabase as exc:
        raise _no_database(exc) from None
