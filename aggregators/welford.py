"""Chan et al.'s merge of stored moments inside the database (SQL expressions for upserts).

The moments themselves (Welford's update, the exact merge) are ``policies.moments.Moments``, shared with the
reporters that fold tasks at the edge; here the same merge is written as SQL so that a stored window absorbs a
new one in one ``INSERT … ON CONFLICT DO UPDATE``.
"""
from __future__ import annotations


def sql_merge(name: str, stored: str, incoming: str) -> dict[str, str]:
    """Chan et al.'s merge (as :meth:`Moments.merge`, same order of operations) as SQL expressions, for an
    upsert that merges a window's moments inside the database (``INSERT … ON CONFLICT DO UPDATE``).

    ``stored`` and ``incoming`` qualify the columns ``<name>_n``, ``<name>_mean``, ``<name>_m2`` of the
    stored row and of the new one (e.g. ``runtime_windows`` and ``excluded``). Every right-hand side reads
    the stored row as it was before the update (SQL semantics), like the Python merge. Column names come
    from the schema, never from input. SQLite and PostgreSQL evaluate them alike: ``_mean``/``_m2`` are
    floating-point columns, so every product and quotient below is computed in double precision."""
    n_s, n_i = f"{stored}.{name}_n", f"{incoming}.{name}_n"
    mean_s, mean_i = f"{stored}.{name}_mean", f"{incoming}.{name}_mean"
    m2_s, m2_i = f"{stored}.{name}_m2", f"{incoming}.{name}_m2"
    delta = f"({mean_i} - {mean_s})"
    return {
        f"{name}_n": f"{n_s} + {n_i}",
        f"{name}_mean": f"CASE WHEN {n_i} = 0 THEN {mean_s} WHEN {n_s} = 0 THEN {mean_i} "
                        f"ELSE {mean_s} + {delta} * {n_i} / ({n_s} + {n_i}) END",
        f"{name}_m2": f"CASE WHEN {n_i} = 0 THEN {m2_s} WHEN {n_s} = 0 THEN {m2_i} "
                      f"ELSE {m2_s} + {m2_i} + {delta} * {delta} * {n_s} * {n_i} / ({n_s} + {n_i}) END",
    }


def sql_saturating_sum(column: str, stored: str, incoming: str, limit: int = 2**63 - 1) -> str:
    """``stored.column + incoming.column`` capped at ``limit`` (a BIGINT column holds at most 2**63 − 1),
    written so that the sum is never evaluated when it would overflow (both are ≥ 0)."""
    s, i = f"{stored}.{column}", f"{incoming}.{column}"
    return f"CASE WHEN {i} > {limit} - {s} THEN {limit} ELSE {s} + {i} END"


def sql_extreme(column: str, stored: str, incoming: str, end: str) -> str:
    """The smaller (``end`` ``"min"``) or larger (``"max"``) of ``stored.column`` and ``incoming.column``, NULL
    standing for an empty sample (SQLite's ``min()``/``max()`` of a NULL is NULL, PostgreSQL's LEAST/GREATEST
    skip it: a CASE is the same on both)."""
    s, i = f"{stored}.{column}", f"{incoming}.{column}"
    op = "<" if end == "min" else ">"
    return f"CASE WHEN {s} IS NULL THEN {i} WHEN {i} IS NULL THEN {s} WHEN {i} {op} {s} THEN {i} ELSE {s} END"
