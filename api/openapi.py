"""The OpenAPI 3.1 document of the web API, served at ``GET /api/v1/openapi.json``.

Built from the same pydantic models that validate requests (``policies.wire.Report``,
``api.policies_api.PolicySettings``) and from the response models of ``api.schemas``; JSON Schema
2020-12 as pydantic emits it is what OpenAPI 3.1 uses. ``tests/test_openapi.py`` checks that
every Flask route is documented and validates real requests and responses against it.
"""
from __future__ import annotations

from functools import lru_cache
from typing import Any, Optional

from pydantic import BaseModel, TypeAdapter
from pydantic.json_schema import models_json_schema

from spark_governor.api import schemas as s
from spark_governor.api.constraints_api import ConstraintSettings
from spark_governor.api.cluster_api import CLUSTER_SCHEMA
from spark_governor.api.policies_api import PolicySettings
from spark_governor.policies.wire import JobName, Report

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
             403: "The token lacks the scope, or is not allowed for this job or reporter",
             404: "Job, template, policy or decision not found", 409: "Conflict: the message says with what",
             413: "Body too large", 415: "Unsupported Content-Encoding",
             503: "Database unreachable or too many reports in flight (retry after Retry-After seconds)"}
    for code in errors:
        out[str(code)] = {"description": texts[code], "content": {JSON: {"schema": _ref(s.Error)}}}
    return out


JOB = _path_param("job", "Job name as given to attach()", TypeAdapter(JobName).json_schema())
NAME = _path_param("name", "Policy name (see GET /api/v1/policies)")
WINDOWS = _query_int("windows", "Number of most recent statistics windows", 1, 1000, 12)
SPANS = _query_int("spans", "Most recent complete averaging spans", 1, 720, 12)
UNTIL = _query_int("until_ms", "The spans before this instant (ms since the epoch; default now), e.g. a constraint's "
                               "slo.judged_until_ms: the spans its SLO counters hold", 0, 999_999_999_999_999)
