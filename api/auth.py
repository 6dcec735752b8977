"""Bearer tokens with scopes, their check before any body is read, the audit trail of every write.

Token model (issue #16):

* A token has a **name**, a set of **scopes** and optionally **job-name patterns** (``fnmatch``,
  e.g. ``team-a-*``) that limit it to some jobs, so several teams share one control plane.
  Scopes: ``report`` (``POST /api/v1/reports``), ``read`` (GET, when reads are closed),
  ``write`` (PUT/DELETE/POST of policies, constraints, approvals; implies ``read``) and ``admin``
  (everything).
* Only ``sha256(secret)`` is stored (``api_tokens``). The presented secret's hash is compared with
  every live token's hash with ``hmac.compare_digest``; secrets are never logged or stored.
* Tokens come from the configuration (``serve --token``, ``SPARK_GOVERNOR_TOKENS``; ``source =
  'config'``: the set is *replaced* at every start, so a token removed from the configuration stops
  working) or from ``spark-governor token create`` (``source = 'cli'``; revoked with ``token
  revoke``). Every process re-reads the table at most every ``token_refresh_s`` (1 s), so creating
  and revoking needs no restart.
* The check runs in ``before_request``, before the body is read: a caller without a valid token
  costs a header parse and a hash.
* Every write attempt is recorded in ``audit_log`` (who, method, path, status, when). The body is
  stored only for authenticated callers and only up to ``AUDIT_BODY_BYTES``; beyond that an
  excerpt. Unauthenticated attempts are recorded without their body, which is never read.
"""
from __future__ import annotations

import fnmatch
import hashlib
import hmac
import json
import logging
import re
import secrets
import threading
import time
from dataclasses import dataclass, field
from functools import wraps
from typing import Iterable, Optional

from flask import Flask, g, jsonify, request
from sqlalchemy import delete, insert, select, update
from sqlalchemy.engine import Engine

from spark_governor.aggregators import queries
from spark_governor.aggregators.models import api_tokens, audit_log

log = logging.getLogger("spark_governor.auth")

SCOPES = ("report", "read", "write", "admin")
#: implied scopes: admin grants everything, write grants read
_IMPLIED = {"admin": set(SCOPES), "write": {"write", "read"}, "read": {"read"}, "report": {"report"}}
#: bytes of an authenticated write's body kept in ``audit_log`` (beyond: an excerpt of AUDIT_EXCERPT_CHARS)
AUDIT_BODY_BYTES = 8192
AUDIT_EXCERPT_CHARS = 512
TOKEN_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
JOB_PATTERN = re.compile(r"^[A-Za-z0-9._*?\[\]-]{1,128}$")


class ApiError(Exception):
    """An error answer: HTTP ``status`` and a message naming the field or resource first."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status, self.message = status, message


def parse_body(model, hint: str):
    """The request's JSON body validated as ``model``; 400 naming the field otherwise."""
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


def new_secret() -> str:
    """A fresh random secret (256 bits)."""
    return "sg_" + secrets.token_urlsafe(32)


@dataclass(frozen=True)
class TokenSpec:
    """A token as configured: its secret, scopes and the job-name patterns it is limited to (None: all jobs)."""

    secret: str
    scopes: tuple[str, ...] = ("admin",)
    jobs: Optional[tuple[str, ...]] = None

    def __post_init__(self) -> None:
        validate_scopes(self.scopes)
        if self.jobs is not None:
            validate_job_patterns(self.jobs)


def validate_scopes(scopes: Iterable[str]) -> tuple[str, ...]:
    scopes = tuple(scopes)
    bad = [s for s in scopes if s not in SCOPES]
    if bad or not scopes:
        raise ValueError(f"scopes: expected some of {', '.join(SCOPES)} (got {', '.join(bad) or 'none'})")
    return scopes


