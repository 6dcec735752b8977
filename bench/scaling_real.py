"""``spark-governor bench scaling-real``: executor policies (Kingman, threshold, utilization-target) and a
static allocation on a real Spark standalone cluster (master + worker on 127.0.0.1), on one short
staircase rate profile, in one invocation.

One control plane (in-process, SQLite in the work directory) and one cluster serve every run; each
run is its own job (``real-<policy>``) with the same whole-query latency constraint. A governed
policy is switched on (mode ``act``) once the job has settled at its initial executors, right before
the staircase begins (t0): its first batches, large and slow while the query starts, would
otherwise have it scale out before the staircase (earlier runs did so). The job is the
paced Zipf query of ``bench/scaling_job.py`` (4 partitions, a per-row sleep of ``row_cost_us``
spread over the executors; 1 core per executor), started at ``initial_executors`` executors (the
static run: at ``static_executors``), then the input rate steps through ``levels`` (rows/s, each for
``level_s`` seconds). Units: seconds, rows/s, executor-seconds.

Defaults (trigger 8 s, bound 14 s on the mean record latency per 8 s span, 100 µs per row, rates
2 000 → 8 000 → 16 000 → 8 000 → 2 000 rows/s for 50 s each) are sized for a small, shared machine,
where a micro-batch of this job costs ~4 s outside its tasks: 1 executor keeps up at 2 000 rows/s,
2 at 8 000, 4 at 16 000 (4 partitions: at most 4 executors help), so the static baseline is 4.
The control plane evaluates every trigger interval (8 s; statistics windows of 8 s), so every
window holds a batch and the policy's cool-downs (3 intervals after a scale-up) outlast the
executor start, which takes 10–25 s on such a machine.

Metrics per run (the same names as ``bench scaling``):

* ``slo_attainment_windows``: share of constraint spans whose true mean record latency (rows that
  arrived in the span; ``bench.latency_truth.span_truths`` on the rate schedule as written and the
  batches' trigger times and durations from the query's progress) is ≤ the bound;
  ``plane_attainment``: the same as the control plane measures it (batches assigned to the span
  they completed in, latency estimated as trigger gap / 2 + processing; spans without a completed
  batch are absent there, so it flatters an overloaded run);
* ``executor_seconds``: ∫ registered executors dt over the profile (the driver samples them every
  second; unlike the simulator, executors being provisioned are not counted);
* ``actions``: executor directives the policy issued; ``oscillations``: direction reversals within
  ``oscillation_window_s`` (``bench.scaling.count_oscillations``);
* ``ratio_vs_static``: executor-seconds / the static run's;
* ``cluster`` and ``service`` (``bench.scaling_real_measure``): the provisioning delay, warm-up, the
  driver's per-batch overhead and the service times measured in the run — from the control plane's
  ``GET /api/v1/jobs/<job>/cluster`` when it has them, else from the bench's own progress records and
  executor samples — which ``bench scaling --calibrate`` feeds the simulator (issue 14);
* ``switches``: [(s since t0, rows/s)] as the rates were written, ``initial_executors``;
* ``prediction`` (when the static run and a policy ran): the static run writes Spark's event log, which is
  replayed and each policy predicted from it, beside its live run (``bench.scaling_real_prediction``).

No search for the smallest static size here (each size is a run of minutes); ``bench scaling``
does that search in the simulator.
"""
from __future__ import annotations

import datetime
import logging
import math
import tempfile
import time
from pathlib import Path
from typing import Callable, Optional

import numpy as np
import requests

from spark_governor.api.processes import wait_for
from spark_governor.bench.cpu_hog import cpu_hog as cpu_hog_processes
from spark_governor.bench.latency_truth import schedule_rows, span_truths
from spark_governor.bench.scaling import GOVERNED, count_oscillations
from spark_governor.bench.scaling_real_measure import executor_seconds, measure_run
from spark_governor.bench.scaling_sim_model import Action
from spark_governor.bench.standalone import Driver, StandaloneCluster

