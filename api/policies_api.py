"""Web API for policies, decisions, directives and events (a Flask blueprint).

Writes (PUT/DELETE a job's policy, approving a dry-run decision) need ``Authorization: Bearer
<token>``; tokens are configured at ``serve`` and stored as SHA-256 hashes. Every write attempt
is recorded in ``audit_log`` with who (the token's name), what (method, path, body) and the HTTP
status. Reads are open.
"""
from __future__ import annotations

from typing import Literal

from flask import Blueprint, g, jsonify, request
from pydantic import BaseModel, ConfigDict, StrictBool
from sqlalchemy import delete, insert, select, update
from sqlalchemy.engine import Engine

from spark_governor.aggregators import directives as repo
from spark_governor.aggregators import queries
from spark_governor.aggregators.models import decisions, events, jobs, policy_configs
from spark_governor.aggregators.registration import configurable_job, forget_if_unreported, register_flag
from spark_governor.api.auth import ApiError, audited, now_ms, parse_body
from spark_governor.api.governor import Governor
from spark_governor.policies.registry import InvalidConfig, PolicyNotFound, describe, get_policy, load_policies, validate_config


class PolicySettings(BaseModel):
    """Body of ``PUT /api/v1/jobs/<job>/policies/<name>``."""

    model_config = ConfigDict(extra="forbid")
    enabled: StrictBool = True
    mode: Literal["dry-run", "act"] = "dry-run"
    config: dict = {}


def _policy_json(row) -> dict:
    return {"policy": row.policy, "enabled": row.enabled, "mode": row.mode, "config": row.config,
            "updated_ms": row.updated_ms}


def _decision_json(r) -> dict:
    """A decision row as the API answers it; ``verification`` (``policies.verification``): verified,
    ineffective, rolled-back or harmful once judged, else null."""
    out = {k: getattr(r, k) for k in ("id", "policy", "knob", "old_value", "new_value", "reason", "inputs",
                                       "prediction", "mode", "status", "status_message", "directive_version",
                                       "created_ms", "applied_ms", "outcome", "effective", "outcome_ms")}
    out["verification"] = (r.outcome or {}).get("verification")
    return out


def _refuse_unapplicable(conn, job_id: int, job: str, policy: str, knobs) -> None:
    """409 when the job's attachment says it can never apply one of the policy's knobs (the listener jar
    applies executors only); jobs whose reporter did not say (``attach()``) are not refused."""
    attachment = conn.execute(select(jobs.c.attachment).where(jobs.c.id == job_id)).scalar() or {}
    can_apply = attachment.get("can_apply")
    if can_apply is None:
        return
    missing = [k for k in knobs if k not in can_apply]
    if missing:
        reason = ((conn.execute(select(jobs.c.not_actuatable).where(jobs.c.id == job_id)).scalar() or {})
                  .get(missing[0]) or "not supported by this attachment")
        kind = {"jar": "the listener jar (--jars/--conf)", "attach": "attach()"}.get(attachment.get("kind"),
                                                                                   str(attachment.get("kind")))
        raise ApiError(409, f"knob {missing[0]!r}: policy {policy!r} needs it, but job {job!r} is attached by "
                            f"{kind}, which can apply only {', '.join(can_apply) or 'no knob'}: {reason}")


