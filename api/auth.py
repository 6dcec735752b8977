"""Bearer-token authentication, the audit trail of every write, and error answers of the web API.

Tokens are configured at ``serve`` (``--token NAME=SECRET``) and stored as SHA-256 hashes; a
write names the token's owner in ``audit_log`` together with method, path, body and status,
whatever the outcome.
"""
from __future__ import annotations

import hashlib
import time
from functools import wraps

from flask import g, request
from sqlalchemy import delete, insert, select
from sqlalchemy.engine import Engine

from spark_governor.aggregators import queries
from spark_governor.aggregators.models import api_tokens, audit_log


class ApiError(Exception):
    """An error answer: HTTP ``status`` and a message naming the field or resource first."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status, self.message = status, message


def parse_body(model, hint: str):
    """The request's JSON body validated as ``model``; 400 naming the field otherwise."""
    from flask import request
    from pydantic import ValidationError

    from spark_governor.policies.wire import describe_validation_error

    body = request.get_json(silent=True)
    if not isinstance(body, dict):
        raise ApiError(400, f"body: expected a JSON object with {hint}")
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        raise ApiError(400, describe_validation_error(exc)) from None


def now_ms() -> int:
    return int(time.time() * 1000)


def hash_token(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def store_tokens(engine: Engine, tokens: dict[str, str]) -> None:
    """Insert or replace named tokens (only their SHA-256 is stored)."""
    now = now_ms()
    with engine.begin() as conn:
        for name, secret in tokens.items():
            conn.execute(delete(api_tokens).where(api_tokens.c.name == name))
            conn.execute(insert(api_tokens).values(name=name, token_sha256=hash_token(secret), created_ms=now))


def authenticate(engine: Engine) -> str:
    """The name of the token in ``Authorization: Bearer <token>``; 401 when missing or unknown."""
    header = request.headers.get("Authorization", "")
    if not header.startswith("Bearer ") or not header[7:].strip():
        raise ApiError(401, "Authorization: a bearer token is required for writes")
    with engine.connect() as conn:
        name = conn.execute(select(api_tokens.c.name).where(
            api_tokens.c.token_sha256 == hash_token(header[7:].strip()))).scalar()
    if name is None:
        raise ApiError(401, "Authorization: invalid token")
    return name


def audited(engine: Engine):
    """Decorator for write handlers: authenticate (``g.who``), run, record the attempt."""
    def decorate(handler):
        @wraps(handler)
        def wrapper(*args, **kwargs):
            who, status = None, 500
            try:
                who = authenticate(engine)
                g.who = who
                response = handler(*args, **kwargs)
                status = response[1] if isinstance(response, tuple) else 200
                return response
            except ApiError as exc:
                status = exc.status
                raise
            except queries.NotFound:
                status = 404
                raise
            finally:
                with engine.begin() as conn:
                    conn.execute(insert(audit_log).values(
                        who=who, method=request.method, path=request.path[:512],
                        body=request.get_json(silent=True), status=status, created_ms=now_ms()))
        return wrapper
    return decorate
