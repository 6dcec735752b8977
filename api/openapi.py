"""The OpenAPI 3.1 document of the web API, served at ``GET /api/v1/openapi.json``.

Built from the same pydantic models that validate requests (``policies.wire.Report``,
``api.policies_api.PolicySettings``) and from the response models of ``api.schemas``; JSON Schema
2020-12 as pydantic emits it is what OpenAPI 3.1 uses. ``tests/test_openapi.py`` checks that
every Flask route is documented and validates real requests and responses against it.
"""
from __future__ import annotations

from functools import lru_cache
from typing import Any, Optional

from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from spark_governor.api import schemas as s
from spark_governor.api.constraints_api import ConstraintSettings
from spark_governor.api.policies_api import PolicySettings
from spark_governor.policies.wire import Report

REF = "#/components/schemas/{model}"
JSON = "application/json"


def _ref(model: type[BaseModel]) -> dict:
    return {"$ref": REF.format(model=model.__name__)}


def _path_param(name: str, description: str, schema: Optional[dict] = None) -> dict:
    return {"name": name, "in": "path", "required": True, "description": description,
            "schema": schema or {"type": "string"}}


def _query_int(name: str, description: str, lo: int, hi: Optional[int] = None, default: Optional[int] = None) -> dict:
    schema: dict[str, Any] = {"type": "integer", "minimum": lo}
    if hi is not None:
        schema["maximum"] = hi
    if default is not None:
        schema["default"] = default
    return {"name": name, "in": "query", "required": False, "description": description, "schema": schema}


def _query_str(name: str, description: str, enum: Optional[list[str]] = None) -> dict:
    schema: dict[str, Any] = {"type": "string"}
    if enum:
        schema["enum"] = enum
    return {"name": name, "in": "query", "required": False, "description": description, "schema": schema}


def _responses(ok: type[BaseModel] | dict, *errors: int, ok_description: str = "OK") -> dict:
    out: dict[str, Any] = {"200": {"description": ok_description, "content": {
        JSON: {"schema": _ref(ok) if isinstance(ok, type) else ok}}}}
    texts = {400: "Bad request: the message names the field", 401: "Missing or invalid bearer token",
             404: "Job, template, policy or decision not found", 409: "Conflict: the message says with what",
             413: "Body too large", 415: "Unsupported Content-Encoding", 503: "Database unreachable"}
    for code in errors:
        out[str(code)] = {"description": texts[code], "content": {JSON: {"schema": _ref(s.Error)}}}
    return out


JOB = _path_param("job", "Job name as given to attach()")
NAME = _path_param("name", "Policy name (see GET /api/v1/policies)")
WINDOWS = _query_int("windows", "Number of most recent statistics windows", 1, 1000, 12)
SPANS = _query_int("spans", "Most recent complete averaging spans", 1, 720, 12)
WRITE = [{"bearerAuth": []}]
RUN = _query_str("run", "The run to show: a run_id from GET /api/v1/jobs/{job}/runs, or `all` for every run merged "
                        "(default: the latest run)")
REGISTER = {"name": "register", "in": "query", "required": False, "schema": {"type": "boolean", "default": False},
            "description": "Pre-register a job that has never reported (without it: 404 for an unknown job). "
                           "A pre-registered job is removed again when its last policy and constraint are deleted "
                           "before it reported."}
DECISION_STATUSES = ["recorded", "issued", "applied", "failed", "not_actuatable", "superseded"]