WRITE = [{"bearerAuth": []}]
#: reports need a token with the report scope unless the plane runs with --anonymous-reports (then none)
REPORT = [{"bearerAuth": []}, {}]
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
            "summary": "Ingest a report from a job's reporter (schema v3: statistics folded at the edge; v1 and "
                       "v2, whole task rows, accepted and deprecated); idempotent per (reporter id, seq)",
            "security": REPORT,
            # Content-Encoding describes the body's representation, not a parameter: a generated request that
            # picked gzip for an uncompressed body would be invalid whatever the document said
            "requestBody": {"required": True, "description": "The report as JSON; it may be gzip-compressed "
                                                             "(`Content-Encoding: gzip`, as the reporters send it)",
                            "content": {JSON: {"schema": _ref(Report)}}},
            "responses": _responses(s.ReportAccepted, 400, 401, 403, 413, 415, 503)}},
        "/api/v1/jobs": {"get": {"summary": "Jobs with their reporter counters", "responses": _responses(s.JobList)}},
        "/api/v1/jobs/{job}": {"get": {"summary": "One job", "parameters": [JOB],
                                       "responses": _responses(s.Job, 404)}},
        "/api/v1/jobs/{job}/runs": {"get": {
            "summary": "Runs of the job (each Spark application that reported under its name), newest first, each "
                       "with its verdict (the live run's now, an ended one's at its end)",
            "parameters": [JOB], "responses": _responses(s.RunList, 404)}},
        "/api/v1/jobs/{job}/stages": {"get": {
            "summary": "Template vertices (stages) of one run (default: the latest): recent windows merged over "
                       "partitions, and a summary",
            "parameters": [JOB, WINDOWS, RUN], "responses": _responses(s.StageList, 400, 404)}},
        "/api/v1/jobs/{job}/stages/{template}/tasks": {"get": {
            "summary": "Runtime vertices (partitions) of one template vertex, in one run (default: the latest), and "
                       "its latest task rows with what the store holds of them (task_detail)",
            "parameters": [JOB, _path_param("template", "Template key"), WINDOWS, RUN,
                           _query_int("limit", "Most recent task rows", 0, 10_000, 100)],
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
        "/api/v1/jobs/{job}/health": {"get": {
            "summary": "The job's health verdict (idle, no-progress, unhealthy, underprovisioned, overprovisioned, "
                       "optimal or unknown) with the reason, the numbers behind it and an executor recommendation",
            "parameters": [JOB, _query_int("window_s", "Seconds of history the verdict looks at", 1, 3600, 60),
                           _query_str("run", "The run to judge: a run_id from GET /api/v1/jobs/{job}/runs (default: "
                                             "the latest). The live run is judged now, an ended or replayed one at "
                                             "its end, on its own clock"),
                           {"name": "timeline", "in": "query", "required": False,
                            "schema": {"type": "string", "enum": ["true", "false"], "default": "false"},
                            "description": "Add the run's verdicts over its life (segments of equal verdicts)"}],
            "responses": _responses(s.JobHealth, 400, 404)}},
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
            "parameters": [JOB, SPANS, UNTIL], "responses": _responses(s.ConstraintList, 400, 404)}},
        "/api/v1/jobs/{job}/constraints/{name}": {
            "parameters": [JOB, _path_param("name", "Constraint name (the same rules as a job name)",
                                            TypeAdapter(JobName).json_schema())],
            "get": {"summary": "One latency constraint per span", "parameters": [SPANS, UNTIL],
                    "responses": _responses(s.ConstraintDetail, 400, 404)},
            "put": {"summary": "Declare or change a latency constraint; 404 for a job that never reported "
                               "unless ?register=true", "security": WRITE, "parameters": [REGISTER],
                    "requestBody": {"required": True, "content": {JSON: {"schema": _ref(ConstraintSettings)}}},
                    "responses": _responses(s.Constraint, 400, 401, 404, 409)},
            "delete": {"summary": "Remove a latency constraint", "security": WRITE,
                       "responses": _responses(s.Deleted, 401, 404)}},
        "/api/v1/jobs/{job}/cluster": {"get": {
            "summary": "What the job measured about its cluster (latest run): provisioning delay, executor "
                       "warm-up, driver overhead per batch, prediction error",
            "parameters": [JOB], "responses": _responses(CLUSTER_SCHEMA, 404)}},
        "/api/v1/jobs/{job}/partitioning": {"get": {
            "summary": "Partitioned micro-batches (loads, BSI/BCI/KSR/MPI) and the latest plan decision",
            "parameters": [JOB, _query_int("limit", "Most recent batches", 1, 500, 20),
                           _query_int("top", "Most frequent keys of the latest batch", 0, 10_000, 20)],
            "responses": _responses(s.Partitioning, 400, 404)}},
        "/api/v1/jobs/{job}/partitioning/plan": {"get": {
            "summary": "The partition_plan directive the job applies", "parameters": [JOB],
            "responses": _responses(s.CurrentPlan, 404)}},
        "/api/v1/replays": {"post": {
            "summary": "Upload a Spark event log (one file, as Spark wrote it) and import it as a job, optionally "
                       "with a policy's what-if in dry-run mode (see docs/replay.md)", "security": WRITE,
            "parameters": [{**_query_str("job", "Job name to import as (default: the log's application name)"),
                            "schema": TypeAdapter(JobName).json_schema()},
                           {"name": "codec", "in": "query", "required": False,
                            "schema": {"enum": ["plain", "lz4", "snappy", "zstd"], "default": "plain"}},
                           _query_str("policy", "Policy to run in dry-run mode over the replayed timeline"),
                           _query_str("config", "The policy's config as JSON; may carry \"constraint\": "
                                                "{\"bound_ms\": ..., \"span_s\": ...}")],
            "requestBody": {"required": True, "description": "The event log file as Spark wrote it (binary)",
                            "content": {"application/octet-stream": {"schema": {}}}},
            "responses": {"201": {"description": "Imported: counts, what was skipped and why, what-if summary",
                                  "content": {JSON: {"schema": {"type": "object", "required": [
                                      "job", "streaming", "batches", "tasks", "stages", "read"]}}}},
                          **{k: v for k, v in _responses({"type": "object"}, 400, 401, 403, 409, 413).items()
                             if k != "200"}}}},
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


