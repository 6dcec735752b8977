"""Folding finished tasks into window statistics: the one fold the reporters and the control plane share.

Lohrmann's QoS reporters summarise their measurements before they travel (thesis §4.4.1, digest §2.3–2.4): a
reporter keeps count, mean and M2 (Welford) per vertex and interval, and the aggregator merges the summaries
with their counts (Chan et al.). This module is that summary, pure (no Spark, no SQL), so that

* the reporters (``collectors.reporter``, the listener jar's ``TaskFold`` port, a replay) fold the tasks of each
  report before sending it (report schema v3: windows instead of task rows), and
* the control plane folds a report of whole tasks (schema v1/v2, deprecated) with the same functions
  (``aggregators.ingest``),

and the stored statistics are the same either way (to rounding: Chan's merge in another order).

Per **runtime vertex** ``(template, partition)`` and window of the task's *finish* time (``window_ms``, aligned to
multiples of it): tasks, failed tasks, the sums of :data:`TASK_SUMS` and, in seconds, the moments (count, mean,
M2, min, max) of task latency (finish − stage submission), service time (executor run time), service time per
record (run time / records read, input + shuffle, when it read any) and the interarrival time of task launches at
the vertex (successive launches, thesis §4.4.1; the vertex's last launch is carried from report to report). A
failed task counts in ``failed_tasks`` only. A task Spark *killed* (:func:`killed`) counts in neither and never travels
as a row: it neither ran to an end nor failed — counted as failed until 2026-12-07, the tasks a stopped query's stop
killed had every run stopped mid-batch judged ``unhealthy`` at its end. It still counts in the executors' first
launches and the micro-batches' task spans, not among the tasks a report accounts for
(``wire.Report.folded_tasks``, the reporters' ``tasks_total``).

Per **template vertex** and window, in every report: its tasks of the report folded as above and merged over its
partitions (Chan), the partitions that had a task in the window so far and the largest run time one of them summed
in it (ms; the busiest partition), and for the stage runs completed in the window: stages, the largest task count
and slots, the moments of the interarrival times of each stage's task launches (every finished task of the stage,
failed ones too, sorted) and of its makespan (completion − submission), seconds. The policies read these.

The runtime windows travel **once**, when their window has ended (:data:`CLOSE_GRACE_MS` after its end, or when the
reporter stops): a job of 20 partitions and two stages touches 40 runtime windows a second, and sending each of them
every second made a report cost the control plane 5× what the template windows alone do (measured: 4.2 ms against
0.7 ms of CPU per report on SQLite). A task that finishes in a window already sent travels as a further delta of it,
merged alike. So the per-partition statistics (``GET …/stages/<template>/tasks``) lag by one window; what the
policies, the health verdict and the cluster profile read does not.

Per **micro-batch** ``(query, batch)``: its tasks' first launch and last finish (epoch ms), the span the driver
overhead is measured against (``aggregators.cluster_profile``). Per **executor**: its first task launch and
first successful task finish (epoch ms), sent when they change.

**Task rows** travel only as detail (:data:`TASK_DETAIL_MODES`), and as the cluster profile's input: an
executor's first :data:`WARMUP_TASKS` tasks by launch (its warm-up) and a uniform sample of one task in
:data:`SAMPLE_ONE_IN` (:func:`sampled`, by task id, so the reporter and the control plane pick the same ones).
The reporter cannot know a task is among its executor's first by launch until the executor's earlier tasks
finished, so it sends every task whose launch is among the :data:`WARMUP_TASKS` earliest *seen so far*: a
superset of the final ones, which the profile narrows again (``aggregators.cluster_profile``).
"""
from __future__ import annotations

import heapq
from collections import OrderedDict, defaultdict
from typing import Any, Callable, Hashable, Iterable, Mapping, Optional

from spark_governor.policies.moments import Moments

#: moments of a runtime window (seconds; ``service_per_record``: seconds per record)
RUNTIME_MOMENTS = ("latency", "service", "service_per_record", "interarrival")
#: moments of a template window (seconds)
TEMPLATE_MOMENTS = ("launch_interarrival", "makespan")
#: task fields summed per runtime window as they are (Spark's units: ms, ns, records, bytes)
TASK_SUMS = ("run_time_ms", "cpu_time_ns", "gc_time_ms", "input_records", "input_bytes", "output_records",
             "output_bytes", "shuffle_read_records", "shuffle_read_bytes", "shuffle_write_records",
             "shuffle_write_bytes", "shuffle_fetch_wait_ms")
