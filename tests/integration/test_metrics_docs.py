"""docs/metrics.md lists every metric the control plane exports, with each of its labels.

Two sources of truth, both compared with the page's table:

* statically, every metric constructed in the code (``prometheus_client`` metric classes and
  ``*MetricFamily`` collectors, found with ``ast`` in every package folder), so a metric that only
  appears with rare data is still checked;
* at run time, the ``/metrics`` exposition of a real in-process control plane fed with a report
  (tasks, stages, micro-batches with event-time and paced-source durations, a partition record),
  a latency constraint, a policy, and decisions, directives and knob states written through the
  control plane's own repository and acknowledged by a report, so that every family has samples.

The page must also not list a metric the code does not define, and its table of label values must list
exactly the labels that the metrics carry (``spark_job`` and ``query``, never Prometheus's own ``job``).
"""
from __future__ import annotations

import ast
import re
import shutil
import subprocess
import time
from pathlib import Path

import requests
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import select

from tests.conftest import require

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "metrics.md"
#: folders installed as spark_governor.* (pyproject's package-dir), scanned for metric definitions
PACKAGE_DIRS = ("spark_governor", "api", "aggregators", "collectors", "policies", "dashboards", "migrations", "bench")
TOKEN = "docs-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
JOB = "docs-job"

#: prometheus_client constructors → metric type
CONSTRUCTORS = {
    "Counter": "counter", "Gauge": "gauge", "Histogram": "histogram", "Summary": "summary", "Info": "info",
    "Enum": "stateset", "CounterMetricFamily": "counter", "GaugeMetricFamily": "gauge",
    "HistogramMetricFamily": "histogram", "GaugeHistogramMetricFamily": "gaugehistogram",
    "SummaryMetricFamily": "summary", "InfoMetricFamily": "info", "StateSetMetricFamily": "stateset",
    "UnknownMetricFamily": "unknown",
}
#: labels prometheus_client adds to samples itself (it also adds a ``<name>_created`` gauge to its own
#: counters and histograms, which the page mentions once instead of listing)
SAMPLE_LABELS = {"le", "quantile"}


def exported_name(family: str, kind: str) -> str:
    """The name users query: counters carry ``_total`` (prometheus_client strips and re-adds it)."""
    if kind == "counter":
        return family if family.endswith("_total") else family + "_total"
    return family


# -- the page ----------------------------------------------------------------------------------
def documented() -> dict[str, dict]:
    """``{metric: {"type": ..., "labels": set}}`` from the table rows ``| `metric` | type | labels | unit | meaning |``."""
    rows = {}
    for line in DOC.read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 5 or not re.fullmatch(r"`spark_governor_\w+`", cells[0]):
            continue
        name = cells[0].strip("`")
        assert name not in rows, f"{DOC.name}: {name} is listed twice"
        rows[name] = {"type": cells[1], "labels": set(re.findall(r"`(\w+)`", cells[2])), "unit": cells[3]}
    assert rows, f"no metric table found in {DOC}"
    return rows


def documented_label_values() -> set[str]:
    """The labels of the table ``| label | values |`` under ``## Label values``."""
    text = DOC.read_text(encoding="utf-8")
    section = text.split("## Label values", 1)[1].split("\n## ", 1)[0]
    labels = set()
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 2 and re.fullmatch(r"`\w+`", cells[0]):
            labels.add(cells[0].strip("`"))
    assert labels, f"no label table found in {DOC}"
    return labels


