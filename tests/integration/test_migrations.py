"""Alembic migrations upgrade an empty SQLite and an empty PostgreSQL database, and downgrade again."""
import pytest
from sqlalchemy import inspect

from spark_governor.aggregators import db
from spark_governor.aggregators.models import metadata
from spark_governor.api.app import Settings, create_app
from spark_governor.bench.reports import gz, make_report


def _tables(url: str) -> set[str]:
    eng = db.make_engine(url)
    try:
        return set(inspect(eng).get_table_names()) - {"alembic_version"}
    finally:
        eng.dispose()


def _roundtrip(url: str) -> None:
    assert _tables(url) == set()
    db.upgrade(url)
    assert _tables(url) == set(metadata.tables)
    assert db.current_revision(url) is not None
    # the migrated schema accepts a report through the real ingest path
    eng = db.make_engine(url)
    client = create_app(eng, Settings()).test_client()
    r = client.post("/api/v1/reports", data=gz(make_report(n_tasks=12, batches=2)),
                    headers={"Content-Encoding": "gzip"})
    assert r.status_code == 200, r.json
    assert client.get("/api/v1/jobs/job-a/stages").json["stages"][0]["summary"]["tasks"] > 0
    eng.dispose()
    db.downgrade(url)
    assert _tables(url) == set()
    assert db.current_revision(url) is None


def test_sqlite_upgrade_and_downgrade(sqlite_url):
    _roundtrip(sqlite_url)


@pytest.mark.postgres
def test_postgres_upgrade_and_downgrade(fresh_postgres_db):
    _roundtrip(fresh_postgres_db)


def test_models_match_migrations(sqlite_url):
    """Autogenerate finds no difference between the models and the migrated schema."""
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext

    db.upgrade(sqlite_url)
    eng = db.make_engine(sqlite_url)
    with eng.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), metadata)
    eng.dispose()
    assert diff == []
