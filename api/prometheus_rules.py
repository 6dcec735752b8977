"""The Prometheus recording and alerting rules that ship with the product (issue #45), generated here.

``python -m spark_governor.api.prometheus_rules`` writes ``deploy/prometheus/spark-governor.rules.yml`` (loaded by
the compose Prometheus and by the tests' Prometheus) and ``deploy/kubernetes/prometheusrule.yaml`` (the same
groups as a Prometheus Operator ``PrometheusRule``); a test checks both equal :func:`render`'s output, so they never
drift apart. The runbook for every alert is ``docs/alerts.md``.

**The latency SLO** follows the SRE workbook's multi-window, multi-burn-rate alerts (chapter 5, "Alerting on
SLOs"), the scheme Sloth and Pyrra generate. The SLI is the share of a constraint's averaging spans judged bad,
from the counters ``spark_governor_constraint_spans_total{result="good"|"bad"}`` (``aggregators.slo_spans``);
the objective is the gauge ``spark_governor_constraint_objective_ratio``, so no rule names a job. Recorded per
``spark_job`` and ``constraint`` over 5m, 30m, 1h, 6h, 1d, 3d and 30d: the error ratio
(``spark_governor:constraint_error_ratio:rate<w>``), the burn rate (error ratio / (1 − objective),
``spark_governor:constraint_burn_rate:rate<w>``) and the error budget left over 30 days
(``spark_governor:constraint_error_budget_remaining:ratio30d``, 1 = untouched, ≤ 0 = spent). The windows of a day
and more are evaluated once a minute (their group's ``interval``): a rate over 30 days is costly and moves
slowly. The burn-rate alerts sit in the group of the rates they read (rules of one group run in order, groups
concurrently), so they never read a rate one evaluation old. Alerts: page when the budget burns 14.4× too fast over 1 h and over 5 min (2 % of a 30-day budget in an
hour), ticket at 6× over 6 h and 30 min (5 % in six hours) — the workbook's values.

**Replicas.** The jobs' series come from the leading replica only (``api.replica_metrics``) but carry its
``instance`` (and on Kubernetes ``pod``), which changes with the leader: gauges are read through
``max without (instance, pod)``, counters' rates summed ``without (instance, pod)`` (a ratio of two such sums is
right also while two replicas briefly export the same counters), so a takeover neither splits a series nor
resets an alert's ``for``.

:func:`render` takes the windows and ``for`` durations as parameters: the tests load the same rules with windows
of seconds (``windows={"1h": "30s", ...}``) — the recording rules keep their names, so dashboards read them the
same way.
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

#: the SLI's windows (recording rules), shortest first; the ones of a day and more go in the slow group
SLI_WINDOWS = ("5m", "30m", "1h", "6h", "1d", "3d", "30d")
SLOW_WINDOWS = ("1d", "3d", "30d")
#: the error budget's window
BUDGET_WINDOW = "30d"
#: (alert, long window, short window, burn-rate factor, severity): SRE workbook table 5-8, first two rows
BURN_ALERTS = (("SparkGovernorLatencySLOFastBurn", "1h", "5m", 14.4, "page"),
               ("SparkGovernorLatencySLOSlowBurn", "6h", "30m", 6.0, "ticket"))
#: default ``for`` of each alert
FOR = {"SparkGovernorLatencySLOFastBurn": "2m", "SparkGovernorLatencySLOSlowBurn": "15m",
       "SparkGovernorJobStoppedReporting": "0s", "SparkGovernorReporterDropping": "0s",
       "SparkGovernorDirectiveNotApplied": "1m", "SparkGovernorPolicyFailing": "0s",
       "SparkGovernorEvaluationsSkipped": "0s", "SparkGovernorActionRolledBack": "0s",
       "SparkGovernorJobUnattended": "5m"}
#: seconds without a report before a job whose queries did not terminate counts as silent (the job is "stopped"
#: after 30 s: aggregators.job_state; four times that rides out a driver's long GC pause or a network blip)
SILENT_S = 120
RUNBOOK = "docs/alerts.md"

REPO = Path(__file__).resolve().parents[1]
RULES_FILE = REPO / "deploy" / "prometheus" / "spark-governor.rules.yml"
OPERATOR_FILE = REPO / "deploy" / "kubernetes" / "prometheusrule.yaml"


def _g(expr: str) -> str:
    """A gauge of the jobs' series, whichever replica exports it."""
    return f"max without (instance, pod) ({expr})"


