"""``spark-governor token``: create, list and revoke API tokens in the database, without a restart.

Secrets are printed once by ``create`` and stored only as SHA-256; running control planes see a new
or revoked token within a second (``api.auth.TokenCache``).
"""
from __future__ import annotations

import json

import click

from spark_governor.aggregators.db import DEFAULT_DB_URL

_DB = click.option("--db", "db_url", default=DEFAULT_DB_URL, show_default=True, envvar="SPARK_GOVERNOR_DB",
                   help="SQLAlchemy URL of the control plane's database.")


def _engine(db_url: str):
    from spark_governor.aggregators.db import NoDatabase, current_revision, make_engine
    from spark_governor.api.server import head_revision

    try:
        revision = current_revision(db_url)
    except NoDatabase as exc:
        raise click.ClickException(str(exc)) from None
    if revision != head_revision():
        raise click.ClickException(f"database schema is not current; run: spark-governor db upgrade --db {db_url}")
    return make_engine(db_url)


@click.group()
def token() -> None:
    """API tokens: scopes report / read / write / admin, optionally limited to job-name patterns."""


@token.command("create")
@click.argument("name")
@click.option("--scope", "scopes", multiple=True, required=True,
              type=click.Choice(["report", "read", "write", "admin"]), help="Repeatable.")
@click.option("--job", "jobs", multiple=True, metavar="PATTERN",
              help="Limit the token to jobs whose name matches (fnmatch, e.g. 'team-a-*'); repeatable.")
@_DB
def token_create(name: str, scopes: tuple[str, ...], jobs: tuple[str, ...], db_url: str) -> None:
    """Create token NAME and print its secret (shown only now)."""
    from spark_governor.api.auth import create_token

    engine = _engine(db_url)
    try:
        secret = create_token(engine, name, scopes, jobs or None)
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    finally:
        engine.dispose()
    click.echo(secret)


@token.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@_DB
def token_list(as_json: bool, db_url: str) -> None:
    """List tokens (never their secrets or hashes)."""
    from spark_governor.api.auth import list_tokens

    engine = _engine(db_url)
    try:
        rows = list_tokens(engine)
    finally:
        engine.dispose()
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    click.echo(f"{'name':<24} {'scopes':<24} {'jobs':<24} {'source':<7} status")
    for r in rows:
        click.echo(f"{r['name']:<24} {'+'.join(r['scopes']):<24} {'+'.join(r['jobs'] or ['*']):<24} "
                   f"{r['source']:<7} {'revoked' if r['revoked_ms'] else 'active'}")


@token.command("revoke")
@click.argument("name")
@_DB
def token_revoke(name: str, db_url: str) -> None:
    """Revoke token NAME (every control plane refuses it within a second)."""
    from spark_governor.api.auth import revoke_token

    engine = _engine(db_url)
    try:
        if not revoke_token(engine, name):
            raise click.ClickException(f"token {name!r}: no active token of that name")
    finally:
        engine.dispose()
    click.echo(f"revoked {name}")
