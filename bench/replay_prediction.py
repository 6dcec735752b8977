"""What each executor policy would have done on a run the control plane only read: the calibrated simulator,
fed from the run's own event log (issue #43, "Predictions that can be checked").

A replayed run (``api.replay``) leaves in the store what the reporters would have sent live: micro-batches,
tasks, executors added and removed. :func:`log_report` turns that into the report ``bench scaling-real`` writes
for one run — so the simulator is calibrated from the log exactly as from a real bench run
(``bench.calibration_cluster.cluster_params``, ``bench.scaling_calibrate.sim_params``):

* **arrivals**: the main query's (the one that read the most rows) micro-batches: batch *k* read the rows that
  arrived after batch *k − 1* started up to its own start (offsets are taken at the batch's start), so the
  arrival rate over that interval is its ``numInputRows`` / the gap between the two starts, piecewise constant
  (``switches``). Exact for a source that offers rows as they arrive (Kafka, a rate source, files written
  steadily); a source that makes rows visible in bursts reads as the average over each gap;
* **service**: per micro-batch [s since t0, rows, executors at its start, duration s] (``batch_points``), with
  the driver overhead per batch (batch duration − the span of its tasks) the control plane measures the same
  way live (``aggregators.cluster_profile``), fitted by ``calibration_cluster.fit_split`` into the fixed time
  of a task, per slot, and per row;
* **executor registration**: Spark logs no executor request, only ``SparkListenerExecutorAdded``; the one
  request a log dates is the application's initial one, at its start. So the provisioning delay of a
  scale-out is read as application start → each executor the application started with registered
  (``registration_s``; at most :data:`INITIAL_REQUEST_S` after the start). Where executors were also added
  later and the control plane's profile dates them against decisions (a governed run), those count too;
* **warm-up**: that of executors added while the run ran (the profile's ``warmup``); a static run has none
  and the simulator's new executors are then warm — which flatters a policy that scales out (said in
  ``defaults``). The application's own executors' first tasks are no substitute: they run the query's first,
  backlogged batches (measured as the warm-up of the two static logs of 2026-12-07: ×1.6–1.9 over 6–10 tasks,
  which moved the predictions by up to 14 points without bringing them nearer the live runs);
* **release**: a released executor's time until the driver drops it, from the run's scale-ins; a static run has
  none: :data:`RELEASE_DELAY_S`.

Where the paper is silent and this module decides: the provisioning delay of a scale-out from a log with no
scale-out is read from the application's start, which on the standalone cluster is an upper bound (17 s for 4
executors starting at once, against 4–7 s for the live runs' scale-outs of 1–2); with the live runs' delays instead
the predictions moved up to 18 points *away* from the live runs (the missing warm-up then shows), so the log's own
figure is kept and said.

:func:`predict` runs every executor policy (today's defaults, bounds [1, the most executors the run had],
starting at 1 executor as ``bench scaling-real`` does) and the run as it was (a static allocation at its
executors) through the simulator over ``seeds`` seeds, from t0 (a trigger start) to the end of the window;
attainment is the share of constraint spans whose true mean record latency (``bench.latency_truth``, thesis
Eq. 4.1) is within the bound, computed for the log itself the same way (``measured``). A policy that would not
act still gets its prediction (the static run's executor-seconds or fewer). Units: seconds, rows/s,
executor-seconds.

:func:`replay_prediction` is what ``spark-governor replay`` calls for each application (a hook, so that the
API's modules do not import the benchmarks): None reasons for a batch application, a local-mode one (no
executors to scale) or a run with too few micro-batches.
"""
from __future__ import annotations

from collections import Counter
from typing import Optional

import numpy as np
from sqlalchemy import func, select
from sqlalchemy.engine import Engine

from spark_governor.aggregators import cluster_profile
from spark_governor.aggregators.models import batches, executor_events, jobs, stage_runs, template_vertices
from spark_governor.aggregators.runs import run_spans
from spark_governor.bench.calibration_cluster import cluster_params
from spark_governor.bench.latency_truth import schedule_rows, span_truths
from spark_governor.bench.scaling import GOVERNED
from spark_governor.bench.scaling_calibrate import sim_params, simulate_run
from spark_governor.bench.scaling_real_measure import executor_seconds
from spark_governor.bench.scaling_sim_model import DEFAULT_PARAMS

