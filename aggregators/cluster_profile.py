"""What a job teaches about its cluster: provisioning delay, executor warm-up, driver overhead (issue #14).

Lohrmann's latency model (thesis §4.6.2, digest 004 §5.2) knows only the queueing and service of the
constrained tasks; his Nephele workers start in a fraction of a second and run long-lived subtasks.
On Spark (digest §11.1, §11.5 "Actuation latency") three costs outside the task statistics decide
whether a scaling action keeps a latency bound. They are measured here, per job and for its latest
run (``aggregators.runs``), from what the statistics store already holds — tasks with executor id and
times, micro-batches, executor decisions and, when the reporter sends them, executor add/remove times
(``executor_events``) — and kept as one bounded row per job (``cluster_profiles``), refreshed at each
policy evaluation (``api.governor``):

* **Provisioning delay** of each executor added by a scale-out decision, in two parts (seconds):
  ``register_s`` = the decision's directive sent (``decisions.created_ms``) → the executor registers
  (``SparkListenerExecutorAdded``; where the reporter did not send it, the executor's first task
  launch, an upper bound: ``register_source`` says which) and ``first_task_s`` = registration → the
  first task finished on it. An executor is the decision's when it first appears after the decision
  and before the next executor decision, at most ``new − old`` of them, within ``MAX_PROVISIONING_S``.
* **Warm-up** of a new executor (one first seen more than ``INITIAL_GRACE_S`` after the run's first
  task, i.e. not one the application started with, whose first tasks carry the application's own
  first-batch cost): its tasks' service time — run time per record read (input + shuffle) where the
  stage's tasks read records, else per task — divided by the *steady* service of the same stage
  template, the median over tasks that are not among the first ``first_tasks`` of their executor.
  ``factor`` = median over new executors of the mean ratio of their first ``first_tasks`` tasks;
  ``tasks`` / ``duration_s`` = median over new executors of how many tasks, and how many seconds from
  their first launch to the end of the last of them, ran before the first task at most
  ``slow_ratio`` (1.5) × steady that starts a run of ``STEADY_RUN`` tasks with a median that is too
  (0 when the first task already was; a stray slow task later, e.g. on a loaded machine, does not
  count). ``work_factor`` = median over new executors of the time those slow tasks (its first task
  when none was) held their slots (launch → finish: a cold executor spends up to seconds of it
  outside the run time) divided by the time steady tasks of the same templates hold theirs for the
  same records (a fixed part + a part per record fitted on the steady tasks, :func:`steady_model`):
  how much slower the executor works while it warms up. ``factor`` averages the
  per-task ratios of the first ``first_tasks`` tasks, so one slow task among nine steady ones reads
  1.13 where the batches say that task ran about 2.3× (run 83 on the standalone cluster, 2026-11-27),
  and a cheap task (a stateful stage's, reading few records) that is slow weighs as much as a long
  scan: runs 68, 69 and 72 read ×4.3–5.5 where their first batches on the new executors ran at most
  ×1.9 the batch model. ``work_factor`` weighs each task by its time, and runs at least through the
  executor's first task of the heaviest template (the most slot time): an executor whose first task
  was a cheap stateful one spent its start-up seconds there (run 69: 4.8 s for a task a steady
  executor runs in 0.1 s, ×39 alone; its next, a scan, ×1.6), and the simulator models the scan.
  ``startup_s`` = median over new executors of their start-up window: first launch → the end of their
  slow tasks (of their first task when none was slow). ``contention_factor`` = the slot time of the
  tasks of the executors that are not new that ran during such a window over the slot time
  steady tasks of the same templates take for the same records, weighed by time (None: no such task):
  executors starting on the machine — a JVM warming up, Python workers forked, state loaded — take CPU
  from those already working. Measured because run 84 on the 2-core standalone cluster (2026-11-27)
  took 12.2 s for the batch a 1 → 4 scale-out joined, where one executor alone takes about 8.6 s;
  runs 85–89 read ×0.97–1.05: there the new executors lengthened it by taking its last pending task
  and holding its slot ×2.5 as long (4.4 s run, 5.2 s in the slot, for 18 000 records a steady task
  holds 2.1 s).
  ``cold_samples`` / ``cold_work_factor`` / ``cold_tasks``: ``work_factor`` and ``tasks`` over the new
  executors whose first task launched within ``COLD_LAUNCH_S`` of their registration (``cold_tasks``
  counts the heaviest template's slow tasks only: the cheap stateful tasks' ratios, a fraction of a
  second for 64–128 records, stay over 1.5 for 8 tasks in run 72 where the scans were slow for 1): they took a task
  that was waiting and started cold whatever warm-up job ran for them (``collectors.executor_warmup``
  warms the others before they work: run 90 read ``work_factor`` ×1.43, the median of one cold executor at
  ×2.3 and two warmed ones). ``idle_work_factor``: ``work_factor`` over the others, registered more than
  that before their first task (warmed ones ran theirs ×1.4 in runs 91 and 92: the streaming query's own
  classes and code are still loaded then).
  The simulator calibrated from a real run slows a new executor's first task by ``work_factor`` (``bench.calibration_cluster``; by the
  ``cold_*`` and ``idle_work_factor`` figures where the profile has both kinds).
* **Driver overhead** per micro-batch (seconds): the batch's duration (``batchDuration``) minus the
  span of its tasks (first launch → last finish; tasks joined on query id and batch id). Planning,
  offset and commit log writes, the sink's commit and scheduling gaps are all in it. Batches without
  tasks are not counted; never negative.
* **Prediction error** of the decisions that took effect (``api.governor`` stores it in each
  decision's ``outcome``): relative error |predicted − measured| / measured of the mean record latency,
  per decision and its mean over the latest ``MAX_ERROR_DECISIONS``.

Times: the directive's time is the control plane's clock, the tasks' and executors' the driver's; they
are compared directly (the control plane and the driver are assumed to share a clock within a second).
Task rows read (issue #42: reporters fold tasks at the edge and send rows only for the profile and as
detail): each executor's first ``WARMUP_TASKS`` (32) tasks by launch — a new executor's warm-up — and the
uniform sample (one task in 16, ``policies.task_fold.sampled``), the steady tasks the warm-up is compared with
and the contention is read on. Before, every task row of the latest 5 000 was read; the steady medians now
come from the sample and the executors' tasks after their first ten, which is the price of a job-second the
control plane stores in well under a millisecond. First launches and finishes and the micro-batches' task
spans come from what the reporters folded over every task (``executor_events.first_*``, ``task_spans``).
Sizes are bounded: at most ``max_tasks`` sampled tasks (the latest), ``max_batches`` batches and
``MAX_DECISIONS`` decisions are read, and one profile row per job is kept.
"""
from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field
from typing import Iterable, Optional

