"""Web API for the health verdict of a job (a Flask blueprint).

``GET /api/v1/jobs/<job>/health?window_s=N&run=R`` answers the verdict over the ``N`` seconds (default 60) before
the instant it is taken: ``state`` (``aggregators.health.STATES``), the reason in words, the numbers behind it and,
where a change is advised, about how many executors would meet the SLO. The run (``?run=``, a ``run_id`` from
``…/runs``; default the latest) is judged on its own clock (``aggregators.health_timeline``): the latest run of a
live job now, every other run — an earlier one, one that stopped reporting, a replayed one — at its last report,
from only what had happened by then. ``?timeline=true`` adds the run's verdicts over its life. How each state is
decided: ``aggregators.health`` and the docs' health page.
"""
from __future__ import annotations

import time

from flask import Blueprint, jsonify, request
from sqlalchemy.engine import Engine

from spark_governor.aggregators import queries, runs
from spark_governor.aggregators.health import DEFAULT_WINDOW_S
from spark_governor.aggregators.health_timeline import health_timeline, run_verdict
from spark_governor.api.auth import ApiError


def build_health_blueprint(engine: Engine, window_ms: int, stopped_after_s: float) -> Blueprint:
    bp = Blueprint("health", __name__)

    @bp.errorhandler(ApiError)
    def _api_error(exc: ApiError):
        return jsonify(error=exc.message), exc.status

    @bp.get("/api/v1/jobs/<job>/health")
    def get_health(job: str):
        raw = request.args.get("window_s", str(int(DEFAULT_WINDOW_S)))
        if not raw.isdigit() or not 1 <= int(raw) <= 3600:
            raise ApiError(400, "window_s: must be an integer between 1 and 3600")
        timeline = request.args.get("timeline", "false")
        if timeline not in ("true", "false"):
            raise ApiError(400, "timeline: must be true or false")
        window_s = float(raw)
        with engine.connect() as conn:
            j = queries.job_row(conn, job)
            run_arg = request.args.get("run") or None
            if run_arg == runs.ALL_RUNS:
                raise ApiError(400, "run: a verdict is of one run (a run_id from …/runs), not of all")
            run = runs.select_run(conn, job, j.id, run_arg)
            now_ms = int(time.time() * 1000)
            replayed = (j.attachment or {}).get("kind") == "replay"
            at_ms, v = run_verdict(conn, job, j.id, run, replayed, now_ms, int(stopped_after_s * 1000), window_s, window_ms)
            extra = {}
            if timeline == "true" and run is not None:
                extra["timeline"] = health_timeline(conn, job, run, run.first_ms, at_ms, window_s, window_ms)
        return jsonify(window_s=window_s, run=run.to_json() if run is not None else None, at="now" if at_ms == now_ms
                       else "run end", **v.as_dict(), **extra)

    return bp
