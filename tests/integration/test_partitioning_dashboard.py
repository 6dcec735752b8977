"""The "spark-governor / partitioning" dashboard: its shape, and every panel and annotation query
evaluated by a real Prometheus scraping a real control plane in which the prompt policy plans.

No Spark: a feeder posts partition statistics the way ``collectors.partition_plan`` does (batches
overrunning W = 0.9, so Algorithm 4 scales the Map tasks out) and acknowledges every plan
directive, running its next batches with the plan's P and R.
"""
import gzip
import json
import threading
import time

import pytest
import requests

from spark_governor.dashboards import DASHBOARD_DIR, annotation_queries, load_all, panel_queries, render_expr
from spark_governor.api.processes import wait_for
from tests.conftest import PromQL
from tests.integration.test_partitioning_plane import partition_record

UID = "spark-governor-partitioning"
JOB = "partitioning-test"
TOKEN = "dashboard-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
METRICS = ("max_mean_load", "predicted_max_mean_load", "block_tuples", "bsi", "bucket_bsi", "bci", "ksr",
           "split_keys", "mpi", "predicted_mpi", "blocks", "buckets", "batch_seconds", "stats_seconds",
           "planning_seconds", "plan_compute_seconds", "tuples", "keys", "batches_total")


@pytest.fixture(scope="module")
def dashboard():
    (d,) = [d for d in load_all() if d["uid"] == UID]
    return d


def test_partitioning_dashboard_is_a_valid_dashboard(dashboard):
    assert json.loads((DASHBOARD_DIR / "partitioning.json").read_text()) == dashboard
    assert dashboard["title"] == "spark-governor / partitioning" and "spark-governor" in dashboard["tags"]
    overview = next(d for d in load_all() if d["uid"] == "spark-governor-job-overview")
    assert dashboard["templating"] == overview["templating"]
    panels = dashboard["panels"]
    ids = [p["id"] for p in panels]
    assert len(panels) >= 8 and len(set(ids)) == len(ids)
    cells = set()
    for p in panels:
        assert p["title"] and p["description"] and p["type"] in {"timeseries", "stat"}
        g = p["gridPos"]
        assert g["x"] + g["w"] <= 24
        mine = {(x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])}
        assert not cells & mine, f"{p['title']} overlaps another panel"
        cells |= mine
        assert p["datasource"] == DATASOURCE
        for t in p["targets"]:
            assert t["datasource"] == DATASOURCE and 'spark_job="$job"' in t["expr"], (p["title"], t)
            assert "{job=" not in t["expr"], (p["title"], t)
    exprs = " ".join(e for _t, e in panel_queries(dashboard))
    for metric in METRICS:
        assert f"spark_governor_partition_{metric}" in exprs, metric
    queried = [a for a in dashboard["annotations"]["list"] if a.get("expr")]
    assert len(queried) >= 2 and all('spark_job="$job"' in a["expr"] and "{job=" not in a["expr"] for a in queried)


def _scrapes_at_least(query, p: int) -> int:
    """Scrapes in the last minute that saw at least ``p`` Map blocks."""
    result = query(f'count_over_time((spark_governor_partition_blocks{{spark_job="{JOB}"}} >= {p})[1m:])')
    return int(float(result[0]["value"][1])) if result else 0


class Feeder(threading.Thread):
    """A job's reporter: one partitioned batch per report, run with the latest plan's P and R."""

    def __init__(self, url: str, period_s: float = 0.4) -> None:
        super().__init__(daemon=True)
        self.url, self.period_s = url, period_s
        self.stopped = threading.Event()
        self.seq, self.batch, self.P, self.R, self.acks, self.error = 1, 0, 4, 4, [], None
        self.w = 0.5

    def post(self) -> None:
        rec = partition_record(self.batch, self.w, tuples=4000 + 100 * self.batch, P=self.P, R=self.R)
        rep = {"schema_version": 1, "job": JOB, "reporter": {"id": "feeder", "seq": self.seq, "applied": self.acks},
               "partitions": [rec]}
        r = requests.post(self.url + "/api/v1/reports", data=gzip.compress(json.dumps(rep).encode()),
                          headers={"Content-Encoding": "gzip", "Content-Type": "application/json"}, timeout=10)
        r.raise_for_status()
        self.seq += 1
        self.batch += 1
        self.acks = []
        for d in r.json()["directives"]:
            if d["knob"] == "partition_plan":
                self.P, self.R = d["value"]["partitions"], d["value"]["reduce"]
                self.acks.append({"knob": d["knob"], "version": d["version"], "status": "applied"})

    def run(self) -> None:
        try:
            while not self.stopped.is_set():
                self.post()
                self.stopped.wait(self.period_s)
        except (requests.RequestException, ValueError, KeyError) as exc:
            self.error = exc


@pytest.mark.prometheus
def test_prometheus_evaluates_every_partitioning_panel_and_annotation(dashboard, start_plane, prometheus_factory):
    plane = start_plane(TOKEN, window_ms=1000, evaluation_interval_s=0.5)
    feeder = Feeder(plane.url)
    feeder.post()
    prom = prometheus_factory([f"127.0.0.1:{plane.port}"])
    started = time.time()

    query, samples = PromQL(prom).query, PromQL(prom).samples

    wait_for(lambda: samples(f'spark_governor_partition_blocks{{spark_job="{JOB}"}}') >= 2, 60, what="scrapes before plans")
    r = requests.put(f"{plane.url}/api/v1/jobs/{JOB}/policies/prompt?register=true", headers=AUTH, timeout=10,
                     json={"mode": "act", "config": {"trigger_interval_s": 2.0, "d": 2, "p_max": 7}})
    assert r.status_code == 200, r.text
    feeder.w = 0.95  # overloaded from now on: Algorithm 4 adds Map tasks
    feeder.start()
    try:
        wait_for(lambda: feeder.error is None and feeder.P >= 6, 90, what="Map tasks scaled out twice")
        wait_for(lambda: _scrapes_at_least(query, 6) >= 3, 60, what="three scrapes after the scale-out")
    finally:
        feeder.stopped.set()
        feeder.join(10)
    assert feeder.error is None, feeder.error

    variables = {"job": JOB, "datasource": "prometheus"}
    empty = PromQL(prom).empty_panels(dashboard, JOB)  # panel by panel, scraped without honor_labels
    assert not empty, "panels without data:\n" + "\n".join(empty)
    # what the panels show is what happened
    blocks = next(p for p in dashboard["panels"] if p["title"] == "Tuples per Map block")
    shown = query(render_expr(blocks["targets"][0]["expr"], variables))
    assert len(shown) >= 6
    span = {"start": started - 5, "end": time.time(), "step": 1}
    silent = [f"{n}: {e}" for n, e in annotation_queries(dashboard) if not query(render_expr(e, variables), **span)]
    assert not silent, "annotations that never fired:\n" + "\n".join(silent)