#: Rules of a report that JSON Schema cannot state (across fields, or beyond a type): the start of the server's 400
#: message for each -> what it means. They are listed in the document (``x-rules`` and the description of
#: ``Report``); tests/integration/test_schemathesis.py accepts a 400 to a schema-valid report only for these.
REPORT_RULES = {
    "Input should be a valid integer": "integers are written without a fraction or exponent (2, not 2.0): the "
                                       "report is validated strictly, as the reporters write it",
    "finish_ms is before launch_ms": "a task finishes at or after its launch",
    "stage_submission_ms is after launch_ms": "a task launches at or after its stage's submission",
    "loads for": "block_loads has one load per partition, bucket_loads one per reduce bucket",
    "key_counts: more tuples than the batch holds": "key counts sum to at most the batch's tuples",
    "backlog_rows: more than available_rows": "a source's backlog is at most its available rows",
    "running_batch_start_ms: required exactly when status is running": "a running query has a running batch",
    "running_batch_id: only while a batch runs": "only a running query has a running batch id",
    "bytes of JSON": "a knob's state is at most MAX_KNOB_STATE_BYTES bytes of JSON",
    "integer outside the 64-bit range": "integers inside free-form JSON values fit 64 bits",
    "nested deeper than": "free-form JSON values nest at most MAX_JSON_DEPTH levels",
    "NUL characters": "strings hold no NUL character (\\u0000)",
    "an empty sample": "moments with n 0 have mean 0, m2 0 and no min or max",
    "min and max: required": "moments with n > 0 have min and max",
    "min is above max": "a sample's min is at most its max",
    "m2: a sample of one": "moments with n 1 have m2 0",
    "service.n:": "a runtime window has one service time per successful task",
    "more samples than": "a runtime window's latency, service-per-record and interarrival counts are at most its tasks",
    "records_in: fewer than input_records": "records_in (input + shuffle read) is at least input_records",
    "more makespans than": "a template window has at most one makespan per stage",
    "last_finish_ms is before first_launch_ms": "a task span ends at or after it starts",
    "schema_version: window_ms": "folded statistics need schema_version 3",
    "window_ms: required": "a report with windows states its window_ms",
    "is not aligned to": "a window starts at a multiple of window_ms",
    "window_ms: required with tasks": "a v3 report with task rows states its window_ms",
    "a task row of schema_version 3": "a v3 task row is detail of a task folded in the same report's template "
                                      "windows",
    "partitions: a window with tasks": "a template window with tasks has at least one partition",
    "window_ms: this control plane keeps": "a report is folded with the control plane's window_ms (its answers "
                                           "say which)",
}


def _document_rules(schemas: dict, model: str, rules: dict) -> None:
    schema = schemas[model]
    schema["x-rules"] = [{"message": m, "rule": r} for m, r in rules.items()]
    schema["description"] = (schema.get("description", "") + "\n\nBeyond this schema (400 naming the field): "
                             + "; ".join(rules.values()) + ".").strip()


def _unique_items(schemas: dict, model: str, field: str) -> None:
    """State in the document a uniqueness rule that a model checks in a validator (pydantic cannot emit it):
    ``uniqueItems`` on the array form of ``model.field``."""
    prop = schemas[model]["properties"][field]
    arrays = [b for b in prop.get("anyOf", [prop]) if b.get("type") == "array"]
    if not arrays:
        raise AssertionError(f"{model}.{field}: no array schema to mark unique")
    for branch in arrays:
        branch["uniqueItems"] = True


@lru_cache(maxsize=1)
def openapi_document() -> dict:
    """The OpenAPI 3.1 document (a fresh dict per process; callers must not mutate it)."""
    request_models = [Report, PolicySettings, ConstraintSettings]
    response_models = [m for m in vars(s).values()
                       if isinstance(m, type) and issubclass(m, s._Body) and m is not s._Body]
    _, top = models_json_schema([(m, "validation") for m in request_models]
                                + [(m, "serialization") for m in response_models], ref_template=REF)
    schemas = top.get("$defs", {})
    _unique_items(schemas, "ConstraintSettings", "vertices")  # ConstraintSettings._unique: 400 on repeated keys
    _document_rules(schemas, Report.__name__, REPORT_RULES)
    return {
        "openapi": "3.1.0",
        "info": {"title": "spark-governor", "version": "1",
                 "description": "Control plane of spark-governor: report ingest, statistics, policies, "
                                "decisions and directives. Writes need a bearer token configured at "
                                "`spark-governor serve --token NAME=SECRET`; reads are open."},
        "servers": [{"url": "/"}],
        "paths": _paths(),
        "components": {"schemas": schemas,
                       "securitySchemes": {"bearerAuth": {"type": "http", "scheme": "bearer"}}},
    }