from sqlalchemy import func, insert, or_, select, update
from sqlalchemy.engine import Connection

from spark_governor.aggregators.models import (batches, cluster_profiles, decisions, executor_events, jobs, task_spans,
                                               tasks)
from spark_governor.aggregators.runs import run_spans
from spark_governor.policies.task_fold import WARMUP_TASKS

#: an executor registering later than this after a scale-out decision is not counted as its (s)
MAX_PROVISIONING_S = 600.0
#: executors first seen within this long of the run's first task are the application's initial ones (s)
INITIAL_GRACE_S = 5.0
#: a new executor's warm-up ends at its first task at most ``slow_ratio`` × steady whose next
#: ``STEADY_RUN`` tasks' median is too (a later stray slow task does not extend it)
STEADY_RUN = 5
MAX_DECISIONS = 200
#: the warm-up part of a profile without a new executor to measure
NO_WARMUP = {"samples": 0, "factor": None, "tasks": None, "duration_s": None, "work_factor": None,
             "startup_s": None, "contention_factor": None, "cold_samples": 0, "cold_work_factor": None,
             "cold_tasks": None, "idle_work_factor": None}
#: a new executor whose first task launched within this long of its registration took a task that was
#: waiting (Spark offers a registering executor the running stage's pending tasks): it started cold,
#: whatever warm-up job ran for it (``collectors.executor_warmup``), seconds
COLD_LAUNCH_S = 1.0
MAX_ERROR_DECISIONS = 50


