"""``spark-governor demo`` on a real Spark standalone cluster: the product doing its job in about three minutes
(issue #46).

1. A standalone master and one 4-core worker on 127.0.0.1 from the pyspark install, and a control plane
   (SQLite, in this process) with an admin token for the demo's API calls and a report token for the job.
2. The paced Zipf job of ``bench scaling-real`` (``bench/scaling_job.py``: a per-row cost of 100 µs, 4 partitions,
   an 8 s trigger, 1 core per executor) starts on one executor at 2 000 rows/s, attached with ``attach()``.
3. Once its first batches have settled, through the HTTP API as an operator would: a latency constraint (mean
   record latency ≤ 14 s per 8 s span, the SLO counting from then) and Kingman in ``act`` mode (1–4 executors).
4. The load steps up and back down (``LEVELS``: 2 000 → 16 000 → 2 000 rows/s, a third of ``seconds`` each; one
   executor keeps up with 2 000 rows/s, 16 000 need 3–4);
   one line per micro-batch (offered rate, rows, executors, batch time, estimated record latency against the
   bound) and one per decision with its reason.
5. A summary from the control plane's API — the spans within the bound from the SLO's start to the end of the
   load (``GET …/constraints/<name>?until_ms=``, the spans its SLO counters count), the run's executor-seconds
   against a static allocation of the run's peak for as long (``GET …/runs``), the decisions —
   and the figure of the run (input rate, latency against the bound, executors against the static peak,
   decisions) with the API answers it was drawn from (JSON).

Everything is the bench's: :class:`bench.standalone.StandaloneCluster` and :class:`bench.standalone.Driver`, the
job's settling rule (``bench.scaling_real.settled``), the aligned evaluations. ``keep``: afterwards, the control
plane and the job (at the last level) stay up and the demo says where to look, until Ctrl-C. Ctrl-C at any time
stops the job, the cluster (its executors included) and the control plane before returning (:class:`Interrupted`).
"""
from __future__ import annotations

import json
import logging
import secrets
import shutil
import signal
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

import requests

#: rows/s of the load's three steps
LEVELS = (2000.0, 16000.0, 2000.0)
JOB = "zipf-cluster-demo"
CONSTRAINT = "record-latency"
POLICY = "kingman"
TRIGGER_S = 8.0
BOUND_S = 14.0
SPAN_S = 8.0
ROW_COST_US = 100.0
MAX_EXECUTORS = 4
#: the demo's length when not given (seconds of load: three levels of 40 s; with the start and the install, `make demo`
#: takes under 5 minutes on a fresh clone)
DEFAULT_SECONDS = 120.0


class ClusterUnavailable(RuntimeError):
    """The standalone cluster cannot start here (the demo falls back to local mode)."""


class Interrupted(RuntimeError):
    """Ctrl-C: everything the demo started is stopped."""


@dataclass
class ClusterDemoOutcome:
    figure: str
    report_json: str
    summary: dict
    decisions: list = field(default_factory=list)


def cluster_unavailable() -> Optional[str]:
    """Why a standalone cluster cannot start here (None: it can be tried)."""
    if shutil.which("java") is None:
        return "no java on the PATH (Spark's master and worker are JVMs)"
    try:
        from spark_governor.bench.standalone import spark_home
    except ImportError as exc:  # pyspark missing
        return f"pyspark is not installed ({exc})"
    if not (spark_home() / "bin" / "spark-class").exists():
        return f"{spark_home()}/bin/spark-class is missing"
    return None


