"""Checks that a job's statistics are the same whether its tasks were folded at the edge (report schema v3) or
sent whole (v2, folded by the control plane): issue #42. Used by tests/integration/test_edge_fold.py."""
from __future__ import annotations

import copy
import dataclasses
import gzip
import json
import math
from typing import Any

from sqlalchemy import select

from spark_governor.aggregators import cluster_profile, health, queries
from spark_governor.aggregators.ingest import ingest_report
from spark_governor.aggregators.models import runtime_vertices, runtime_windows, template_vertices, template_windows
from spark_governor.aggregators.view import build_view
from spark_governor.collectors.reporter import Reporter
from spark_governor.policies.registry import get_policy, validate_config
from spark_governor.policies.wire import parse_report

#: the executor policies whose decisions must not change (their defaults)
EXECUTOR_POLICIES = ("kingman", "threshold", "utilization-target", "utilization-threshold")
REL = 1e-9


def whole(v3: dict, items: list) -> dict:
    """The v2 report of the same records as the v3 report ``v3``: every task row, no folded statistics."""
    v2 = {k: v for k, v in v3.items() if k not in ("window_ms", "runtime_windows", "template_windows", "task_spans")}
    v2["schema_version"] = 2
    v2["reporter"] = {k: v for k, v in v3["reporter"].items() if k != "task_detail"}
    v2["tasks"] = [rec for kind, rec in items if kind == "task"]
    executors = [rec for kind, rec in items if kind == "executor"]
    v2.pop("executors", None)
    if executors:
        v2["executors"] = executors
    return v2


class CapturingReporter(Reporter):
    """A reporter that keeps, for each report it builds, the v3 report it sends, the v2 report of the same records
    and the time it was built (epoch ms)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.captured: list[tuple[dict, dict, int]] = []
        self._items: list = []

    def _take(self) -> list:
        items = super()._take()
        self._items = copy.deepcopy(items)
        return items

    def _build_pending(self) -> None:
        import time

        super()._build_pending()
        v3 = json.loads(gzip.decompress(self._pending[1]))
        self.captured.append((v3, whole(v3, self._items), int(time.time() * 1000)))


def ingest_all(engine, reports: list[tuple[dict, int]], window_ms: int) -> None:
    """Store ``(report, now_ms)`` pairs in order, each in its own transaction (``ingest_report``)."""
    for report, now_ms in reports:
        with engine.begin() as conn:
            ingest_report(conn, parse_report(json.dumps(report)), window_ms, now_ms=now_ms)


def _windows(conn) -> dict:
    rv, tv = runtime_vertices.c, template_vertices.c
    out = {}
    for r in conn.execute(select(runtime_windows, tv.key, rv.partition)
                          .join(runtime_vertices, rv.id == runtime_windows.c.runtime_vertex_id)
                          .join(template_vertices, tv.id == runtime_windows.c.template_id)).mappings():
        out[("runtime", r["key"], r["partition"], r["window_start_ms"])] = {
            k: v for k, v in r.items() if k not in ("id", "runtime_vertex_id", "template_id", "key", "partition")}
    for r in conn.execute(select(template_windows, tv.key)
                          .join(template_vertices, tv.id == template_windows.c.template_id)).mappings():
        out[("template", r["key"], r["window_start_ms"])] = {k: v for k, v in r.items()
                                                             if k not in ("id", "template_id", "key")}
    return out


def assert_close(a: Any, b: Any, path: str = "") -> None:
    """``a`` equals ``b``, floats to a relative 1e-9 (dataclasses and models compared field by field)."""
    if dataclasses.is_dataclass(a) and not isinstance(a, type):
        a, b = dataclasses.asdict(a), dataclasses.asdict(b)
    if hasattr(a, "model_dump"):
        a, b = a.model_dump(), b.model_dump()
    if isinstance(a, float) or isinstance(b, float):
        assert isinstance(a, (int, float)) and isinstance(b, (int, float)), f"{path}: {a!r} != {b!r}"
        assert (math.isnan(a) and math.isnan(b)) or math.isclose(a, b, rel_tol=REL, abs_tol=1e-12), \
            f"{path}: {a!r} != {b!r}"
    elif isinstance(a, dict):
        assert isinstance(b, dict) and set(a) == set(b), f"{path}: keys {sorted(set(a) ^ set(b))} differ"
        for k in a:
            assert_close(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, (list, tuple)):
        assert isinstance(b, (list, tuple)) and len(a) == len(b), f"{path}: lengths {len(a)} != {len(b)}"
        for i, (x, y) in enumerate(zip(a, b)):
            assert_close(x, y, f"{path}.{i}")
    else:
        assert a == b, f"{path}: {a!r} != {b!r}"


def statistics(engine, job: str, now_ms: int, window_ms: int, window_s: float = 60.0) -> dict:
    """Everything a job's statistics decide, as of ``now_ms``: its windows, cluster profile, health verdict, the
    view the policies see and each executor policy's proposals at its defaults."""
    with engine.begin() as conn:
        job_id = queries.job_row(conn, job).id
        profile = cluster_profile.refresh(conn, job, job_id, now_ms)
        view = build_view(conn, job, window_s, window_ms, now_ms)
        verdict = health.job_health(conn, job, window_s, window_ms, now_ms)
        proposals = {}
        for name in EXECUTOR_POLICIES:
            cls = get_policy(name)
            proposals[name] = [dataclasses.asdict(p) for p in cls().evaluate(view, validate_config(cls, {}))]
        return {"windows": _windows(conn), "profile": profile.to_json(), "health": dataclasses.asdict(verdict),
                "view": dataclasses.asdict(view), "proposals": proposals}


def assert_same_statistics(folded, whole_, job: str, now_ms: int, window_ms: int) -> dict:
    """The statistics of ``job`` in the store that took folded reports equal those in the store that took whole
    ones (to 1e-9); returns the folded store's."""
    a = statistics(folded, job, now_ms, window_ms)
    b = statistics(whole_, job, now_ms, window_ms)
    assert a["windows"], "no statistics window stored"
    assert_close(a, b, "statistics")
    return a
