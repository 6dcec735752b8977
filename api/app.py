"""Flask application of the control plane: ingest, statistics, health and Prometheus metrics.

``POST /api/v1/reports`` accepts a report (``policies.wire.Report``, JSON, optionally
``Content-Encoding: gzip``). It is validated as a whole in the request's thread: a bad report gets 400
(or 413 when too large) with a message naming the field, and stores nothing. A valid report is stored
by the process's ingest writer together with the other reports that wait, in one transaction
(group commit, ``api.ingest_queue``); the answer is sent after that transaction commits.
"""
from __future__ import annotations

import logging
import threading
import time
import zlib
from dataclasses import dataclass

from flask import Flask, Response, g, jsonify, request
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from sqlalchemy import text
from sqlalchemy.engine import Engine
from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError
from werkzeug.exceptions import HTTPException

from spark_governor.aggregators import liveness, queries, runs
from spark_governor.aggregators.health import DEFAULT_WINDOW_S as DEFAULT_HEALTH_WINDOW_S
from spark_governor.aggregators.health_timeline import run_verdict
from spark_governor.aggregators.ingest import DEFAULT_WINDOW_MS, ReporterConflict
from spark_governor.aggregators.ingest_batch import Pending
from spark_governor.api import auth
from spark_governor.api.constraints_api import build_constraints_blueprint
from spark_governor.api.cluster_api import build_cluster_blueprint
from spark_governor.api.health_api import build_health_blueprint
from spark_governor.api.docs_ui import build_docs_blueprint
from spark_governor.api.partitioning_api import build_partitioning_blueprint
from spark_governor.api.governor import Governor
from spark_governor.api.ingest_queue import IngestFailed, IngestQueue, QueueMetrics, Refused
from spark_governor.api.metrics import build_registry
from spark_governor.api.openapi import openapi_document
from spark_governor.api.policies_api import build_blueprint
from spark_governor.api.replay_api import build_replay_blueprint
from spark_governor.api.scheduler_metrics import SchedulerMetrics
from spark_governor.api.worker_metrics import exposition_registry
from spark_governor.policies.wire import ReportError, parse_report

log = logging.getLogger("spark_governor.app")


@dataclass(frozen=True)
class Settings:
    """Control-plane settings. Sizes in bytes, window in milliseconds."""

    window_ms: int = DEFAULT_WINDOW_MS
    evaluation_interval_s: float = 10.0             # policy evaluation interval
    max_body_bytes: int = 16 * 1024 * 1024          # as sent (compressed)
    max_decompressed_bytes: int = 32 * 1024 * 1024  # after gunzip
    # security (api.auth): reports need a ``report`` token (serve: on unless --anonymous-reports);
    # reads are open unless open_reads is false
    require_report_token: bool = False
    open_reads: bool = True
    token_refresh_s: float = 1.0
    # reports parsed at the same time per process (more wait up to 1 s, then 503 + Retry-After)
    max_inflight_reports: int = 4
    # group commit (api.ingest_queue): reports waiting to be stored per process (more: 503 + Retry-After),
    # the most reports and task records stored in one transaction, and how long (s) a request waits for
    # its report to be committed (then 503; the reporter re-sends it and gets duplicate: true if it was)
    max_queued_reports: int = 512
    max_queued_tasks: int = 200_000
    max_batch_reports: int = 64
    max_batch_tasks: int = 20_000
    queue_deadline_s: float = 30.0
    # how long (s) the oldest waiting report waits for others to share its transaction (api.ingest_queue):
    # 25 ms took 200 jobs on PostgreSQL from 99.1 % (p99 0.50 s) to 99.5-99.9 % (p99 0.14-0.15 s) on the
    # project's 2-core machine (docs/benchmarks.md, control-plane load)
    batch_linger_s: float = 0.025
    # a job without a report for this long is stopped: no policy evaluations (aggregators.job_state)
    stopped_after_s: float = 30.0
    # a job whose probed arrival rate rises by this share is evaluated at once, not at the next interval
    # (api.surge_watch); 0: off
    surge_ratio: float = 0.25
    # a job silent for this long (s) leaves /metrics (its history stays in SQL); 0: never (api.job_metrics)
    metrics_expiry_s: float = 600.0