def _levels_at(levels: tuple, level_s: float, t_s: float) -> float:
    return levels[min(len(levels) - 1, max(0, int(t_s // level_s)))]


class _Live:
    """Prints one line per new micro-batch of the job and one per new decision."""

    def __init__(self, driver, plane_url: str, err: Callable[[str], None]) -> None:
        self.driver, self.url, self.err = driver, plane_url, err
        self.batches_seen, self.decisions_seen = -1, set()
        self.prev_trigger_ms: Optional[int] = None
        self.t0: Optional[float] = None
        self.levels: tuple = ()
        self.level_s = 1.0

    def poll(self) -> None:
        from spark_governor.api.demo_report import decision_line

        samples = self.driver.samples()
        executors = samples[-1]["executors"] if samples else None
        for p in self.driver.progress():
            if p["batch"] <= self.batches_seen:
                continue
            self.batches_seen = p["batch"]
            trigger_ms, processing_s = p["trigger_ms"], (p["processing_ms"] or 0) / 1000.0
            wait_s = None if self.prev_trigger_ms is None else (trigger_ms - self.prev_trigger_ms) / 2000.0
            self.prev_trigger_ms = trigger_ms
            if self.t0 is None:
                self.err(f"[ warm-up] batch {p['batch']:3d}: {p['rows'] or 0:7,} rows in {processing_s:4.1f} s on "
                         f"{executors} executor(s)")
                continue
            t = trigger_ms / 1000.0 - self.t0
            rate = _levels_at(self.levels, self.level_s, t) if t >= 0 else self.levels[0]
            latency = "" if wait_s is None else (
                f", latency ≈ {wait_s + processing_s:4.1f} s of {BOUND_S:g} s "
                + ("ok" if wait_s + processing_s <= BOUND_S else "OVER"))
            self.err(f"[{t:6.1f} s] batch {p['batch']:3d}: {rate:7,.0f} rows/s offered, {p['rows'] or 0:7,} rows in "
                     f"{processing_s:4.1f} s on {executors} executor(s){latency}")
        try:
            found = requests.get(f"{self.url}/api/v1/jobs/{JOB}/decisions?limit=50", timeout=5).json()["decisions"]
        except (requests.RequestException, ValueError, KeyError):
            return  # progress output only; the summary asks again
        for d in reversed(found):
            if d["id"] not in self.decisions_seen:
                self.decisions_seen.add(d["id"])
                self.err(f"           decision: {decision_line(d)} [{d['status']}]")
                if d.get("reason"):
                    self.err(f"             because {d['reason']}")


def _sleep(seconds: float, live: _Live) -> None:
    end = time.time() + seconds
    while time.time() < end:
        live.poll()
        time.sleep(min(1.0, max(0.0, end - time.time())))


def run_cluster_demo(seconds: float = DEFAULT_SECONDS, port: int = 0, db_url: Optional[str] = None,
                     out_dir: str = "bench-results/demo", keep: bool = False,
                     out: Callable[[str], None] = print, err: Callable[[str], None] = print) -> ClusterDemoOutcome:
    """The demo (module docstring); raises :class:`ClusterUnavailable` when the cluster does not start, and
    :class:`Interrupted` on Ctrl-C; nothing is left running either way. Its work directory (the cluster's and the
    job's logs, the default SQLite file) is removed afterwards, unless the demo failed (the error names it)."""
    from spark_governor.api.auth import TokenSpec
    from spark_governor.api.app import Settings
    from spark_governor.api.processes import ProcessError, descendants, kill_all
    from spark_governor.api.server import ControlPlane
    from spark_governor.bench.scaling_real import align_evaluations, align_to_trigger, policy_config, settled
    from spark_governor.bench.standalone import Driver, StandaloneCluster

    reason = cluster_unavailable()
    if reason:
        raise ClusterUnavailable(reason)
    level_s = seconds / len(LEVELS)
    workdir = Path(tempfile.mkdtemp(prefix="sg-demo-cluster-"))
    out_path = Path(out_dir)
    out_path.mkdir(parents=True, exist_ok=True)
    admin, reporter = secrets.token_urlsafe(16), secrets.token_urlsafe(16)
    auth = {"Authorization": f"Bearer {admin}"}
    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    cluster = plane = driver = None
    tree: list[int] = []
    failed = True
    main_thread = threading.current_thread() is threading.main_thread()  # signal handlers: only there
    previous_sigint = signal.getsignal(signal.SIGINT) if main_thread else None
    try:
        (workdir / "cluster").mkdir()
        cluster = StandaloneCluster(workdir / "cluster", cores=MAX_EXECUTORS)
        err(f"starting a standalone Spark cluster (master {cluster.url}, one worker with {MAX_EXECUTORS} cores) ...")
        try:
            cluster.start()
        except (ProcessError, TimeoutError, AssertionError, OSError) as exc:
            raise ClusterUnavailable(f"the standalone cluster did not start: {exc}") from None
        plane = ControlPlane(db_url=db_url or f"sqlite:///{workdir / 'demo.db'}", port=port,
                             tokens={"demo": admin, "demo-reporter": TokenSpec(reporter, ("report",))},
                             settings=Settings(window_ms=int(TRIGGER_S * 1000), evaluation_interval_s=TRIGGER_S,
                                               require_report_token=True)).start()
        align_evaluations(plane, TRIGGER_S, TRIGGER_S)
        err(f"control plane: {plane.url} (SQLite: {plane.db_url})")
        (workdir / "job").mkdir()
        driver = Driver(workdir / "job", cluster, plane, JOB, initial_executors=1, initial_rate=LEVELS[0],
                        extra_args=("--row-cost-us", str(ROW_COST_US), "--trigger-seconds", str(TRIGGER_S),
                                    "--launch-hold"),
                        env={"SPARK_GOVERNOR_TOKEN": reporter})
        err(f"job {JOB}: the paced Zipf query ({ROW_COST_US:g} µs per row, 4 partitions, trigger {TRIGGER_S:g} s) "
            f"on 1 executor at {LEVELS[0]:,.0f} rows/s, attached with attach(); warming up ...")
        live = _Live(driver, plane.url, err)
        deadline = time.time() + 300
        while not (driver.executors() == 1 and settled(driver.progress(), TRIGGER_S)):
            if driver.proc.poll() is not None:
                raise RuntimeError(f"the job exited ({driver.proc.returncode}); its log: {workdir / 'job' / 'driver.log'}")
            if time.time() > deadline:
                raise RuntimeError(f"the job did not settle within 300 s; its log: {workdir / 'job' / 'driver.log'}")
            live.poll()
            time.sleep(1)
        _put(plane.url, f"/api/v1/jobs/{JOB}/constraints/{CONSTRAINT}", auth,
             {"bound_ms": BOUND_S * 1000, "span_s": SPAN_S})
        detail = f"/api/v1/jobs/{JOB}/constraints/{CONSTRAINT}"
        deadline = time.time() + 30  # the SLO counts from the span after its first pass (aggregators.slo_spans)
        while _get(plane.url, detail)["slo"]["judged_until_ms"] is None and time.time() < deadline:
            time.sleep(0.5)
        slo_since_ms = _get(plane.url, detail)["slo"]["judged_until_ms"]
        _put(plane.url, f"/api/v1/jobs/{JOB}/policies/{POLICY}", auth,
             {"mode": "act", "config": policy_config(POLICY, TRIGGER_S, MAX_EXECUTORS)})
        err(f"PUT /api/v1/jobs/{JOB}/constraints/{CONSTRAINT}: mean record latency ≤ {BOUND_S:g} s per {SPAN_S:g} s "
            "span (SLO 99 % of spans)")
        err(f"PUT /api/v1/jobs/{JOB}/policies/{POLICY}: mode act, 1–{MAX_EXECUTORS} executors, evaluated every "
            f"{TRIGGER_S:g} s")
        t0 = align_to_trigger(TRIGGER_S)
        live.t0, live.levels, live.level_s = t0, LEVELS, level_s
        for i, level in enumerate(LEVELS):
            driver.rate(level)
            err(f"[{time.time() - t0:6.1f} s] load: {level:,.0f} rows/s" + (" (step up)" if i == 1 else
                                                                            " (step down)" if i == 2 else ""))
            _sleep(level_s, live)
        t_end = time.time()
        _sleep(2, live)  # the batches that ended in the load have reported (the reporter flushes every 0.5 s)
        if not keep:  # the run as the API will always tell it: ended
            err("stopping the job ...")
            driver.stop(90)
        outcome = _summary(plane.url, out_path, out, err, t0, t_end, slo_since_ms, driver)
        if keep:
            _keep(plane.url, out, live)
        failed = False
        return outcome
    except KeyboardInterrupt:
        failed = False
        err("interrupted: stopping the job, the cluster and the control plane ...")
        raise Interrupted("interrupted (Ctrl-C)") from None
    except ClusterUnavailable:
        failed = False
        raise
    finally:
        if main_thread:
            signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not cut the clean-up short
        try:
            for proc in ([driver.proc] if driver else []) + (cluster.procs if cluster else []):
                tree += [proc.pid, *descendants(proc.pid)]
            if driver is not None and driver.proc.poll() is None:
                driver.stop(30)
            if cluster is not None:
                cluster.stop()
            if plane is not None:
                plane.stop()
            kill_all(tree)  # an executor whose worker went first
            if failed:
                err(f"the cluster's and the job's logs: {workdir}")
            else:
                shutil.rmtree(workdir, ignore_errors=True)
        finally:
            if main_thread:
                signal.signal(signal.SIGINT, previous_sigint)


def _put(url: str, path: str, auth: dict, body: dict) -> dict:
    r = requests.put(url + path, json=body, headers=auth, params={"register": "true"}, timeout=10)
    if r.status_code != 200:
        raise RuntimeError(f"PUT {path}: HTTP {r.status_code}: {r.text[:300]}")
    return r.json()


def _get(url: str, path: str) -> dict:
    r = requests.get(url + path, timeout=10)
    if r.status_code != 200:
        raise RuntimeError(f"GET {path}: HTTP {r.status_code}: {r.text[:300]}")
    return r.json()


def _summary(url: str, out_path: Path, out: Callable[[str], None], err: Callable[[str], None], t0: float,
             t_end: float, slo_since_ms: Optional[int], driver) -> ClusterDemoOutcome:
    """The run in numbers, from the control plane's API, and its figure. The spans are those from ``slo_since_ms``
    (the SLO's first span) to the last that ended within the load."""
    from spark_governor.api.run_figure import plot_run, run_series

    detail = f"/api/v1/jobs/{JOB}/constraints/{CONSTRAINT}"
    run = _get(url, f"/api/v1/jobs/{JOB}/runs")["runs"][0]
    # the spans from the SLO's first (slo_since_ms) to the last that ended within the load, as the API judges them
    span_ms = int(SPAN_S * 1000)
    until_ms = int(t_end * 1000) - int(t_end * 1000) % span_ms
    n_spans = max(1, (until_ms - (slo_since_ms or until_ms - span_ms)) // span_ms)
    constraint = _get(url, f"{detail}?until_ms={until_ms}&spans={n_spans}")
    good = sum(1 for x in constraint["spans"] if x["attained"])
    slo = {"spans_good": good, "spans_bad": len(constraint["spans"]) - good}
    decisions = _get(url, f"/api/v1/jobs/{JOB}/decisions?limit=1000")["decisions"]
    batches = _get(url, f"/api/v1/jobs/{JOB}/batches?limit=10000")
    job = _get(url, f"/api/v1/jobs/{JOB}")
    judged = slo["spans_good"] + slo["spans_bad"]
    run_s = (run["last_ms"] - run["first_ms"]) / 1000.0
    peak = run["max_executors"]
    static_s = peak * run_s if peak else None
    applied = [d for d in decisions if d["status"] == "applied"]
    summary = {"job": JOB, "levels": list(LEVELS), "level_s": (t_end - t0) / len(LEVELS), "bound_s": BOUND_S,
               "span_s": SPAN_S, "spans_good": slo["spans_good"], "spans_bad": slo["spans_bad"],
               "attainment": slo["spans_good"] / judged if judged else None,
               "run_seconds": run_s, "executor_seconds": run["executor_seconds"], "max_executors": peak,
               "static_peak_executor_seconds": static_s,
               "ratio_vs_static_peak": run["executor_seconds"] / static_s if static_s else None,
               "scale_outs": sum(1 for d in applied if d["new_value"] > d["old_value"]),
               "scale_ins": sum(1 for d in applied if d["new_value"] < d["old_value"]),
               "decisions": len(decisions), "t0_ms": int(t0 * 1000), "t_end_ms": int(t_end * 1000),
               "slo_since_ms": slo_since_ms, "slo_until_ms": until_ms}
    out("")
    out(f"summary of {JOB} (from the control plane's API):")
    if judged:
        out(f"  spans within the bound: {slo['spans_good']} of {judged} ({summary['attainment']:.1%}; mean record "
            f"latency ≤ {BOUND_S:g} s per {SPAN_S:g} s span; GET {detail}?until_ms={until_ms}&spans={n_spans})")
    else:
        out("  spans within the bound: none judged")
    if static_s:
        out(f"  executor-seconds: {run['executor_seconds']:,.0f} over the run's {run_s:,.0f} s, "
            f"{summary['ratio_vs_static_peak']:.2f}× a static {peak} executors (the run's peak) for as long "
            f"({static_s:,.0f}; GET /api/v1/jobs/{JOB}/runs)")
    out(f"  decisions: {len(decisions)}, applied by the job: {summary['scale_outs']} scale-out(s), "
        f"{summary['scale_ins']} scale-in(s)")
    for d in sorted(decisions, key=lambda d: d["created_ms"]):
        out(f"    {d['created_ms'] / 1000.0 - t0:6.1f} s  {d['old_value']} → {d['new_value']} executors "
            f"[{d['status']}]: {d.get('reason') or ''}")
    series = run_series(batches["batches"], decisions, constraint, job)
    series.executors = [(x["t"] - series.t0_ms / 1000.0, x["executors"]) for x in driver.samples()]
    series.static_peak = peak
    figure, report_json = str(out_path / f"{JOB}.png"), str(out_path / f"{JOB}.json")
    title = (f"spark-governor demo: {JOB} on a standalone cluster, {POLICY} in act mode, "
             f"bound {BOUND_S:g} s on the mean record latency")
    plot_run(series, figure, title)
    Path(report_json).write_text(json.dumps({"summary": summary, "job": job, "run": run, "constraint": constraint,
                                             "decisions": decisions, "batches": batches,
                                             "executors": [[t, n] for t, n in series.executors]}, indent=1))
    out(f"  figure of the run: {figure}")
    out(f"  API answers it was drawn from: {report_json}")
    return ClusterDemoOutcome(figure, report_json, summary, decisions)


def _keep(url: str, out: Callable[[str], None], live: _Live) -> None:
    """Leave the control plane and the job running (at the last level) until Ctrl-C, saying where to look."""
    out("")
    out("the control plane and the job keep running; press Ctrl-C to stop them. Where to look:")
    out(f"  Swagger UI:   {url}/api/docs")
    out(f"  metrics:      {url}/metrics")
    for what in ("health", "decisions", "live", f"constraints/{CONSTRAINT}", "runs"):
        out(f"  {what + ':':<13} curl {url}/api/v1/jobs/{JOB}/{what}")
    out(f"  Prometheus:   prometheus --config.file=deploy/prometheus.yml (it scrapes 127.0.0.1:8787: run the demo "
        "with --port 8787; the rules and alerts come with it, docs/alerts.md)")
    out("  Grafana:      spark-governor dashboards push --grafana-url http://127.0.0.1:3000 --token ... "
        "--datasource-uid <your Prometheus>")
    out("  or the whole stack in containers, with its own control plane: docker compose -f deploy/docker/compose.yaml "
        "up (docs/deployment.md)")
    try:
        while True:
            live.poll()
            time.sleep(1)
    except KeyboardInterrupt:  # the way out of --keep: the caller stops everything
        out("stopping the job, the cluster and the control plane ...")
