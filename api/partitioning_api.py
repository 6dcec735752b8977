"""Partitioning endpoints (Prompt, digest 000): per-batch partition statistics and plans.

- ``GET /api/v1/jobs/<job>/partitioning?limit=N&top=M`` — the latest N (1..500, default 20)
  partitioned batches, oldest first, with the applied plan's loads and metrics (BSI, BCI, KSR,
  MPI, max/mean block load; times in ms); the latest batch's M (0..10000, default 20) most frequent
  keys; and the latest ``partition_plan`` decision with its predicted metrics.
- ``GET /api/v1/jobs/<job>/partitioning/plan`` — the current ``partition_plan`` directive (the
  full plan the job applies) with its version and status, 404 when there is none.
"""
from __future__ import annotations

from flask import Blueprint, jsonify, request
from sqlalchemy import select
from sqlalchemy.engine import Engine

from spark_governor.aggregators import queries
from spark_governor.aggregators.directives import current_directives
from spark_governor.aggregators.models import decisions
from spark_governor.aggregators.partitions import recent_partition_stats
from spark_governor.api.auth import ApiError


def _int_arg(name: str, default: int, lo: int, hi: int) -> int:
    raw = request.args.get(name, str(default))
    if not raw.isdigit() or not lo <= int(raw) <= hi:
        raise ApiError(400, f"{name}: must be an integer between {lo} and {hi}")
    return int(raw)


def latest_plan_decision(conn, job_id: int):
    d = conn.execute(select(decisions).where(decisions.c.job_id == job_id, decisions.c.knob == "partition_plan")
                     .order_by(decisions.c.created_ms.desc(), decisions.c.id.desc()).limit(1)).mappings().first()
    if d is None:
        return None
    value = d["new_value"] or {}
    return {"id": d["id"], "policy": d["policy"], "status": d["status"], "created_ms": d["created_ms"],
            "reason": d["reason"], "prediction": d["prediction"], "inputs": d["inputs"],
            "partitions": value.get("partitions"), "reduce": value.get("reduce"),
            "planned_keys": len(value.get("assignment") or {}), "based_on": value.get("based_on"),
            "elasticity": value.get("elasticity"), "planning_s": value.get("planning_s"),
            "directive_version": d["directive_version"]}


def build_partitioning_blueprint(engine: Engine) -> Blueprint:
    bp = Blueprint("partitioning", __name__)

    @bp.errorhandler(ApiError)
    def _api_error(exc: ApiError):
        return jsonify(error=exc.message), exc.status

    @bp.get("/api/v1/jobs/<job>/partitioning")
    def partitioning(job: str):
        limit, top = _int_arg("limit", 20, 1, 500), _int_arg("top", 20, 0, 10_000)
        with engine.connect() as conn:
            j = queries.job_row(conn, job)
            rows = recent_partition_stats(conn, j.id, limit)
            plan = latest_plan_decision(conn, j.id)
        for r in rows:
            r.pop("job_id", None)
            keys = r.pop("key_counts")
            r.pop("id", None)
            r["top_keys"] = keys[:top] if r is rows[-1] else None
        return jsonify(job=job, batches=rows, plan=plan)

    @bp.get("/api/v1/jobs/<job>/partitioning/plan")
    def current_plan(job: str):
        with engine.connect() as conn:
            j = queries.job_row(conn, job)
            found = [d for d in current_directives(conn, j.id) if d["knob"] == "partition_plan"]
        if not found:
            raise ApiError(404, f"job {job!r} has no partition_plan directive")
        d = found[0]
        return jsonify(job=job, version=d["version"], status=d["status"], applied_version=d["applied_version"],
                       plan=d["value"])

    return bp