#: every sum of a runtime window: the task sums and ``records_in`` (input + shuffle-read records)
RUNTIME_SUMS = (*TASK_SUMS[:4], "records_in", *TASK_SUMS[4:])
#: what task rows travel besides the statistics: ``none``; ``failed`` (failed tasks and the uniform sample, the
#: default); ``all``. The profile's rows (warm-up and sample) travel in every mode.
TASK_DETAIL_MODES = ("none", "failed", "all")
DEFAULT_TASK_DETAIL = "failed"
#: an executor's first tasks by launch kept as rows for the cluster profile's warm-up (it reads the first 10 and
#: looks for the end of the slow ones among the next)
WARMUP_TASKS = 32
#: one task in this many is kept as a row (:func:`sampled`)
SAMPLE_ONE_IN = 16
#: stages whose task launches are kept while they run; the oldest is forgotten beyond this
MAX_OPEN_STAGES = 4096
#: a runtime window travels once it ended this long ago (ms): the tasks that finished in it were folded by then
CLOSE_GRACE_MS = 1000
#: windows (after their end) whose per-partition run time is remembered for a late task's busiest partition
REMEMBER_WINDOWS = 3
_GOLDEN = 0x9E3779B1
_SAMPLE_BELOW = (1 << 32) // SAMPLE_ONE_IN


def sampled(task_id: int) -> bool:
    """Whether task ``task_id`` is in the uniform sample: the low 32 bits of ``task_id × 0x9E3779B1``
    (Knuth's multiplicative hash) below 2³²/:data:`SAMPLE_ONE_IN`. Successive task ids spread over the
    sample, so it does not keep picking the same partition of the same stage."""
    return ((task_id * _GOLDEN) & 0xFFFFFFFF) < _SAMPLE_BELOW


def moments_record(values: list[float]) -> dict:
    """``{"n", "mean", "m2", "min", "max"}`` of ``values`` (``Moments.of``; min/max None when empty)."""
    if not values:
        return {"n": 0, "mean": 0.0, "m2": 0.0, "min": None, "max": None}
    if len(values) == 1:
        x = float(values[0])
        return {"n": 1, "mean": x, "m2": 0.0, "min": x, "max": x}
    m = Moments.of(values)
    return {"n": m.n, "mean": m.mean, "m2": m.m2, "min": float(min(values)), "max": float(max(values))}


def merge_moments(a: dict, b: dict) -> dict:
    """Two moments records merged (Chan et al., as ``Moments.merge``, same order of operations; min of mins, max of
    maxes; an empty record has neither)."""
    nb = b["n"]
    if not nb:
        return a
    na = a["n"]
    if not na:
        return b
    n = na + nb
    delta = b["mean"] - a["mean"]
    return {"n": n, "mean": a["mean"] + delta * nb / n, "m2": a["m2"] + b["m2"] + delta * delta * na * nb / n,
            "min": min(a["min"], b["min"]), "max": max(a["max"], b["max"])}


class _Window:
    """The tasks of a window as they are folded: counts, sums and the samples of each moment (seconds)."""

    __slots__ = ("tasks", "failed_tasks", "sums", "samples")

    def __init__(self) -> None:
        self.tasks = 0
        self.failed_tasks = 0
        self.sums = dict.fromkeys(RUNTIME_SUMS, 0)
        self.samples: dict[str, list[float]] = {name: [] for name in RUNTIME_MOMENTS}

    def absorb(self, other: "_Window") -> None:
        self.tasks += other.tasks
        self.failed_tasks += other.failed_tasks
        for name, v in other.sums.items():
            self.sums[name] += v
        for name, xs in other.samples.items():
            self.samples[name] += xs

    def record(self, limit: int = 2**63 - 1) -> dict:
        out = {"tasks": self.tasks, "failed_tasks": self.failed_tasks,
               **{name: min(v, limit) for name, v in self.sums.items()}}
        for name in RUNTIME_MOMENTS:
            out[name] = moments_record(self.samples[name])
        return out


def killed(t: Mapping[str, Any]) -> bool:
    """Whether ``t`` was killed by Spark (its end reason ``TaskKilled``: a stopped query's or a cancelled stage's
    task, a speculative copy that lost) rather than run to success or failure."""
    return not t["successful"] and str(t.get("failure_reason") or "").startswith("TaskKilled")