# -- the code ----------------------------------------------------------------------------------
class _Resolver:
    """Evaluates the name and label arguments of metric constructors: string literals, f-strings over
    module constants, local or module-level lists, and the loop variables of the comprehension the
    constructor sits in (``{name: Gauge(f"{PREFIX}_{name}", ...) for name, doc in (("a", "..."), ...)}``)."""

    def __init__(self, tree: ast.Module) -> None:
        self.tree = tree
        self.parents: dict[ast.AST, ast.AST] = {}
        for node in ast.walk(tree):
            for child in ast.iter_child_nodes(node):
                self.parents[child] = node
        self.module_values = {}
        for node in tree.body:
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                self.module_values[node.targets[0].id] = node.value

    def _assigned(self, name: str, at: ast.AST):
        """The expression last assigned to ``name`` in the function around ``at``, else at module level."""
        node = at
        while node in self.parents:
            node = self.parents[node]
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for n in ast.walk(node):
                    if (isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name)
                            and n.targets[0].id == name):
                        return n.value
        return self.module_values.get(name)

    def _loop_values(self, name: str, at: ast.AST):
        node = at
        while node in self.parents:
            node = self.parents[node]
            if isinstance(node, (ast.DictComp, ast.ListComp, ast.SetComp, ast.GeneratorExp)):
                for gen in node.generators:
                    target = gen.target
                    names = [t.id for t in target.elts] if isinstance(target, ast.Tuple) else [getattr(target, "id", None)]
                    if name not in names:
                        continue
                    items = gen.iter
                    if isinstance(items, ast.Name):
                        items = self._assigned(items.id, node)
                    if not isinstance(items, (ast.Tuple, ast.List)):
                        raise ValueError(f"cannot enumerate {ast.unparse(gen.iter)}")
                    index = names.index(name)
                    return [self.strings(e.elts[index] if isinstance(target, ast.Tuple) else e, node)
                            for e in items.elts]
        return None

    def strings(self, expr: ast.AST, at: ast.AST) -> list[str]:
        """Every string ``expr`` can take (a list: loop variables give several)."""
        if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
            return [expr.value]
        if isinstance(expr, ast.JoinedStr):
            out = [""]
            for part in expr.values:
                values = self.strings(part.value, at) if isinstance(part, ast.FormattedValue) else [part.value]
                out = [o + v for o in out for v in values]
            return out
        if isinstance(expr, ast.Name):  # a comprehension's variable first (innermost scope), then an assignment
            groups = self._loop_values(expr.id, at)
            if groups is not None:
                return [v for group in groups for v in group]
            value = self._assigned(expr.id, at)
            if value is None:
                raise ValueError(f"unbound name {expr.id}")
            return self.strings(value, at)
        raise ValueError(f"cannot evaluate {ast.unparse(expr)}")

    def labels(self, expr: ast.AST, at: ast.AST) -> set[str]:
        if isinstance(expr, ast.Name):
            expr = self._assigned(expr.id, at)
        if not isinstance(expr, (ast.List, ast.Tuple)):
            raise ValueError(f"cannot evaluate labels {ast.unparse(expr) if expr else expr}")
        return {s for e in expr.elts for s in self.strings(e, at)}


def defined_in_code() -> dict[str, dict]:
    """``{exported metric: {"type", "labels", "where"}}`` for every metric constructed in the package."""
    found: dict[str, dict] = {}
    problems = []
    for folder in PACKAGE_DIRS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
            imported = {}  # local name → prometheus_client class name
            for node in ast.walk(tree):
                if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("prometheus_client"):
                    for alias in node.names:
                        if alias.name in CONSTRUCTORS:
                            imported[alias.asname or alias.name] = alias.name
            if not imported:
                continue
            resolver = _Resolver(tree)
            for call in ast.walk(tree):
                if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id in imported):
                    continue
                cls = imported[call.func.id]
                where = f"{path.relative_to(ROOT)}:{call.lineno}"
                kw = {k.arg: k.value for k in call.keywords}
                try:
                    names = resolver.strings(call.args[0] if call.args else kw["name"], call)
                    label_expr = kw.get("labels") or kw.get("labelnames")
                    if label_expr is None and len(call.args) >= 3:
                        label_expr = call.args[2]
                    labels = resolver.labels(label_expr, call) if label_expr is not None else set()
                except (ValueError, KeyError) as exc:
                    problems.append(f"{where}: {exc}")
                    continue
                for name in names:
                    found[exported_name(name, CONSTRUCTORS[cls])] = {
                        "type": CONSTRUCTORS[cls], "labels": labels, "where": where}
    assert not problems, "metric definitions this test cannot read (make it read them):\n" + "\n".join(problems)
    return found


