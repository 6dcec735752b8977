"""Bulk statements for the ingest hot path: many rows in one statement (one round trip).

Per report, ingest writes tens of task rows and updates tens of runtime windows and vertices
(``aggregators.ingest``). Through SQLAlchemy's ``executemany`` the PostgreSQL driver sends one
statement per row (pipelined, but parsed, planned and executed once per row by the server), and
SQLAlchemy compiles each statement per call; a multi-row ``VALUES`` list instead costs the driver a
scan of a long query text on every call. Here, on PostgreSQL, every column travels as one array
parameter (``%b``: sent in PostgreSQL's binary format, which halves the driver's cost of dumping
arrays) and the statement text depends only on the table and its columns, so the driver caches
and prepares it once per connection, whatever the number of rows:

* ``insert_rows``: ``INSERT INTO t (a, b) SELECT * FROM unnest(%b::bigint[], %b::text[])``;
* ``update_rows``: ``UPDATE t SET a = v.a FROM unnest(%b::integer[], %b::bigint[]) AS v(_id, a)
  WHERE t.id = v._id``;
* ``upsert_rows``: ``INSERT … SELECT * FROM unnest(…) ON CONFLICT (key) DO UPDATE SET …`` (SQLite:
  ``INSERT … VALUES (?, …) ON CONFLICT (key) DO UPDATE SET …``), the SET expressions given by the
  caller, reading the stored row as ``<table>`` and the new one as ``excluded``: one statement
  instead of a locking read, an update and an insert.

SQLite, in process, gets the DB-API ``executemany`` of one prepared statement, which is as cheap as it
gets there. The SQL text is built from the table's own column names and types (never from input);
values always travel as bound parameters, converted to the column's Python type first (the driver
refuses arrays mixing ints and floats).
"""
from __future__ import annotations

from functools import lru_cache

from sqlalchemy import Table
from sqlalchemy.engine import Connection

def _pg_types(table: Table, cols: tuple[str, ...], dialect) -> list[str]:
    return [table.c[c].type.compile(dialect=dialect) for c in cols]


def _converter(table: Table, col: str):
    """The Python type every value of ``col`` is converted to (None stays None)."""
    try:
        py = table.c[col].type.python_type
    except (KeyError, NotImplementedError):
        return None
    return py if py in (int, float, bool, str) else None


def _arrays(table: Table, cols: tuple[str, ...], rows: list[dict], id_key: str | None = None) -> list[list]:
    out = []
    if id_key is not None:
        out.append([r[id_key] for r in rows])
    for c in cols:
        conv = _converter(table, c)
        values = [r[c] for r in rows]
        if conv is not None:
            values = [v if v is None or type(v) is conv else conv(v) for v in values]
        out.append(values)
    return out


@lru_cache(maxsize=128)
def _pg_insert_sql(table: Table, cols: tuple[str, ...], dialect) -> str:
    arrays = ", ".join(f"%b::{t}[]" for t in _pg_types(table, cols, dialect))
    return f"INSERT INTO {table.name} ({', '.join(cols)}) SELECT * FROM unnest({arrays})"


@lru_cache(maxsize=64)
def _qmark_insert_sql(table: Table, cols: tuple[str, ...]) -> str:
    return f"INSERT INTO {table.name} ({', '.join(cols)}) VALUES ({', '.join('?' for _ in cols)})"


def insert_rows(conn: Connection, table: Table, rows: list[dict]) -> None:
    """INSERT ``rows`` (dicts with the same keys, all of them scalar columns of ``table``) in one
    statement. No RETURNING: for rows whose generated ids nobody needs back."""
    if not rows:
        return
    cols = tuple(rows[0])
    if conn.dialect.name == "postgresql":
        conn.exec_driver_sql(_pg_insert_sql(table, cols, conn.dialect), tuple(_arrays(table, cols, rows)))
    elif conn.dialect.paramstyle == "qmark":
        conn.exec_driver_sql(_qmark_insert_sql(table, cols), [tuple(r[c] for c in cols) for r in rows])
    else:  # another dialect: SQLAlchemy's own executemany
        conn.execute(table.insert(), rows)


@lru_cache(maxsize=128)
def _pg_update_sql(table: Table, cols: tuple[str, ...], dialect) -> str:
    arrays = ", ".join(f"%b::{t}[]" for t in ["INTEGER", *_pg_types(table, cols, dialect)])
    sets = ", ".join(f"{c} = v.{c}" for c in cols)
    return (f"UPDATE {table.name} AS t SET {sets} FROM unnest({arrays}) AS v(_id, {', '.join(cols)}) "
            f"WHERE t.id = v._id")


