"""The floor of ``POST /api/v1/reports`` on this stack: ``spark-governor bench load --floor`` (issue #16).

A Flask app served like ``serve`` (gunicorn, ``gthread`` workers) that does for each report what any
control plane built on Flask must do before it stores anything, with the same code as
:func:`api.app.create_app`: the bearer token checked in constant time against its SHA-256 digest, the
body read within the size limit, gunzipped within the decompressed limit and validated whole
(``policies.wire.parse_report``), and an answer of the same shape (``accepted`` counts, ``duplicate``,
``directives``). It stores nothing and evaluates no policy. Its CPU per report is what the HTTP layer
and the validation cost; ``bench load`` without ``--floor`` measures the same load against ``serve``,
so the difference is the cost of storing, folding and evaluating (docs/benchmarks.md, "Control-plane
load"). Only for benchmarks: it binds where ``bench load`` tells gunicorn to, 127.0.0.1.

The token's digest comes from the environment (``SPARK_GOVERNOR_FLOOR_TOKEN_SHA256``), so the secret is
never on a command line.
"""
from __future__ import annotations

import hmac
import os

from flask import Flask, jsonify

from spark_governor.api.app import BadRequest, Settings, report_body
from spark_governor.api.auth import bearer_secret, hash_token
from spark_governor.policies.wire import ReportError, parse_report

#: the environment variable holding the SHA-256 hex digest of the one report token the floor accepts
TOKEN_ENV = "SPARK_GOVERNOR_FLOOR_TOKEN_SHA256"


def create_floor_app(token_sha256: str | None = None, settings: Settings = Settings()) -> Flask:
    """The floor app; ``token_sha256`` defaults to ``$SPARK_GOVERNOR_FLOOR_TOKEN_SHA256`` (required)."""
    digest = token_sha256 or os.environ.get(TOKEN_ENV)
    if not digest:
        raise ValueError(f"{TOKEN_ENV}: the SHA-256 digest of the report token is required")
    app = Flask("spark_governor.load_floor")

    @app.errorhandler(BadRequest)
    def _bad(exc: BadRequest):
        return jsonify(error=exc.message), exc.status

    @app.get("/healthz")
    def healthz():
        return jsonify(status="ok")

    @app.post("/api/v1/reports")
    def post_report():
        secret = bearer_secret()
        if secret is None or not hmac.compare_digest(hash_token(secret), digest):
            raise BadRequest(401, "Authorization: a valid report token is required")
        try:
            report = parse_report(report_body(settings))
        except ReportError as exc:
            raise BadRequest(400, str(exc)) from None
        return jsonify(accepted={"tasks": report.folded_tasks, "stages": len(report.stages),
                                 "batches": len(report.batches)}, duplicate=False, directives=[],
                       window_ms=settings.window_ms)

    return app