def build_blueprint(engine: Engine, governor: Governor) -> Blueprint:
    bp = Blueprint("policies", __name__)

    @bp.errorhandler(ApiError)
    def _api_error(exc: ApiError):
        return jsonify(error=exc.message), exc.status

    def job_id_or_404(conn, job: str) -> int:
        return queries.job_row(conn, job).id

    @bp.get("/api/v1/policies")
    def list_policies():
        found, errors = load_policies()
        return jsonify(policies=[describe(cls) for _n, cls in sorted(found.items())], load_errors=errors)

    @bp.get("/api/v1/jobs/<job>/policies")
    def job_policies(job: str):
        with engine.connect() as conn:
            jid = job_id_or_404(conn, job)
            rows = conn.execute(select(policy_configs).where(policy_configs.c.job_id == jid)
                                .order_by(policy_configs.c.policy)).all()
        return jsonify(job=job, policies=[_policy_json(r) for r in rows])

    @bp.get("/api/v1/jobs/<job>/policies/<name>")
    def get_job_policy(job: str, name: str):
        with engine.connect() as conn:
            jid = job_id_or_404(conn, job)
            row = conn.execute(select(policy_configs).where(policy_configs.c.job_id == jid,
                                                            policy_configs.c.policy == name)).first()
        if row is None:
            raise ApiError(404, f"policy {name!r} is not configured for job {job!r}")
        return jsonify(job=job, **_policy_json(row))

    @bp.put("/api/v1/jobs/<job>/policies/<name>")
    @audited(engine)
    def put_job_policy(job: str, name: str):
        settings = parse_body(PolicySettings, "enabled, mode and config")
        try:
            cls = get_policy(name)
            cfg = validate_config(cls, settings.config)
        except PolicyNotFound as exc:
            raise ApiError(404, str(exc)) from None
        except InvalidConfig as exc:
            raise ApiError(400, str(exc)) from None
        from spark_governor.policies.wire import validate_job_name

        try:
            validate_job_name(job)
        except ValueError as exc:
            raise ApiError(400, str(exc)) from None
        try:
            register = register_flag(request.args.get("register"))
        except ValueError as exc:
            raise ApiError(400, str(exc)) from None
        now = now_ms()
        with engine.begin() as conn:
            jid = configurable_job(conn, job, register, now)
            if settings.enabled:
                _refuse_unapplicable(conn, jid, job, name, cls.knobs)
                for other in conn.execute(select(policy_configs).where(
                        policy_configs.c.job_id == jid, policy_configs.c.enabled, policy_configs.c.policy != name)):
                    try:
                        other_knobs = get_policy(other.policy).knobs
                    except PolicyNotFound:
                        continue
                    shared = sorted(set(other_knobs) & set(cls.knobs))
                    if shared:
                        raise ApiError(409, f"knob {shared[0]!r} of job {job!r} is owned by enabled policy "
                                            f"{other.policy!r}; disable it first")
            values = dict(enabled=settings.enabled, mode=settings.mode, config=cfg.model_dump(mode="json"),
                          updated_ms=now)
            res = conn.execute(update(policy_configs).where(policy_configs.c.job_id == jid,
                                                            policy_configs.c.policy == name).values(**values))
            if res.rowcount == 0:
                conn.execute(insert(policy_configs).values(job_id=jid, policy=name, **values))
            row = conn.execute(select(policy_configs).where(policy_configs.c.job_id == jid,
                                                            policy_configs.c.policy == name)).first()
        return jsonify(job=job, **_policy_json(row)), 200

    @bp.delete("/api/v1/jobs/<job>/policies/<name>")
    @audited(engine)
    def delete_job_policy(job: str, name: str):
        with engine.begin() as conn:
            jid = job_id_or_404(conn, job)
            res = conn.execute(delete(policy_configs).where(policy_configs.c.job_id == jid,
                                                            policy_configs.c.policy == name))
            if res.rowcount:
                forget_if_unreported(conn, jid)  # a pre-registered job without configuration is gone
        if res.rowcount == 0:
            raise ApiError(404, f"policy {name!r} is not configured for job {job!r}")
        return jsonify(deleted=name), 200

    @bp.get("/api/v1/jobs/<job>/decisions")
    def list_decisions(job: str):
        q = select(decisions)
        with engine.connect() as conn:
            q = q.where(decisions.c.job_id == job_id_or_404(conn, job))
            for arg, col in (("policy", decisions.c.policy), ("knob", decisions.c.knob),
                             ("status", decisions.c.status), ("mode", decisions.c.mode)):
                if request.args.get(arg):
                    q = q.where(col == request.args[arg])
            for arg, op in (("since_ms", "ge"), ("until_ms", "lt")):
                raw = request.args.get(arg)
                if raw is not None:
                    if not raw.isdigit() or int(raw) > 2**63 - 1:
                        raise ApiError(400, f"{arg}: must be epoch milliseconds")
                    col = decisions.c.created_ms
                    q = q.where(col >= int(raw) if op == "ge" else col < int(raw))
            limit = request.args.get("limit", "100")
            if not limit.isdigit() or not 1 <= int(limit) <= 10_000:
                raise ApiError(400, "limit: must be an integer between 1 and 10000")
            rows = conn.execute(q.order_by(decisions.c.created_ms.desc(), decisions.c.id.desc())
                                .limit(int(limit))).all()
        return jsonify(job=job, decisions=[_decision_json(r) for r in rows])

    @bp.post("/api/v1/jobs/<job>/decisions/<int:decision_id>/approve")
    @audited(engine)
    def approve(job: str, decision_id: int):
        if decision_id > 2**31 - 1:  # larger than any id the database holds
            raise ApiError(404, f"decision {decision_id} of job {job!r} not found")
        now = now_ms()
        with engine.begin() as conn:
            j = queries.job_row(conn, job)
            d = conn.execute(select(decisions).where(decisions.c.id == decision_id, decisions.c.job_id == j.id)
                             .with_for_update()).first()
            if d is None:
                raise ApiError(404, f"decision {decision_id} of job {job!r} not found")
            if d.mode != "dry-run" or d.status != "recorded":
                raise ApiError(409, f"decision {decision_id} is {d.status} ({d.mode}); only recorded dry-run "
                                    "decisions can be approved")
            reason = (j.not_actuatable or {}).get(d.knob)
            if reason:
                raise ApiError(409, f"{d.knob}: not actuatable: {reason}")
            version = governor.issue(conn, j.id, d.id, d.knob, d.old_value, d.new_value, now)
            conn.execute(update(decisions).where(decisions.c.id == d.id).values(
                status_message=f"approved by {g.who}"))
            row = conn.execute(select(decisions).where(decisions.c.id == d.id)).first()
        return jsonify(job=job, directive_version=version, decision=_decision_json(row)), 200

    @bp.get("/api/v1/jobs/<job>/directives")
    def get_directives(job: str):
        with engine.connect() as conn:
            j = queries.job_row(conn, job)
            items = repo.current_directives(conn, j.id)
            not_actuatable = j.not_actuatable or {}
        for d in items:
            if d["knob"] in not_actuatable:
                d["actuatable"] = f"not actuatable: {not_actuatable[d['knob']]}"
        return jsonify(job=job, directives=items, executors=j.executors,
                       not_actuatable={k: f"not actuatable: {v}" for k, v in not_actuatable.items()})

    @bp.get("/api/v1/jobs/<job>/events")
    def get_events(job: str):
        with engine.connect() as conn:
            jid = job_id_or_404(conn, job)
            rows = conn.execute(select(events).where(events.c.job_id == jid)
                                .order_by(events.c.created_ms.desc(), events.c.id.desc()).limit(500)).all()
        return jsonify(job=job, events=[{"kind": r.kind, "policy": r.policy, "message": r.message,
                                         "created_ms": r.created_ms} for r in rows])

    @bp.get("/api/v1/jobs/<job>/holds")
    def get_holds(job: str):
        from spark_governor.aggregators.models import knob_states

        with engine.connect() as conn:
            jid = job_id_or_404(conn, job)
            rows = conn.execute(select(knob_states).where(knob_states.c.job_id == jid)).all()
        return jsonify(job=job, knobs=[{"knob": r.knob, "held": r.held,
                                        "consecutive_ineffective_scale_ups": r.consecutive_ineffective_ups,
                                        "last_change_ms": r.last_change_ms} for r in rows])

    return bp

