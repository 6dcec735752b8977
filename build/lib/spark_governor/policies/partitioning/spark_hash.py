"""Spark's row hash in pure Python: ``hash(c1, c2, …)`` = Murmur3 x86 32-bit with seed 42, chained
column by column (``org.apache.spark.sql.catalyst.expressions.Murmur3Hash``), and the partition
``pmod(hash(cols), P)`` that ``HashPartitioning`` — hence every stateful operator's state store —
gives a grouping key (digest 003 §9.1–9.2, digest 001 §8.1).

Supported column values: ``int`` in the 32-bit range (``IntegerType``, ``hashInt``), ``Long(v)``
for ``LongType`` (``hashLong``), ``str`` (``StringType``: ``hashUnsafeBytes`` over the UTF-8
bytes, whose tail bytes are mixed one signed byte at a time, unlike reference Murmur3) and
``None`` (skipped, as Spark skips nulls). Used by the routing-table job side
(``collectors.routing``) to pick bucket tokens on the driver, and by the ``mixed-routing`` policy
for the hash fallback h(k); a test checks it against Spark's ``hash``.
"""
from __future__ import annotations

from typing import Iterable, Optional

__all__ = ["Long", "spark_hash", "spark_partition", "token_for"]

_C1, _C2, _M = 0xCC9E2D51, 0x1B873593, 0xFFFFFFFF
SEED = 42


class Long(int):
    """Marks a value hashed as Spark's ``LongType`` (8 bytes) instead of ``IntegerType``."""


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _M


def _mix_k1(k1: int) -> int:
    k1 = (k1 * _C1) & _M
    k1 = _rotl(k1, 15)
    return (k1 * _C2) & _M


def _mix_h1(h1: int, k1: int) -> int:
    h1 ^= k1
    h1 = _rotl(h1, 13)
    return (h1 * 5 + 0xE6546B64) & _M


def _fmix(h1: int, length: int) -> int:
    h1 ^= length
    h1 ^= h1 >> 16
    h1 = (h1 * 0x85EBCA6B) & _M
    h1 ^= h1 >> 13
    h1 = (h1 * 0xC2B2AE35) & _M
    return h1 ^ (h1 >> 16)


def _hash_int(v: int, seed: int) -> int:
    return _fmix(_mix_h1(seed, _mix_k1(v & _M)), 4)


def _hash_long(v: int, seed: int) -> int:
    v &= (1 << 64) - 1
    h1 = _mix_h1(seed, _mix_k1(v & _M))
    h1 = _mix_h1(h1, _mix_k1(v >> 32))
    return _fmix(h1, 8)


def _hash_bytes(b: bytes, seed: int) -> int:
    n = len(b)
    aligned = n - n % 4
    h1 = seed
    for i in range(0, aligned, 4):
        h1 = _mix_h1(h1, _mix_k1(int.from_bytes(b[i:i + 4], "little")))
    for i in range(aligned, n):
        signed = b[i] - 256 if b[i] > 127 else b[i]
        h1 = _mix_h1(h1, _mix_k1(signed & _M))
    return _fmix(h1, n)


def _signed(h: int) -> int:
    return h - (1 << 32) if h >= 1 << 31 else h


def spark_hash(*values: Optional[object]) -> int:
    """``hash(values…)`` as Spark SQL computes it (a signed 32-bit int)."""
    h = SEED
    for v in values:
        if v is None:
            continue
        if isinstance(v, bool):
            h = _hash_int(int(v), h)
        elif isinstance(v, Long):
            h = _hash_long(int(v), h)
        elif isinstance(v, int):
            if not -(1 << 31) <= v < 1 << 31:
                raise ValueError(f"{v} is outside IntegerType; wrap it in Long() for LongType")
            h = _hash_int(v, h)
        elif isinstance(v, str):
            h = _hash_bytes(v.encode("utf-8"), h)
        else:
            raise TypeError(f"unsupported value {v!r} ({type(v).__name__})")
    return _signed(h)


def spark_partition(partitions: int, *values: Optional[object]) -> int:
    """``pmod(hash(values…), partitions)``: the shuffle / state-store partition of a grouping key."""
    return spark_hash(*values) % partitions


def token_for(key: object, target: int, partitions: int, start: int = 0, limit: int = 1 << 20) -> int:
    """The smallest int token t ≥ ``start`` with ``pmod(hash(t, key), partitions) == target``: grouping
    by (token, key) then places the key's state on partition ``target``."""
    for t in range(start, start + limit):
        if spark_hash(t, key) % partitions == target:
            return t
    raise ValueError(f"no token within {limit} tries for key {key!r} → {target}")


def partitions_of(keys: Iterable[object], partitions: int, token: int = 0) -> list[int]:
    """``pmod(hash(token, k), partitions)`` for every key (the hash fallback h(k) of the routed job)."""
    return [spark_hash(token, k) % partitions for k in keys]