def validate_job_patterns(patterns: Iterable[str]) -> tuple[str, ...]:
    patterns = tuple(patterns)
    bad = [p for p in patterns if not JOB_PATTERN.match(p)]
    if bad or not patterns:
        raise ValueError(f"jobs: expected job-name patterns such as team-a-* (got {bad or 'none'})")
    return patterns


def parse_token_option(item: str) -> tuple[str, TokenSpec]:
    """``NAME=SECRET`` (scope admin) or ``NAME:SCOPE+SCOPE[:PATTERN+PATTERN]=SECRET``."""
    head, sep, secret = item.partition("=")
    parts = head.split(":")
    if not sep or not parts[0] or len(parts) > 3 or len(secret) < 8:
        raise ValueError("expected NAME[:SCOPES[:JOBS]]=SECRET with a secret of at least 8 characters")
    if not TOKEN_NAME.match(parts[0]):
        raise ValueError(f"name: {parts[0]!r} is not a valid token name")
    scopes = tuple(parts[1].split("+")) if len(parts) > 1 and parts[1] else ("admin",)
    jobs = tuple(parts[2].split("+")) if len(parts) > 2 and parts[2] else None
    return parts[0], TokenSpec(secret, scopes, jobs)


@dataclass(frozen=True)
class Principal:
    """The caller behind a valid token."""

    name: str
    scopes: frozenset = field(default_factory=frozenset)
    jobs: Optional[tuple[str, ...]] = None

    def has(self, scope: str) -> bool:
        return any(scope in _IMPLIED[s] for s in self.scopes)

    def may_access(self, job: Optional[str]) -> bool:
        if self.jobs is None:
            return True
        return job is not None and any(fnmatch.fnmatchcase(job, p) for p in self.jobs)


# -- the token table ----------------------------------------------------------------------------------
def store_tokens(engine: Engine, tokens: dict) -> None:
    """Make the configured tokens exactly ``tokens`` (name -> secret or :class:`TokenSpec`).

    Configured tokens that are no longer configured are deleted; tokens created with ``spark-governor
    token create`` are kept (a configured token of the same name replaces one)."""
    now = now_ms()
    specs = {name: spec if isinstance(spec, TokenSpec) else TokenSpec(spec) for name, spec in tokens.items()}
    with engine.begin() as conn:
        conn.execute(delete(api_tokens).where(api_tokens.c.source == "config",
                                              api_tokens.c.name.not_in(list(specs) or [""])))
        for name, spec in specs.items():
            conn.execute(delete(api_tokens).where(api_tokens.c.name == name))
            conn.execute(insert(api_tokens).values(
                name=name, token_sha256=hash_token(spec.secret), created_ms=now, scopes=list(spec.scopes),
                jobs=list(spec.jobs) if spec.jobs is not None else None, source="config"))


def create_token(engine: Engine, name: str, scopes: Iterable[str], jobs: Optional[Iterable[str]] = None,
                 secret: Optional[str] = None) -> str:
    """Create a token (``source = 'cli'``) and return its secret, which is stored only hashed."""
    if not TOKEN_NAME.match(name):
        raise ValueError(f"name: {name!r} is not a valid token name")
    scopes = validate_scopes(scopes)
    jobs = validate_job_patterns(jobs) if jobs else None
    secret = secret or new_secret()
    with engine.begin() as conn:
        row = conn.execute(select(api_tokens.c.revoked_ms).where(api_tokens.c.name == name)).first()
        if row is not None and row.revoked_ms is None:
            raise ValueError(f"name: a token named {name!r} exists; revoke it first")
        conn.execute(delete(api_tokens).where(api_tokens.c.name == name))
        conn.execute(insert(api_tokens).values(name=name, token_sha256=hash_token(secret), created_ms=now_ms(),
                                               scopes=list(scopes), jobs=list(jobs) if jobs else None,
                                               source="cli"))
    return secret


