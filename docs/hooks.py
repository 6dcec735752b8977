"""MkDocs hook: pages that must not drift from the code are generated from it at build time.

A page asks for a generated block with an HTML comment on a line of its own:

* ``<!-- generated: openapi -->``: every operation of the OpenAPI document that ``GET /api/v1/openapi.json``
  serves (``spark_governor.api.openapi.openapi_document``), and the fields of each request body;
* ``<!-- generated: policies -->``: the policies installed under the entry-point group ``spark_governor.policies``;
* ``<!-- generated: policy-config NAME -->``: the config fields of policy NAME with their defaults;
* ``<!-- generated: partitioners -->``: the registered partitioners and their options;
* ``<!-- generated: dashboards -->``: the Grafana dashboards shipped in ``dashboards/``, panel by panel.

An unknown marker, or a name the code does not know, stops the build.
"""
from __future__ import annotations

import json
import re

from mkdocs.exceptions import PluginError

MARKER = re.compile(r"^<!-- generated: ([a-z-]+)(?: ([\w-]+))? -->$", re.MULTILINE)


CODE_SPAN = re.compile(r"(`+)(?:.+?)\1")


def _cell(text) -> str:
    """One Markdown table cell: no newlines, pipes escaped outside code spans (inside one the table
    parser leaves them alone, and an escape would show)."""
    text = " ".join(str(text).split())
    out, end = [], 0
    for m in CODE_SPAN.finditer(text):
        out += [text[end:m.start()].replace("|", "\\|"), m.group(0)]
        end = m.end()
    return "".join(out + [text[end:].replace("|", "\\|")])


def _schema_type(schema: dict) -> str:
    if "$ref" in schema:
        return schema["$ref"].rsplit("/", 1)[-1]
    if "anyOf" in schema:
        return " or ".join(_schema_type(s) for s in schema["anyOf"])
    if "enum" in schema:
        return " | ".join(f"`{json.dumps(v)}`" for v in schema["enum"])  # _cell escapes the pipes
    if "const" in schema:
        return f"`{json.dumps(schema['const'])}`"
    kind = schema.get("type", "any")
    if kind == "array":
        return f"array of {_schema_type(schema.get('items', {}))}"
    if kind == "object" and "additionalProperties" in schema and isinstance(schema["additionalProperties"], dict):
        return f"object of {_schema_type(schema['additionalProperties'])}"
    return kind


def _default(field: dict) -> str:
    if "default" not in field:
        return "optional"  # e.g. a list with a default factory: empty when left out
    return f"`{json.dumps(field['default'], ensure_ascii=False)}`"


def _fields_table(schema: dict) -> list[str]:
    required = set(schema.get("required", ()))
    lines = ["| field | type | default | description |", "| --- | --- | --- | --- |"]
    for name, field in schema.get("properties", {}).items():
        default = "**required**" if name in required else _default(field)
        lines.append(f"| `{name}` | {_cell(_schema_type(field))} | {_cell(default)} | "
                     f"{_cell(field.get('description', ''))} |")
    return lines