def fold_windows(tasks: Iterable[Mapping[str, Any]], window_ms: int, last_launch: dict,
                 vertex: Callable[[Mapping[str, Any]], tuple]) -> tuple[dict[tuple, _Window], dict[tuple, _Window]]:
    """One report's tasks folded in launch order (module docstring): the runtime windows ``(vertex, window start
    ms) → window`` and the task parts of the template windows ``(template, window start ms) → window`` (the same
    samples, merged over the partitions). ``vertex(task)``: the runtime vertex's key ``(template, partition)``;
    ``last_launch``: vertex → its last task launch (epoch ms), read and advanced here (a successful task's
    launch only)."""
    windows: dict[tuple, _Window] = defaultdict(_Window)
    templates: dict[tuple, _Window] = defaultdict(_Window)
    for t in sorted(tasks, key=lambda t: t["launch_ms"]):
        if killed(t):
            continue
        v = vertex(t)
        finish = t["finish_ms"]
        start = finish - finish % window_ms
        w, tw = windows[(v, start)], templates[(v[0], start)]
        if not t["successful"]:
            w.failed_tasks += 1
            tw.failed_tasks += 1
            continue
        w.tasks += 1
        tw.tasks += 1
        records_in = t["input_records"] + t["shuffle_read_records"]
        for s in (w.sums, tw.sums):
            s["records_in"] += records_in
            for name in TASK_SUMS:
                s[name] += t[name]
        run_s = t["run_time_ms"] / 1000.0
        samples = [("service", run_s)]
        if t["stage_submission_ms"] is not None:
            samples.append(("latency", (finish - t["stage_submission_ms"]) / 1000.0))
        if records_in > 0:
            samples.append(("service_per_record", run_s / records_in))
        launch, last = t["launch_ms"], last_launch.get(v)
        if last is not None and launch > last:
            samples.append(("interarrival", (launch - last) / 1000.0))
        last_launch[v] = launch if last is None else max(last, launch)
        for name, x in samples:
            w.samples[name].append(x)
            tw.samples[name].append(x)
    return windows, templates


def fold_tasks(tasks: Iterable[Mapping[str, Any]], window_ms: int, last_launch: dict,
               vertex: Callable[[Mapping[str, Any]], tuple]) -> tuple[dict[tuple, dict], dict[tuple, dict]]:
    """:func:`fold_windows` as records: the runtime windows' and the template windows' task parts."""
    windows, templates = fold_windows(tasks, window_ms, last_launch, vertex)
    return ({key: w.record() for key, w in windows.items()}, {key: w.record() for key, w in templates.items()})


_NO_MOMENTS = {"n": 0, "mean": 0.0, "m2": 0.0, "min": None, "max": None}


def empty_tasks() -> dict:
    """The task part of a window with no task."""
    return {"tasks": 0, "failed_tasks": 0, **dict.fromkeys(RUNTIME_SUMS, 0),
            **{name: dict(_NO_MOMENTS) for name in RUNTIME_MOMENTS}}


def empty_stages() -> dict:
    """The stage part of a template window with no completed stage."""
    return {"stages": 0, "max_num_tasks": 0, "max_slots": None, **{name: dict(_NO_MOMENTS) for name in TEMPLATE_MOMENTS}}


def stage_window(stage: Mapping[str, Any], launches: list[int]) -> dict:
    """The stage part of a template window of one completed stage run: ``launches`` the launch times of its finished
    tasks (epoch ms, sorted)."""
    makespan = []
    if stage["submission_ms"] is not None and stage["completion_ms"] >= stage["submission_ms"]:
        makespan = [(stage["completion_ms"] - stage["submission_ms"]) / 1000.0]
    return {"stages": 1, "max_num_tasks": stage["num_tasks"], "max_slots": stage["slots"],
            "launch_interarrival": moments_record([(b - a) / 1000.0 for a, b in zip(launches, launches[1:])]),
            "makespan": moments_record(makespan)}


def template_window(tasks: Optional[dict], stages: Optional[dict], partitions: int, max_vertex_run_time_ms: int) -> dict:
    """A template window record: its task part (a runtime-window record merged over partitions, or none), its stage
    part (:func:`stage_window`, or none), the partitions with a task in the window so far and the busiest one's
    run time (ms)."""
    return {**(tasks or empty_tasks()), **(stages or empty_stages()), "partitions": partitions,
            "max_vertex_run_time_ms": max_vertex_run_time_ms}


