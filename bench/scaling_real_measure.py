"""What ``bench scaling-real`` measures of the cluster in one run: provisioning delay, warm-up of new
executors, the driver's per-batch overhead and the service times — the parameters ``bench scaling
--calibrate`` gives the simulator (``bench.scaling_calibrate``). Issue 14, "The simulator learns from
real runs".

Source, per part (``sources`` in the result names which was used):

* ``control-plane``: ``GET /api/v1/jobs/<job>/cluster`` of the control plane (its measurement from the
  listener's events: directive sent → ``ExecutorAdded`` / first task on the new executor; warm-up factor =
  a new executor's first tasks' service time / the steady one; driver overhead = batch duration − the
  span of its tasks). A part with no samples there, or an endpoint that answers 404 (a control plane
  without that measurement), falls back to:
* ``bench``: what the bench itself sees —

  - provisioning (``register_s``): per executor asked for by a scale-up directive, the time from the
    directive (``created_ms``) to the first per-second driver sample counting it (executors ≥ the
    count at the directive + k for the k-th); resolution 1 s, the reporter's directive poll included.
    ``first_task_s`` is not visible to the bench (None);
  - driver overhead: the batches' durations fitted to the simulator's model of a batch (least
    squares over the batches with rows triggered in the run, ``batch_points``):
    ``triggerExecution`` = overhead + ⌈partitions / slots⌉ × rows / partitions × per-row cost, slots =
    executors sampled at the batch's trigger (at most ``partitions``). The intercept is the per-batch
    overhead — the time the tasks' work does not explain, what the simulator must add to every batch
    —; the slope (``fit.row_cost_s``, core-seconds per row) and the spread of log(measured / fitted)
    (``fit.noise_sigma``, the lognormal shape of the per-batch noise) are kept with it.
    ``outside_add_batch_s`` (``triggerExecution`` − ``addBatch``: offsets, planning and commit only)
    is kept beside it as a lower bound. Each batch's (t, rows, executors, duration) is in
    ``batch_points`` for a pooled fit (``bench.scaling_calibrate``);
  - warm-up: not visible without per-task data (factor None: the simulator then assumes none).

* service times (always from the control plane's stage statistics, ``GET /api/v1/jobs/<job>/stages``):
  per stage template the tasks, mean and CV of the task service time (s), records in and busy seconds;
  ``row_cost_s`` = Σ busy seconds over the templates / the records read by the source stage (the
  template with the most records): core-seconds per input row, all stages of a batch included (on a
  machine with fewer cores than executors it grows with the executors: time-sharing is busy time).
  ``fit`` is the batch-duration fit above.

Units: seconds (delays, overheads, service times), core-seconds per row, epoch seconds for ``t`` in
the driver's samples, epoch ms in the control plane's records.
"""
from __future__ import annotations

import math
from typing import Optional

import numpy as np
import requests

from spark_governor.aggregators.cluster_profile import NO_WARMUP


def _summary(values: list[float]) -> dict:
    v = np.asarray(values, dtype=float)
    if not len(v):
        return {"samples": 0, "mean": None, "median": None, "p90": None}
    return {"samples": int(len(v)), "mean": float(v.mean()), "median": float(np.median(v)),
            "p90": float(np.percentile(v, 90))}


def _count_at(samples: list[tuple[float, int]], t: float) -> Optional[int]:
    """Executors in the latest sample at or before ``t`` (epoch s)."""
    before = [n for s, n in samples if s <= t]
    return before[-1] if before else None