#: executors registered within this long of the application's start answered its initial request (s)
INITIAL_REQUEST_S = 60.0
#: fewer micro-batches with rows than this in the window: no fit, no prediction
MIN_BATCHES = 5
#: released executor → gone from the driver, where the log shows no release (a static run), seconds: the median
#: ``bench scaling-real`` measured on the standalone cluster in November (``bench.calibration_cluster``, 5.5 s; 5.2 s
#: and 5.5 s on 2026-12-07). Without it (0: gone at once) the predicted executor-seconds of the policies that scale
#: in most were 7–12 % under their live runs (Kingman 0.90 and 0.88, utilization-target 0.96 and 0.88), with it
#: 0.91–1.00 (``docs/benchmarks.md``, "Prediction from an event log")
RELEASE_DELAY_S = 5.5
#: the window predicted by default: the run's last hour at most (s)
MAX_WINDOW_S = 3600.0
#: seeds per policy in ``replay`` (each a different noise draw of the same run)
DEFAULT_SEEDS = 3
#: the policies predicted, in the table's order
POLICIES = GOVERNED
#: the control plane's surge evaluations as ``serve`` runs them by default (``api.app.Settings.surge_ratio``)
SURGE_RATIO = 0.25


class NoPrediction(ValueError):
    """The run cannot be predicted (the message says why)."""


def _job_id(conn, job: str) -> int:
    jid = conn.execute(select(jobs.c.id).where(jobs.c.name == job)).scalar()
    if jid is None:
        raise NoPrediction(f"job {job!r} is not in the store")
    return jid


def _executor_samples(events: list, t0_ms: int, end_ms: int) -> list[dict]:
    """Per-second samples {t (epoch s), executors} from executor add/remove times, over [t0 − 5 s, end]."""
    out = []
    t = t0_ms - 5000
    while t <= end_ms:
        n = sum(1 for e in events if e.added_ms is not None and e.added_ms <= t
                and (e.removed_ms is None or e.removed_ms > t))
        out.append({"t": t / 1000.0, "executors": n})
        t += 1000
    return out


