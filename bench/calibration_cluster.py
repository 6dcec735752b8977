"""The cluster a real run measured, as the calibrated simulator's parameters (issue 14, "The simulator
learns from real runs"; :mod:`bench.scaling_calibrate` runs the simulator with them).

From the JSON ``bench scaling-real`` writes, pooled over its policy runs (one cluster served them all;
:func:`cluster_params`):

- provisioning: ``up_delays_s``, every run's directive → executor registered delays, first in first
  out from its ``decisions`` and per-second ``timeline`` (:func:`registration_delays`); each simulated
  scale-out draws its delay from them (the tail matters on a loaded machine: 5.2–6.8 s, and 13.0–30.8 s
  for the executors the utilization-target run of ``scaling-real-2026-11-25-1539`` asked for while the
  host was busiest), ``up_delay_s`` = their median. Without such delays (no scale-out, no timeline):
  the sample-weighted mean of the runs' median register delays the control plane measured;
- release: ``release_delay_s``, the median over every run's scale-ins of executor released (the end
  of the batch running at the decision) → gone from the driver's list (:func:`release_delays`; 5.5 s
  on the standalone cluster). Not measured (no scale-in): 0. It moves only the executor-seconds:
  over runs 43–61 the simulated/real ratio went from 0.98 to 1.00 on average;
- the executor warm-up job (``collectors.executor_warmup``; reports with ``warm_executors``):
  ``prewarm_s``, the median of the runs' ``warm_job_s`` (each warm-up job's seconds), else
  :data:`PREWARM_S`; and the warm-up of the executors that took a waiting task as they registered
  (the profile's ``cold_work_factor`` / ``cold_tasks``), which no warm-up job reaches, instead of all
  new executors'; a warmed executor's first task by the others' (``idle_work_factor``, at least 1:
  ``prewarm_factor``). Reports from before it (no ``warm_executors``) whose profile has the ``cold_*``
  fields: the same split with no warm-up job (``prewarm_s`` 0): a cold executor that took a waiting
  task ×``cold_work_factor``, one that registered idle ×``idle_work_factor`` on its first task (runs
  83–89 re-profiled: ×2.6–2.8 against ×2.1–2.3); profiles without them: all new executors alike;
- the batch model, fitted on every run's ``batch_points`` together, with the driver overhead
  the control plane measured (batch − span of its tasks, ``driver_overhead_s``) held fixed
  (:func:`fit_split`: duration = driver overhead + waves × (task overhead + per-slot overhead ×
  slots + rows / partitions × per-row cost)): ``task_overhead_s`` + ``task_overhead_per_slot_s`` ×
  slots = the fixed time of a task (growing with the executors sharing the machine's cores),
  ``row_cost_s`` = the per-row slope, ``noise_sigma`` = the spread of log(measured / fitted) (per-batch lognormal noise;
  ``task_noise_sigma`` is then 0: the residuals hold all the noise). The simulator's
  ``overhead_s`` before the tasks is 0. Why the split: what a batch spends beyond its per-row
  work is mostly *inside* its tasks on Spark (the control plane measured 0.22 s of a 1.3 s
  intercept outside them), where the stage statistics see it — the busy slot-seconds per record
  (DS2's true processing rate, which utilization-target sizes on) and Kingman's service time.
  The earlier model put the whole intercept outside the tasks (``driver_overhead_s`` = intercept,
  ``task_overhead_s`` 0): its tasks read 25 % cheaper per record than the real ones, and the
  simulated utilization-target scaled in at 8 000 rows/s where the real one did not (simulated
  attainment 7.5 points below the real run's, ``tests/data/scaling-real-2026-11-25-1336.json``);
  with the split the gap is within 5 points for every policy (``tests/unit/test_bench_scaling_calibrate.py``).
  Without a control-plane driver overhead (or when the split fit has no positive per-row slope):
  the intercept fit (``bench.scaling_real_measure.fit_batches``), all of it outside the tasks;
- without batch points (or no usable fit): the control plane's driver overhead where it has
  samples, else the runs' own, and the per-row service (``service.row_cost_s``), else the job's
  configured ``row_cost_us``;
- warm-up (control plane only): ``warmup_factor`` and the tasks it lasts, sample-weighted over
  the runs (none measured: no warm-up). The factor that slows the simulated executors is the
  profile's ``work_factor`` (its slow tasks' run time over a steady one's, weighed by time; reports
  from 2026-11-27 20:00 UTC on), and the one the simulated control plane reports to the policies
  its ``factor``, as the real one did (``reported_warmup_factor``); a report without
  ``work_factor`` uses ``factor`` for both, as before. The measured tasks count every stage's tasks on the new
  executor, while a simulated task is a partition's whole batch (all its stages): ``warmup_tasks`` =
  measured tasks / the job's stages per batch (the most stage templates a run's ``service`` lists),
  rounded up: one slow task of the first stage makes the new executor's first simulated task slow.
  (Rounded to the nearest until 2026-11-27, 1 task / 2 stages gave 0 and no warm-up at all: run 52,
  Kingman without its spare, lost a span on the spike to new executors ×2.3 slow on their first
  task, and the simulator kept every span.)
  ``warmup_s`` stays 0: the measured ``duration_s`` is the same window in wall time (until the last
  slow task), and the simulator would slow every task in it on top of the counted ones;
- start-up contention (control plane only, reports from 2026-11-27 22:00 UTC on):
  ``startup_contention`` = the profile's ``contention_factor`` (the executors already working ran
  their tasks that much slower while new ones started) for ``startup_s`` after each registration
  (the profile's start-up window), sample-weighted over the runs, at least 1 (under 1 is noise).
  Without it: none, as before. Runs 85–89 (2026-11-27, Kingman on the spike, with and without its spare)
  measured ×0.97–1.05: the batch a 1 → 4 scale-out joins is long because a new executor takes its
  last pending task and runs it ×2.2 (4.4 s for 18 000 records a steady task runs in 2.0 s), not
  because the old executor slows.

In a report of several policies each run takes its own new executors' warm-up where the profile splits
them into cold and idle ones (:func:`run_warmup`). Units: seconds, rows/s, core-seconds per row.
"""
from __future__ import annotations