def provisioning_from_samples(decisions: list[dict], samples: list[dict]) -> dict:
    """Per executor asked for by a scale-up directive: directive → first sample counting it (s).
    ``decisions``: the API's decision records (``created_ms``, ``new_value``); ``samples``: the driver's
    per-second ``{"t": epoch s, "executors": n}``. A directive superseded before it was met is only
    counted for the executors that registered before the next directive."""
    pts = sorted((s["t"], s["executors"]) for s in samples if s.get("executors") is not None)
    decs = sorted(decisions, key=lambda d: d["created_ms"])
    delays = []
    for i, d in enumerate(decs):
        t_dec = d["created_ms"] / 1000.0
        until = decs[i + 1]["created_ms"] / 1000.0 if i + 1 < len(decs) else math.inf
        base = _count_at(pts, t_dec)
        if base is None or d["new_value"] <= base:
            continue
        for k in range(1, d["new_value"] - base + 1):
            hit = next((s for s, n in pts if t_dec <= s <= until and n >= base + k), None)
            if hit is not None:
                delays.append(hit - t_dec)
    reg = _summary(delays)
    return {"samples": reg["samples"], "register_s": {"median": reg["median"], "p90": reg["p90"]},
            "first_task_s": {"median": None, "p90": None}}


def batch_points(progress: list[dict], samples: list[dict], t0: float, t_end: float) -> list[list]:
    """[s since t0, rows, executors at the trigger, duration s] of the batches with rows triggered in
    [t0, t_end] (epoch s) and an executor sample before them."""
    pts = sorted((s["t"], s["executors"]) for s in samples if s.get("executors") is not None)
    out = []
    for p in sorted(progress, key=lambda p: p["trigger_ms"]):
        t = p["trigger_ms"] / 1000.0
        n = _count_at(pts, t)
        if p.get("rows") and p.get("processing_ms") is not None and t0 <= t <= t_end and n:
            out.append([round(t - t0, 3), int(p["rows"]), int(n), p["processing_ms"] / 1000.0])
    return out


def fit_batches(points: list[list], partitions: int) -> dict:
    """Least-squares fit of duration = overhead + ⌈partitions / slots⌉ × rows / partitions × row cost
    over ``points`` (:func:`batch_points`); None values when fewer than 3 points, no spread in the work
    or a non-positive slope (then the durations say nothing about the per-row cost)."""
    none = {"samples": len(points), "overhead_s": None, "row_cost_s": None, "noise_sigma": None}
    if len(points) < 3:
        return none
    work = np.array([math.ceil(partitions / max(1, min(n, partitions))) * rows / partitions
                     for _, rows, n, _ in points], dtype=float)
    dur = np.array([d for *_, d in points], dtype=float)
    if np.ptp(work) <= 0:
        return none
    (a, b), *_ = np.linalg.lstsq(np.vstack([np.ones_like(work), work]).T, dur, rcond=None)
    if b <= 0:
        return none
    fitted = a + b * work
    ok = (fitted > 0) & (dur > 0)
    sigma = float(np.std(np.log(dur[ok] / fitted[ok]))) if ok.sum() >= 2 else None
    return {"samples": len(points), "overhead_s": float(a), "row_cost_s": float(b), "noise_sigma": sigma}


def overhead_from_progress(progress: list[dict], samples: list[dict], partitions: int, t0: float,
                           t_end: float) -> dict:
    """Per-batch driver overhead (s) of the batches with rows triggered in [t0, t_end] (epoch s): the
    intercept of :func:`fit_batches` (see the module docstring), with ``fit`` and ``outside_add_batch_s``."""
    points = batch_points(progress, samples, t0, t_end)
    fit = fit_batches(points, partitions)
    outside = [p["processing_ms"] / 1000.0 - p["add_batch_ms"] / 1000.0 for p in progress
               if p.get("rows") and p.get("add_batch_ms") is not None and p.get("processing_ms") is not None
               and t0 <= p["trigger_ms"] / 1000.0 <= t_end]
    o = _summary(outside)
    a = fit["overhead_s"]
    return {"samples": fit["samples"] if a is not None else 0, "mean_s": a, "median_s": None, "p90_s": None,
            "fit": fit, "outside_add_batch_s": {"samples": o["samples"], "mean_s": o["mean"], "median_s": o["median"]},
            "batch_points": points}