# -- a running control plane -------------------------------------------------------------------
def _report(now_ms: int, seq: int, applied=(), with_data=True) -> dict:
    """A report as a reporter sends it: two stage templates (scan, aggregate) run in 6 micro-batches of 4
    tasks each, the batches' progress with the event-time observation and paced-source durations, one
    partition record of a Prompt-planned batch, and the query's current state (a batch in flight)."""
    start = now_ms - 30_000
    templates = [{"key": "t-scan", "name": "MicroBatchScan", "ordinal": 0, "operators": ["MicroBatchScan"],
                  "parents": []},
                 {"key": "t-agg", "name": "StateStoreSave", "ordinal": 1, "operators": ["Exchange", "StateStoreSave"],
                  "parents": ["t-scan"]}]
    tasks, stages, batches = [], [], []
    task_id = 0
    for b in range(6):
        trigger = start + b * 2000
        for ordinal, key in enumerate(("t-scan", "t-agg")):
            stage_id = 2 * b + ordinal
            sub = trigger + 50 + ordinal * 300
            finish = sub
            for p in range(4):
                launch = sub + 3 + 7 * p + (p * p) % 3
                run = 120 + 40 * p + 10 * b
                finish = max(finish, launch + run + 5)
                tasks.append({
                    "template_key": key, "query_id": "q1", "batch_id": b, "stage_id": stage_id, "stage_attempt": 0,
                    "task_id": task_id, "partition": p, "attempt": 0, "executor_id": str(p % 2), "host": "127.0.0.1",
                    "stage_submission_ms": sub, "launch_ms": launch, "finish_ms": launch + run + 5,
                    "run_time_ms": run, "cpu_time_ns": run * 900_000, "gc_time_ms": 1, "deserialize_ms": 1,
                    "result_serialize_ms": 0, "input_records": 500 if key == "t-scan" else 0, "input_bytes": 0,
                    "output_records": 0, "output_bytes": 0, "shuffle_read_records": 0 if key == "t-scan" else 300,
                    "shuffle_read_bytes": 0 if key == "t-scan" else 6000, "shuffle_fetch_wait_ms": 0,
                    "shuffle_write_records": 300 if key == "t-scan" else 0,
                    "shuffle_write_bytes": 6000 if key == "t-scan" else 0, "shuffle_write_time_ns": 1000,
                    "successful": True, "speculative": False, "failure_reason": None})
                task_id += 1
            stages.append({"template_key": key, "query_id": "q1", "batch_id": b, "stage_id": stage_id, "attempt": 0,
                           "num_tasks": 4, "submission_ms": sub, "completion_ms": finish, "slots": 2})
        event_min_us = (trigger - 2000) * 1000
        batches.append({
            "query_id": "q1", "run_id": "r1", "name": None, "batch_id": b, "trigger_ms": trigger,
            "batch_duration_ms": 900, "durations_ms": {"triggerExecution": 900, "batchInterval": 2000,
                                                       "batchQueueing": 40},
            "num_input_rows": 2000, "input_rows_per_second": 1000.0, "processed_rows_per_second": 2200.0,
            "state_operators": [], "event_time": {},
            "observed_metrics": {"spark_governor_event_time": {
                "records": 2000, "min_us": event_min_us, "max_us": event_min_us + 1_999_000, "wait_us_avg": 1_000_000}}})
    partition = {"batch_id": 5, "query_id": "q1", "algorithm": "prompt", "source": "batch", "partitions": 4,
                 "reduce": 4, "tuples": 2000, "keys": 3, "key_counts": [["a", 1200], ["b", 500], ["c", 300]],
                 "block_loads": [500, 500, 500, 500], "bsi": 0.0, "bci": 1.0, "ksr": 1.3, "mpi": 0.4,
                 "max_mean_load": 1.0, "bsi_buckets": 12.0, "split_keys": 1, "stats_ms": 120.0, "planning_ms": 4.5,
                 "processing_ms": 900.0}
    reporter = {"id": "docs-reporter", "seq": seq, "dropped_total": 3, "orphaned_total": 1, "app_id": "app-1",
                "master": "spark://127.0.0.1:7077", "slots": 4, "executors": 2, "applied": list(applied)}
    if not with_data:
        return {"schema_version": 1, "job": JOB, "reporter": reporter}
    report = {"schema_version": 1, "job": JOB, "reporter": reporter, "templates": templates, "stages": stages,
              "tasks": tasks, "batches": batches, "partitions": [partition]}
    from spark_governor.policies.wire import Report

    if "queries" in Report.model_fields:  # the query's state between micro-batches: a batch in flight, a backlog
        report["queries"] = [{
            "query_id": "q1", "run_id": "r1", "observed_ms": now_ms - 500, "status": "running",
            "running_batch_id": 6, "running_batch_start_ms": now_ms - 1500, "last_batch_id": 5,
            "last_batch_end_ms": start + 5 * 2000 + 900, "trigger_interval_ms": 2000, "backlog_rows": 1200,
            "oldest_unprocessed_ms": now_ms - 3000, "arrival_rows_per_second": 1000.0,
            "sources": [{"description": "zipf", "processed_rows": 12_000, "available_rows": 13_200,
                         "backlog_rows": 1200, "oldest_unprocessed_ms": now_ms - 3000,
                         "arrival_rows_per_second": 1000.0}]}]
    return report