import math

import numpy as np

from spark_governor.bench.scaling_real_measure import fit_batches

SAMPLE_LAG_S = 0.5  # the driver's executor samples are 1 s apart: a registration is ~0.5 s before the first

#: a warm-up job's seconds on a cold executor when a run with warm-up (``warm_executors``) did not record them:
#: the time a cold executor's first mapInPandas task took beyond a warm one's (3.8 s − 1.1 s on the 2-core
#: standalone cluster, ``bench warmup``, 2026-11-28; its warm-up jobs took 3.5 s)
PREWARM_S = 2.7


def _weighted(parts: list[tuple[float, int]]) -> float | None:
    parts = [(v, n) for v, n in parts if v is not None and n]
    total = sum(n for _, n in parts)
    return sum(v * n for v, n in parts) / total if total else None


def cluster_params(report: dict) -> dict:
    """The cluster parameters pooled over the report's runs (module docstring); None = not measured.
    ``fit``: the pooled batch-duration fit."""
    prov, ovh, plane_ovh, factor, tasks, secs, cost, points, stages = [], [], [], [], [], [], [], [], 1
    work, crowd, startup, cold, cold_tasks, idle = [], [], [], [], [], []
    delays, releases, prewarm = [], [], []
    for r in report["results"]:
        prewarm += [float(x) for x in r.get("warm_job_s") or []]
        # a replayed log's executors dated against the application's initial request (bench.replay_prediction)
        delays += [float(x) for x in r.get("registration_s") or []] + registration_delays(r)
        releases += release_delays(r)
        c, svc = r.get("cluster") or {}, r.get("service") or {}
        p = c.get("provisioning") or {}
        prov.append(((p.get("register_s") or {}).get("median"), p.get("samples") or 0))
        o = c.get("driver_overhead") or {}
        ovh.append((o.get("mean_s"), o.get("samples") or 0))
        if (c.get("sources") or {}).get("driver_overhead") == "control-plane":
            plane_ovh.append((o.get("mean_s"), o.get("samples") or 0))
        w = c.get("warmup") or {}
        n = w.get("samples") or 0
        factor.append((w.get("factor"), n))
        work.append((w.get("work_factor"), n))
        crowd.append((w.get("contention_factor"), n))
        startup.append((w.get("startup_s"), n))
        cold.append((w.get("cold_work_factor"), w.get("cold_samples") or 0))
        cold_tasks.append((w.get("cold_tasks"), w.get("cold_samples") or 0))
        idle.append((w.get("idle_work_factor"), max(0, n - (w.get("cold_samples") or 0))))
        tasks.append((w.get("tasks"), n))
        secs.append((w.get("duration_s"), n))
        if svc.get("row_cost_s"):
            cost.append(svc["row_cost_s"])
        stages = max(stages, len(svc.get("templates") or []))
        points += r.get("batch_points") or []
    partitions = int(report.get("partitions") or 4)
    plane = _weighted(plane_ovh) if plane_ovh else None
    fit = fit_split(points, partitions, plane) if plane is not None else None
    if fit is None or fit["row_cost_s"] is None:
        fit = {**fit_batches(points, partitions), "task_overhead_s": 0.0, "task_overhead_per_slot_s": 0.0}
    t = _weighted(tasks)
    # the factor that slows the simulated executors, and the one the simulated plane reports (module docstring)
    plane_factor, work_factor = _weighted(factor), _weighted(work)
    split = _weighted(cold) is not None
    if split:
        # new executors that took a waiting task at once (cold) are slowed by what those measured; the others,
        # which registered idle, by theirs (prewarm_factor), after the warm-up job when the run warmed them
        work_factor, t = _weighted(cold), _weighted(cold_tasks)
    use_fit = fit["row_cost_s"] is not None
    return {"up_delay_s": float(np.median(delays)) if delays else _weighted(prov),
            "up_delays_s": delays,
            "driver_overhead_s": fit["overhead_s"] if use_fit else plane if plane is not None else _weighted(ovh),
            "task_overhead_s": fit["task_overhead_s"] if use_fit else None,
            "task_overhead_per_slot_s": fit.get("task_overhead_per_slot_s") if use_fit else None,
            "warmup_factor": work_factor if work_factor is not None else plane_factor,
            "reported_warmup_factor": plane_factor if work_factor is not None else None,
            # cold_tasks counts the heaviest stage's tasks already; tasks counts every stage's
            "warmup_tasks": (math.ceil(t - 1e-9) if split else math.ceil(t / stages - 1e-9)) if t is not None else None,
            "warmup_s": _weighted(secs), "stages_per_batch": stages,
            "startup_contention": _weighted(crowd), "startup_s": _weighted(startup),
            "row_cost_s": fit["row_cost_s"] if use_fit else float(np.mean(cost)) if cost else None,
            "noise_sigma": fit["noise_sigma"] if use_fit else None,
            "task_noise_sigma": 0.0 if use_fit else None,
            "release_delay_s": float(np.median(releases)) if releases else None,
            "prewarm_s": (float(np.median(prewarm)) if prewarm else PREWARM_S) if report.get("warm_executors")
            else 0.0 if split else None,
            "prewarm_factor": _weighted(idle) if split or report.get("warm_executors") else None,
            "split": split,
            "fit": fit}


