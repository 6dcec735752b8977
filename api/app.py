"""Flask application of the control plane: ingest, statistics, health and Prometheus metrics.

``POST /api/v1/reports`` accepts a report (``policies.wire.Report``, JSON, optionally
``Content-Encoding: gzip``). It is validated as a whole and stored in one transaction: a bad
report gets 400 (or 413 when too large) with a message naming the field, and stores nothing.
"""
from __future__ import annotations

import time
import zlib
from dataclasses import dataclass

from flask import Flask, Response, jsonify, request
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from sqlalchemy import text
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError, OperationalError
from werkzeug.exceptions import HTTPException

from spark_governor.aggregators import queries
from spark_governor.aggregators.directives import current_directives
from spark_governor.aggregators.ingest import DEFAULT_WINDOW_MS, ingest_report
from spark_governor.api.constraints_api import build_constraints_blueprint
from spark_governor.api.partitioning_api import build_partitioning_blueprint
from spark_governor.api.governor import Governor
from spark_governor.api.metrics import build_registry
from spark_governor.api.openapi import openapi_document
from spark_governor.api.policies_api import build_blueprint
from spark_governor.policies.wire import ReportError, parse_report


@dataclass(frozen=True)
class Settings:
    """Control-plane settings. Sizes in bytes, window in milliseconds."""

    window_ms: int = DEFAULT_WINDOW_MS
    evaluation_interval_s: float = 10.0             # policy evaluation interval
    max_body_bytes: int = 16 * 1024 * 1024          # as sent (compressed)
    max_decompressed_bytes: int = 64 * 1024 * 1024  # after gunzip


class BadRequest(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status, self.message = status, message


def _gunzip(data: bytes, limit: int) -> bytes:
    d = zlib.decompressobj(16 + zlib.MAX_WBITS)
    try:
        out = d.decompress(data, limit + 1)
    except zlib.error as exc:
        raise BadRequest(400, f"body: invalid gzip data ({exc})") from None
    if len(out) > limit:
        raise BadRequest(413, f"body: decompressed report exceeds {limit} bytes")
    if not d.eof:
        raise BadRequest(400, "body: truncated gzip data")
    return out


def _int_arg(name: str, default: int, lo: int, hi: int) -> int:
    raw = request.args.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise BadRequest(400, f"{name}: must be an integer") from None
    if not lo <= value <= hi:
        raise BadRequest(400, f"{name}: must be between {lo} and {hi}")
    return value


def create_app(engine: Engine, settings: Settings = Settings()) -> Flask:
    app = Flask("spark_governor")
    app.config["MAX_CONTENT_LENGTH"] = settings.max_body_bytes
    app.extensions["spark_governor.engine"] = engine
    registry, ingest_metrics = build_registry(engine, settings.window_ms)
    governor = Governor(engine, settings.evaluation_interval_s, settings.window_ms)
    app.extensions["spark_governor.governor"] = governor
    app.register_blueprint(build_blueprint(engine, governor))
    app.register_blueprint(build_constraints_blueprint(engine, settings.window_ms))
    app.register_blueprint(build_partitioning_blueprint(engine))

    @app.errorhandler(BadRequest)
    def _bad(exc: BadRequest):
        return jsonify(error=exc.message), exc.status

    @app.errorhandler(queries.NotFound)
    def _not_found(exc: queries.NotFound):
        return jsonify(error=str(exc)), 404

    @app.errorhandler(HTTPException)
    def _http(exc: HTTPException):
        message = exc.description
        if exc.code == 413:
            message = f"body: request exceeds {settings.max_body_bytes} bytes"
        return jsonify(error=message), exc.code

    @app.post("/api/v1/reports")
    def post_report():
        started = time.perf_counter()
        try:
            if request.content_length is not None and request.content_length > settings.max_body_bytes:
                raise BadRequest(413, f"body: request exceeds {settings.max_body_bytes} bytes")
            body = request.get_data(cache=False)
            encoding = (request.headers.get("Content-Encoding") or "identity").lower()
            if encoding == "gzip":
                body = _gunzip(body, settings.max_decompressed_bytes)
            elif encoding != "identity":
                raise BadRequest(415, f"Content-Encoding: unsupported {encoding!r} (use gzip or identity)")
            if not body:
                raise BadRequest(400, "body: empty; expected a JSON report")
            try:
                report = parse_report(body)
            except ReportError as exc:
                raise BadRequest(400, str(exc)) from None
        except BadRequest:
            ingest_metrics.reports.labels("rejected").inc()
            raise
        for attempt in range(5):
            try:
                with engine.begin() as conn:
                    if conn.dialect.name == "sqlite":  # take the write lock now, not on first write
                        conn.exec_driver_sql("BEGIN IMMEDIATE")
                    result = ingest_report(conn, report, settings.window_ms)
                break
            except (IntegrityError, OperationalError):  # concurrent first insert / busy database
                if attempt == 4:
                    ingest_metrics.reports.labels("error").inc()
                    raise
                time.sleep(0.05 * (attempt + 1))
        ingest_metrics.reports.labels("duplicate" if result.duplicate else "accepted").inc()
        ingest_metrics.duration.observe(time.perf_counter() - started)
        with engine.connect() as conn:
            pending = [{"knob": d["knob"], "version": d["version"], "value": d["value"]}
                       for d in current_directives(conn, result.job_id)]
        return jsonify(accepted={"tasks": result.tasks, "stages": result.stages, "batches": result.batches},
                       duplicate=result.duplicate, directives=pending)

    @app.get("/api/v1/jobs")
    def get_jobs():
        with engine.connect() as conn:
            return jsonify(jobs=queries.list_jobs(conn))

    @app.get("/api/v1/jobs/<job>")
    def get_job(job: str):
        with engine.connect() as conn:
            queries.job_row(conn, job)
            return jsonify(next(j for j in queries.list_jobs(conn) if j["name"] == job))

    @app.get("/api/v1/jobs/<job>/stages")
    def get_stages(job: str):
        windows = _int_arg("windows", 12, 1, 1000)
        with engine.connect() as conn:
            return jsonify(job=job, stages=queries.template_stats(conn, job, windows))

    @app.get("/api/v1/jobs/<job>/stages/<template>/tasks")
    def get_tasks(job: str, template: str):
        windows = _int_arg("windows", 12, 1, 1000)
        with engine.connect() as conn:
            return jsonify(job=job, **queries.runtime_stats(conn, job, template, windows))

    @app.get("/api/v1/jobs/<job>/batches")
    def get_batches(job: str):
        limit = _int_arg("limit", 100, 1, 10_000)
        with engine.connect() as conn:
            return jsonify(job=job, **queries.batch_stats(conn, job, limit))

    @app.get("/api/v1/openapi.json")
    def openapi():
        return jsonify(openapi_document())

    @app.get("/healthz")
    def healthz():
        try:
            with engine.connect() as conn:
                conn.execute(text("SELECT 1"))
        except Exception as exc:  # pragma: no cover - reported to the caller
            return jsonify(status="error", error=str(exc)[:300]), 503
        return jsonify(status="ok")

    @app.get("/metrics")
    def metrics():
        return Response(generate_latest(registry), mimetype=CONTENT_TYPE_LATEST)

    return app
