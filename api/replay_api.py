"""``POST /api/v1/replays``: upload a Spark event log and import it as a job (a Flask blueprint).

The body is the log file itself, as Spark wrote it (``Content-Type: application/octet-stream``; one file:
plain JSON lines or compressed — say which with ``?codec=lz4|snappy|zstd``, default plain; a rolling
``eventlog_v2_*`` directory is replayed file by file with the CLI instead). Query parameters: ``job``
(default: the log's application name), ``policy`` and ``config`` (the policy's config as JSON, which may
carry ``"constraint": {"bound_ms": …, "span_s": …}``) for a what-if run in dry-run mode, as
``spark-governor replay`` does (``api.replay``).

The token needs the ``write`` scope, for the job imported into. The body is streamed to a temporary file
(bounded memory, limited by the server's request size limit) and imported in the request; the answer
(201) is the import's result: counts, what was skipped and why, and the what-if summary. A job name that
exists already: 409; bad parameters or an unreadable log: 400 naming the field.
"""
from __future__ import annotations

import json
import os
import tempfile

from flask import Blueprint, g, jsonify, request
from sqlalchemy.engine import Engine

from spark_governor.api.auth import ApiError, audited
from spark_governor.api.replay import Replay, ReplayError
from spark_governor.collectors.event_log import EventLogError

CODECS = ("plain", "lz4", "snappy", "zstd")
COPY_CHUNK = 1 << 20


def build_replay_blueprint(engine: Engine, window_ms: int, evaluation_interval_s: float) -> Blueprint:
    bp = Blueprint("replays", __name__)

    @bp.errorhandler(ApiError)
    def _api_error(exc: ApiError):
        return jsonify(error=exc.message), exc.status

    @bp.post("/api/v1/replays")
    @audited(engine)
    def post_replay():
        codec = request.args.get("codec", "plain")
        if codec not in CODECS:
            raise ApiError(400, f"codec: must be one of {', '.join(CODECS)} (got {codec!r})")
        policy = request.args.get("policy") or None
        config = None
        if "config" in request.args:
            if policy is None:
                raise ApiError(400, "config: needs policy")
            try:
                config = json.loads(request.args["config"])
            except ValueError as exc:
                raise ApiError(400, f"config: not JSON ({exc})") from None
            if not isinstance(config, dict):
                raise ApiError(400, "config: must be a JSON object")
        job = request.args.get("job") or None
        principal = getattr(g, "principal", None)
        if job is not None and principal is not None and not principal.may_access(job):
            raise ApiError(403, f"job: token {principal.name!r} is not allowed for job {job!r}")
        fd, path = tempfile.mkstemp(prefix="local-upload-", suffix="" if codec == "plain" else f".{codec}")
        try:
            size = 0
            with os.fdopen(fd, "wb") as f:
                while True:
                    chunk = request.stream.read(COPY_CHUNK)
                    if not chunk:
                        break
                    f.write(chunk)
                    size += len(chunk)
            if size == 0:
                raise ApiError(400, "body: empty; send the event log file as the request body")
            try:
                rep = Replay(engine, path, job, window_ms=window_ms, evaluation_interval_s=evaluation_interval_s,
                             policy=policy, policy_config=config)
            except ReplayError as exc:
                raise ApiError(409 if "already exists" in str(exc) else 400, str(exc)) from None
            except EventLogError as exc:
                raise ApiError(400, f"body: {exc}") from None
            if principal is not None and not principal.may_access(rep.job):
                raise ApiError(403, f"job: token {principal.name!r} is not allowed for job {rep.job!r}")
            result = rep.run().to_json()
        finally:
            try:
                os.remove(path)
            except OSError:
                pass
        result["read"]["notes"] = [n.replace(path, "body") for n in result["read"]["notes"]]
        if result["reports"] == 0:
            raise ApiError(400, "body: nothing could be imported from the event log")
        return jsonify(result), 201

    return bp