@lru_cache(maxsize=64)
def _qmark_update_sql(table: Table, cols: tuple[str, ...]) -> str:
    return f"UPDATE {table.name} SET {', '.join(f'{c} = ?' for c in cols)} WHERE id = ?"


def update_rows(conn: Connection, table: Table, rows: list[dict]) -> None:
    """UPDATE rows of ``table`` by primary key ``id``: each dict has ``_id`` and the same columns."""
    if not rows:
        return
    cols = tuple(k for k in rows[0] if k != "_id")
    if conn.dialect.name == "postgresql":
        conn.exec_driver_sql(_pg_update_sql(table, cols, conn.dialect), tuple(_arrays(table, cols, rows, "_id")))
    elif conn.dialect.paramstyle == "qmark":
        conn.exec_driver_sql(_qmark_update_sql(table, cols), [tuple(r[c] for c in cols) + (r["_id"],) for r in rows])
    else:
        from sqlalchemy import bindparam, update

        stmt = update(table).where(table.c.id == bindparam("_id")).values({c: bindparam(c) for c in cols})
        conn.execute(stmt, rows)


@lru_cache(maxsize=64)
def _upsert_sql(table: Table, cols: tuple[str, ...], key: tuple[str, ...], sets: tuple[tuple[str, str], ...],
                dialect) -> str:
    if dialect.name == "postgresql":
        arrays = ", ".join(f"%b::{t}[]" for t in _pg_types(table, cols, dialect))
        source = f"SELECT * FROM unnest({arrays})"
    else:
        source = f"VALUES ({', '.join('?' for _ in cols)})"
    updates = ", ".join(f"{c} = {expr}" for c, expr in sets)
    return (f"INSERT INTO {table.name} ({', '.join(cols)}) {source} "
            f"ON CONFLICT ({', '.join(key)}) DO UPDATE SET {updates}")


def upsert_rows(conn: Connection, table: Table, rows: list[dict], key: tuple[str, ...],
                sets: tuple[tuple[str, str], ...]) -> None:
    """INSERT ``rows``, or where a row with the same ``key`` (a unique constraint) exists, UPDATE it with
    ``sets`` (column, SQL expression over ``<table>.col`` and ``excluded.col``). At most one row per key in
    ``rows`` (PostgreSQL cannot update one row twice in a statement). SQLite and PostgreSQL only."""
    if not rows:
        return
    cols = tuple(rows[0])
    sql = _upsert_sql(table, cols, key, sets, conn.dialect)
    if conn.dialect.name == "postgresql":
        conn.exec_driver_sql(sql, tuple(_arrays(table, cols, rows)))
    else:
        conn.exec_driver_sql(sql, [tuple(r[c] for c in cols) for r in rows])


def insert_new_rows(conn: Connection, table: Table, rows: list[dict], key: tuple[str, ...],
                    returning: tuple[str, ...]) -> set[tuple]:
    """INSERT the ``rows`` whose ``key`` (a unique constraint) is not stored yet, in one statement
    (``ON CONFLICT DO NOTHING``); returns the ``returning`` columns of the rows inserted (of a key given
    twice, the first row). For the few rows per report of stage runs and micro-batches (JSON columns
    allowed: the statement is SQLAlchemy's, with its type processing). SQLite and PostgreSQL only."""
    if not rows:
        return set()
    stmt = _insert_new_stmt(table, key, returning, conn.dialect.name)
    # executemany with RETURNING: SQLAlchemy sends one multi-row INSERT ("insertmanyvalues") from a
    # statement compiled once; building ``.values(rows)`` per call costs about 1 ms in coercions
    return {tuple(r) for r in conn.execute(stmt, rows)}


@lru_cache(maxsize=32)
def _insert_new_stmt(table: Table, key: tuple[str, ...], returning: tuple[str, ...], dialect_name: str):
    if dialect_name == "postgresql":
        from sqlalchemy.dialects.postgresql import insert as dialect_insert
    else:
        from sqlalchemy.dialects.sqlite import insert as dialect_insert
    return (dialect_insert(table).on_conflict_do_nothing(index_elements=list(key))
            .returning(*[table.c[c] for c in returning]))
