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

With psycopg 3, the widest rows of a report skip the arrays (psycopg dumps array elements in Python:
that was about 40 % of ingest's client CPU) and travel by ``COPY … FROM STDIN``, whose rows psycopg
formats in C: ``insert_tuples`` (the task rows) COPies into the table itself, ``upsert_rows`` into a
temporary staging table of the session and then moves them with ``WITH s AS (DELETE FROM stage
RETURNING …) INSERT … SELECT … FROM s ON CONFLICT …``. A session-level temporary table, like the prepared
statements above, needs a session per connection: not PgBouncer's transaction pooling.

SQLite, in process, gets the DB-API ``executemany`` of one prepared statement, which is as cheap as it
gets there. The SQL text is built from the table's own column names and types (never from input);
values always travel as bound parameters, converted to the column's Python type first (the driver
refuses arrays mixing ints and floats).
"""
from __future__ import annotations

import json
import threading
import weakref
import zlib
from functools import lru_cache
from operator import itemgetter

from sqlalchemy import JSON, Table, event
from sqlalchemy.engine import Connection, Engine

def _pg_types(table: Table, cols: tuple[str, ...], dialect) -> list[str]:
    return [table.c[c].type.compile(dialect=dialect) for c in cols]


@lru_cache(maxsize=1024)
def _converter(table: Table, col: str):
    """The Python type every value of ``col`` is converted to (None stays None)."""
    try:
        py = table.c[col].type.python_type
    except (KeyError, NotImplementedError):
        return None
    return py if py in (int, float, bool, str) else None


def _columns(table: Table, cols: tuple[str, ...], columns) -> list[list]:
    """``columns`` (one sequence of values per column of ``cols``) as lists of the columns' Python types."""
    out = []
    for c, values in zip(cols, columns):
        conv = _converter(table, c)
        if conv is not None and not _NONE_OR.get(conv, set()).issuperset(map(type, values)):
            values = [v if v is None or type(v) is conv else conv(v) for v in values]
        out.append(list(values))
    return out


_NONE_OR = {t: {t, type(None)} for t in (int, float, bool, str)}


def _arrays(table: Table, cols: tuple[str, ...], rows: list[dict], id_key: str | None = None) -> list[list]:
    out = [[r[id_key] for r in rows]] if id_key is not None else []
    get = itemgetter(*cols)
    return out + _columns(table, cols, zip(*map(get, rows)) if len(cols) > 1 else [[r[cols[0]] for r in rows]])


def _tuples(rows: list[dict], cols: tuple[str, ...]) -> list[tuple]:
    """Each row's values in the order of ``cols`` (the DB-API parameters of an ``executemany``)."""
    if len(cols) == 1:
        return [(r[cols[0]],) for r in rows]
    return list(map(itemgetter(*cols), rows))


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
        conn.exec_driver_sql(_qmark_insert_sql(table, cols), _tuples(rows, cols))
    else:  # another dialect: SQLAlchemy's own executemany
        conn.execute(table.insert(), rows)


def insert_tuples(conn: Connection, table: Table, cols: tuple[str, ...], rows: list[tuple]) -> None:
    """``insert_rows`` for rows given as tuples in the order of ``cols`` (no dict built per row: the
    task rows of a report, ``aggregators.ingest``). On PostgreSQL with psycopg 3 the rows travel by
    ``COPY … FROM STDIN`` in the same transaction: psycopg formats COPY rows in C, about a quarter of
    the client CPU of dumping the same values as arrays (0.12 vs 0.43 ms for 40 task rows)."""
    if not rows:
        return
    if conn.dialect.name == "postgresql" and conn.dialect.driver == "psycopg":
        _copy_rows(conn, table, cols, rows)
    elif conn.dialect.name == "postgresql":
        conn.exec_driver_sql(_pg_insert_sql(table, cols, conn.dialect), tuple(_columns(table, cols, zip(*rows))))
    elif conn.dialect.paramstyle == "qmark":
        conn.exec_driver_sql(_qmark_insert_sql(table, cols), rows)
    else:
        conn.execute(table.insert(), [dict(zip(cols, r)) for r in rows])


def _copy_rows(conn: Connection, table, cols: tuple[str, ...], rows: list[tuple]) -> None:
    """COPY ``rows`` into ``table`` (a Table or a table name) on the connection's current transaction
    (psycopg 3). The text format is parsed by the server by column type, so no conversion to the
    column's Python type is needed."""
    with conn.connection.driver_connection.cursor() as cur:
        with cur.copy(_copy_sql(table if isinstance(table, str) else table.name, cols)) as copy:
            for r in rows:
                copy.write_row(r)


@lru_cache(maxsize=64)
def _copy_sql(table: str, cols: tuple[str, ...]) -> str:
    return f"COPY {table} ({', '.join(cols)}) FROM STDIN"


# -- PostgreSQL staging tables (upsert_rows) ------------------------------------------------------------
#: per psycopg connection: staging tables known to exist (committed) and created in the open transaction
_stages: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_stages_lock = threading.Lock()
_tracked_engines: "weakref.WeakSet" = weakref.WeakSet()


@lru_cache(maxsize=64)
def _stage_name(table: Table, cols: tuple[str, ...]) -> str:
    return f"sg_stage_{table.name}_{zlib.crc32(','.join(cols).encode()):08x}"


