"""``spark-governor db``: database schema migrations (Alembic)."""
from __future__ import annotations

import click

from spark_governor.aggregators.db import DEFAULT_DB_URL


@click.group()
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
