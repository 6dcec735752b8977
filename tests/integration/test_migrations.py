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


def _kingman_lean_options(url: str) -> None:
    """Migration 0012: a Kingman config stored with options issue #44 removed reads as today's; threshold's own
    ``backlog_projected`` (an option it keeps) is left alone."""
    from sqlalchemy import insert, select

    from spark_governor.aggregators.models import jobs, policy_configs
    from spark_governor.policies.kingman_config import KingmanConfig, REMOVED_OPTIONS
    from spark_governor.policies.registry import get_policy, validate_config

    db.upgrade(url, "0011")
    eng = db.make_engine(url)
    old = {"spare_executors": 2, "spare_when": "rising", "scale_down_delay_s": 30.0, "e_clamp_low": 0.8,
           "in_flight": False, "max_value": 6}
    with eng.begin() as conn:
        job_id = conn.execute(insert(jobs).values(name="old-job", created_ms=1)).inserted_primary_key[0]
        conn.execute(insert(policy_configs), [
            {"job_id": job_id, "policy": "kingman", "enabled": True, "mode": "act", "config": old, "updated_ms": 1},
            {"job_id": job_id, "policy": "threshold", "enabled": True, "mode": "act",
             "config": {"backlog_projected": True}, "updated_ms": 1}])
    eng.dispose()
    db.upgrade(url)
    eng = db.make_engine(url)
    with eng.connect() as conn:
        stored = dict(conn.execute(select(policy_configs.c.policy, policy_configs.c.config)).all())
    eng.dispose()
    assert stored["kingman"] == {"spare_executors": 2, "max_value": 6}
    assert not set(stored["kingman"]) & set(REMOVED_OPTIONS)
    assert validate_config(get_policy("kingman"), stored["kingman"]) == KingmanConfig(spare_executors=2, max_value=6)
    assert stored["threshold"] == {"backlog_projected": True}
    db.downgrade(url)


def test_sqlite_drops_kingmans_removed_options(sqlite_url):
    _kingman_lean_options(sqlite_url)


@pytest.mark.postgres
def test_postgres_drops_kingmans_removed_options(fresh_postgres_db):
    _kingman_lean_options(fresh_postgres_db)