TOKEN = "bench-scaling-real"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
DEFAULT_LEVELS = (2000.0, 8000.0, 16000.0, 8000.0, 2000.0)
POLICIES = (*GOVERNED, "static")
PARTITIONS = 4  # tasks per stage of bench/scaling_job.py (numPartitions, spark.sql.shuffle.partitions)


def run_metrics(switches, t0: float, t_end: float, progress: list[dict], samples: list[dict],
                decisions: list[dict], bound_s: float, span_s: float, oscillation_window_s: float) -> dict:
    """The run's numbers (see the module docstring); times in ``switches`` are relative to ``t0``."""
    end_s = t_end - t0
    grid, cum = schedule_rows(switches, end_s)
    batches = sorted((p["trigger_ms"] / 1000.0 - t0, p["trigger_ms"] / 1000.0 - t0 + (p["processing_ms"] or 0) / 1000.0)
                     for p in progress if p.get("rows"))
    spans = span_truths(grid, cum, [b[0] for b in batches], [b[1] for b in batches], span_s, end_s)
    lat = np.array([s.latency_s for s in spans])
    actions = [Action(d["created_ms"] / 1000.0, d["old_value"], d["new_value"], d.get("reason", ""))
               for d in sorted(decisions, key=lambda d: d["created_ms"]) if t0 * 1000 <= d["created_ms"] <= t_end * 1000]
    es = executor_seconds(samples, t0, t_end)
    return {"windows": len(spans),
            "slo_attainment_windows": float((lat <= bound_s + 1e-9).mean()) if len(lat) else None,
            "window_latency_p95_s": float(np.percentile(lat, 95)) if len(lat) else None,
            "executor_seconds": es, "mean_executors": es / end_s if end_s > 0 else None,
            "max_executors": max((s["executors"] for s in samples if t0 <= s["t"] <= t_end), default=None),
            "actions": len(actions), "oscillations": count_oscillations(actions, oscillation_window_s),
            "batches": len(batches), "duration_s": end_s}


def settled(progress: list[dict], trigger_s: float, batches: int = 3) -> bool:
    """At least ``batches`` batches with rows have completed and the latest took ≤ the trigger interval."""
    with_rows = [p for p in progress if p.get("rows")]
    return len(with_rows) >= batches and (with_rows[-1]["processing_ms"] or 0) <= trigger_s * 1000


def _put(url: str, body: dict) -> None:
    r = requests.put(url, json=body, headers=AUTH, timeout=10)
    if r.status_code != 200:
        raise RuntimeError(f"PUT {url}: {r.status_code} {r.text}")


def policy_config(policy: str, trigger_s: float, max_executors: int, extra: Optional[dict] = None) -> dict:
    """The config a governed run registers: bounds [1, max], ``trigger_interval_s`` where the policy's
    config has it, then ``extra``."""
    from spark_governor.policies.registry import get_policy

    raw = {"min_value": 1, "max_value": max_executors}
    if "trigger_interval_s" in get_policy(policy).Config.model_fields:
        raw["trigger_interval_s"] = trigger_s
    return {**raw, **(extra or {})}


def full_config(policy: str, extra: Optional[dict] = None) -> dict:
    """Every option of ``policy``'s config the run used (today's defaults, then ``extra``), without those
    ``policy_config`` sets from the run's own parameters: what a later ``bench scaling --calibrate`` replays."""
    from spark_governor.policies.registry import get_policy

    cfg = get_policy(policy).Config(**(extra or {})).model_dump(mode="json")
    return {k: v for k, v in cfg.items() if k not in ("trigger_interval_s", "min_value", "max_value")}


def align_to_trigger(trigger_s: float) -> float:
    """Sleep until the next trigger boundary and return it (epoch s). Spark's processing-time trigger fires
    at multiples of its interval since the epoch (``ProcessingTimeExecutor.nextBatchTime``) while batches
    are on time, so a staircase started there meets every policy's job at the same trigger phase (0, as
    the simulator's boundaries): a step just after a trigger waits a whole interval longer than one just
    before it, which decided a 4× spike's first spans for one policy and not another when t0 fell at
    random (runs up to 34)."""
    time.sleep(trigger_s - time.time() % trigger_s)
    return time.time()