def revoke_token(engine: Engine, name: str) -> bool:
    """Revoke a token by name; False when there is no live token of that name."""
    with engine.begin() as conn:
        res = conn.execute(update(api_tokens).where(api_tokens.c.name == name, api_tokens.c.revoked_ms.is_(None))
                           .values(revoked_ms=now_ms()))
    return res.rowcount > 0


def list_tokens(engine: Engine) -> list[dict]:
    """Every token without its hash: name, scopes, jobs, source, created_ms, revoked_ms."""
    with engine.connect() as conn:
        rows = conn.execute(select(api_tokens).order_by(api_tokens.c.name)).all()
    return [{"name": r.name, "scopes": list(r.scopes or ["admin"]), "jobs": r.jobs, "source": r.source,
             "created_ms": r.created_ms, "revoked_ms": r.revoked_ms} for r in rows]


class TokenCache:
    """The live tokens, re-read from SQL at most every ``refresh_s`` seconds (so ``token create`` and
    ``token revoke`` take effect in every worker without a restart)."""

    def __init__(self, engine: Engine, refresh_s: float = 1.0) -> None:
        self.engine, self.refresh_s = engine, refresh_s
        self._tokens: list[tuple[str, Principal]] = []
        self._loaded = float("-inf")
        self._lock = threading.Lock()

    def _load(self) -> None:
        with self.engine.connect() as conn:
            rows = conn.execute(select(api_tokens.c.name, api_tokens.c.token_sha256, api_tokens.c.scopes,
                                       api_tokens.c.jobs).where(api_tokens.c.revoked_ms.is_(None))).all()
        self._tokens = [(r.token_sha256, Principal(r.name, frozenset(r.scopes or ["admin"]),
                                                   tuple(r.jobs) if r.jobs else None)) for r in rows]

    def invalidate(self) -> None:
        self._loaded = float("-inf")

    def lookup(self, secret: str) -> Optional[Principal]:
        if time.monotonic() - self._loaded >= self.refresh_s:
            with self._lock:
                if time.monotonic() - self._loaded >= self.refresh_s:
                    self._load()
                    self._loaded = time.monotonic()
        presented = hash_token(secret).encode()
        found = None
        for digest, principal in self._tokens:  # compare with every token: time does not depend on which matched
            if hmac.compare_digest(presented, digest.encode()):
                found = principal
        return found


# -- request checks --------------------------------------------------------------------------------------
def bearer_secret() -> Optional[str]:
    header = request.headers.get("Authorization", "")
    if not header.startswith("Bearer ") or not header[7:].strip():
        return None
    return header[7:].strip()


def _cache(engine: Engine) -> TokenCache:
    from flask import current_app

    cache = current_app.extensions.get("spark_governor.tokens")
    if cache is None:
        cache = current_app.extensions["spark_governor.tokens"] = TokenCache(engine)
    return cache


def authenticate(engine: Engine, what: str = "writes") -> Principal:
    """The caller of ``Authorization: Bearer <token>``; 401 when missing or unknown."""
    secret = bearer_secret()
    if secret is None:
        raise ApiError(401, f"Authorization: a bearer token is required for {what}")
    principal = _cache(engine).lookup(secret)
    if principal is None:
        raise ApiError(401, "Authorization: invalid token")
    return principal


def require(principal: Principal, scope: str, job: Optional[str] = None) -> None:
    """403 unless ``principal`` has ``scope`` (for ``job``, when given)."""
    if not principal.has(scope):
        raise ApiError(403, f"Authorization: token {principal.name!r} lacks the {scope!r} scope")
    if job is not None and not principal.may_access(job):
        raise ApiError(403, f"job: token {principal.name!r} is not allowed for job {job!r}")


def allowed_job(job: str) -> bool:
    """Whether this request's caller may see ``job`` (open reads and unlimited tokens: always)."""
    principal = getattr(g, "principal", None)
    return principal is None or principal.may_access(job)