def service_from_stages(stages: list[dict]) -> dict:
    """Per-template service statistics and the per-row cost (core-seconds per row) from the control
    plane's ``/stages`` answer (its ``stages`` list)."""
    rows = []
    for st in stages:
        s = st.get("summary")
        if not s or not s.get("tasks"):
            continue
        svc = s.get("service") or {}
        rows.append({"key": st["key"], "name": st.get("name"), "tasks": s["tasks"], "service_mean_s": svc.get("mean"),
                     "service_cv": svc.get("cv"), "records_in": s.get("records_in") or 0,
                     "busy_seconds": s.get("busy_seconds") or 0.0})
    source = max(rows, key=lambda r: r["records_in"], default=None)
    busy = sum(r["busy_seconds"] for r in rows)
    heavy = max(rows, key=lambda r: r["busy_seconds"], default=None)
    return {"templates": rows,
            "row_cost_s": busy / source["records_in"] if source and source["records_in"] else None,
            "task_service_cv": heavy["service_cv"] if heavy else None}


def fetch_cluster(url: str, job: str, get=requests.get) -> Optional[dict]:
    """The control plane's cluster measurement of ``job``, or None when it has none (404: a control
    plane without the endpoint or without the job). Other failures raise."""
    r = get(f"{url}/api/v1/jobs/{job}/cluster", timeout=10)
    if r.status_code == 404:
        return None
    r.raise_for_status()
    return r.json()


def _has(part: Optional[dict]) -> bool:
    return bool(part) and (part.get("samples") or 0) > 0


def merge_cluster(plane: Optional[dict], bench: dict) -> dict:
    """Per part, the control plane's measurement when it has samples, else the bench's; ``sources``
    names the one used (``bench`` parts keep their extra fields)."""
    out, sources = {}, {}
    for part in ("provisioning", "warmup", "driver_overhead"):
        mine = (plane or {}).get(part)
        if _has(mine):
            out[part], sources[part] = mine, "control-plane"
        else:
            out[part], sources[part] = bench[part], "bench"
    out["prediction_error"] = (plane or {}).get("prediction_error")
    out["sources"] = sources
    out["endpoint"] = plane is not None
    return out


def measure_run(url: str, job: str, *, decisions: list[dict], samples: list[dict], progress: list[dict],
                t0: float, t_end: float, partitions: int, get=requests.get) -> dict:
    """The cluster parameters of one run (module docstring): ``{"cluster": ..., "service": ...,
    "batch_points": ...}``."""
    stages = get(f"{url}/api/v1/jobs/{job}/stages?windows=1000", timeout=10)
    service = service_from_stages(stages.json().get("stages", []) if stages.status_code == 200 else [])
    overhead = overhead_from_progress(progress, samples, partitions, t0, t_end)
    points = overhead.pop("batch_points")
    service["fit"] = overhead["fit"]
    bench = {"provisioning": provisioning_from_samples(
                 [d for d in decisions if t0 * 1000 <= d["created_ms"] <= t_end * 1000], samples),
             "warmup": dict(NO_WARMUP),
             "driver_overhead": overhead}
    return {"cluster": merge_cluster(fetch_cluster(url, job, get), bench), "service": service,
            "batch_points": points}


def executor_seconds(samples: list[dict], start: float, end: float) -> float:
    """∫ executors dt over [start, end] (epoch s) from per-second samples (step function)."""
    pts = [(s["t"], s["executors"]) for s in samples if s.get("executors") is not None]
    total, prev_t, prev_n = 0.0, start, None
    for t, n in pts:
        if t <= start:
            prev_n = n
            continue
        if t > end:
            break
        if prev_n is not None:
            total += prev_n * (t - prev_t)
        prev_t, prev_n = t, n
    if prev_n is not None:
        total += prev_n * (end - prev_t)
    return total