def _stage_table(conn: Connection, table: Table, cols: tuple[str, ...]) -> str:
    """The session's staging table for ``cols`` of ``table`` (created once per database session: a
    creation rolled back with its transaction is forgotten, ``_track``)."""
    name = _stage_name(table, cols)
    raw = conn.connection.driver_connection
    with _stages_lock:
        state = _stages.get(raw)
        if state is None:
            state = _stages[raw] = (set(), set())  # (committed, created in the open transaction)
    if name in state[0] or name in state[1]:
        return name
    _track(conn.engine)
    conn.exec_driver_sql(f"CREATE TEMPORARY TABLE IF NOT EXISTS {name} ON COMMIT DELETE ROWS AS "
                         f"SELECT {', '.join(cols)} FROM {table.name} WITH NO DATA")
    state[1].add(name)
    return name


def _track(engine: Engine) -> None:
    """Settle the staging tables created in a transaction when it commits or rolls back."""
    if engine in _tracked_engines:
        return
    with _stages_lock:
        if engine in _tracked_engines:
            return
        _tracked_engines.add(engine)

    def _settle(conn: Connection, committed: bool) -> None:
        try:
            state = _stages.get(conn.connection.driver_connection)
        except Exception:  # an invalidated connection: its session and temporary tables are gone
            return
        if state is not None:
            if committed:
                state[0].update(state[1])
            state[1].clear()

    event.listen(engine, "commit", lambda conn: _settle(conn, True))
    event.listen(engine, "rollback", lambda conn: _settle(conn, False))


@lru_cache(maxsize=64)
def _staged_upsert_sql(table: Table, cols: tuple[str, ...], key: tuple[str, ...], sets: tuple[tuple[str, str], ...],
                       stage: str) -> str:
    names = ", ".join(cols)
    updates = ", ".join(f"{c} = {expr}" for c, expr in sets)
    return (f"WITH s AS (DELETE FROM {stage} RETURNING {names}) "
            f"INSERT INTO {table.name} ({names}) SELECT {names} FROM s "
            f"ON CONFLICT ({', '.join(key)}) DO UPDATE SET {updates}")


@lru_cache(maxsize=128)
def _json_columns(table: Table, cols: tuple[str, ...]) -> frozenset:
    return frozenset(c for c in cols if isinstance(table.c[c].type, JSON))


@lru_cache(maxsize=128)
def _pg_update_sql(table: Table, cols: tuple[str, ...], dialect) -> str:
    json_cols = _json_columns(table, cols)
    types = ["TEXT" if c in json_cols else t for c, t in zip(cols, _pg_types(table, cols, dialect))]
    arrays = ", ".join(f"%b::{t}[]" for t in ["INTEGER", *types])
    sets = ", ".join(f"{c} = v.{c}::json" if c in json_cols else f"{c} = v.{c}" for c in cols)
    return (f"UPDATE {table.name} AS t SET {sets} FROM unnest({arrays}) AS v(_id, {', '.join(cols)}) "
            f"WHERE t.id = v._id")


@lru_cache(maxsize=64)
def _qmark_update_sql(table: Table, cols: tuple[str, ...]) -> str:
    return f"UPDATE {table.name} SET {', '.join(f'{c} = ?' for c in cols)} WHERE id = ?"


def update_rows(conn: Connection, table: Table, rows: list[dict]) -> None:
    """UPDATE rows of ``table`` by primary key ``id``: each dict has ``_id`` and the same columns. On
    PostgreSQL a JSON column travels as its JSON text (``json.dumps``, as SQLAlchemy's JSON type writes it:
    None is JSON ``null``) cast back to ``json``; elsewhere through SQLAlchemy's JSON type."""
    if not rows:
        return
    cols = tuple(k for k in rows[0] if k != "_id")
    json_cols = _json_columns(table, cols)
    if json_cols and conn.dialect.name != "postgresql":
        from sqlalchemy import bindparam, update

        stmt = update(table).where(table.c.id == bindparam("_id")).values({c: bindparam(c) for c in cols})
        conn.execute(stmt, rows)
        return
    if conn.dialect.name == "postgresql":
        if json_cols:
            rows = [{k: json.dumps(v) if k in json_cols else v for k, v in r.items()} for r in rows]
        conn.exec_driver_sql(_pg_update_sql(table, cols, conn.dialect), tuple(_arrays(table, cols, rows, "_id")))
    elif conn.dialect.paramstyle == "qmark":
        conn.exec_driver_sql(_qmark_update_sql(table, cols), _tuples(rows, (*cols, "_id")))
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
    ``rows`` (PostgreSQL cannot update one row twice in a statement). SQLite and PostgreSQL only.

    PostgreSQL with psycopg 3: the rows are COPied into a temporary staging table of the session, then
    ``WITH s AS (DELETE FROM stage RETURNING …) INSERT INTO t SELECT … FROM s ON CONFLICT …`` moves them,
    in COPY order, in one statement that leaves the staging table empty (it is also emptied at every
    commit, ``ON COMMIT DELETE ROWS``). That is two round trips instead of one, at a third of the client
    CPU of dumping the columns as arrays."""
    if not rows:
        return
    cols = tuple(rows[0])
    if conn.dialect.name == "postgresql" and conn.dialect.driver == "psycopg":
        stage = _stage_table(conn, table, cols)
        _copy_rows(conn, stage, cols, _tuples(rows, cols))
        conn.exec_driver_sql(_staged_upsert_sql(table, cols, key, sets, stage))
        return
    sql = _upsert_sql(table, cols, key, sets, conn.dialect)
    if conn.dialect.name == "postgresql":
        conn.exec_driver_sql(sql, tuple(_arrays(table, cols, rows)))
    else:
        conn.exec_driver_sql(sql, _tuples(rows, cols))


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