OPEN_PATHS = ("/healthz", "/api/v1/openapi.json")
OPEN_PREFIXES = ("/api/docs",)  # the interactive API page and its static files (api.docs_ui)
REPORT_PATH = "/api/v1/reports"


def _audit(engine: Engine, who: Optional[str], status: int, body=None) -> None:
    try:
        with engine.begin() as conn:
            conn.execute(insert(audit_log).values(who=who, method=request.method[:8], path=request.path[:512],
                                                  body=body, status=status, created_ms=now_ms()))
    except Exception as exc:  # the audit trail must not turn an answer into a 500
        log.warning("audit log write failed: %s", exc.__class__.__name__)


def _bounded_body():
    """An authenticated write's body for the audit log: the JSON when at most AUDIT_BODY_BYTES, else an
    excerpt and the size (the body was read by the handler, within the request size limit)."""
    try:
        raw = request.get_data(cache=True)
    except Exception:  # e.g. over the request size limit
        return {"excerpt": "", "bytes": request.content_length}
    if len(raw) <= AUDIT_BODY_BYTES:
        try:
            return json.loads(raw) if raw else None
        except ValueError:
            pass
    return {"excerpt": raw[:AUDIT_EXCERPT_CHARS].decode("utf-8", "replace"), "bytes": len(raw)}


def install_auth(app: Flask, engine: Engine, *, require_report_token: bool = False, open_reads: bool = True,
                 token_refresh_s: float = 1.0) -> None:
    """Check every request's token before its body is read (``g.principal``, None for open access).

    ``POST /api/v1/reports`` needs the ``report`` scope (without a token it is accepted only when
    ``require_report_token`` is false, for local development); other POST/PUT/DELETE need ``write``
    (the audited handlers record them); GET needs ``read`` only when ``open_reads`` is false.
    ``/healthz``, the OpenAPI document and the API page (``/api/docs``) are always open."""
    app.extensions["spark_governor.tokens"] = TokenCache(engine, token_refresh_s)

    @app.errorhandler(ApiError)
    def _api_error(exc: ApiError):
        response = jsonify(error=exc.message)
        if exc.status == 401:
            response.headers["WWW-Authenticate"] = 'Bearer realm="spark-governor"'
        return response, exc.status

    @app.before_request
    def _check_token():
        g.principal = None
        path, method = request.path, request.method
        if path in OPEN_PATHS or path.startswith(OPEN_PREFIXES):
            return None
        job = (request.view_args or {}).get("job")
        if method == "POST" and path == REPORT_PATH:
            if bearer_secret() is None and not require_report_token:
                return None
            g.principal = authenticate(engine, "reports")
            require(g.principal, "report")  # the job is in the body: checked after parsing
            return None
        if method in ("GET", "HEAD", "OPTIONS"):
            if open_reads:
                return None
            g.principal = authenticate(engine, "reads")
            require(g.principal, "read", job)
            if path == "/metrics" and g.principal.jobs is not None:
                raise ApiError(403, f"Authorization: token {g.principal.name!r} is limited to some jobs; "
                                    "/metrics needs a read token for all jobs")
            return None
        try:
            g.principal = authenticate(engine)
            require(g.principal, "write", job)
        except ApiError as exc:  # recorded without the body, which is never read
            _audit(engine, g.principal.name if g.principal else None, exc.status)
            raise
        return None


def audited(engine: Engine):
    """Decorator for write handlers: the caller is authenticated (``g.who``), the attempt recorded."""
    def decorate(handler):
        @wraps(handler)
        def wrapper(*args, **kwargs):
            principal = getattr(g, "principal", None)
            if principal is None:  # an app without install_auth: check here
                try:
                    principal = g.principal = authenticate(engine)
                    require(principal, "write", kwargs.get("job"))
                except ApiError as exc:
                    _audit(engine, None, exc.status)
                    raise
            g.who = principal.name
            status = 500
            try:
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
                _audit(engine, principal.name, status, _bounded_body())
        return wrapper
    return decorate