def openapi_table() -> str:
    from spark_governor.api.openapi import openapi_document

    doc = openapi_document()
    lines = [f"Generated from the OpenAPI {doc['openapi']} document that the control plane serves at "
             "`GET /api/v1/openapi.json`.", "",
             "| method | path | summary | auth | parameters | request body | response (200) | errors |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    bodies: dict[str, dict] = {}
    for path, item in doc["paths"].items():
        shared = item.get("parameters", [])
        for method in ("get", "post", "put", "delete", "patch"):
            op = item.get(method)
            if op is None:
                continue
            params = [p for p in shared + op.get("parameters", []) if p["in"] in ("query", "header")]
            param_text = ", ".join(f"`{p['name']}`" + (" (header)" if p["in"] == "header" else "") for p in params)
            body = ""
            if "requestBody" in op:
                schema = next(iter(op["requestBody"]["content"].values()))["schema"]
                body = _schema_type(schema)
                if "$ref" in schema:
                    bodies[body] = doc["components"]["schemas"][body]
            ok = op["responses"].get("200", {})
            content = ok.get("content", {})
            response = ", ".join(f"{_schema_type(c['schema'])}" + ("" if t == "application/json" else f" ({t})")
                                 for t, c in content.items())
            errors = ", ".join(code for code in op["responses"] if code != "200")
            auth = "bearer token" if op.get("security") else "–"
            lines.append(f"| {method.upper()} | `{path}` | {_cell(op.get('summary', ''))} | {auth} | "
                         f"{param_text or '–'} | {body or '–'} | {response or '–'} | {errors or '–'} |")
    # request bodies, and the schemas they refer to (the report's records), in order of first use
    schemas = doc["components"]["schemas"]
    pending = list(bodies)
    while pending:
        for ref in sorted(set(re.findall(r'"#/components/schemas/(\w+)"', json.dumps(schemas[pending.pop(0)])))):
            if ref not in bodies:
                bodies[ref] = schemas[ref]
                pending.append(ref)
    lines += ["", "### Request bodies", "",
              "The bodies of the write endpoints and of the report ingest, with the records a report carries.", ""]
    for name, schema in bodies.items():
        lines += [f"#### {name}", "", _cell(schema.get("description", "")), ""] + _fields_table(schema) + [""]
    lines += ["### Response schemas", "",
              "Every response body is a JSON object described in `components.schemas` of the document: "
              + ", ".join(f"`{n}`" for n in sorted(doc["components"]["schemas"]) if n not in bodies) + "."]
    return "\n".join(lines)


def _policies():
    from spark_governor.policies.registry import load_policies

    found, errors = load_policies()
    if errors:
        raise PluginError(f"policies that could not be loaded: {errors}")
    return found


def policies_table() -> str:
    from spark_governor.policies.registry import describe

    lines = ["| policy | knob | what it does |", "| --- | --- | --- |"]
    for name, cls in sorted(_policies().items()):
        d = describe(cls)
        # a policy of another installed package has no page here
        link = f"[`{name}`]({name}.md)" if cls.__module__.startswith("spark_governor.") else f"`{name}`"
        lines.append(f"| {link} | {', '.join(f'`{k}`' for k in d['knobs'])} | {_cell(d['description'])} |")
    return "\n".join(lines)


def policy_config(name: str) -> str:
    from spark_governor.policies.registry import describe

    found = _policies()
    if name not in found:
        raise PluginError(f"policy-config: no policy named {name!r}; installed: {sorted(found)}")
    schema = describe(found[name])["config_schema"]
    return ("Generated from the policy's config schema (`GET /api/v1/policies`). The safety fields "
            "(`min_value` … `max_ineffective_scale_ups`) are explained in [Policies](index.md#safety).\n\n"
            + "\n".join(_fields_table(schema)))


def partitioners_table() -> str:
    from spark_governor.policies.partitioning.registry import partitioners

    lines = ["| partitioner | what it does | options (`-o NAME=VALUE`, default) |", "| --- | --- | --- |"]
    for name, cls in partitioners().items():
        opts = []
        for field, info in cls.Options.model_fields.items():
            text = f"`{field}` = `{json.dumps(info.default, ensure_ascii=False)}`"
            if info.description:
                text += f": {info.description}"
            opts.append(text)
        lines.append(f"| `{name}` | {_cell(cls.description)} | {_cell('; '.join(opts)) or '–'} |")
    return "\n".join(lines)


def dashboards_list() -> str:
    from spark_governor.dashboards import load_all

    out = []
    for d in load_all():
        variables = [v.get("name") for v in d.get("templating", {}).get("list", [])]
        notes = [a.get("name") for a in d.get("annotations", {}).get("list", [])
                 if a.get("name") != "Annotations & Alerts"]
        out += [f"### {d['title']}", "",
                f"UID `{d['uid']}`; variables {', '.join(f'`${v}`' for v in variables)}"
                + (f"; annotations: {', '.join(notes)}." if notes else "."), "",
                "| panel | type | PromQL |", "| --- | --- | --- |"]
        for p in d.get("panels", []):
            exprs = "<br>".join(_cell(f"`{t['expr']}`") for t in p.get("targets", []) if t.get("expr"))
            out.append(f"| {_cell(p.get('title', ''))} | {p.get('type', '')} | {exprs} |")
        out.append("")
    return "\n".join(out)


def _render(match: re.Match) -> str:
    kind, arg = match.group(1), match.group(2)
    if kind == "openapi":
        return openapi_table()
    if kind == "policies":
        return policies_table()
    if kind == "policy-config" and arg:
        return policy_config(arg)
    if kind == "partitioners":
        return partitioners_table()
    if kind == "dashboards":
        return dashboards_list()
    raise PluginError(f"unknown generated block: {match.group(0)}")


def on_page_markdown(markdown: str, page, config, files) -> str:
    try:
        return MARKER.sub(_render, markdown)
    except PluginError as exc:
        raise PluginError(f"{page.file.src_path}: {exc}") from None
