"""Web API for the health verdict of a job (a Flask blueprint).

``GET /api/v1/jobs/<job>/health?window_s=N`` answers the verdict computed now over the last ``N``
seconds (default 60): ``state`` (``aggregators.health.STATES``), the reason in words, the numbers behind
it and, where a change is advised, about how many executors would meet the SLO. How each state is
decided: ``aggregators.health`` and the docs' health page.
"""
from __future__ import annotations

from flask import Blueprint, jsonify, request
from sqlalchemy.engine import Engine

from spark_governor.aggregators.health import job_health
from spark_governor.api.auth import ApiError

DEFAULT_WINDOW_S = 60


def build_health_blueprint(engine: Engine, window_ms: int) -> Blueprint:
    bp = Blueprint("health", __name__)

    @bp.errorhandler(ApiError)
    def _api_error(exc: ApiError):
        return jsonify(error=exc.message), exc.status

    @bp.get("/api/v1/jobs/<job>/health")
    def get_health(job: str):
        raw = request.args.get("window_s", str(DEFAULT_WINDOW_S))
        if not raw.isdigit() or not 1 <= int(raw) <= 3600:
            raise ApiError(400, "window_s: must be an integer between 1 and 3600")
        with engine.connect() as conn:
            v = job_health(conn, job, float(raw), window_ms)
        return jsonify(window_s=float(raw), **v.as_dict())

    return bp