def align_evaluations(plane, interval_s: float, trigger_s: float) -> None:
    """Move the control plane's policy evaluations onto the trigger boundaries (multiples of the trigger
    interval since the epoch, where :func:`align_to_trigger` starts each run): phase 0, as the
    simulator's evaluations. Otherwise they run from the plane's start, a phase that differs between
    invocations and decided an 8x spike's spans for threshold and utilization-target (runs 34–36:
    0.696–1.000 by phase; the simulator agrees at each run's phases, ``bench.scaling_calibrate``)."""
    from apscheduler.triggers.interval import IntervalTrigger

    grid = math.lcm(round(interval_s * 1000), round(trigger_s * 1000)) / 1000.0
    start = (time.time() // grid + 1) * grid
    plane.scheduler.reschedule_job("policies", trigger=IntervalTrigger(
        seconds=interval_s, start_date=datetime.datetime.fromtimestamp(start, datetime.timezone.utc)))


def evaluation_phase_s(plane, t0: float) -> Optional[float]:
    """When the control plane's policy evaluations fall, seconds after ``t0`` modulo their interval (its
    scheduler runs from the plane's start, not the run's); None when the plane has no such job."""
    job = plane.scheduler.get_job("policies")
    if job is None or job.next_run_time is None:
        return None
    return (job.next_run_time.timestamp() - t0) % job.trigger.interval.total_seconds()


def launch_hold_waves() -> float:
    """The launch hold's ``spark.governor.launchHoldWaves`` the job runs with (the plugin's default; the bench
    sets none): the calibration simulates the same rule (``SimParams.launch_hold_waves``)."""
    from spark_governor.bench.scaling_sim_model import DEFAULT_PARAMS

    return DEFAULT_PARAMS.launch_hold_waves


def run_one(cluster, plane, workdir: Path, policy: str, *, levels, level_s: float, trigger_s: float, bound_s: float,
            span_s: float, initial_executors: int, max_executors: int, row_cost_us: float, oscillation_window_s: float,
            config: Optional[dict] = None, source_probe: bool = True, warm_executors: bool = True,
            launch_hold: bool = True, jar_only: bool = False, event_log: Optional[Path] = None,
            log: Callable[[str], None] = lambda m: None) -> dict:
    """One run: ``policy`` is one of :data:`GOVERNED` (acting on the job, with ``config``: overrides of its
    defaults) or ``static``; ``source_probe``: the job's reporter probes its source's rate file
    (``collectors.source_probe.RateFileProbe``); ``warm_executors``: ``attach`` warms added executors
    (``collectors.executor_warmup``, its default); ``launch_hold``: the job runs the listener jar's launch
    hold (``collectors.launch_hold``); ``jar_only``: no ``attach()``, the listener jar reports and applies
    executors, attached by Spark confs alone (then no probe and no warm-up: both are ``attach()``'s);
    ``event_log``: the job writes Spark's event log into this directory (``out["event_log"]``: its file)."""
    job = f"real-{policy}"
    _put(f"{plane.url}/api/v1/jobs/{job}/constraints/e2e?register=true", {"bound_ms": bound_s * 1000, "span_s": span_s})
    tmp = workdir / job
    tmp.mkdir(parents=True, exist_ok=True)
    if event_log is not None:
        event_log.mkdir(parents=True, exist_ok=True)
    driver = Driver(tmp, cluster, plane, job, initial_executors=initial_executors, initial_rate=levels[0],
                    extra_args=("--row-cost-us", str(row_cost_us), "--trigger-seconds", str(trigger_s),
                                *(() if source_probe else ("--no-probe",)), *(() if warm_executors else ("--no-warm",)),
                                *(("--launch-hold",) if launch_hold else ()), *(("--jar-only",) if jar_only else ()),
                                *(("--event-log", str(event_log)) if event_log is not None else ())))
    try:
        wait_for(lambda: driver.executors() == initial_executors, 300, 1, f"{job}: {initial_executors} executors")
        # warm-up: the rows offered while the query started make the first batches large; begin once
        # a few batches with rows have completed, the latest within the trigger interval
        wait_for(lambda: settled(driver.progress(), trigger_s), 300, 1, f"{job}: settled batches")
        if policy in GOVERNED:  # from now on: every policy starts the staircase from the same executors
            body = {"mode": "act", "config": policy_config(policy, trigger_s, max_executors, config)}
            _put(f"{plane.url}/api/v1/jobs/{job}/policies/{policy}?register=true", body)
        t0 = align_to_trigger(trigger_s)
        evaluation_phase = evaluation_phase_s(plane, t0)
        switches = []
        for level in levels:
            driver.rate(level)
            switches.append((time.time() - t0, float(level)))
            log(f"{job}: {level:g} rows/s at {switches[-1][0]:.0f} s, executors {driver.executors()}")
            time.sleep(level_s)
        t_end = time.time()
        time.sleep(trigger_s * 2)  # let the batch running at the end report its progress
    finally:
        driver.stop()
    decisions = requests.get(f"{plane.url}/api/v1/jobs/{job}/decisions?limit=1000", timeout=10).json()["decisions"]
    spans_api = requests.get(f"{plane.url}/api/v1/jobs/{job}/constraints/e2e?spans=720", timeout=10).json()
    in_run = [s for s in spans_api["spans"] if t0 * 1000 <= s["start_ms"] and s["start_ms"] + span_s * 1000 <= t_end * 1000]
    out = run_metrics(switches, t0, t_end, driver.progress(), driver.samples(), decisions, bound_s, span_s,
                      oscillation_window_s)
    out["plane_attainment"] = (sum(s["attained"] for s in in_run) / len(in_run)) if in_run else None
    try:
        out.update(measure_run(plane.url, job, decisions=decisions, samples=driver.samples(),
                               progress=driver.progress(), t0=t0, t_end=t_end, partitions=PARTITIONS))
    except (requests.RequestException, ValueError) as exc:  # keep the run's numbers; say what is missing
        log(f"{job}: cluster measurement failed: {exc}")
        out.update(cluster=None, service=None, measure_error=str(exc))
    out["switches"] = [[t, r] for t, r in switches]
    out["initial_executors"] = initial_executors
    # the job's executor warm-up jobs (collectors.executor_warmup): seconds each, for bench scaling --calibrate
    out["warm_job_s"] = next((x["warm_job_s"] for x in reversed(driver.samples()) if x.get("warm_job_s") is not None), [])
    # seconds the launch hold kept each added executor from tasks (collectors.launch_hold; empty without it)
    out["held_s"] = next((x["held_s"] for x in reversed(driver.samples()) if x.get("held_s") is not None), {})
    # seconds each warm-up task kept its executor's slot after the warm-up (io.sparkgovernor.SlotHold)
    out["slot_held_s"] = next((x["slot_held_s"] for x in reversed(driver.samples())
                               if x.get("slot_held_s") is not None), {})
    out["evaluation_phase_s"] = evaluation_phase
    out["t0_ms"], out["t_end_ms"] = int(t0 * 1000), int(t_end * 1000)
    if event_log is not None:
        logs = sorted(p for p in event_log.iterdir() if not p.name.startswith("."))
        out["event_log"] = str(logs[-1]) if logs else None
    out["policy"] = policy if policy != "static" else f"static-{initial_executors}"
    out["timeline"] = [[s["t"] - t0, s["executors"]] for s in driver.samples() if t0 - 5 <= s["t"] <= t_end]
    out["decisions"] = [{"t_s": d["created_ms"] / 1000.0 - t0, "old": d["old_value"], "new": d["new_value"],
                         "reason": d.get("reason")} for d in decisions if d["created_ms"] >= t0 * 1000]
    return out


def run_real_scaling_bench(levels=DEFAULT_LEVELS, level_s: float = 50.0, trigger_s: float = 8.0,
                           bound_s: float = 14.0, span_s: float = 8.0, max_executors: int = 4,
                           static_executors: int = 4, row_cost_us: float = 100.0, workdir: Optional[Path] = None,
                           policies: tuple[str, ...] = POLICIES, evaluation_interval_s: float = 8.0,
                           window_ms: int = 8000, oscillation_intervals: int = 12,
                           configs: Optional[dict[str, dict]] = None, source_probe: bool = True,
                           warm_executors: bool = True, launch_hold: bool = True, jar_only: bool = False,
                           cpu_hog: float = 0.0, log: Callable[[str], None] = lambda m: None) -> dict:
    """Every policy in ``policies`` on the staircase; returns the JSON-ready report. ``configs``: per
    governed policy, overrides of its defaults (stored whole in ``policy_configs``, as
    ``bench scaling --calibrate`` replays them): e.g. a baseline given as many executor-seconds as
    Kingman spends, to compare attainment at equal cost. ``source_probe``: the
    job's reporter reads its source's rate between batches (a rate step shows in the live state within
    a second; ``collectors.source_probe``); False: only the completed batches' offsets show it.
    ``warm_executors``: the job's ``attach`` warms executors added while it runs (its default); False:
    ``warm_modules=None``. ``launch_hold``: the job runs the listener jar's launch hold (its default since
    2026-11-28; ``collectors.launch_hold``: an added executor takes no waiting task cold while the executors
    working launch them within a wave); False: Spark's default. ``jar_only``: the job is attached by the
    listener jar's confs alone, as a job whose code cannot change (no source probe, no warm-up: the report
    says both are off). ``cpu_hog``: cores' worth of CPU taken by busy processes while the cluster runs
    (``bench.cpu_hog``): a slower cluster, registration and service alike."""
    from spark_governor.api.app import Settings
    from spark_governor.api.server import ControlPlane

    configs = dict(configs or {})
    if jar_only:  # the probe and the warm-up are attach()'s: a jar-only job has neither
        source_probe = warm_executors = False
    for name, overrides in configs.items():  # a bad config fails here, before minutes of cluster start
        if name not in GOVERNED:
            raise ValueError(f"configs: {name!r} is not a governed policy ({', '.join(GOVERNED)})")
        full_config(name, overrides)
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # one line per request otherwise
    workdir = Path(workdir or tempfile.mkdtemp(prefix="sg-scaling-real-"))
    workdir.mkdir(parents=True, exist_ok=True)
    window_s = oscillation_intervals * evaluation_interval_s
    (workdir / "cluster").mkdir(exist_ok=True)
    results = []
    with cpu_hog_processes(cpu_hog), StandaloneCluster(workdir / "cluster", cores=max_executors) as cluster:
        settings = Settings(window_ms=window_ms, evaluation_interval_s=evaluation_interval_s)
        plane = ControlPlane(db_url=f"sqlite:///{workdir / 'plane.db'}", port=0, tokens={"ops": TOKEN},
                             settings=settings).start()
        try:
            align_evaluations(plane, evaluation_interval_s, trigger_s)
            for policy in policies:
                initial = static_executors if policy == "static" else 1
                log(f"run {policy} (start at {initial} executors)")
                results.append(run_one(cluster, plane, workdir, policy, levels=levels, level_s=level_s,
                                       trigger_s=trigger_s, bound_s=bound_s, span_s=span_s, initial_executors=initial,
                                       max_executors=max_executors, row_cost_us=row_cost_us,
                                       oscillation_window_s=window_s, config=configs.get(policy),
                                       source_probe=source_probe, warm_executors=warm_executors,
                                       launch_hold=launch_hold, jar_only=jar_only,
                                       event_log=workdir / "events" if policy == "static" else None, log=log))
        finally:
            plane.stop()
    static = next((r for r in results if r["policy"].startswith("static")), None)
    for r in results:
        r["ratio_vs_static"] = r["executor_seconds"] / static["executor_seconds"] if static else None
        r["slo_met"] = r["slo_attainment_windows"] is not None and r["slo_attainment_windows"] >= 0.95 - 1e-12
    report = {"results": results, "levels": list(levels), "level_s": level_s, "trigger_s": trigger_s,
            "bound_s": bound_s, "span_s": span_s, "max_executors": max_executors, "row_cost_us": row_cost_us,
            "evaluation_interval_s": evaluation_interval_s, "window_ms": window_ms, "partitions": PARTITIONS,
            "static_executors": static_executors, "kingman_config": full_config("kingman", configs.get("kingman")),
            "policy_configs": {p: full_config(p, configs.get(p)) for p in policies if p in GOVERNED},
            "oscillation_window_s": window_s, "workdir": str(workdir), "source_probe": source_probe,
            "warm_executors": warm_executors, "launch_hold": launch_hold, "jar_only": jar_only, "cpu_hog": cpu_hog,
            "launch_hold_waves": launch_hold_waves() if launch_hold else None,
            # the warm-up's tasks keep their slots by the hold's rule (io.sparkgovernor.SlotHold, since 2026-11-28)
            "slot_hold": bool(launch_hold and warm_executors),
            "surge_ratio": settings.surge_ratio or None, "source_arrivals": SOURCE_ARRIVALS,
            "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    if static is not None and static.get("event_log") and len(results) > 1:
        # the static run's log replayed and every policy predicted from it, beside the live runs (issue #43)
        from spark_governor.bench.scaling_real_prediction import static_prediction

        try:
            report["prediction"] = static_prediction(report, workdir)
        except Exception as exc:  # keep the runs' numbers; say what is missing
            log(f"prediction from the static run's log failed: {exc.__class__.__name__}: {exc}")
            report["prediction_error"] = f"{exc.__class__.__name__}: {exc}"
    return report


#: how the job's source offers rows against the rate schedule (``collectors.sources.rate_file``): "schedule",
#: a step counts from the rate file's write. Reports without the key ran the source before 2026-11-27, which
#: counted a step from its previous call, a trigger early (``bench.scaling_calibrate`` replays those with
#: the trigger at phase 0, as they were calibrated)
SOURCE_ARRIVALS = "schedule"


def _f(x, spec: str) -> str:
    return "-" if x is None else format(x, spec)


def format_cluster(r: dict) -> str:
    """One line of the run's measured cluster parameters (``cluster``, ``service``)."""
    c, svc = r.get("cluster") or {}, r.get("service") or {}
    prov = (c.get("provisioning") or {}).get("register_s") or {}
    warm, ovh = c.get("warmup") or {}, c.get("driver_overhead") or {}
    src = c.get("sources") or {}
    return (f"{r['policy']}: register {_f(prov.get('median'), '.1f')} s (p90 {_f(prov.get('p90'), '.1f')}, "
            f"{(c.get('provisioning') or {}).get('samples', 0)} executors, {src.get('provisioning', '-')}); "
            f"warm-up ×{_f(warm.get('factor'), '.2f')} ({src.get('warmup', '-')}); "
            f"overhead {_f(ovh.get('mean_s'), '.2f')} s/batch ({ovh.get('samples', 0)} batches, "
            f"{src.get('driver_overhead', '-')}); service {_f(svc.get('row_cost_s') and svc['row_cost_s'] * 1e6, '.0f')} "
            "µs/row")


def format_real_table(report: dict) -> str:
    head = (f"{'policy':<18} {'SLO windows':>11} {'plane SLO':>9} {'exec-s':>8} {'vs static':>9} {'actions':>7} "
            f"{'oscill.':>7} {'mean exec':>9} {'p95 win lat s':>13}")
    lines = [head, "-" * len(head)]
    f = _f
    for r in report["results"]:
        lines.append(f"{r['policy']:<18} {f(r['slo_attainment_windows'], '.3f'):>11} {f(r['plane_attainment'], '.3f'):>9} "
                     f"{r['executor_seconds']:>8.0f} {f(r['ratio_vs_static'], '.3f'):>9} {r['actions']:>7} "
                     f"{r['oscillations']:>7} {f(r['mean_executors'], '.2f'):>9} {f(r['window_latency_p95_s'], '.1f'):>13}")
    lines.append("")
    lines += ["measured: " + format_cluster(r) for r in report["results"] if "cluster" in r]
    lines.append(f"constraint: mean record latency ≤ {report['bound_s']:g} s per {report['span_s']:g} s span; "
                 f"profile {', '.join(f'{x:g}' for x in report['levels'])} rows/s × {report['level_s']:g} s; "
                 "goal: SLO windows ≥ 0.95 " + "; ".join(
                     f"{r['policy']} {'met' if r['slo_met'] else 'missed'}" for r in report["results"]))
    return "\n".join(lines)