class BadRequest(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status, self.message = status, message


def _gunzip(data: bytes, limit: int) -> bytes:
    """``data`` gunzipped; 400 when it is not whole gzip data, 413 as soon as it exceeds ``limit`` bytes."""
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


def _read_bounded(limit: int) -> bytes:
    """The request body, read in chunks; 413 as soon as it exceeds ``limit`` (chunked bodies too)."""
    stream, chunks, size = request.stream, [], 0
    while True:
        chunk = stream.read(min(65536, limit + 1 - size))
        if not chunk:
            return b"".join(chunks)
        size += len(chunk)
        if size > limit:
            raise BadRequest(413, f"body: request exceeds {limit} bytes")
        chunks.append(chunk)


def report_body(settings: Settings) -> bytes:
    """The request's report body, read and gunzipped within ``settings``' limits (413 past them, 415 for
    another encoding, 400 when empty or not whole gzip data)."""
    if request.content_length is not None and request.content_length > settings.max_body_bytes:
        raise BadRequest(413, f"body: request exceeds {settings.max_body_bytes} bytes")
    body = _read_bounded(settings.max_body_bytes)
    encoding = (request.headers.get("Content-Encoding") or "identity").lower()
    if encoding == "gzip":
        body = _gunzip(body, settings.max_decompressed_bytes)
    elif encoding != "identity":
        raise BadRequest(415, f"Content-Encoding: unsupported {encoding!r} (use gzip or identity)")
    if not body:
        raise BadRequest(400, "body: empty; expected a JSON report")
    return body


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
    registry, ingest_metrics = build_registry(engine, settings.window_ms, settings.metrics_expiry_s, settings.stopped_after_s)
    scheduler_metrics = SchedulerMetrics(registry)  # counted by api.scheduler (api.server passes it on)
    app.extensions["spark_governor.scheduler_metrics"] = scheduler_metrics
    governor = Governor(engine, settings.evaluation_interval_s, settings.window_ms,
                        stopped_after_s=settings.stopped_after_s, surge_ratio=settings.surge_ratio or None)
    app.extensions["spark_governor.governor"] = governor
    app.register_blueprint(build_blueprint(engine, governor))
    app.register_blueprint(build_constraints_blueprint(engine, settings.window_ms))
    app.register_blueprint(build_cluster_blueprint(engine))
    app.register_blueprint(build_partitioning_blueprint(engine))
    app.register_blueprint(build_docs_blueprint())
    app.register_blueprint(build_health_blueprint(engine, settings.window_ms, settings.stopped_after_s))
    app.register_blueprint(build_replay_blueprint(engine, settings.window_ms, settings.evaluation_interval_s))
    auth.install_auth(app, engine, require_report_token=settings.require_report_token,
                      open_reads=settings.open_reads, token_refresh_s=settings.token_refresh_s)
    inflight = threading.BoundedSemaphore(settings.max_inflight_reports)
    queue_metrics = QueueMetrics(registry)
    ingest_queue = IngestQueue(engine, settings.window_ms, max_queued_reports=settings.max_queued_reports,
                               max_queued_tasks=settings.max_queued_tasks,
                               max_batch_reports=settings.max_batch_reports, max_batch_tasks=settings.max_batch_tasks,
                               deadline_s=settings.queue_deadline_s, linger_s=settings.batch_linger_s,
                               metrics=queue_metrics)
    app.extensions["spark_governor.ingest_queue"] = ingest_queue  # closed by api.server when the process stops
    exposed = exposition_registry(registry, (ingest_metrics.reports, ingest_metrics.duration,
                                             *scheduler_metrics.process_metrics, *queue_metrics.process_metrics))

    @app.errorhandler(OperationalError)
    @app.errorhandler(InterfaceError)
    def _database_down(exc: DBAPIError):
        log.warning("database error: %s", exc.__class__.__name__)
        response = jsonify(error="database: unavailable, retry later")
        response.headers["Retry-After"] = "5"
        return response, 503

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
            body = report_body(settings)
            if not inflight.acquire(timeout=1.0):
                response = jsonify(error="server: too many reports in flight, retry later")
                response.headers["Retry-After"] = "1"
                return response, 503
            try:
                try:
                    report = parse_report(body)
                except ReportError as exc:
                    raise BadRequest(400, str(exc)) from None
                del body
                if report.window_ms is not None and report.window_ms != settings.window_ms:
                    ingest_metrics.reports.labels("rejected").inc()
                    return jsonify(error=f"window_ms: this control plane keeps {settings.window_ms} ms windows "
                                         f"(got {report.window_ms}); fold with its window_ms",
                                   window_ms=settings.window_ms), 400
                principal = getattr(g, "principal", None)
                if principal is not None and not principal.may_access(report.job):
                    raise BadRequest(403, f"job: token {principal.name!r} is not allowed for job {report.job!r}")
                token = principal.name if principal is not None else None
            finally:
                inflight.release()
            try:
                # stored with the reports that wait, in one transaction; returns after its commit, so only
                # committed reports are acknowledged
                result, pending = ingest_queue.submit(Pending(report, token))
            except ReporterConflict as exc:
                raise BadRequest(403, str(exc)) from None
            except Refused as exc:
                ingest_metrics.reports.labels("error").inc()
                response = jsonify(error=exc.message)
                response.headers["Retry-After"] = str(exc.retry_after_s)
                return response, exc.status
            except IngestFailed as exc:  # this report alone could not be stored (the writer logged why)
                ingest_metrics.reports.labels("error").inc()
                return jsonify(error=str(exc)), 500
        except BadRequest:
            ingest_metrics.reports.labels("rejected").inc()
            raise
        ingest_metrics.reports.labels("duplicate" if result.duplicate else "accepted").inc()
        ingest_metrics.duration.observe(time.perf_counter() - started)
        return jsonify(accepted={"tasks": result.tasks, "stages": result.stages, "batches": result.batches},
                       duplicate=result.duplicate, directives=pending, window_ms=settings.window_ms)

    @app.get("/api/v1/jobs")
    def get_jobs():
        with engine.connect() as conn:
            return jsonify(jobs=[j for j in queries.list_jobs(conn, stopped_after_s=settings.stopped_after_s)
                                 if auth.allowed_job(j["name"])])

    @app.get("/api/v1/jobs/<job>")
    def get_job(job: str):
        with engine.connect() as conn:
            queries.job_row(conn, job)
            return jsonify(next(j for j in queries.list_jobs(conn, stopped_after_s=settings.stopped_after_s)
                                if j["name"] == job))

    def _run(conn, job: str):
        """The run the statistics show (``?run=``; default the latest; ``all``: every run merged)."""
        j = queries.job_row(conn, job)
        span = runs.select_run(conn, job, j.id, request.args.get("run") or None)
        return span, (span.to_json() if span is not None else None)

    @app.get("/api/v1/jobs/<job>/runs")
    def get_runs(job: str):
        with engine.connect() as conn:
            j = queries.job_row(conn, job)
            counts = runs.batch_counts(conn, j.id)
            now_ms, replayed = int(time.time() * 1000), (j.attachment or {}).get("kind") == "replay"
            out = []
            for s in reversed(runs.run_spans(conn, j.id)):
                at_ms, v = run_verdict(conn, job, j.id, s, replayed, now_ms, int(settings.stopped_after_s * 1000),
                                       DEFAULT_HEALTH_WINDOW_S, settings.window_ms)
                executor_s, peak = runs.executor_usage(conn, j.id, s)
                out.append({**s.to_json(), "batches": counts.get(s.run_id, 0), "executor_seconds": executor_s,
                            "max_executors": peak,
                            "health": {"state": v.state, "reason": v.reason, "evaluated_ms": at_ms}})
            return jsonify(job=job, runs=out)

    @app.get("/api/v1/jobs/<job>/stages")
    def get_stages(job: str):
        windows = _int_arg("windows", 12, 1, 1000)
        with engine.connect() as conn:
            span, run = _run(conn, job)
            return jsonify(job=job, run=run, stages=queries.template_stats(conn, job, windows, span))

    @app.get("/api/v1/jobs/<job>/stages/<template>/tasks")
    def get_tasks(job: str, template: str):
        windows = _int_arg("windows", 12, 1, 1000)
        limit = _int_arg("limit", 100, 0, 10_000)
        with engine.connect() as conn:
            span, run = _run(conn, job)
            return jsonify(job=job, run=run, **queries.runtime_stats(conn, job, template, windows, span, limit))

    @app.get("/api/v1/jobs/<job>/batches")
    def get_batches(job: str):
        limit = _int_arg("limit", 100, 1, 10_000)
        with engine.connect() as conn:
            span, run = _run(conn, job)
            return jsonify(job=job, run=run, **queries.batch_stats(conn, job, limit, span))

    @app.get("/api/v1/jobs/<job>/live")
    def get_live(job: str):
        window_s = _int_arg("window_s", 30, 1, 3600)
        with engine.connect() as conn:
            j = queries.job_row(conn, job)
            return jsonify(job=job, window_s=float(window_s), live=liveness.live(conn, j.id, window_s=window_s))

    @app.get("/api/v1/openapi.json")
    def openapi():
        return jsonify(openapi_document())

    @app.get("/healthz")
    def healthz():
        try:
            with engine.connect() as conn:
                conn.execute(text("SELECT 1"))
        except Exception as exc:  # the detail (hosts, ports) goes to the log, never to the caller
            log.warning("healthz: database unreachable: %s", exc)
            response = jsonify(status="error", error="database: unreachable")
            response.headers["Retry-After"] = "5"
            return response, 503
        return jsonify(status="ok")

    @app.get("/metrics")
    def metrics():
        return Response(generate_latest(exposed), mimetype=CONTENT_TYPE_LATEST)

    return app