def registration_delays(run: dict) -> list[float]:
    """Directive → executor registered (s), per executor a scale-out asked for, from the run's own
    ``decisions`` ([t s, old, new]) and ``timeline`` (per-second driver samples [t s, executors]):
    Spark grants executor requests in order, so the k-th executor to register after t0 is the oldest
    request still outstanding (first in, first out); a scale-in first cancels the newest outstanding
    requests. Resolution: the 1 s sampling; the registration is taken half a sample before the first
    sample counting it (``SAMPLE_LAG_S``; on the quiet run these delays are 1.6–2.8 s, the control plane's
    ``ExecutorAdded`` medians 2.1–2.4 s). Why not the control plane's ``register_s``: it pairs an
    executor with the latest decision before its registration, so an executor that came late is
    counted for a later decision, with a short delay: the utilization-target run of
    ``scaling-real-2026-11-25-1539`` asked at 82.4, 98.4 and 114.3 s and its driver counted the
    executors from 113.7, 119.8 and 127.9 s (30.8, 20.9, 13.0 s in order), which ``register_s`` reported as 6.5 s median."""
    tl = sorted((float(t), int(n)) for t, n in run.get("timeline") or [] if n is not None)
    decs = sorted((float(d["t_s"]), int(d["new"])) for d in run.get("decisions") or []
                  if isinstance(d.get("new"), (int, float)) and isinstance(d.get("t_s"), (int, float)))
    if not tl or not decs:
        return []
    before = [n for t, n in tl if t <= 0]
    count = before[-1] if before else tl[0][1]
    events = sorted([(t, 1, n) for t, n in decs] + [(t, 0, n) for t, n in tl if t > 0])
    pending: list[float] = []
    delays = []
    for t, kind, n in events:
        if kind == 1:  # a decision: the target is n
            want = n - count - len(pending)
            if want > 0:
                pending += [t] * want
            elif want < 0:
                del pending[len(pending) + max(want, -len(pending)):]
        elif n > count:
            for _ in range(min(n - count, len(pending))):  # registered within the second before t
                delays.append(max(0.0, t - SAMPLE_LAG_S - pending.pop(0)))
            count = n
        else:
            count = n
    return delays