def _rate(selector: str, window: str) -> str:
    """A counter's rate over the replicas that exported it in ``window``."""
    return f"sum without (instance, pod, result) (rate({selector}[{window}]))"


def _alert(name: str, expr: str, severity: str, summary: str, section: str, for_: dict,
           description: Optional[str] = None) -> dict:
    rule = {"alert": name, "expr": expr}
    if for_[name] not in ("0s", "0m"):
        rule["for"] = for_[name]
    rule["labels"] = {"severity": severity}
    rule["annotations"] = {"summary": summary, "runbook": f"{RUNBOOK}#{section}"}
    if description:
        rule["annotations"]["description"] = description
    return rule


def render(windows: Optional[dict[str, str]] = None, for_: Optional[dict[str, str]] = None,
           slow_interval: Optional[str] = "1m") -> dict:
    """The rule groups (a Prometheus rule file's content). ``windows`` maps a window's name (``"1h"``) to the range
    the rules use for it (default: itself); ``for_`` overrides alerts' ``for``; ``slow_interval`` is the evaluation
    interval of the day-and-longer windows (None: the global one)."""
    w = {name: (windows or {}).get(name, name) for name in SLI_WINDOWS}
    for_ = {**FOR, **(for_ or {})}
    spans = "spark_governor_constraint_spans_total"
    bad = spans + '{result="bad"}'
    objective = "spark_governor:constraint_objective:ratio"

    def sli(name: str) -> list[dict]:
        ratio = f"spark_governor:constraint_error_ratio:rate{name}"
        return [{"record": ratio,
                 "expr": f"{_rate(bad, w[name])}\n/\n{_rate(spans, w[name])}"},
                {"record": f"spark_governor:constraint_burn_rate:rate{name}",
                 "expr": f"{ratio} / (1 - {objective})"}]

    fast = [{"record": objective, "expr": _g("spark_governor_constraint_objective_ratio")}]
    for name in SLI_WINDOWS:
        if name not in SLOW_WINDOWS:
            fast += sli(name)
    slow = [r for name in SLOW_WINDOWS for r in sli(name)]
    slow.append({"record": f"spark_governor:constraint_error_budget_remaining:ratio{BUDGET_WINDOW}",
                 "expr": f"1 - spark_governor:constraint_error_ratio:rate{BUDGET_WINDOW} / (1 - {objective})"})
    slow_group = {"name": "spark-governor-slo-long", **({"interval": slow_interval} if slow_interval else {}),
                  "rules": slow}

    burn = []  # in the group of the rates they read: evaluated after them, at the same instant
    for name, long, short, factor, severity in BURN_ALERTS:
        burn.append(_alert(
            name, f"spark_governor:constraint_burn_rate:rate{long} > {factor:g}\n"
                  f"and\nspark_governor:constraint_burn_rate:rate{short} > {factor:g}", severity,
            f"Spark job {{{{ $labels.spark_job }}}}: latency SLO {{{{ $labels.constraint }}}} burns its error budget "
            f"{{{{ $value | humanize }}}}x too fast ({factor:g}x over {long} and {short})",
            "latency-slo-burn", for_,
            f"At this rate the 30-day error budget lasts {30 / factor:.1f} days. Spans over the bound: "
            f"GET /api/v1/jobs/{{{{ $labels.spark_job }}}}/constraints/{{{{ $labels.constraint }}}}"))
    alerts = [_alert(
        "SparkGovernorJobStoppedReporting",
        f"{_g('spark_governor_job_last_report_age_seconds')} > {SILENT_S}\n"
        f"and\n{_g('spark_governor_job_unfinished_queries')} > 0", "page",
        "Spark job {{ $labels.spark_job }} stopped reporting {{ $value | humanizeDuration }} ago while its "
        "streaming queries had not terminated", "job-stopped-reporting", for_)]
    alerts.append(_alert(
        "SparkGovernorReporterDropping",
        f"sum without (instance, pod) (increase(spark_governor_reporter_dropped_total[10m])) > 0", "ticket",
        "The reporter of Spark job {{ $labels.spark_job }} dropped {{ $value | humanize }} records or events in "
        "10 minutes", "reporter-dropping", for_))
    version, applied = _g("spark_governor_directive_version"), _g("spark_governor_directive_applied_version")
    alerts.append(_alert(
        "SparkGovernorDirectiveNotApplied",
        f"(\n  {version} > {applied}\n  or\n  {version} unless {applied}\n)\n"
        f"and on (spark_job) {_g('spark_governor_job_up')} == 1", "ticket",
        "Spark job {{ $labels.spark_job }} has not applied directive {{ $value }} of knob {{ $labels.knob }}",
        "directive-not-applied", for_))
    alerts.append(_alert(
        "SparkGovernorPolicyFailing",
        "sum without (instance, pod) (increase(spark_governor_policy_errors_total[10m])) >= 3", "ticket",
        "Policies of Spark job {{ $labels.spark_job }} failed {{ $value | humanize }} times in 10 minutes",
        "policy-failing", for_))
    alerts.append(_alert(
        "SparkGovernorEvaluationsSkipped",
        "sum without (instance, pod, reason) (increase(spark_governor_evaluations_skipped_total"
        "{reason=~\"database_unavailable|database_error\"}[5m])) >= 3", "page",
        "The control plane skipped {{ $value | humanize }} policy evaluations in 5 minutes: its database fails",
        "evaluations-skipped", for_))
    rolled = 'spark_governor_decision_verifications{verification="rolled-back"}'
    alerts.append(_alert(
        "SparkGovernorActionRolledBack",
        f"{_g(rolled)} - {_g(rolled + ' offset 30m')} > 0\nor\n{_g(rolled)} unless {_g(rolled + ' offset 30m')}",
        "ticket", "A decision of policy {{ $labels.policy }} on Spark job {{ $labels.spark_job }} was rolled back "
                  "in the last 30 minutes", "action-rolled-back", for_))
    unhealthy = _g('spark_governor_health{state=~"underprovisioned|no-progress"}')
    alerts.append(_alert(
        "SparkGovernorJobUnattended",
        f"{unhealthy} == 1\n"
        "unless on (spark_job)\n"
        "sum by (spark_job) (increase(spark_governor_decisions_made_total{mode=\"act\"}[10m])) > 0", "ticket",
        "Spark job {{ $labels.spark_job }} is {{ $labels.state }} and no policy in act mode decided anything "
        "for 10 minutes", "job-unattended", for_))
    return {"groups": [{"name": "spark-governor-slo", "rules": fast + burn}, slow_group,
                       {"name": "spark-governor-alerts", "rules": alerts}]}