def log_report(engine: Engine, job: str, *, bound_s: float, span_s: float, trigger_s: float,
               start_ms: Optional[int] = None, end_ms: Optional[int] = None, max_executors: Optional[int] = None,
               evaluation_interval_s: float = DEFAULT_PARAMS.eval_interval_s, window_ms: int = DEFAULT_PARAMS.window_ms,
               source_probe: bool = False, warm_executors: bool = True, launch_hold: bool = True,
               surge_ratio: Optional[float] = SURGE_RATIO) -> dict:
    """The ``bench scaling-real``-shaped report of ``job``'s latest run (module docstring), over the window
    [``start_ms``, ``end_ms``] (epoch ms; default: the run's first to last micro-batch, its last
    :data:`MAX_WINDOW_S` at most). ``trigger_s``: the
    job's trigger interval (``collectors.trigger_inference`` reads it back from a log); ``max_executors``:
    the policies' bound (default: the most executors the run had). The other options are how the job would be
    governed: the control plane's evaluation interval and statistics window, whether its source is probed
    between batches, whether ``attach()`` warms added executors and the listener jar holds them (its launch
    hold), and the control plane's surge evaluations (``serve``'s ``surge_ratio``; None: none). :class:`NoPrediction` when the run has too little to calibrate on."""
    with engine.connect() as conn:
        jid = _job_id(conn, job)
        run = next((r for r in run_spans(conn, jid) if r.latest), None)
        if run is None:
            raise NoPrediction("no run recorded")
        bs = conn.execute(select(batches.c.query_id, batches.c.batch_id, batches.c.trigger_ms,
                                 batches.c.batch_duration_ms, batches.c.num_input_rows)
                          .where(batches.c.job_id == jid, batches.c.job_run_id == run.run_id)
                          .order_by(batches.c.trigger_ms)).all()
        if not bs:
            raise NoPrediction("no micro-batch in the log")
        rows_by_query = Counter()
        for b in bs:
            rows_by_query[b.query_id] += b.num_input_rows or 0
        main = rows_by_query.most_common(1)[0][0]
        bs = [b for b in bs if b.query_id == main]
        evs = conn.execute(select(executor_events.c.executor_id, executor_events.c.added_ms,
                                  executor_events.c.removed_ms)
                           .where(executor_events.c.job_id == jid, executor_events.c.run_id == run.run_id)).all()
        evs = [e for e in evs if e.executor_id != "driver"]
        if not evs:
            raise NoPrediction("no executor in the log (local mode: nothing to scale)")
        parts = Counter(r.num_tasks for r in conn.execute(
            select(stage_runs.c.num_tasks).where(stage_runs.c.job_id == jid, stage_runs.c.query_id == main)))
        templates = conn.execute(select(func.count()).select_from(template_vertices)
                                 .where(template_vertices.c.job_id == jid)).scalar() or 1
        profile = cluster_profile.measure(conn, job, jid).to_json()
    hi = end_ms if end_ms is not None else bs[-1].trigger_ms + bs[-1].batch_duration_ms
    # by default the run's last MAX_WINDOW_S at most: a simulated second costs about a millisecond per policy and seed
    lo = start_ms if start_ms is not None else max(bs[0].trigger_ms, hi - int(MAX_WINDOW_S * 1000))
    # t0: the first batch start in the window (a trigger boundary: the simulator's phase 0)
    first = next((i for i, b in enumerate(bs) if b.trigger_ms >= lo), None)
    if first is None or first == 0 and len(bs) < 2:
        raise NoPrediction("no micro-batch in the window")
    first = max(first, 1)  # the rate over the gap before t0 needs the batch before
    t0_ms = bs[first].trigger_ms
    # arrivals: batch k's rows over (start_{k-1}, start_k]; the last gap ending at or after the window's end
    switches, k = [], first + 1
    while k < len(bs):
        a, b = bs[k - 1], bs[k]
        gap = (b.trigger_ms - a.trigger_ms) / 1000.0
        if gap > 0:
            switches.append([(a.trigger_ms - t0_ms) / 1000.0, (b.num_input_rows or 0) / gap])
        if b.trigger_ms >= hi:
            break
        k += 1
    end_s = min(hi, bs[min(k, len(bs) - 1)].trigger_ms) / 1000.0 - t0_ms / 1000.0
    in_window = [b for b in bs[first:] if b.trigger_ms <= t0_ms + end_s * 1000 and b.num_input_rows]
    if len(in_window) < MIN_BATCHES or not switches or end_s <= 0:
        raise NoPrediction(f"{len(in_window)} micro-batches with rows in the window (at least {MIN_BATCHES} needed)")
    samples = _executor_samples(evs, t0_ms, t0_ms + int(end_s * 1000))

    def at(t_ms: int) -> int:
        return sum(1 for e in evs if e.added_ms is not None and e.added_ms <= t_ms
                   and (e.removed_ms is None or e.removed_ms > t_ms))

    points = [[(b.trigger_ms - t0_ms) / 1000.0, int(b.num_input_rows), max(1, at(b.trigger_ms)),
               b.batch_duration_ms / 1000.0] for b in in_window]
    most = max(s["executors"] for s in samples)
    start_app = run.first_ms
    registration = sorted((e.added_ms - start_app) / 1000.0 for e in evs
                          if e.added_ms is not None and 0 <= e.added_ms - start_app <= INITIAL_REQUEST_S * 1000)
    partitions = parts.most_common(1)[0][0] if parts else 1
    static_n = round(executor_seconds(samples, t0_ms / 1000.0, t0_ms / 1000.0 + end_s) / end_s)
    cap = int(max_executors or most)
    run_json = {"policy": f"static-{max(1, min(cap, static_n))}", "switches": switches, "duration_s": end_s,
                "batch_points": points, "timeline": [[s["t"] - t0_ms / 1000.0, s["executors"]] for s in samples],
                "decisions": [], "cluster": {**profile, "sources": {"driver_overhead": "control-plane"}},
                "service": {"templates": [{}] * templates}, "registration_s": registration,
                "executor_seconds": executor_seconds(samples, t0_ms / 1000.0, t0_ms / 1000.0 + end_s)}
    return {"results": [run_json], "levels": [r for _, r in switches], "level_s": end_s / len(switches),
            "trigger_s": float(trigger_s), "bound_s": float(bound_s), "span_s": float(span_s),
            "max_executors": cap, "partitions": int(partitions), "evaluation_interval_s": float(evaluation_interval_s),
            "window_ms": int(window_ms), "source_probe": bool(source_probe), "warm_executors": bool(warm_executors),
            "launch_hold": bool(launch_hold), "launch_hold_waves": DEFAULT_PARAMS.launch_hold_waves if launch_hold
            else None, "slot_hold": bool(launch_hold and warm_executors), "surge_ratio": surge_ratio,
            "source_arrivals": "schedule", "t0_ms": t0_ms, "log_executors": most,
            "measured": measured_attainment(switches, end_s, in_window, t0_ms, bound_s, span_s)}


def measured_attainment(switches: list, end_s: float, in_window: list, t0_ms: int, bound_s: float,
                        span_s: float) -> Optional[float]:
    """The log's own true attainment over the window (``bench.latency_truth`` on the arrivals read back and the
    batches' starts and ends), as the simulator computes a prediction's."""
    grid, cum = schedule_rows([(t, r) for t, r in switches], end_s)
    starts = [(b.trigger_ms - t0_ms) / 1000.0 for b in in_window]
    ends = [s + b.batch_duration_ms / 1000.0 for s, b in zip(starts, in_window)]
    spans = span_truths(grid, cum, starts, ends, span_s, end_s)
    lat = np.array([s.latency_s for s in spans])
    return float((lat <= bound_s + 1e-9).mean()) if len(lat) else None


