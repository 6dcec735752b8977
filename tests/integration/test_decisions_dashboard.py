"""The "spark-governor / decisions" dashboard: its shape, and every panel and annotation query
evaluated by a real Prometheus scraping a real control plane in which real decisions exist.

No Spark: a feeder posts synthetic reports (micro-batches overrunning their trigger interval, so
the threshold policy scales executors up in ``act`` mode) and acknowledges each directive the way
the driver does. The scale-ups do not lower the ratio, so they are judged ineffective and the knob
is held; a third-party policy that always fails on the same job produces policy errors.
"""
import gzip
import json
import threading
import time

import pytest
import requests

from spark_governor.dashboards import (
    DASHBOARD_DIR,
    annotation_queries,
    load_all,
    panel_queries,
    render_expr,
)
from spark_governor.api.processes import wait_for
from tests.conftest import PromQL
from tests.integration.test_policy_api import (
    AUTH,
    TOKEN,
    plugin_installed,  # noqa: F401  (a fixture: pip-installs tests/plugin_policy)
    report,
)

UID = "spark-governor-decisions"
JOB = "decisions-test"
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
#: metrics the dashboard must show
METRICS = ("decisions_total", "decisions_made_total", "directive_version", "directive_applied_version",
           "directive_value", "executors", "knob_held", "knob_ineffective_scale_ups", "policy_errors_total",
           "decision_verifications")


@pytest.fixture(scope="module")
def dashboard():
    (d,) = [d for d in load_all() if d["uid"] == UID]
    return d


# -- shape ------------------------------------------------------------------------------------
def test_decisions_dashboard_is_a_valid_dashboard(dashboard):
    assert json.loads((DASHBOARD_DIR / "decisions.json").read_text()) == dashboard
    assert dashboard["title"] == "spark-governor / decisions"
    assert "spark-governor" in dashboard["tags"] and isinstance(dashboard["schemaVersion"], int)
    overview = next(d for d in load_all() if d["uid"] == "spark-governor-job-overview")
    assert dashboard["templating"] == overview["templating"]  # same datasource and job variables
    assert [v["name"] for v in dashboard["templating"]["list"]] == ["datasource", "job"]

    panels = dashboard["panels"]
    ids = [p["id"] for p in panels]
    assert len(panels) >= 8 and len(set(ids)) == len(ids) and all(isinstance(i, int) for i in ids)
    cells = set()
    for p in panels:
        assert p["title"] and p["type"] in {"timeseries", "table", "stat", "state-timeline"}, p["title"]
        g = p["gridPos"]
        assert all(isinstance(g[k], int) for k in "xywh") and g["w"] > 0 and g["h"] > 0 and g["x"] + g["w"] <= 24
        mine = {(x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])}
        assert not cells & mine, f"{p['title']} overlaps another panel"
        cells |= mine
        assert p["datasource"] == DATASOURCE, p["title"]
        refs = [t["refId"] for t in p["targets"]]
        assert refs and len(set(refs)) == len(refs), p["title"]
        for t in p["targets"]:
            assert t["datasource"] == DATASOURCE and 'spark_job="$job"' in t["expr"], (p["title"], t)
            assert "{job=" not in t["expr"] and " job=" not in t["expr"], (p["title"], t)
    tables = [p for p in panels if p["type"] == "table"]
    assert len(tables) == 2 and all(t["instant"] is True and t["format"] == "table"
                                    for p in tables for t in p["targets"])
    assert "by (policy, knob, status)" in tables[0]["targets"][0]["expr"]
    assert "by (policy, verification)" in tables[1]["targets"][0]["expr"]

    exprs = " ".join(e for _t, e in panel_queries(dashboard))
    for metric in METRICS:
        assert f"spark_governor_{metric}" in exprs, metric
    assert "$__rate_interval" in exprs

    annotations = dashboard["annotations"]["list"]
    assert annotations[0]["builtIn"] == 1
    queried = [a for a in annotations if a.get("expr")]
    assert len(queried) >= 3 and len({a["name"] for a in queried}) == len(queried)
    for a in queried:
        assert a["datasource"] == DATASOURCE and a["enable"] is True and 'spark_job="$job"' in a["expr"], a["name"]
        assert "{job=" not in a["expr"], a["name"]
        assert a["iconColor"] and a["titleFormat"], a["name"]
    assert any("changes(spark_governor_directive_version" in a["expr"] for a in queried)
    assert any("spark_governor_knob_held" in a["expr"] for a in queried)


# -- against a real Prometheus ------------------------------------------------------------------
class Feeder(threading.Thread):
    """Posts a report every ``period_s``, like a driver whose batches overrun the trigger interval,
    and acknowledges every directive it receives as applied in its next report."""

    def __init__(self, url: str, period_s: float = 0.3) -> None:
        super().__init__(daemon=True)
        self.url, self.period_s = url, period_s
        self.stopped = threading.Event()
        self.executors, self.seq, self.acked, self.acks, self.error = 2, 1, set(), [], None
        self.ratio = 0.5  # inside the dead band: no decision until the policies are configured

    def post(self) -> None:
        rep = report(job=JOB, seq=self.seq, ratio=self.ratio, executors=self.executors, applied=self.acks)
        r = requests.post(self.url + "/api/v1/reports", data=gzip.compress(json.dumps(rep).encode()),
                          headers={"Content-Encoding": "gzip", "Content-Type": "application/json"}, timeout=10)
        r.raise_for_status()
        self.seq += 1
        self.acks = []
        for d in r.json()["directives"]:
            if (d["knob"], d["version"]) not in self.acked:
                self.acked.add((d["knob"], d["version"]))
                self.executors = d["value"]
                self.acks.append({"knob": d["knob"], "version": d["version"], "status": "applied",
                                   "message": f"requested {d['value']} executors"})

    def run(self) -> None:
        try:
            while not self.stopped.is_set():
                self.post()
                self.stopped.wait(self.period_s)
        except (requests.RequestException, ValueError, KeyError) as exc:  # surfaced by the test
            self.error = exc