def _decide(engine, now_ms: int) -> None:
    """Decisions with predictions and judged outcomes, their directives and a held knob, written through
    the control plane's repository (what the governor does after evaluating a policy)."""
    from spark_governor.aggregators import directives as repo
    from spark_governor.aggregators.models import jobs
    from spark_governor.policies.safety import KnobHistory

    with engine.begin() as conn:
        job_id = conn.execute(select(jobs.c.id).where(jobs.c.name == JOB)).scalar()
        base = dict(job_id=job_id, mode="act", status="issued", directive_version=1, created_ms=now_ms - 20_000,
                    reason="docs")  # each knob's first directive: version 1
        d = repo.record_decision(conn, **base, policy="kingman", knob="executors", old_value=2, new_value=3,
                                 inputs={"plan": {"constraints": {"e2e": {"feasible": True}}}},
                                 prediction={"constraints": {"e2e": 2.5}, "latency_s": 2.5},
                                 outcome={"predicted": {"latency_s": 2.5}, "observed": {"latency_s": 2.8},
                                          "verification": "verified", "evidence": []},
                                 effective=True, outcome_ms=now_ms - 1000)
        repo.issue_directive(conn, job_id, "executors", 3, d, now_ms - 20_000)
        d = repo.record_decision(conn, **base, policy="pid-rate", knob="batch_interval", old_value=None,
                                 new_value={"interval_s": 2.0, "max_rows_per_second": 1500.0}, inputs={}, prediction={})
        repo.issue_directive(conn, job_id, "batch_interval", {"interval_s": 2.0, "max_rows_per_second": 1500.0}, d,
                             now_ms - 20_000)
        d = repo.record_decision(conn, **base, policy="prompt", knob="partition_plan", old_value=None,
                                 new_value={"partitions": 4, "planning_s": 0.004}, inputs={},
                                 prediction={"max_mean_load": 1.01, "mpi": 0.5})
        repo.issue_directive(conn, job_id, "partition_plan", {"partitions": 4, "planning_s": 0.004}, d, now_ms - 20_000)
        repo.save_knob_history(conn, job_id, "executors", KnobHistory(now_ms - 20_000, 1, 1, False))
        # a measured cluster profile (aggregators.cluster_profile), as the governor stores it
        from spark_governor.aggregators.cluster_profile import ClusterProfile
        from spark_governor.aggregators.models import cluster_profiles
        profile = ClusterProfile(
            JOB, None, provisioning={"samples": 2, "register_s": {"median": 9.0, "p90": 12.0},
                                     "first_task_s": {"median": 2.0, "p90": 3.0}},
            warmup={"samples": 2, "factor": 2.5, "tasks": 10, "duration_s": 8.0, "work_factor": 3.1,
                    "startup_s": 9.0, "contention_factor": 1.4},
            driver_overhead={"samples": 5, "mean_s": 0.4, "median_s": 0.3, "p90_s": 0.8},
            prediction_error={"samples": 1, "mean_abs_rel": 0.12, "last": None})
        conn.execute(cluster_profiles.insert().values(job_id=job_id, run_id=None, updated_ms=now_ms,
                                                      profile=profile.to_json()))


def populated_metrics(start_plane) -> str:
    """``GET /metrics`` of a real in-process control plane with data for every metric family (see the module
    docstring)."""
    plane = start_plane(TOKEN)
    now_ms = int(time.time() * 1000)
    r = requests.post(f"{plane.url}/api/v1/reports", json=_report(now_ms, 1), timeout=10)
    assert r.status_code == 200, r.text
    r = requests.put(f"{plane.url}/api/v1/jobs/{JOB}/constraints/e2e?register=true", headers=AUTH, timeout=10,
                     json={"bound_ms": 6000, "span_s": 5})
    assert r.status_code == 200, r.text
    r = requests.put(f"{plane.url}/api/v1/jobs/{JOB}/policies/threshold?register=true", headers=AUTH, timeout=10,
                     json={"mode": "dry-run", "config": {"trigger_interval_s": 2}})
    assert r.status_code == 200, r.text
    _decide(plane.engine, now_ms)
    acks = [{"knob": k, "version": 1, "status": "applied"} for k in ("executors", "batch_interval", "partition_plan")]
    r = requests.post(f"{plane.url}/api/v1/reports", json=_report(now_ms, 2, acks, with_data=False), timeout=10)
    assert r.status_code == 200, r.text
    r = requests.get(f"{plane.url}/metrics", timeout=10)
    assert r.status_code == 200, r.text
    return r.text