def merge_template_window(a: dict, b: dict, limit: int = 2**63 - 1) -> dict:
    """Two template-window records merged: stages and task counts and sums added, the largest task count, slots,
    partitions and busiest partition kept, moments by Chan."""
    out = merge_runtime_window(a, b, limit)
    out.update({"stages": a["stages"] + b["stages"], "max_num_tasks": max(a["max_num_tasks"], b["max_num_tasks"]),
                "max_slots": max(a["max_slots"] or 0, b["max_slots"] or 0) or None,
                "partitions": max(a["partitions"], b["partitions"]),
                "max_vertex_run_time_ms": max(a["max_vertex_run_time_ms"], b["max_vertex_run_time_ms"])})
    for name in TEMPLATE_MOMENTS:
        out[name] = merge_moments(a[name], b[name])
    return out


def merge_runtime_window(a: dict, b: dict, limit: int = 2**63 - 1) -> dict:
    """Two runtime-window records (or the task parts of two template windows) merged: counts and sums added
    (saturated at ``limit``), moments by Chan."""
    out = {name: min(a[name] + b[name], limit) for name in ("tasks", "failed_tasks", *RUNTIME_SUMS)}
    for name in RUNTIME_MOMENTS:
        out[name] = merge_moments(a[name], b[name])
    return out


def completed(stage: Mapping[str, Any]) -> bool:
    """A stage run that folds into its template window: completed, not failed."""
    return stage["completion_ms"] is not None and not stage["failure_reason"]


def task_spans(tasks: Iterable[Mapping[str, Any]]) -> dict[tuple, list[int]]:
    """``(query id, batch id) → [first launch, last finish]`` (epoch ms) of the tasks of each micro-batch."""
    out: dict[tuple, list[int]] = {}
    for t in tasks:
        if t["query_id"] is None or t["batch_id"] is None:
            continue
        key = (t["query_id"], t["batch_id"])
        span = out.get(key)
        if span is None:
            out[key] = [t["launch_ms"], t["finish_ms"]]
        else:
            span[0] = min(span[0], t["launch_ms"])
            span[1] = max(span[1], t["finish_ms"])
    return out


