"""Template keys: a stable identity for a query's stage across micro-batches.

Spark gives every micro-batch new job and stage ids. A *template vertex* (Lohrmann's template
graph, thesis §2.3.1; digest §11.2) is recovered from what does not change between batches of
the same query:

* the streaming query id (``sql.streaming.queryId`` job property; it survives restarts from the
  same checkpoint),
* the stage's position among its job's stages (stage ids are created parents-first, so sorting
  them gives a topological order),
* the plan operators that make up the stage: the names of the RDD operation scopes, e.g.
  ``MicroBatchScan``, ``WholeStageCodegen (1)``, ``Exchange``, ``StateStoreSave`` (scope *ids*
  change per batch and are ignored), and the stage's call site,
* and, if one batch runs several jobs whose stages look alike, the occurrence index of that
  signature within the batch.

The key is a 16-hex-digit SHA-1 prefix of that signature. Pure functions over the JSON that
Spark's ``JsonProtocol`` produces for ``SparkListenerJobStart``.
"""
from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Optional

_CODEGEN = re.compile(r"^WholeStageCodegen \(\d+\)$")


@dataclass(frozen=True)
class StageTemplate:
    """Template vertex of one stage of one job."""

    key: str
    name: str
    ordinal: int
    operators: tuple[str, ...]
    parents: tuple[str, ...] = field(default_factory=tuple)


@lru_cache(maxsize=4096)
def _scope_name(scope: str) -> Optional[str]:
    """The operator name of an RDD's ``Scope`` JSON (the same strings repeat every micro-batch)."""
    try:
        name = json.loads(scope).get("name")
    except (TypeError, ValueError, AttributeError):
        return None
    return name if isinstance(name, str) else None


def stage_operators(stage_info: dict) -> tuple[str, ...]:
    """Operator (scope) names of a stage in pipeline order (by RDD id), de-duplicated."""
    ops: list[str] = []
    for rdd in sorted(stage_info.get("RDD Info", []), key=lambda r: r.get("RDD ID", 0)):
        scope = rdd.get("Scope")
        if not scope or not isinstance(scope, str):
            continue
        name = _scope_name(scope)
        if name and name not in ops:
            ops.append(name)
    return tuple(ops)


def readable_name(ordinal: int, operators: tuple[str, ...]) -> str:
    shown = [op for op in operators if not _CODEGEN.match(op)] or list(operators) or ["stage"]
    return f"s{ordinal} " + " > ".join(shown)


class TemplateRegistry:
    """Assigns template vertices to the stages of streaming jobs, batch by batch."""

    def __init__(self) -> None:
        self._seen_in_batch: dict[tuple[str, int], Counter] = {}
        self._stages_in_batch: dict[tuple[str, int], int] = {}

    def templates_for_job(self, query_id: str, batch_id: int, stage_infos: list[dict]) -> dict[int, StageTemplate]:
        """Map each stage id of a job to its template; ``stage_infos`` as in JobStart's "Stage Infos"."""
        batch = (query_id, batch_id)
        # keep bookkeeping for a handful of recent batches only
        if batch not in self._seen_in_batch:
            for old in list(self._seen_in_batch)[:-8]:
                self._seen_in_batch.pop(old, None)
                self._stages_in_batch.pop(old, None)
            self._seen_in_batch[batch] = Counter()
            self._stages_in_batch[batch] = 0
        seen = self._seen_in_batch[batch]
        offset = self._stages_in_batch[batch]
        infos = sorted(stage_infos, key=lambda s: s["Stage ID"])
        position = {s["Stage ID"]: i for i, s in enumerate(infos)}
        out: dict[int, StageTemplate] = {}
        for i, info in enumerate(infos):
            ops = stage_operators(info)
            parents = sorted(position[p] for p in info.get("Parent IDs", []) if p in position)
            signature = json.dumps([i, info.get("Stage Name", ""), ops, parents])
            occurrence = seen[signature]
            seen[signature] += 1
            digest = hashlib.sha1(json.dumps([query_id, signature, occurrence]).encode()).hexdigest()[:16]
            out[info["Stage ID"]] = StageTemplate(digest, readable_name(offset + i, ops), offset + i, ops)
        self._stages_in_batch[batch] = offset + len(infos)
        # parents as template keys
        for info in infos:
            t = out[info["Stage ID"]]
            parents = tuple(out[p].key for p in info.get("Parent IDs", []) if p in out)
            out[info["Stage ID"]] = StageTemplate(t.key, t.name, t.ordinal, t.operators, parents)
        return out