def test_every_exported_metric_and_label_is_documented(start_plane):
    docs = documented()
    code = defined_in_code()
    text = populated_metrics(start_plane)  # live exposition of a control plane with data for every family

    live: dict[str, dict] = {}
    for fam in text_string_to_metric_families(text):
        base = fam.name[:-len("_created")]
        if fam.name.endswith("_created") and code.get(exported_name(base, "counter"), code.get(base)):
            continue  # prometheus_client's creation timestamp of an in-process counter or histogram
        labels = set().union(*(set(s.labels) for s in fam.samples)) - SAMPLE_LABELS if fam.samples else set()
        live[exported_name(fam.name, fam.type)] = {"type": fam.type, "labels": labels, "samples": len(fam.samples)}

    missing, wrong_labels, wrong_type = [], [], []
    for source, metrics in (("/metrics", live), ("code", code)):
        for name, m in sorted(metrics.items()):
            if name not in docs:
                missing.append(f"{name} ({source}{', ' + m['where'] if 'where' in m else ''})")
                continue
            if not m["labels"] <= docs[name]["labels"]:
                wrong_labels.append(f"{name}: {source} has labels {sorted(m['labels'])}, "
                                    f"the page lists {sorted(docs[name]['labels'])}")
            if m["type"] != docs[name]["type"]:
                wrong_type.append(f"{name}: {source} says {m['type']}, the page says {docs[name]['type']}")
    assert not missing, f"metrics missing from {DOC.relative_to(ROOT)}: {sorted(set(missing))}"
    assert not wrong_labels, "\n".join(sorted(set(wrong_labels)))
    assert not wrong_type, "\n".join(sorted(set(wrong_type)))

    # nothing listed that the code does not define, and no label the code does not set
    stale = sorted(set(docs) - set(code))
    assert not stale, f"{DOC.relative_to(ROOT)} lists metrics the code does not define: {stale}"
    extra = sorted(f"{n}: {sorted(docs[n]['labels'] - code[n]['labels'])}" for n in docs
                   if docs[n]["labels"] - code[n]["labels"])
    assert not extra, f"{DOC.relative_to(ROOT)} lists labels the code does not set: {extra}"
    assert all(docs[n]["unit"] for n in docs), "every metric needs a unit (– for none)"

    # every label that appears (in the code, on /metrics, in the tables) has its row of values, and no other
    used = set().union(*(m["labels"] for m in (*code.values(), *live.values(), *docs.values())))
    values = documented_label_values()
    assert used == values, (f"labels without a row in the label values table: {sorted(used - values)}; "
                            f"rows for labels no metric has: {sorted(values - used)}")
    # Prometheus's target labels are never exported (a scrape without honor_labels would rename them)
    assert not used & {"job", "instance"}, sorted(used & {"job", "instance"})
    assert "spark_job" in live[exported_name("spark_governor_tasks_ingested", "counter")]["labels"]

    # the data above reaches every family the code defines, so the live labels were checked for all of them
    silent = sorted(n for n in code if n not in live or not live[n]["samples"])
    assert not silent, f"families without samples on the test's control plane (give the test data for them): {silent}"


def test_promtool_finds_no_problem_in_the_exposition(start_plane):
    """``promtool check metrics`` (Prometheus's own linter) over the populated ``/metrics``: it exits non-zero on
    an exposition it cannot parse and prints one line per lint problem (naming, units, counters without
    ``_total``, ...); either fails the test."""
    promtool = shutil.which("promtool")
    require(promtool is not None, "promtool (Debian package prometheus)")
    text = populated_metrics(start_plane)
    assert "spark_job=" in text and 'query="q1"' in text  # the test covers the identity labels
    r = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
    complaints = (r.stdout + r.stderr).strip()
    assert r.returncode == 0 and not complaints, f"promtool check metrics (exit {r.returncode}):\n{complaints}"
