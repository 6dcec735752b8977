"""Grafana dashboards (JSON files beside this module) and helpers to read their queries."""
from __future__ import annotations

import json
from pathlib import Path

DASHBOARD_DIR = Path(__file__).resolve().parent
#: the main dashboard comes first (``dashboards list``, ``dashboards push``); the others by file name
FIRST = "job_overview.json"


def load_all() -> list[dict]:
    """Every dashboard JSON shipped in this folder, the job overview first."""
    paths = sorted(DASHBOARD_DIR.glob("*.json"), key=lambda p: (p.name != FIRST, p.name))
    return [json.loads(p.read_text()) for p in paths]


def panel_queries(dashboard: dict) -> list[tuple[str, str]]:
    """``(panel title, PromQL expression)`` for every target of every panel."""
    return [(p["title"], t["expr"]) for p in dashboard.get("panels", []) for t in p.get("targets", []) if t.get("expr")]


def annotation_queries(dashboard: dict) -> list[tuple[str, str]]:
    """``(annotation name, PromQL expression)`` for every Prometheus-driven annotation."""
    return [(a["name"], a["expr"]) for a in dashboard.get("annotations", {}).get("list", []) if a.get("expr")]


def render_expr(expr: str, variables: dict[str, str]) -> str:
    """Substitute Grafana template variables (``$name`` and ``${name}``) and built-in intervals."""
    values = {"__rate_interval": "1m", "__interval": "15s", **variables}
    for name in sorted(values, key=len, reverse=True):
        expr = expr.replace("${" + name + "}", values[name]).replace("$" + name, values[name])
    return expr