def _paths() -> dict:
    return {
        "/api/v1/reports": {"post": {
            "summary": "Ingest a report from a job's reporter (schema v2; v1 accepted); idempotent per "
                       "(reporter id, seq)",
            "parameters": [{"name": "Content-Encoding", "in": "header", "required": False,
                            "schema": {"type": "string", "enum": ["gzip", "identity"]}}],
            "requestBody": {"required": True, "content": {JSON: {"schema": _ref(Report)}}},
            "responses": _responses(s.ReportAccepted, 400, 413, 415)}},
        "/api/v1/jobs": {"get": {"summary": "Jobs with their reporter counters", "responses": _responses(s.JobList)}},
        "/api/v1/jobs/{job}": {"get": {"summary": "One job", "parameters": [JOB],
                                       "responses": _responses(s.Job, 404)}},
        "/api/v1/jobs/{job}/runs": {"get": {
            "summary": "Runs of the job (each Spark application that reported under its name), newest first",
            "parameters": [JOB], "responses": _responses(s.RunList, 404)}},
        "/api/v1/jobs/{job}/stages": {"get": {
            "summary": "Template vertices (stages) of one run (default: the latest): recent windows merged over "
                       "partitions, and a summary",
            "parameters": [JOB, WINDOWS, RUN], "responses": _responses(s.StageList, 400, 404)}},
        "/api/v1/jobs/{job}/stages/{template}/tasks": {"get": {
            "summary": "Runtime vertices (partitions) of one template vertex, in one run (default: the latest)",
            "parameters": [JOB, _path_param("template", "Template key"), WINDOWS, RUN],
            "responses": _responses(s.TaskStats, 400, 404)}},
        "/api/v1/jobs/{job}/batches": {"get": {
            "summary": "Recent micro-batches of one run (default: the latest) with trigger interarrival and "
                       "duration moments",
            "parameters": [JOB, _query_int("limit", "Most recent batches", 1, 10_000, 100), RUN],
            "responses": _responses(s.BatchList, 400, 404)}},
        "/api/v1/jobs/{job}/live": {"get": {
            "summary": "The job between its micro-batches: running batch and its age, oldest unprocessed record's "
                       "age, backlog in rows and seconds of work, idle or not, per query and combined",
            "parameters": [JOB, _query_int("window_s", "Seconds of history for the backlog trend and completed "
                                                       "batches", 1, 3600, 30)],
            "responses": _responses(s.JobLive, 400, 404)}},
        "/api/v1/policies": {"get": {"summary": "Installed policies with their config schema",
                                     "responses": _responses(s.PolicyList)}},
        "/api/v1/jobs/{job}/policies": {"get": {"summary": "Policies configured for a job", "parameters": [JOB],
                                                "responses": _responses(s.JobPolicyList, 404)}},
        "/api/v1/jobs/{job}/policies/{name}": {
            "parameters": [JOB, NAME],
            "get": {"summary": "A job's configuration of one policy", "responses": _responses(s.JobPolicy, 404)},
            "put": {"summary": "Configure, enable or disable a policy for a job (config is validated against "
                               "the policy's config_schema); 404 for a job that never reported unless "
                               "?register=true", "security": WRITE, "parameters": [REGISTER],
                    "requestBody": {"required": True, "content": {JSON: {"schema": _ref(PolicySettings)}}},
                    "responses": _responses(s.JobPolicy, 400, 401, 404, 409)},
            "delete": {"summary": "Remove a policy's configuration from a job", "security": WRITE,
                       "responses": _responses(s.Deleted, 401, 404)}},
        "/api/v1/jobs/{job}/decisions": {"get": {
            "summary": "Decisions, newest first",
            "parameters": [JOB, _query_str("policy", "Only this policy"),
                           _query_str("knob", "Only this knob", ["executors", "batch_interval", "partition_plan",
                                                                 "exchanges"]),
                           _query_str("status", "Only this status", DECISION_STATUSES),
                           _query_str("mode", "Only this mode", ["dry-run", "act"]),
                           _query_int("since_ms", "Created at or after (epoch ms)", 0),
                           _query_int("until_ms", "Created before (epoch ms)", 0),
                           _query_int("limit", "At most this many", 1, 10_000, 100)],
            "responses": _responses(s.DecisionList, 400, 404)}},
        "/api/v1/jobs/{job}/decisions/{decision_id}/approve": {"post": {
            "summary": "Apply a decision recorded in dry-run mode (issues its directive)", "security": WRITE,
            "parameters": [JOB, _path_param("decision_id", "Decision id", {"type": "integer", "minimum": 0})],
            "responses": _responses(s.Approved, 401, 404, 409)}},
        "/api/v1/jobs/{job}/directives": {"get": {
            "summary": "Desired state per knob with the version the driver applied", "parameters": [JOB],
            "responses": _responses(s.DirectiveList, 404)}},
        "/api/v1/jobs/{job}/events": {"get": {"summary": "Policy errors, holds and releases, newest first",
                                              "parameters": [JOB], "responses": _responses(s.EventList, 404)}},
        "/api/v1/jobs/{job}/holds": {"get": {"summary": "Effectiveness state and holds per knob",
                                             "parameters": [JOB], "responses": _responses(s.HoldList, 404)}},
        "/api/v1/jobs/{job}/constraints": {"get": {
            "summary": "Latency constraints with measured latency, bound, attainment and prediction per span",
            "parameters": [JOB, SPANS], "responses": _responses(s.ConstraintList, 400, 404)}},
        "/api/v1/jobs/{job}/constraints/{name}": {
            "parameters": [JOB, _path_param("name", "Constraint name")],
            "get": {"summary": "One latency constraint per span", "parameters": [SPANS],
                    "responses": _responses(s.ConstraintDetail, 400, 404)},
            "put": {"summary": "Declare or change a latency constraint; 404 for a job that never reported "
                               "unless ?register=true", "security": WRITE, "parameters": [REGISTER],
                    "requestBody": {"required": True, "content": {JSON: {"schema": _ref(ConstraintSettings)}}},
                    "responses": _responses(s.Constraint, 400, 401, 404, 409)},
            "delete": {"summary": "Remove a latency constraint", "security": WRITE,
                       "responses": _responses(s.Deleted, 401, 404)}},
        "/api/v1/jobs/{job}/partitioning": {"get": {
            "summary": "Partitioned micro-batches (loads, BSI/BCI/KSR/MPI) and the latest plan decision",
            "parameters": [JOB, _query_int("limit", "Most recent batches", 1, 500, 20),
                           _query_int("top", "Most frequent keys of the latest batch", 0, 10_000, 20)],
            "responses": _responses(s.Partitioning, 400, 404)}},
        "/api/v1/jobs/{job}/partitioning/plan": {"get": {
            "summary": "The partition_plan directive the job applies", "parameters": [JOB],
            "responses": _responses(s.CurrentPlan, 404)}},
        "/api/v1/openapi.json": {"get": {"summary": "This document",
                                          "responses": _responses({"type": "object"})}},
        "/api/docs": {"get": {"summary": "Interactive API page (Swagger UI over this document, served locally)",
                              "responses": {"200": {"description": "OK", "content": {
                                  "text/html": {"schema": {"type": "string"}}}}}}},
        "/api/docs/{filename}": {"get": {
            "summary": "Swagger UI's static files for /api/docs",
            "parameters": [_path_param("filename", "A file of the Swagger UI distribution")],
            "responses": {"200": {"description": "OK (CSS, JavaScript or an image)", "content": {"*/*": {"schema": {}}}},
                          "404": {"description": "No such file", "content": {JSON: {"schema": _ref(s.Error)}}}}}},
        "/healthz": {"get": {"summary": "Health (database reachable)", "responses": _responses(s.Health, 503)}},
        "/metrics": {"get": {"summary": "Prometheus exposition", "responses": {"200": {
            "description": "OK", "content": {"text/plain": {"schema": {"type": "string"}}}}}}},
    }


@lru_cache(maxsize=1)
def openapi_document() -> dict:
    """The OpenAPI 3.1 document (a fresh dict per process; callers must not mutate it)."""
    request_models = [Report, PolicySettings, ConstraintSettings]
    response_models = [m for m in vars(s).values()
                       if isinstance(m, type) and issubclass(m, s._Body) and m is not s._Body]
    _, top = models_json_schema([(m, "validation") for m in request_models]
                                + [(m, "serialization") for m in response_models], ref_template=REF)
    return {
        "openapi": "3.1.0",
        "info": {"title": "spark-governor", "version": "1",
                 "description": "Control plane of spark-governor: report ingest, statistics, policies, "
                                "decisions and directives. Writes need a bearer token configured at "
                                "`spark-governor serve --token NAME=SECRET`; reads are open."},
        "servers": [{"url": "/"}],
        "paths": _paths(),
        "components": {"schemas": top.get("$defs", {}),
                       "securitySchemes": {"bearerAuth": {"type": "http", "scheme": "bearer"}}},
    }
