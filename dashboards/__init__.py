"""Grafana dashboards (JSON files beside this module) and helpers to read their queries."""
from __future__ import annotations

import json
from pathlib import Path

DASHBOARD_DIR = Path(__file__).resolve().parent


def load_all() -> list[dict]:
    """Every dashboard JSON shipped in this folder."""
    return [json.loads(p.read_text()) for p in sorted(DASHBOARD_DIR.glob("*.json"))]


def panel_queries(dashboard: dict) -> list[tuple[str, str]]:
    """``(panel title, PromQL expression)`` for every target of every panel."""
    return [(p["title"], t["expr"]) for p in dashboard.get("panels", []) for t in p.get("targets", []) if t.get("expr")]


def render_expr(expr: str, variables: dict[str, str]) -> str:
    """Substitute Grafana template variables (``$name`` and ``${name}``) and built-in intervals."""
    values = {"__rate_interval": "1m", "__interval": "15s", **variables}
    for name in sorted(values, key=len, reverse=True):
        expr = expr.replace("${" + name + "}", values[name]).replace("$" + name, values[name])
    return expr