@pytest.fixture
def plane(start_plane):
    return start_plane(TOKEN, window_ms=1000, evaluation_interval_s=1.0)


@pytest.mark.usefixtures("plugin_installed")  # its always-fails policy produces policy errors
def test_prometheus_evaluates_every_decisions_panel_and_annotation(dashboard, plane, prometheus_factory):
    feeder = Feeder(plane.url)
    feeder.post()  # the job exists, with 2 executors and no decision yet
    prom = prometheus_factory([f"127.0.0.1:{plane.port}"])
    started = time.time()

    query, samples = PromQL(prom).query, PromQL(prom).samples

    # Prometheus sees the job before any decision, so it sees directives and holds change
    wait_for(lambda: samples(f'spark_governor_executors{{spark_job="{JOB}"}}') >= 2, 60, what="scrapes before decisions")
    # decisions at least 2 s apart: two 1 s scrapes see each directive version (the annotation fires on a
    # version change or on a series' first appearance at version 1; a CI run once saw the series appear at 2)
    cfg = {"trigger_interval_s": 2.0, "scaling_interval_s": 2.0, "effectiveness_intervals": 1,
           "max_ineffective_scale_ups": 2, "max_value": 50}
    r = requests.put(f"{plane.url}/api/v1/jobs/{JOB}/policies/threshold?register=true", headers=AUTH, timeout=10,
                     json={"mode": "act", "config": cfg})
    assert r.status_code == 200, r.text
    r = requests.put(f"{plane.url}/api/v1/jobs/{JOB}/policies/always-fails?register=true", headers=AUTH, timeout=10,
                     json={"mode": "act", "config": {}})
    assert r.status_code == 200, r.text
    feeder.ratio = 1.0  # processing time = trigger interval from now on
    feeder.start()
    try:
        def held():
            assert feeder.error is None, feeder.error
            knobs = requests.get(f"{plane.url}/api/v1/jobs/{JOB}/holds", timeout=5).json()["knobs"]
            return [k for k in knobs if k["held"]]

        wait_for(held, 60, what="executors held after ineffective scale-ups")
        # enough scrapes after the hold for rate() and the annotations' change detection
        held_scrapes = f'sum_over_time(spark_governor_knob_held{{spark_job="{JOB}"}}[1m])'  # the gauge is 0 or 1
        wait_for(lambda: any(float(r["value"][1]) >= 3 for r in query(held_scrapes)), 60, what="three scrapes held")
    finally:
        feeder.stopped.set()
        feeder.join(10)
    assert feeder.error is None, feeder.error

    decisions = requests.get(f"{plane.url}/api/v1/jobs/{JOB}/decisions", timeout=5).json()["decisions"]
    assert len(decisions) >= 2 and {"applied"} <= {d["status"] for d in decisions}
    directive = requests.get(f"{plane.url}/api/v1/jobs/{JOB}/directives", timeout=5).json()["directives"][0]
    assert directive["applied_version"] == directive["version"] >= 2

    variables = {"job": JOB, "datasource": "prometheus"}
    empty = PromQL(prom).empty_panels(dashboard, JOB)  # panel by panel, scraped without honor_labels
    assert not empty, "panels without data:\n" + "\n".join(empty)

    # what the panels show is what happened
    table = next(t for p in dashboard["panels"] if p["type"] == "table" for t in p["targets"])
    rows = {(r["metric"]["policy"], r["metric"]["knob"], r["metric"]["status"]): float(r["value"][1])
            for r in query(render_expr(table["expr"], variables))}
    assert rows[("threshold", "executors", "applied")] >= 2
    assert sum(rows.values()) == len(decisions)
    held_panel = next(p for p in dashboard["panels"] if p["title"] == "Knobs held")
    (r,) = query(render_expr(held_panel["targets"][0]["expr"], variables))
    assert (r["metric"]["knob"], r["value"][1]) == ("executors", "1")

    # annotations as Grafana evaluates them: a range query over the dashboard's time range
    span = {"start": started - 5, "end": time.time(), "step": 1}
    silent = []
    for name, expr in annotation_queries(dashboard):
        if not query(render_expr(expr, variables), **span):
            silent.append(f"{name}: {expr}")
    assert not silent, "annotations that never fired:\n" + "\n".join(silent)

    # the job variable's query (label_values(spark_governor_tasks_ingested_total, spark_job))
    (var,) = [v for v in dashboard["templating"]["list"] if v["name"] == "job"]
    assert var["query"]["query"] == "label_values(spark_governor_tasks_ingested_total, spark_job)"
    r = requests.get(f"{prom}/api/v1/label/spark_job/values",
                     params={"match[]": "spark_governor_tasks_ingested_total"}, timeout=5)
    assert r.json()["data"] == [JOB]