def dump(rules: dict) -> str:
    """A rule file's YAML (block strings for multi-line expressions)."""
    import yaml

    class _Dumper(yaml.SafeDumper):
        pass

    def _str(dumper, value: str):
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|" if "\n" in value else None)

    _Dumper.add_representer(str, _str)
    return yaml.dump(rules, Dumper=_Dumper, sort_keys=False, width=10_000, allow_unicode=True)


HEADER = ("# Generated by `python -m spark_governor.api.prometheus_rules` (api/prometheus_rules.py): edit that module, "
          "not this file.\n# The latency SLO's recording rules and burn-rate alerts, and the control plane's alerts; "
          "runbook: docs/alerts.md\n")


def rule_file() -> str:
    """``deploy/prometheus/spark-governor.rules.yml``'s text."""
    return HEADER + dump(render())


def operator_file() -> str:
    """``deploy/kubernetes/prometheusrule.yaml``'s text: the same groups as a ``PrometheusRule``."""
    resource = {"apiVersion": "monitoring.coreos.com/v1", "kind": "PrometheusRule",
                "metadata": {"name": "spark-governor", "labels": {"app.kubernetes.io/name": "spark-governor"}},
                "spec": render()}
    return HEADER + dump(resource)


def main() -> None:
    RULES_FILE.parent.mkdir(parents=True, exist_ok=True)
    RULES_FILE.write_text(rule_file())
    OPERATOR_FILE.write_text(operator_file())
    print(f"wrote {RULES_FILE} and {OPERATOR_FILE}")


if __name__ == "__main__":
    main()