def predict(report: dict, policies=POLICIES, seeds: int = DEFAULT_SEEDS, seed: int = 0) -> dict:
    """Each policy of ``policies`` and the run as it was (``as_run``: its static allocation) simulated with the
    cluster the log measured; JSON-ready: per policy ``attainment`` (mean over seeds), ``attainment_range``,
    ``executor_seconds`` (registered executors, mean), ``actions``, ``ratio_vs_run`` (executor-seconds / the
    run's own over the window), ``saving`` (1 − that ratio), and the first seed's ``timeline`` and
    ``decisions`` (seconds since t0)."""
    cluster = cluster_params(report)
    release = cluster.get("release_delay_s") is None
    if release:  # a static run releases no executor: the standalone cluster's (module docstring)
        cluster = {**cluster, "release_delay_s": RELEASE_DELAY_S}
    params, defaults = sim_params(report, cluster)
    if release:
        defaults.append(f"release_delay_s ({RELEASE_DELAY_S:g} s, the standalone cluster's)")
    if not cluster.get("warmup_factor"):
        defaults = [d for d in defaults if d != "warmup_factor"]
        defaults.append("warm-up of an added executor (none in the log: simulated warm)")
    run = report["results"][0]
    used = run["executor_seconds"]
    out = {"t0_ms": report["t0_ms"], "duration_s": run["duration_s"], "bound_s": report["bound_s"],
           "span_s": report["span_s"], "trigger_s": report["trigger_s"], "max_executors": report["max_executors"],
           "partitions": report["partitions"], "executor_seconds": used, "measured_attainment": report["measured"],
           "seeds": list(range(seed, seed + seeds)), "defaults": sorted(defaults),
           "cluster": {k: params.__dict__[k] for k in ("up_delay_s", "driver_overhead_s", "task_overhead_s",
                                                      "task_overhead_per_slot_s", "row_cost_s", "noise_sigma")},
           "registration_s": run.get("registration_s"), "policies": {}}
    names = [run["policy"], *policies]
    for name in names:
        what = dict(report, policy_configs={name: {}} if name in GOVERNED else {})
        sim_run = {"policy": name, "initial_executors": 1, "switches": run["switches"],
                   "duration_s": run["duration_s"], "batch_points": run["batch_points"]}
        sim = simulate_run(what, sim_run, params, list(range(seed, seed + seeds)), trace=True)
        es, first = sim["executor_seconds"], sim["runs"][0]
        out["policies"]["as run" if name == run["policy"] else name] = {
            "attainment": sim["slo_attainment_windows"], "attainment_range": sim["slo_attainment_range"],
            "executor_seconds": es, "actions": sim["actions"], "ratio_vs_run": es / used if used else None,
            "saving": 1 - es / used if used else None, **({"static": name} if name == run["policy"] else {}),
            # the first seed's run, for a picture: [t s, registered, allocated], [t s, old, new, reason]
            "timeline": first["timeline"], "decisions": first["decisions"]}
    return out


def replay_prediction(engine: Engine, job: str, result: dict, seeds: int = DEFAULT_SEEDS) -> dict:
    """The hook ``spark-governor replay`` calls after importing an application: ``{"prediction": …}`` or
    ``{"reason": why none}``. ``result``: the replay's result (``api.replay.ReplayResult.to_json()``)."""
    slo = result.get("slo") or {}
    if not result.get("streaming"):
        return {"reason": "a batch application"}
    if str(result.get("master") or "").startswith("local"):
        return {"reason": "local mode: no executors to scale"}
    if not slo.get("bound_ms"):
        return {"reason": "no latency bound"}
    trigger_ms = slo.get("trigger_ms")
    if not trigger_ms:
        return {"reason": "no trigger interval read from the log"}
    try:
        report = log_report(engine, job, bound_s=slo["bound_ms"] / 1000.0, span_s=float(slo["span_s"]),
                            trigger_s=trigger_ms / 1000.0)
        return {"prediction": predict(report, seeds=seeds)}
    except NoPrediction as exc:
        return {"reason": str(exc)}


def best(prediction: dict, target: float = 0.95) -> Optional[str]:
    """The policy that keeps at least ``target`` of the spans with the fewest executor-seconds (None: none does)."""
    ok = [(p["executor_seconds"], name) for name, p in prediction["policies"].items()
          if name != "as run" and p["attainment"] is not None and p["attainment"] >= target - 1e-9]
    return min(ok)[1] if ok else None