class TaskFold:
    """A reporter's fold across its reports (one application run): the state carried from report to report
    and :meth:`fold`, which turns one report's finished tasks and completed stages into the records of report
    schema v3 (``policies.wire``)."""

    def __init__(self, task_detail: str = DEFAULT_TASK_DETAIL) -> None:
        if task_detail not in TASK_DETAIL_MODES:
            raise ValueError(f"task_detail: expected one of {', '.join(TASK_DETAIL_MODES)} (got {task_detail!r})")
        self.task_detail = task_detail
        self.last_launch: dict[tuple[str, int], int] = {}
        self.stage_launches: "OrderedDict[tuple[int, int], list[int]]" = OrderedDict()
        self._earliest: dict[str, list[int]] = {}  # executor → max-heap (negated) of its WARMUP_TASKS earliest launches
        self._firsts: dict[str, list[Optional[int]]] = {}  # executor → [first launch, first successful finish]
        self.open: dict[tuple[str, int, int], _Window] = {}  # (template, partition, window start) → not sent yet
        self._runs: dict[tuple[str, int], dict[int, int]] = {}  # (template, window) → partition → run time ms
        self.folded_tasks = 0  # tasks folded since the start (successful and failed; not killed)

    def _warmup(self, t: Mapping[str, Any]) -> bool:
        """Whether ``t``'s launch is among its executor's :data:`WARMUP_TASKS` earliest seen so far (recorded)."""
        heap = self._earliest.setdefault(t["executor_id"], [])
        if len(heap) < WARMUP_TASKS:
            heapq.heappush(heap, -t["launch_ms"])
            return True
        if t["launch_ms"] < -heap[0]:
            heapq.heapreplace(heap, -t["launch_ms"])
            return True
        return False

    def _detail(self, t: Mapping[str, Any]) -> Optional[str]:
        """Why ``t`` travels as a row (None: it does not): ``warmup``, ``sample``, ``failed`` or ``all``; a killed task
        never (:func:`killed`: it is in no window, and a row is detail of a task its window counts)."""
        if killed(t):
            return None
        if self._warmup(t):
            return "warmup"
        if sampled(t["task_id"]):
            return "sample"
        if self.task_detail == "all":
            return "all"
        if self.task_detail == "failed" and not t["successful"]:
            return "failed"
        return None

    def fold(self, tasks: list[dict], stages: list[dict], window_ms: int, now_ms: int,
             final: bool = False) -> dict[str, list]:
        """One report's records (module docstring): ``template_windows`` (this report's tasks and completed stages),
        ``runtime_windows`` (the windows that ended :data:`CLOSE_GRACE_MS` before ``now_ms``, epoch ms, or every
        open one when ``final``), ``task_spans``, ``executors`` (first launch and first successful finish of the
        executors whose firsts changed) and ``tasks`` (the rows that travel, each with its ``detail``), from its
        finished ``tasks`` and completed ``stages`` (wire records as ``collectors.events`` makes them)."""
        ordered = sorted(tasks, key=lambda t: t["launch_ms"])
        deltas, tasks_of = fold_windows(ordered, window_ms, self.last_launch,
                                        lambda t: (t["template_key"], t["partition"]))
        rows, changed = [], {}
        for t in ordered:
            key = (t["stage_id"], t["stage_attempt"])
            launches = self.stage_launches.get(key)
            if launches is None:
                launches = self.stage_launches[key] = []
                while len(self.stage_launches) > MAX_OPEN_STAGES:
                    self.stage_launches.popitem(last=False)
            launches.append(t["launch_ms"])
            firsts = self._firsts.setdefault(t["executor_id"], [None, None])
            before = tuple(firsts)
            if firsts[0] is None or t["launch_ms"] < firsts[0]:
                firsts[0] = t["launch_ms"]
            if t["successful"] and (firsts[1] is None or t["finish_ms"] < firsts[1]):
                firsts[1] = t["finish_ms"]
            if tuple(firsts) != before:
                changed[t["executor_id"]] = firsts
            detail = self._detail(t)
            if detail is not None:
                rows.append({**t, "detail": detail})
        self.folded_tasks += sum(1 for t in ordered if not killed(t))
        for ((template, partition), start), w in deltas.items():
            key = (template, partition, start)
            if key in self.open:
                self.open[key].absorb(w)
            else:
                self.open[key] = w
            runs = self._runs.setdefault((template, start), {})
            runs[partition] = runs.get(partition, 0) + w.sums["run_time_ms"]
        parts = {key: w.record() for key, w in tasks_of.items()}
        stage_parts: dict[tuple[str, int], dict] = {}
        for s in stages:
            launches = self.stage_launches.pop((s["stage_id"], s["attempt"]), [])
            if not completed(s):
                continue
            rec = template_window(None, stage_window(s, sorted(launches)), 0, 0)
            key = (s["template_key"], s["completion_ms"] - s["completion_ms"] % window_ms)
            stage_parts[key] = rec if key not in stage_parts else merge_template_window(stage_parts[key], rec)
        template = {}
        for key in sorted(set(parts) | set(stage_parts)):
            runs = self._runs.get(key, {})
            rec = template_window(parts.get(key), None, len(runs), max(runs.values(), default=0))
            template[key] = rec if key not in stage_parts else merge_template_window(rec, stage_parts[key])
        closed = sorted(k for k in self.open if final or k[2] + window_ms + CLOSE_GRACE_MS <= now_ms)
        runtime = [{"template_key": k[0], "partition": k[1], "window_start_ms": k[2], **self.open.pop(k).record()}
                   for k in closed]
        for key in [k for k in self._runs if k[1] + window_ms * (1 + REMEMBER_WINDOWS) <= now_ms]:
            del self._runs[key]
        return {
            "runtime_windows": runtime,
            "template_windows": [{"template_key": k[0], "window_start_ms": k[1], **w} for k, w in template.items()],
            "task_spans": [{"query_id": q, "batch_id": b, "first_launch_ms": lo, "last_finish_ms": hi}
                           for (q, b), (lo, hi) in sorted(task_spans(ordered).items())],
            "executors": [{"executor_id": e, "first_launch_ms": f[0], "first_finish_ms": f[1]}
                          for e, f in sorted(changed.items())],
            "tasks": rows,
        }
