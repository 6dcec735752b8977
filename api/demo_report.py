"""What the demo prints about a policy's decisions: plain text from the control plane's API answers.

Pure functions over the JSON of ``GET /api/v1/jobs/<job>/decisions``, ``…/constraints`` and
``…/stages`` (no HTTP, no click), so the wording is unit-testable. Latencies in the API's
decisions are seconds (``inputs.latency_s``, ``prediction.constraints``), in its constraints
milliseconds (``bound_ms``, ``latency_ms``); the text shows milliseconds.
"""
from __future__ import annotations

from typing import Optional


def ms(seconds: Optional[float]) -> str:
    return "-" if seconds is None else f"{seconds * 1000:,.0f} ms"


def _unit(decision: dict) -> str:
    return (decision.get("inputs") or {}).get("unit") or decision.get("knob", "")


def _mode(decision: dict) -> str:
    return "dry run" if decision.get("mode") == "dry-run" else decision.get("mode", "")


def _constraint_plan(decision: dict, name: Optional[str] = None) -> tuple[Optional[str], dict]:
    """(constraint name, its plan) from a Kingman decision's inputs (the first constraint by name)."""
    plans = (((decision.get("inputs") or {}).get("plan") or {}).get("constraints") or {})
    if not plans:
        return None, {}
    name = name if name in plans else min(plans)
    return name, plans[name]


def predicted_latency_s(decision: dict, name: Optional[str] = None) -> Optional[float]:
    """The latency the decision predicts for constraint ``name`` (default: its first), seconds."""
    prediction = decision.get("prediction") or {}
    per = prediction.get("constraints") or {}
    if name is None and per:
        name = min(per)
    value = per.get(name) if name is not None else None
    return value if isinstance(value, (int, float)) else prediction.get("latency_s")


def decision_line(decision: dict) -> str:
    """One line per decision, e.g. "kingman (dry run): 2 → 4 task slots — predicted 1,320 ms vs bound 1,500 ms"."""
    line = (f"{decision['policy']} ({_mode(decision)}): {decision['old_value']} → {decision['new_value']} "
            f"{_unit(decision)}")
    name, plan = _constraint_plan(decision)
    predicted = predicted_latency_s(decision, name)
    if plan.get("bound_s") is not None:
        line += (f" — predicted {ms(predicted)} vs bound {ms(plan['bound_s'])}" if predicted is not None
                 else f" — bound {ms(plan['bound_s'])}")
        if plan.get("measured_latency_s") is not None:
            line += f" (measured {ms(plan['measured_latency_s'])})"
    elif predicted is not None:
        line += f" — predicted {ms(predicted)}"
    return line


def _stage_rows(plan: dict, names: dict[str, str]) -> list[str]:
    stages = plan.get("stages") or {}
    if not stages:
        return []
    label = {key: (names.get(key) or key)[:40] for key in stages}
    width = max(5, *(len(v) for v in label.values()))
    head = f"{'stage':<{width}}  {'p':>3}  {'p_max':>5}  {'S ms':>7}  {'ρ':>5}  {'c_A':>5}  {'c_S':>5}  {'w ms':>7}  {'e':>5}"
    rows = [head]

    def num(x, fmt):
        return "-" if x is None else format(x, fmt)

    for key, s in sorted(stages.items(), key=lambda kv: label[kv[0]]):
        rows.append(f"{label[key]:<{width}}  {num(s.get('p'), 'd'):>3}  {num(s.get('p_max'), 'd'):>5}  "
                    f"{num(None if s.get('S') is None else s['S'] * 1000, ',.0f'):>7}  {num(s.get('rho'), '.2f'):>5}  "
                    f"{num(s.get('cA'), '.2f'):>5}  {num(s.get('cS'), '.2f'):>5}  "
                    f"{num(None if s.get('w') is None else s['w'] * 1000, ',.0f'):>7}  {num(s.get('e'), '.2f'):>5}")
    return rows