def release_delays(run: dict) -> list[float]:
    """Executor released → gone from the driver's list (s), per scale-in of the run, from its
    ``decisions`` ([t s, old, new]), ``batch_points`` ([t s, rows, executors, duration s]) and
    ``timeline`` (per-second samples [t s, executors]). The applier kills executors only between
    batches (``collectors.appliers.ExecutorApplier``), so the release is the end of the batch running at
    the decision, else the decision; gone is the first sample at or below the new size, less
    ``SAMPLE_LAG_S``. A scale-in overtaken by the next decision before its sample is skipped. On the
    standalone cluster 4.7–7.8 s (median 5.5 s, 113 scale-ins of runs 14–61): the reporter's next cycle
    (≤ 1 s), then the master kills the executor's process and the driver hears of it."""
    tl = sorted((float(t), int(n)) for t, n in run.get("timeline") or [] if n is not None)
    decs = sorted((float(d["t_s"]), int(d["old"]), int(d["new"])) for d in run.get("decisions") or []
                  if all(isinstance(d.get(k), (int, float)) for k in ("t_s", "old", "new")))
    batches = [(float(b[0]), float(b[0]) + float(b[3])) for b in run.get("batch_points") or [] if len(b) >= 4]
    out = []
    for i, (t, old, new) in enumerate(decs):
        if new >= old:
            continue
        until = decs[i + 1][0] if i + 1 < len(decs) else math.inf
        released = next((end for start, end in batches if start <= t < end), t)
        gone = next((s for s, n in tl if s >= t and n <= new), None)
        if gone is not None and gone < until:
            out.append(max(0.0, gone - SAMPLE_LAG_S - released))
    return out


