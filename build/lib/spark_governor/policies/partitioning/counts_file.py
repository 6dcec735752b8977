"""Reading key counts (CSV ``key,count``, one key per line, optional header ``key,count``).

Errors name the file and the 1-based line: ``counts.csv:7: count 'x' is not an integer``.
"""
from __future__ import annotations

import csv
import io
from pathlib import Path

import numpy as np

from spark_governor.policies.partitioning.base import KeyCounts, PlanError


def parse_counts(text: str, source: str = "<counts>") -> KeyCounts:
    keys: list[str] = []
    counts: list[int] = []
    seen: dict[str, int] = {}
    for lineno, row in enumerate(csv.reader(io.StringIO(text)), start=1):
        if not row or all(not c.strip() for c in row):
            continue
        if lineno == 1 and [c.strip().lower() for c in row] == ["key", "count"]:
            continue
        if len(row) != 2:
            raise PlanError(f"{source}:{lineno}: expected 2 fields 'key,count', got {len(row)}")
        key, raw = row[0].strip(), row[1].strip()
        if not key:
            raise PlanError(f"{source}:{lineno}: empty key")
        try:
            n = int(raw)
        except ValueError:
            raise PlanError(f"{source}:{lineno}: count {raw!r} is not an integer") from None
        if n <= 0:
            raise PlanError(f"{source}:{lineno}: count {n} must be > 0")
        if key in seen:
            raise PlanError(f"{source}:{lineno}: key {key!r} repeats line {seen[key]}")
        seen[key] = lineno
        keys.append(key)
        counts.append(n)
    return KeyCounts(tuple(keys), np.array(counts, dtype=np.int64))


def read_counts(path: str | Path) -> KeyCounts:
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise PlanError(f"{p}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    return parse_counts(text, str(p))