def recommendation_report(decisions: list[dict], constraint: Optional[dict], job: dict,
                          stage_names: Optional[dict[str, str]] = None, policy: str = "kingman",
                          errors: tuple[str, ...] = ()) -> str:
    """The policy's verdict on the run: its latest decision with the prediction and the model inputs
    behind it, or why it made none. ``decisions`` newest first (as the API lists them);
    ``constraint`` one entry of ``GET …/constraints``; ``job`` the ``GET /api/v1/jobs/<job>`` body."""
    names = stage_names or {}
    mine = [d for d in decisions if d.get("policy") == policy]
    local = (job.get("not_actuatable") or {}).get("executors")
    slots = job.get("slots")
    lines = []
    if constraint is not None:
        lines.append(f"{policy} policy on job {job.get('name')}: constraint {constraint['name']!r}, mean record "
                     f"latency ≤ {constraint['bound_ms']:,.0f} ms over {constraint['span_s']:g} s spans")
    else:
        lines.append(f"{policy} policy on job {job.get('name')}")
    if local:
        lines.append(f"  the job runs in {local} ({slots} task slots, no executors): the policy sizes it in task "
                     "slots; its decisions are recommendations (not actuatable)")
    if not mine:
        lines.append(f"  no recommendation recorded: {_why_none(constraint)}")
    else:
        latest = mine[0]
        name, plan = _constraint_plan(latest, constraint["name"] if constraint else None)
        predicted = predicted_latency_s(latest, name)
        unit = _unit(latest)
        status = latest.get("status")
        note = " (dry run: recorded, no directive)" if status == "recorded" else f" ({status})"
        lines.append(f"  {len(mine)} recommendation(s) recorded{note}; the latest:")
        lines.append(f"  RECOMMENDATION: {latest['old_value']} → {latest['new_value']} {unit}")
        if plan:
            measured = plan.get("measured_latency_s")
            bound = plan.get("bound_s")
            if measured is not None and bound is not None:
                verdict = "bound missed" if measured > bound else "bound met"
                lines.append(f"    measured latency   {ms(measured)} at {latest['old_value']} {unit} ({verdict})")
            if predicted is not None and bound is not None:
                verdict = "meets the bound" if predicted <= bound else "still above the bound"
                lines.append(f"    predicted latency  {ms(predicted)} at {latest['new_value']} {unit} "
                             f"vs bound {ms(bound)} ({verdict})")
            elif plan.get("bottleneck"):
                lines.append("    predicted latency  - (a bottleneck: the model's wait at the current size is "
                             "unbounded, so it doubles the slots (Eq. 4.12) without predicting a latency)")
            if plan.get("feasible") is False:
                lines.append("    infeasible: even at the most slots the stages can use the bound is not met")
        utilization = (latest.get("prediction") or {}).get("utilization")
        if utilization is not None:
            lines.append(f"    predicted utilization of the busiest stage {utilization:.2f} "
                         f"(now {(latest.get('inputs') or {}).get('utilization', 0):.2f})")
        rows = _stage_rows(plan, names)
        if rows:
            lines.append("    model inputs per stage (G/G/1 queue per stage, Kingman's formula fitted by e):")
            lines += ["      " + r for r in rows]
        lines.append(f"    reason: {latest['reason']}")
        if latest.get("status_message"):
            lines.append(f"    status: {status} — {latest['status_message']}")
    if constraint is not None and constraint.get("attainment") is not None:
        spans = constraint.get("spans") or []
        lines.append(f"  constraint attained in {constraint['attainment']:.0%} of the last {len(spans)} spans"
                     + (f" (source: {constraint['source']})" if constraint.get("source") else ""))
    for e in errors:
        lines.append(f"  policy error: {e}")
    return "\n".join(lines)


def _why_none(constraint: Optional[dict]) -> str:
    if constraint is None:
        return "no latency constraint declared"
    latest = constraint.get("latest")
    if latest is None:
        return "no latency measured yet (the run was too short for the policy's warm-up)"
    verdict = "within" if latest["attained"] else "above"
    return (f"the latest measured latency {latest['latency_ms']:,.0f} ms is {verdict} the bound "
            f"{constraint['bound_ms']:,.0f} ms and the model saw no better size")