def fit_split(points: list[list], partitions: int, driver_overhead_s: float) -> dict:
    """Robust fit of duration − ``driver_overhead_s`` = waves × (task overhead + per-slot overhead ×
    slots + rows / partitions × row cost) over ``points`` ([t s, rows, executors, duration s]; slots =
    min(executors, partitions), waves = ⌈partitions / slots⌉), seconds, seconds per slot and
    core-seconds per row. ``row_cost_s`` None when fewer than 3 points, no spread in the work or a
    non-positive slope.

    Why a per-slot part: a task's fixed time grows with the executors sharing the 2-core machine (its
    fixed work is CPU; the bench job's per-row cost is a sleep): on the quiet run
    ``scaling-real-2026-11-25-1336`` the fit gives 0.07 s + 0.12 s per slot (a task's fixed time 0.19 s
    on 1 executor, 0.54 s on 4) and 99 µs per row (the job's nominal 100). With one fixed time for every
    executor count (0.34 s there), the 4-executor batches pulled it up for 1 and 2 executors, where the
    reactive policies decide: on their 1–2-executor batches the median |log(measured / predicted)| was
    0.067 (threshold) and 0.117 (utilization-target), with the per-slot part 0.023 and 0.036; on the
    loaded ``scaling-real-2026-11-25-1539`` 0.435 and 0.371 → 0.388 and 0.313. What it does not fix
    there: the runs met different load (the pooled model predicts threshold's batches 26 % too long and
    utilization-target's 15 % too short: the mean log residual per run, −0.23 and +0.16), and one
    pooled model cannot carry both.

    Robust, relative: iteratively reweighted least squares on the relative error (weights 1 / fitted²)
    with Tukey's biweight (c = 4.685) on log(measured / fitted) scaled by its MAD, so the few batches an
    executor change disrupted (a new executor's first task 3–14 s slower, tasks re-run after a
    removal; the simulator models those itself) and the 30 s batches of a backlog do not set the
    per-task cost of the 2 s ones. A negative coefficient is refitted at 0 (the task overhead first).
    ``noise_sigma``: the robust spread of log(measured / fitted), 1.4826 × its median absolute
    deviation — the batch-to-batch noise (not the standard deviation: the disrupted batches are not
    random per batch; drawn as per-batch noise they made simulated overruns 2–3 times too frequent)."""
    none = {"samples": len(points), "overhead_s": driver_overhead_s, "task_overhead_s": None,
            "task_overhead_per_slot_s": None, "row_cost_s": None, "noise_sigma": None}
    if len(points) < 3:
        return none
    slots = np.array([max(1, min(n, partitions)) for _, _, n, _ in points], dtype=float)
    waves = np.ceil(partitions / slots)
    work = np.array([w * rows / partitions for w, (_, rows, _, _) in zip(waves, points)], dtype=float)
    measured = np.array([d for *_, d in points], dtype=float)
    if np.ptp(work) <= 0 or (measured <= 0).any():
        return none
    dur = measured - driver_overhead_s
    cols = {"task_overhead_s": waves, "task_overhead_per_slot_s": waves * slots, "row_cost_s": work}
    # one slot count (a static run): the per-slot part cannot be told from the fixed one; all of it is fixed
    keep = list(cols) if np.ptp(slots) > 0 else ["task_overhead_s", "row_cost_s"]
    weight = 1.0 / measured ** 2
    coef, sigma = {}, None
    for _ in range(40):
        x = np.vstack([cols[k] for k in keep]).T
        root = np.sqrt(weight)
        beta, *_ = np.linalg.lstsq(x * root[:, None], dur * root, rcond=None)
        coef = dict(zip(keep, beta.tolist()))
        negative = [k for k in ("task_overhead_s", "task_overhead_per_slot_s") if k in keep and coef[k] < 0]
        if negative and len(keep) > 1:
            keep.remove(negative[0])
            continue
        fitted = np.maximum(driver_overhead_s + x @ beta, 1e-3)
        r = np.log(measured / fitted)
        sigma = float(1.4826 * np.median(np.abs(r - np.median(r))))
        u = r / (4.685 * max(sigma, 1e-3))
        new = np.where(np.abs(u) < 1, (1 - u ** 2) ** 2, 0.0) / fitted ** 2
        if np.allclose(new, weight, rtol=1e-6, atol=0):
            break
        weight = new
    c = coef.get("row_cost_s", 0.0)
    if c <= 0:
        return none
    return {"samples": len(points), "overhead_s": float(driver_overhead_s),
            "task_overhead_s": float(coef.get("task_overhead_s", 0.0)),
            "task_overhead_per_slot_s": float(coef.get("task_overhead_per_slot_s", 0.0)),
            "row_cost_s": float(c), "noise_sigma": sigma}


#: the cluster parameters of a new executor's warm-up that :func:`run_warmup` takes from the policy run itself
RUN_WARMUP_KEYS = ("warmup_factor", "reported_warmup_factor", "warmup_tasks", "prewarm_factor")


def run_warmup(report: dict, run: dict, cluster: dict) -> dict:
    """``cluster`` with the warm-up of ``run``'s own new executors, where the pooled profile splits them into
    cold and idle ones (:func:`cluster_params`) and the run measured new executors: how slow a cold executor
    is depends on how many start beside it (on the 2-core machine, utilization-target's 1 → 4 scale-out read
    ×4.1–4.5 in runs 95 and 97 with two warm-up jobs running beside it, where threshold's one executor at a
    time took no waiting task), so a run slows its cold executors by its own figure, and one that measured
    none of them all its new executors alike by its own ``work_factor``. Pooled profiles without the split:
    ``cluster`` unchanged (every report calibrated before 2026-11-28 05:00 UTC)."""
    w = (run.get("cluster") or {}).get("warmup") or {}
    if len(report["results"]) == 1 or not w.get("samples") or cluster.get("split") is not True:
        return cluster
    own = cluster_params(dict(report, results=[run]))
    return {**cluster, **{k: own[k] for k in RUN_WARMUP_KEYS}}
