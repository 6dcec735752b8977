"""Web API for latency constraints (a Flask blueprint).

``PUT/DELETE /api/v1/jobs/<job>/constraints/<name>`` (bearer token, audited) declare or remove a
constraint; ``GET`` shows each constraint per averaging span: measured mean record latency, the
bound, whether it was attained, the model's prediction in force, and where the measurement comes
from (``event-time``, ``estimated`` or ``stage-latency``; see ``aggregators.constraints``), over the
last ``spans`` spans before ``until_ms`` (default now), and its SLO: the objective and the counts of
spans judged good and bad so far (``aggregators.slo_spans``).
"""
from __future__ import annotations

from typing import Optional

from flask import Blueprint, jsonify, request
from pydantic import BaseModel, ConfigDict, Field, StrictBool, field_validator
from sqlalchemy import delete, insert, select, update
from sqlalchemy.engine import Engine

from spark_governor.aggregators import constraints as store
from spark_governor.aggregators import queries
from spark_governor.aggregators.models import latency_constraints
from spark_governor.aggregators.registration import configurable_job, forget_if_unreported, register_flag
from spark_governor.api.auth import ApiError, audited, now_ms, parse_body
from spark_governor.policies.wire import TemplateKey, validate_job_name


class ConstraintSettings(BaseModel):
    """Body of ``PUT /api/v1/jobs/<job>/constraints/<name>``."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    vertices: Optional[list[TemplateKey]] = Field(
        None, min_length=1, max_length=64,
        description="Template keys of the constrained sequence, in order; omitted or null: the whole query")
    bound_ms: float = Field(gt=0, le=86_400_000, description="Bound ℓ on the mean record latency, milliseconds")
    span_s: float = Field(store.DEFAULT_SPAN_S, ge=0.001, le=3600, description="Averaging span t, seconds")
    use_event_time: StrictBool = Field(True, description="Measure the wait from the job's observed event-time metric "
                                                   "when it reports one")
    objective: float = Field(store.DEFAULT_OBJECTIVE, gt=0, lt=1,
                             description="The SLO: the share of spans that must be within the bound (0 < objective "
                                         "< 1); burn-rate alerts compare the share of bad spans with 1 - objective")

    @field_validator("vertices")
    @classmethod
    def _unique(cls, v):
        if v is not None and len(set(v)) != len(v):
            raise ValueError("template keys must be unique")
        return v


def build_constraints_blueprint(engine: Engine, window_ms: int) -> Blueprint:
    bp = Blueprint("constraints", __name__)

    @bp.errorhandler(ApiError)
    def _api_error(exc: ApiError):
        return jsonify(error=exc.message), exc.status

    def spans_arg() -> int:
        raw = request.args.get("spans", "12")
        if not raw.isdigit() or not 1 <= int(raw) <= 720:
            raise ApiError(400, "spans: must be an integer between 1 and 720")
        return int(raw)

    def until_arg() -> Optional[int]:
        raw = request.args.get("until_ms")
        if raw is None:
            return None
        if not raw.isdigit() or len(raw) > 15:
            raise ApiError(400, "until_ms: must be a non-negative integer (milliseconds since the epoch)")
        return int(raw)

    @bp.get("/api/v1/jobs/<job>/constraints")
    def list_constraints(job: str):
        spans, until, now = spans_arg(), until_arg(), now_ms()
        with engine.connect() as conn:
            j = queries.job_row(conn, job)
            items = [store.measure(conn, job, j.id, c, now, spans, window_ms, until)
                     for c in store.list_constraints(conn, j.id)]
        return jsonify(job=job, constraints=items)

    @bp.get("/api/v1/jobs/<job>/constraints/<name>")
    def get_constraint(job: str, name: str):
        spans, until, now = spans_arg(), until_arg(), now_ms()
        with engine.connect() as conn:
            j = queries.job_row(conn, job)
            c = store.find(conn, j.id, name)
            if c is None:
                raise ApiError(404, f"constraint {name!r} of job {job!r} not found")
            return jsonify(job=job, **store.measure(conn, job, j.id, c, now, spans, window_ms, until))

    @bp.put("/api/v1/jobs/<job>/constraints/<name>")
    @audited(engine)
    def put_constraint(job: str, name: str):
        settings = parse_body(ConstraintSettings, "bound_ms and optionally vertices, span_s")
        for what, value in (("job", job), ("name", name)):
            try:
                validate_job_name(value)
            except ValueError as exc:
                raise ApiError(400, f"{what}: {str(exc).split(': ', 1)[1]}") from None
        try:
            register = register_flag(request.args.get("register"))
        except ValueError as exc:
            raise ApiError(400, str(exc)) from None
        now = now_ms()
        values = dict(vertices=settings.vertices, bound_ms=settings.bound_ms, span_s=settings.span_s,
                      event_time_metric=settings.use_event_time, objective=settings.objective, updated_ms=now)
        with engine.begin() as conn:
            jid = configurable_job(conn, job, register, now)
            others = [c for c in store.list_constraints(conn, jid) if c.name != name]
            if others and any(c.span_s != settings.span_s for c in others):
                # digest 004 §10.13: constraints of one job are evaluated together and must share t
                raise ApiError(409, f"span_s: every constraint of job {job!r} must use the same averaging span "
                                    f"({others[0].span_s:g} s)")
            res = conn.execute(update(latency_constraints).where(
                latency_constraints.c.job_id == jid, latency_constraints.c.name == name).values(**values))
            if res.rowcount == 0:  # its SLO counts the spans from the next one on (aggregators.slo_spans)
                conn.execute(insert(latency_constraints).values(job_id=jid, name=name, **values))
            row = store.find(conn, jid, name)
        return jsonify(job=job, **store.constraint_json(row)), 200

    @bp.delete("/api/v1/jobs/<job>/constraints/<name>")
    @audited(engine)
    def delete_constraint(job: str, name: str):
        with engine.begin() as conn:
            j = queries.job_row(conn, job)
            res = conn.execute(delete(latency_constraints).where(latency_constraints.c.job_id == j.id,
                                                                 latency_constraints.c.name == name))
            if res.rowcount:
                forget_if_unreported(conn, j.id)  # a pre-registered job without configuration is gone
        if res.rowcount == 0:
            raise ApiError(404, f"constraint {name!r} of job {job!r} not found")
        return jsonify(deleted=name), 200

    return bp