def quantile(xs: Iterable[float], q: float) -> Optional[float]:
    """The ``q`` quantile by linear interpolation between order statistics; None for no data."""
    v = sorted(xs)
    if not v:
        return None
    pos = q * (len(v) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (pos - lo)


def _dist(xs: list[float]) -> dict:
    return {"median": quantile(xs, 0.5), "p90": quantile(xs, 0.9)}


@dataclass
class ClusterProfile:
    """One job's measured cluster profile (seconds unless named otherwise); the ``/cluster`` answer."""

    job: str
    run_id: Optional[str]
    provisioning: dict = field(default_factory=dict)
    warmup: dict = field(default_factory=dict)
    driver_overhead: dict = field(default_factory=dict)
    prediction_error: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        return asdict(self)

    # -- what the Kingman policy uses (None when not measured) ---------------------------------
    @property
    def provisioning_delay_s(self) -> Optional[float]:
        """Median directive → first task finished on a new executor (register + first task), s."""
        r, f = self.provisioning["register_s"]["median"], self.provisioning["first_task_s"]["median"]
        return None if r is None else r + (f or 0.0)

    @property
    def register_s(self) -> Optional[float]:
        """Median directive → executor registered (``ExecutorAdded``, or its first launch), s."""
        return self.provisioning["register_s"]["median"]

    @property
    def driver_overhead_s(self) -> Optional[float]:
        return self.driver_overhead.get("mean_s")


def _latest_run(conn: Connection, job_id: int):
    spans = run_spans(conn, job_id)
    return spans[-1] if spans else None


def _run_start(run) -> int:
    """Decisions from this time on belong to the run (``aggregators.runs``: where the previous run's
    span ends; 0 for the first run)."""
    return run.lo_ms if run is not None and run.lo_ms is not None else 0


def _task_filter(job_id: int, run):
    cond = [tasks.c.job_id == job_id]
    if run is not None and run.app_id:
        cond.append(tasks.c.app_id == run.app_id)
    elif run is not None and run.lo_ms is not None:
        cond.append(tasks.c.finish_ms >= run.lo_ms)
    return cond


_PROFILE_COLUMNS = (tasks.c.task_id, tasks.c.executor_id, tasks.c.template_id, tasks.c.launch_ms, tasks.c.finish_ms,
                    tasks.c.run_time_ms, tasks.c.input_records, tasks.c.shuffle_read_records, tasks.c.successful)


def _run_tasks(conn: Connection, job_id: int, run, max_tasks: int) -> list:
    """The task rows the warm-up is measured on (``policies.task_fold``): each executor's first
    ``WARMUP_TASKS`` tasks by launch, and the latest ``max_tasks`` of the uniform sample. A v3 reporter sends
    exactly these (and candidates for the first ones, narrowed here again); of a v1/v2 reporter's every task
    the same ones are picked, so the profile is the same whichever way the tasks travelled."""
    cond = _task_filter(job_id, run)
    rank = func.row_number().over(partition_by=tasks.c.executor_id,
                                  order_by=(tasks.c.launch_ms, tasks.c.task_id)).label("rank")
    ranked = (select(*_PROFILE_COLUMNS, rank)
              .where(*cond, or_(tasks.c.detail.is_(None), tasks.c.detail.in_(("warmup", "all")))).subquery())
    first = conn.execute(select(*[ranked.c[c.name] for c in _PROFILE_COLUMNS])
                         .where(ranked.c.rank <= WARMUP_TASKS)).all()
    sample = conn.execute(select(*_PROFILE_COLUMNS).where(*cond, tasks.c.sampled.is_(True))
                          .order_by(tasks.c.finish_ms.desc()).limit(max_tasks)).all()
    rows = {r.task_id: r for r in sample}
    rows.update((r.task_id, r) for r in first)
    return sorted(rows.values(), key=lambda r: (r.launch_ms, r.finish_ms, r.task_id))


def _earliest(a: Optional[int], b: Optional[int]) -> Optional[int]:
    return b if a is None else a if b is None else min(a, b)


def executor_firsts(conn: Connection, job_id: int, run) -> dict[str, tuple[int, Optional[int]]]:
    """executor id → (its first task launch, its first successful task finish) in the run (epoch ms): the earliest
    of what the stored task rows hold (every task of a v1/v2 reporter) and what a v3 reporter sent for the
    executor (``executor_events.first_*``, over every task it folded), so both give the same answer."""
    out: dict[str, list] = {}
    for r in conn.execute(select(tasks.c.executor_id, tasks.c.successful, func.min(tasks.c.launch_ms).label("launch"),
                                 func.min(tasks.c.finish_ms).label("finish"))
                          .where(*_task_filter(job_id, run)).group_by(tasks.c.executor_id, tasks.c.successful)):
        cur = out.setdefault(r.executor_id, [None, None])
        cur[0] = _earliest(cur[0], r.launch)
        if r.successful:
            cur[1] = _earliest(cur[1], r.finish)
    if run is not None:
        for r in conn.execute(select(executor_events.c.executor_id, executor_events.c.first_launch_ms,
                                     executor_events.c.first_finish_ms).where(
                executor_events.c.job_id == job_id, executor_events.c.run_id == run.run_id,
                executor_events.c.first_launch_ms.is_not(None))):
            cur = out.setdefault(r.executor_id, [None, None])
            cur[0] = _earliest(cur[0], r.first_launch_ms)
            cur[1] = _earliest(cur[1], r.first_finish_ms)
    return {e: (v[0], v[1]) for e, v in out.items() if v[0] is not None}


def registrations(conn: Connection, job_id: int, run) -> dict[str, int]:
    """Executor id → its registration on the run (``SparkListenerExecutorAdded``, epoch ms of the driver)."""
    if run is None:
        return {}
    return {r.executor_id: r.added_ms for r in conn.execute(
        select(executor_events.c.executor_id, executor_events.c.added_ms).where(
            executor_events.c.job_id == job_id, executor_events.c.run_id == run.run_id,
            executor_events.c.added_ms.is_not(None)))}


def provisioning(conn: Connection, job_id: int, run, firsts: dict[str, tuple[int, Optional[int]]]) -> dict:
    """``{"samples", "register_s", "first_task_s", "register_source"}`` (module docstring);
    ``firsts``: :func:`executor_firsts`."""
    first_launch = {e: v[0] for e, v in firsts.items()}
    first_finish = {e: v[1] for e, v in firsts.items() if v[1] is not None}
    added = registrations(conn, job_id, run)
    since = _run_start(run)
    ds = conn.execute(select(decisions.c.created_ms, decisions.c.old_value, decisions.c.new_value).where(
        decisions.c.job_id == job_id, decisions.c.knob == "executors", decisions.c.created_ms >= since,
        decisions.c.status.in_(("issued", "applied", "superseded")))
        .order_by(decisions.c.created_ms).limit(MAX_DECISIONS)).all()
    registered = {e: added.get(e, first_launch.get(e)) for e in set(first_launch) | set(added)}
    register, first_task, sources = [], [], set()
    for i, d in enumerate(ds):
        if not (isinstance(d.old_value, (int, float)) and isinstance(d.new_value, (int, float))
                and d.new_value > d.old_value):
            continue
        t0 = d.created_ms
        t1 = min(ds[i + 1].created_ms if i + 1 < len(ds) else t0 + MAX_PROVISIONING_S * 1000,
                 t0 + MAX_PROVISIONING_S * 1000)
        new = sorted((t, e) for e, t in registered.items() if t is not None and t0 < t <= t1
                     and first_launch.get(e, t) >= t0)
        for t, e in new[:int(d.new_value - d.old_value)]:
            register.append((t - t0) / 1000.0)
            sources.add("executor_added" if e in added else "first_launch")
            if e in first_finish:
                first_task.append(max(0.0, (first_finish[e] - t) / 1000.0))
    source = None if not sources else (sources.pop() if len(sources) == 1 else "mixed")
    return {"samples": len(register), "register_s": _dist(register), "first_task_s": _dist(first_task),
            "register_source": source}


def _service(r, per_record: bool) -> Optional[float]:
    records = (r.input_records or 0) + (r.shuffle_read_records or 0)
    if per_record:
        return r.run_time_ms / 1000.0 / records if records > 0 else None
    return r.run_time_ms / 1000.0


def warmup(task_rows: list, first_tasks: int = 10, slow_ratio: float = 1.5,
           initial_grace_s: float = INITIAL_GRACE_S, first_launch: Optional[dict[str, int]] = None,
           run_start_ms: Optional[int] = None, registered: Optional[dict[str, int]] = None) -> dict:
    """``{"samples", "factor", "tasks", "duration_s", "work_factor", "startup_s", "contention_factor",
    "cold_samples", "cold_work_factor", "cold_tasks", "idle_work_factor"}`` of the run's new executors (module
    docstring).
    ``task_rows``: the run's latest tasks in launch order; ``first_launch``: each executor's first
    launch in the whole run and ``run_start_ms`` the run's first (executors whose first tasks are not
    among ``task_rows`` are left out); default: as in ``task_rows``. ``registered``: each executor's
    registration (epoch ms, ``executor_events.added_ms``), for the ``cold_*`` fields."""
    ok = [r for r in task_rows if r.successful]
    if not ok:
        return dict(NO_WARMUP)
    by_template: dict[int, list] = {}
    for r in ok:
        by_template.setdefault(r.template_id, []).append(r)
    per_record = {t: sum(1 for r in rs if (r.input_records or 0) + (r.shuffle_read_records or 0) > 0) >= 0.9 * len(rs)
                  for t, rs in by_template.items()}
    ordinal: dict[int, int] = {}
    seen: dict[str, int] = {}
    for i, r in enumerate(ok):  # ok is in launch order
        ordinal[i] = seen.get(r.executor_id, 0)
        seen[r.executor_id] = ordinal[i] + 1
    steady: dict[int, float] = {}
    model: dict[int, tuple[float, float]] = {}  # template → a steady task's slot time: (fixed s, s per record)
    for t in by_template:
        warm = [(r, s) for i, r in enumerate(ok) if r.template_id == t and ordinal[i] >= first_tasks
                and (s := _service(r, per_record[t])) is not None and s > 0]
        if len(warm) >= 3:
            steady[t] = statistics.median(s for _, s in warm)
            model[t] = steady_model([r for r, _ in warm], per_record[t])
    start = (ok[0].launch_ms if run_start_ms is None else run_start_ms) + initial_grace_s * 1000
    runs: dict[str, list[tuple[float, int, int]]] = {}  # executor → [(ratio, launch, finish)]
    first_seen: dict[str, int] = {}
    for r in ok:
        first_seen.setdefault(r.executor_id, r.launch_ms)
        if first_launch is not None and first_launch.get(r.executor_id, r.launch_ms) < first_seen[r.executor_id]:
            continue  # its first tasks are older than the tasks read
        if first_seen[r.executor_id] <= start or r.template_id not in steady:
            continue
        s = _service(r, per_record[r.template_id])
        if s is not None:
            ratio, actual = s / steady[r.template_id], _slot_s(r)
            # (ratio, launch, finish, slot time s, the slot time a steady task of its template would take s)
            runs.setdefault(r.executor_id, []).append((ratio, r.launch_ms, r.finish_ms, actual,
                                                       _steady_s(r, model[r.template_id]), r.template_id))
    heavy = max(steady, key=lambda t: sum(_slot_s(r) for r in by_template[t]), default=None)
    factors, counts, durations, work = [], [], [], []
    cold_work, cold_counts, idle_work = [], [], []
    starting: dict[str, tuple[int, int]] = {}  # new executor → its start-up window (epoch ms)
    for e, seq in runs.items():
        head = seq[:first_tasks]
        factors.append(statistics.fmean(x[0] for x in head))
        end = _slow_end([x[0] for x in seq], slow_ratio)
        counts.append(end)
        durations.append((seq[end - 1][2] - first_seen[e]) / 1000.0 if end else 0.0)
        slow = seq[:max(end, 1)]
        # the work factor runs through the executor's first task of the heaviest template (the stage most of
        # a batch's slot time is in, the one the simulator models): a cheap stateful task first, slow by the
        # executor's start-up seconds, reads ×39 alone (run 69's idle executors; their scan tasks ×1.6 after)
        first_heavy = next((k for k, x in enumerate(seq) if x[5] == heavy), 0)
        worked = seq[:max(end, 1, first_heavy + 1)]
        cold = registered is not None and e in registered and first_seen[e] - registered[e] <= COLD_LAUNCH_S * 1000
        if sum(x[4] for x in worked) > 0:
            work.append(sum(x[3] for x in worked) / sum(x[4] for x in worked))
            if cold:
                cold_work.append(work[-1])
                cold_counts.append(_slow_end([x[0] for x in seq if x[5] == heavy], slow_ratio))
            elif registered is not None and e in registered:
                idle_work.append(work[-1])
        starting[e] = (first_seen[e], max(x[2] for x in slow))
    if not factors:
        return dict(NO_WARMUP)
    crowd = contention(ok, starting, model)
    return {"samples": len(factors), "factor": statistics.median(factors),
            "tasks": int(round(statistics.median(counts))), "duration_s": statistics.median(durations),
            "work_factor": statistics.median(work) if work else None,
            "startup_s": statistics.median((b - a) / 1000.0 for a, b in starting.values()),
            "contention_factor": crowd, "cold_samples": len(cold_work),
            "cold_work_factor": statistics.median(cold_work) if cold_work else None,
            "cold_tasks": int(round(statistics.median(cold_counts))) if cold_counts else None,
            "idle_work_factor": statistics.median(idle_work) if idle_work else None}


def _slow_end(ratios: list[float], slow_ratio: float) -> int:
    """How many of a new executor's first tasks were slow: the index of its first task at most ``slow_ratio`` ×
    steady that starts a run of ``STEADY_RUN`` tasks whose median is too (all of them when none does)."""
    return next((k for k in range(len(ratios)) if ratios[k] <= slow_ratio
                 and statistics.median(ratios[k:k + STEADY_RUN]) <= slow_ratio), len(ratios))


def contention(ok: list, starting: dict[str, tuple[int, int]],
               model: dict[int, tuple[float, float]]) -> Optional[float]:
    """How much slower the executors already working run while new ones start (module docstring): the
    slot time of the tasks of executors that are not new that ran during a new executor's start-up
    window (``starting``: new executor → (first launch, end of its slow tasks), epoch ms) over the slot
    time steady tasks of the same templates take for the same records (``model``: :func:`steady_model`
    per template), each task weighed by its time. None: no such task."""
    actual = expected = 0.0
    for r in ok:
        if r.template_id not in model or r.executor_id in starting:
            continue  # a new executor's tasks carry its own warm-up (a second task ×1.24 in run 89), not contention
        if any(r.launch_ms < b and r.finish_ms > a for a, b in starting.values()):  # ran while one started
            actual += _slot_s(r)
            expected += _steady_s(r, model[r.template_id])
    return actual / expected if expected > 0 else None


def steady_model(warm: list, per_record: bool) -> tuple[float, float]:
    """(fixed s, s per record) of the time a steady task holds its slot (:func:`_slot_s`), from
    ``warm``: the template's steady tasks. Per task (no part per record) the median when the tasks do
    not read records (``per_record`` False). Else a least-squares line through their (records, slot
    time), fitted again without the tasks more than 1.5× off it (a stray slow task), when their
    records vary (the largest ≥ 1.5 × the smallest) and the line has a positive slope and no negative
    fixed part; else the median per record, no fixed part. Why a line: a task's fixed cost makes a
    small task's time per record the larger, and a rate's low levels run many small tasks: on the
    standalone cluster (run 86, 2026-11-27) 117 µs per record for 4 000 records, 109 for 48 000, so
    the median per record put a new executor's 48 000-record first task at ×1.63 where a steady one
    takes 5.25 s and it took 9.2 s (×1.76)."""
    if not per_record:
        return statistics.median(_slot_s(r) for r in warm), 0.0
    pts = [((r.input_records or 0) + (r.shuffle_read_records or 0), _slot_s(r)) for r in warm]
    median = statistics.median(y / x for x, y in pts)
    for _ in range(2):  # fit, then fit again without the tasks more than 1.5x off the first line
        xs = [x for x, _ in pts]
        if len(pts) < 3 or max(xs) < 1.5 * min(xs):
            break
        slope, fixed = statistics.linear_regression(xs, [y for _, y in pts])
        if slope <= 0 or fixed < 0:
            break
        kept = [(x, y) for x, y in pts if (fixed + slope * x) / 1.5 <= y <= 1.5 * (fixed + slope * x)]
        if len(kept) == len(pts):
            return fixed, slope
        pts = kept
    return 0.0, median


def _slot_s(r) -> float:
    """How long the task held its slot (s): launch → finish. A cold executor spends seconds of it
    outside the task's run time (deserialising the task, loading classes): in run 86 on the standalone
    cluster 0.8–1.9 s of a new executor's first tasks, 0.1 s of a steady one's."""
    return (r.finish_ms - r.launch_ms) / 1000.0


def _steady_s(r, model: tuple[float, float]) -> float:
    """How long (s) a steady task of ``r``'s template holds its slot for ``r``'s records (:func:`steady_model`)."""
    fixed, per = model
    return fixed + per * ((r.input_records or 0) + (r.shuffle_read_records or 0))


def driver_overhead(conn: Connection, job_id: int, run, max_batches: int = 500) -> dict:
    """``{"samples", "mean_s", "median_s", "p90_s"}``: batch duration − its tasks' span (module docstring)."""
    cond = [batches.c.job_id == job_id]
    if run is not None:
        cond.append(batches.c.job_run_id == run.run_id)
    rows = conn.execute(select(batches.c.query_id, batches.c.batch_id, batches.c.batch_duration_ms).where(*cond)
                        .order_by(batches.c.trigger_ms.desc()).limit(max_batches)).all()
    if not rows:
        return {"samples": 0, "mean_s": None, "median_s": None, "p90_s": None}
    lo = min(r.batch_id for r in rows)
    # the earliest launch and latest finish of the stored task rows (every task of a v1/v2 reporter) and of the
    # spans a v3 reporter sent (over every task it folded): the same span either way
    spans: dict[tuple, tuple[int, int]] = {}
    span_cond = [task_spans.c.job_id == job_id, task_spans.c.batch_id >= lo]
    if run is not None and run.app_id:
        span_cond.append(task_spans.c.app_id == run.app_id)
    for s in (*conn.execute(select(tasks.c.query_id, tasks.c.batch_id, func.min(tasks.c.launch_ms).label("lo"),
                                   func.max(tasks.c.finish_ms).label("hi"))
                            .where(*_task_filter(job_id, run), tasks.c.batch_id >= lo)
                            .group_by(tasks.c.query_id, tasks.c.batch_id)),
              *conn.execute(select(task_spans.c.query_id, task_spans.c.batch_id,
                                   task_spans.c.first_launch_ms.label("lo"), task_spans.c.last_finish_ms.label("hi"))
                            .where(*span_cond))):
        old = spans.get((s.query_id, s.batch_id))
        spans[(s.query_id, s.batch_id)] = (s.lo, s.hi) if old is None else (min(old[0], s.lo), max(old[1], s.hi))
    xs = []
    for r in rows:
        span = spans.get((r.query_id, r.batch_id))
        if span is not None:
            xs.append(max(0.0, (r.batch_duration_ms - (span[1] - span[0])) / 1000.0))
    return {"samples": len(xs), "mean_s": statistics.fmean(xs) if xs else None,
            "median_s": quantile(xs, 0.5), "p90_s": quantile(xs, 0.9)}


def prediction_error(conn: Connection, job_id: int, since_ms: int = 0) -> dict:
    """``{"samples", "mean_abs_rel", "last"}`` over the latest judged decisions with a prediction error
    (``outcome["prediction_error"]``, written by ``api.governor``)."""
    rows = conn.execute(select(decisions.c.id, decisions.c.policy, decisions.c.outcome, decisions.c.outcome_ms).where(
        decisions.c.job_id == job_id, decisions.c.outcome_ms.is_not(None), decisions.c.created_ms >= since_ms)
        .order_by(decisions.c.outcome_ms.desc(), decisions.c.id.desc()).limit(MAX_DECISIONS)).all()
    errs = [(r, r.outcome["prediction_error"]) for r in rows
            if isinstance(r.outcome, dict) and isinstance(r.outcome.get("prediction_error"), dict)]
    errs = errs[:MAX_ERROR_DECISIONS]
    if not errs:
        return {"samples": 0, "mean_abs_rel": None, "last": None}
    r, e = errs[0]
    return {"samples": len(errs), "mean_abs_rel": statistics.fmean(x["abs_rel"] for _, x in errs),
            "last": {"decision_id": r.id, "policy": r.policy, "outcome_ms": r.outcome_ms, **e}}


def measure(conn: Connection, job: str, job_id: int, max_tasks: int = 5000, max_batches: int = 500) -> ClusterProfile:
    """The job's profile on its latest run, computed now (read-only)."""
    run = _latest_run(conn, job_id)
    rows = _run_tasks(conn, job_id, run, max_tasks)
    firsts = executor_firsts(conn, job_id, run)
    start = min((v[0] for v in firsts.values()), default=None)
    return ClusterProfile(job=job, run_id=run.run_id if run is not None else None,
                          provisioning=provisioning(conn, job_id, run, firsts),
                          warmup=warmup(rows, first_launch={e: v[0] for e, v in firsts.items()}, run_start_ms=start,
                                        registered=registrations(conn, job_id, run)),
                          driver_overhead=driver_overhead(conn, job_id, run, max_batches),
                          prediction_error=prediction_error(conn, job_id, _run_start(run)))


#: how often the profile is measured again (s): often while a new executor is warming up (its
#: provisioning delay and warm-up are being learnt), rarely otherwise (driver overhead moves slowly, and
#: a measurement reads up to ``max_tasks`` task rows: at 10 s for every governed job, it was about a
#: third of an evaluation run's CPU with 40 governed jobs)
REFRESH_STEADY_S = 60.0
REFRESH_AFTER_SCALE_S = 10.0


def refresh_interval_s(conn: Connection, job_id: int, now_ms: int) -> float:
    """``REFRESH_AFTER_SCALE_S`` while an executor of the job was added in the last ``REFRESH_STEADY_S``
    seconds (``executor_events.added_ms``, the driver's clock), else ``REFRESH_STEADY_S``."""
    latest = conn.execute(select(func.max(executor_events.c.added_ms))
                          .where(executor_events.c.job_id == job_id)).scalar()
    if latest is not None and now_ms - latest < REFRESH_STEADY_S * 1000:
        return REFRESH_AFTER_SCALE_S
    return REFRESH_STEADY_S


def refresh(conn: Connection, job: str, job_id: int, now_ms: int, min_interval_s: float = 0.0) -> ClusterProfile:
    """Measure and store the job's profile (one row per job, replaced); the stored one when it is
    less than ``min_interval_s`` seconds old (the measurement reads thousands of tasks)."""
    row = conn.execute(select(cluster_profiles.c.updated_ms, cluster_profiles.c.profile)
                       .where(cluster_profiles.c.job_id == job_id)).first()
    if row is not None and 0 <= now_ms - row.updated_ms < min_interval_s * 1000:
        return from_json(row.profile)
    p = measure(conn, job, job_id)
    values = dict(run_id=p.run_id, updated_ms=now_ms, profile=p.to_json())
    if conn.execute(update(cluster_profiles).where(cluster_profiles.c.job_id == job_id).values(**values)).rowcount == 0:
        conn.execute(insert(cluster_profiles).values(job_id=job_id, **values))
    return p


def from_json(d: dict) -> ClusterProfile:
    """A stored profile; ``warmup``'s fields added later (``work_factor``, ``startup_s``, ``contention_factor``
    2026-11-27; the ``cold_*`` ones 2026-11-28) read as :data:`NO_WARMUP` has them in profiles stored before."""
    p = ClusterProfile(**{k: d[k] for k in ("job", "run_id", "provisioning", "warmup", "driver_overhead",
                                              "prediction_error")})
    if p.warmup:
        p.warmup = {**NO_WARMUP, **p.warmup}
    return p


def stored(conn: Connection, job_id: int) -> Optional[ClusterProfile]:
    """The profile stored at the latest evaluation, or None."""
    row = conn.execute(select(cluster_profiles.c.profile).where(cluster_profiles.c.job_id == job_id)).first()
    return None if row is None else from_json(row.profile)


def stored_all(conn: Connection) -> list[tuple[int, ClusterProfile]]:
    """Every job's stored profile with its job id (for ``/metrics``), by job name."""
    rows = conn.execute(select(cluster_profiles.c.job_id, cluster_profiles.c.profile)
                        .join(jobs, jobs.c.id == cluster_profiles.c.job_id).order_by(jobs.c.name)).all()
    return [(r.job_id, from_json(r.profile)) for r in rows]


def record_executor_events(conn: Connection, job_id: int, run_id: str, evs: Iterable[dict]) -> None:
    """Store executor add/remove times a reporter sent: ``{"executor_id", "added_ms"?, "removed_ms"?,
    "cores"?, "first_launch_ms"?, "first_finish_ms"?}`` (driver clock, epoch ms); a later event of the same
    executor fills in what is known, the earliest registration, first launch and first finish winning (an executor
    ``attach()`` found registered is sent at the attach time, and may also come with its own event)."""
    for ev in evs:
        key = (executor_events.c.job_id == job_id, executor_events.c.run_id == run_id,
               executor_events.c.executor_id == ev["executor_id"])
        values = {k: ev[k] for k in ("added_ms", "removed_ms", "cores", "first_launch_ms", "first_finish_ms")
                  if ev.get(k) is not None}
        row = conn.execute(select(executor_events.c.id, executor_events.c.added_ms, executor_events.c.first_launch_ms,
                                  executor_events.c.first_finish_ms).where(*key)).first()
        if row is None:
            conn.execute(insert(executor_events).values(job_id=job_id, run_id=run_id,
                                                        executor_id=ev["executor_id"], **values))
            continue
        for name in ("added_ms", "first_launch_ms", "first_finish_ms"):
            stored_ms = getattr(row, name)
            if name in values and stored_ms is not None and stored_ms <= values[name]:
                del values[name]
        if values:
            conn.execute(update(executor_events).where(executor_events.c.id == row.id).values(**values))
