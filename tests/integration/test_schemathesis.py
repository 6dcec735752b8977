"""Schemathesis against the control plane, from the OpenAPI document it serves (issue #16).

The WSGI app of a real control plane (``api.server.ControlPlane``, a fresh SQLite file, an admin token) is called in
process by schemathesis with requests generated from ``GET /api/v1/openapi.json``: valid ones (from the schemas)
and invalid ones (violating them), a bounded number per operation and mode (``MAX_EXAMPLES``) so the whole test
takes well under a minute. Every answer must pass schemathesis' checks: no server error (5xx), status code, content
type, headers and body as documented, valid requests accepted and invalid ones refused (4xx), so the document and
the validation say the same thing. All failures are collected and reported together.

Two allowances, both for "valid by the schema, refused with 400": a report refused for a rule JSON Schema cannot state
(across fields, e.g. a task finishing before its launch), only when the document lists that rule (``x-rules`` of
``Report``) and every error of the report, found again here with ``policies.wire``, is one of them; and an upload whose
body has no schema (an event log as ``application/octet-stream``: any bytes match, few are a log). Everything else
about those answers (status documented, body schema, no 5xx, invalid requests refused) is still checked.
"""
import json

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from pydantic import ValidationError
from schemathesis import GenerationMode

from spark_governor.policies.wire import Report, ReportError, parse_report

TOKEN = "schemathesis-admin-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
MAX_EXAMPLES = 10
INTEGER_RULE = "Input should be a valid integer"


def _documented(error: dict, rules: list[str]) -> bool:
    if error["type"] == "int_type":  # only the documented case: an integer written with a fraction (2.0)
        return INTEGER_RULE in rules and isinstance(error["input"], float) and error["input"].is_integer()
    return any(rule in error["msg"] for rule in rules)


def _rejected_for_documented_rules(case, response, rules: list[str]) -> bool:
    """Whether a schema-valid report was refused (400) only for rules the document lists."""
    if case.operation.path != "/api/v1/reports" or response.status_code != 400:
        return False
    text = json.dumps(case.body)
    try:
        Report.model_validate_json(text)
    except ValidationError as exc:
        return all(_documented(e, rules) for e in exc.errors())
    try:  # beyond the model: NUL characters
        parse_report(text)
    except ReportError as exc:
        return any(rule in str(exc) for rule in rules)
    return False


def _opaque_body(raw_operation: dict) -> bool:
    """Whether the operation's request body has no JSON schema to agree with (a file upload)."""
    content = raw_operation.get("requestBody", {}).get("content", {})
    return bool(content) and not any("json" in media for media in content)


def _failures(operation, mode: GenerationMode, rules: list[str], raw_operation: dict) -> list[str]:
    found: list[str] = []
    opaque = _opaque_body(raw_operation)

    @given(case=operation.as_strategy(generation_mode=mode))
    @settings(max_examples=MAX_EXAMPLES, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck), report_multiple_bugs=False)
    def run(case):
        response = case.call(headers=AUTH)
        try:
            case.validate_response(response, headers=AUTH)
        except (Exception, BaseExceptionGroup) as exc:  # a FailureGroup of check failures, or one failure
            failures = list(getattr(exc, "exceptions", [exc]))
            if (mode is GenerationMode.POSITIVE and all(f.title == "Schema-valid request rejected" for f in failures)
                    and ((opaque and response.status_code == 400)
                         or _rejected_for_documented_rules(case, response, rules))):
                return
            titles = "; ".join(f"{getattr(f, 'title', type(f).__name__)}: {getattr(f, 'message', f)}"
                               for f in failures)
            found.append(f"{operation.label} [{mode.value}] {titles}\n  {case.as_curl_command()}\n"
                         f"  -> {response.status_code} {response.content[:300]!r}")

    try:
        run()
    except Unsatisfiable:  # nothing of this operation can be made invalid (no parameters, no body)
        assert mode is GenerationMode.NEGATIVE, operation.label
    return found


@pytest.fixture
def control_plane_with_token(sqlite_url):
    from spark_governor.api.app import Settings
    from spark_governor.api.server import ControlPlane

    plane = ControlPlane(db_url=sqlite_url, port=0, tokens={"ops": TOKEN},
                         settings=Settings(evaluation_interval_s=3600)).start()
    yield plane
    plane.stop()


def test_api_answers_as_documented(control_plane_with_token):
    plane = control_plane_with_token
    schema = schemathesis.openapi.from_wsgi("/api/v1/openapi.json", plane.app)
    rules = [r["message"] for r in schema.raw_schema["components"]["schemas"]["Report"]["x-rules"]]
    failures, operations = [], 0
    for result in schema.get_all_operations():
        operation = result.ok()
        operations += 1
        raw_operation = schema.raw_schema["paths"][operation.path][operation.method.lower()]
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            failures += _failures(operation, mode, rules, raw_operation)
    assert operations >= 25
    assert not failures, f"{len(failures)} failures:\n\n" + "\n\n".join(failures)
