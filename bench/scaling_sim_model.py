"""The simulated micro-batch job of ``bench scaling``: its parameters, Spark's FIFO task scheduling and
the records of a run (``bench.scaling_sim`` runs it; ``bench.scaling_sim_control`` watches and
steers it).

- :class:`SimParams` — job, cluster and control-plane constants: trigger interval, per-batch
  overhead, per-row cost, cores per executor, tasks per batch, noise shapes, provisioning delay,
  evaluation interval, statistics window, executor bounds, SLO and latency constraint;
- :func:`list_schedule` — the tasks of a stage run in partition order, each on the slot that frees
  first (Spark's FIFO task scheduling; equal tasks run in waves), with slots joining while the
  stage runs;
- the records: :class:`BatchRecord`, :class:`Action` (an issued executor directive),
  :class:`SimResult`, and the running batch with its tasks.

Units: seconds (records, parameters), integer milliseconds since the source started inside the
engine (``_Running``, ``_Tasks``), rows, core-seconds per row, executor-seconds.
"""
from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field

import numpy as np

from spark_governor.bench.latency_truth import SpanTruth

__all__ = ["SimParams", "DEFAULT_PARAMS", "BatchRecord", "Action", "SimResult", "list_schedule"]


@dataclass(frozen=True)
class SimParams:
    """Job, cluster and control-plane constants (seconds, rows, core-seconds per row)."""

    trigger_s: float = 4.0
    overhead_s: float = 0.3  # fixed cost of a batch (planning, commit), seconds
    row_cost_s: float = 0.0005  # core-seconds per row: 2 000 rows/s per core
    cores_per_executor: int = 1
    partitions: int = 200  # tasks per batch (one stage); caps the parallelism of a batch
    noise_sigma: float = 0.1  # lognormal shape of the per-batch processing-time noise (mean 1)
    task_noise_sigma: float = 0.2  # lognormal shape of the per-task service-time noise (mean 1)
    up_delay_s: float = 10.0  # requested executor → registered
    eval_interval_s: float = 10.0  # control plane's default evaluation interval
    window_ms: int = 5000  # control plane's statistics window
    min_executors: int = 1
    max_executors: int = 12
    slo_s: float | None = None  # latency target; None → 2 × trigger_s
    constraint_bound_s: float | None = None  # the view's latency constraint; None → the SLO target
    constraint_span_s: float = 5.0  # averaging span of the constraint (aggregators.constraints)

    @property
    def slo(self) -> float:
        return self.slo_s if self.slo_s is not None else 2 * self.trigger_s

    @property
    def constraint_bound(self) -> float:
        return self.constraint_bound_s if self.constraint_bound_s is not None else self.slo

    def slots(self, executors: int) -> int:
        return max(1, min(executors * self.cores_per_executor, self.partitions))

    def processing_s(self, rows: float, executors: int) -> float:
        """Noise-free processing time (s) of a batch of ``rows`` on ``executors``: overhead + waves ×
        task time (exact when rows is a multiple of the partitions)."""
        waves = math.ceil(self.partitions / self.slots(executors))
        return self.overhead_s + waves * rows / self.partitions * self.row_cost_s

    def executors_for_rate(self, rate: float) -> int:
        """Fewest executors in [min, max] that process a trigger interval of ``rate`` rows/s within it."""
        for n in range(self.min_executors, self.max_executors + 1):
            if self.processing_s(rate * self.trigger_s, n) <= self.trigger_s:
                return n
        return self.max_executors


DEFAULT_PARAMS = SimParams()


@dataclass(frozen=True)
class BatchRecord:
    """One simulated batch (seconds)."""

    batch_id: int
    start_s: float
    end_s: float
    cut_s: float  # start of the interval whose rows it holds
    rows: int
    executors: int

    @property
    def processing_s(self) -> float:
        return self.end_s - self.start_s

    @property
    def latency_s(self) -> float:
        return self.end_s - self.cut_s


@dataclass(frozen=True)
class Action:
    """An issued executor directive (seconds)."""

    t_s: float
    old: int
    new: int
    reason: str


@dataclass
class SimResult:
    batches: list[BatchRecord]
    actions: list[Action]
    timeline: list[tuple[float, int, int]]  # (t_s, registered, allocated) at every change
    executor_seconds: float
    duration_s: float
    unprocessed_rows: int
    holds: int  # scale-up holds entered after ineffective scale-ups
    spans: list[SpanTruth] = field(default_factory=list)  # the constraint per span (Eq. 4.1), ground truth


@dataclass
class _Running:
    batch_id: int
    start: int
    end: int
    cut: int
    rows: int
    executors: int
    boundary: int  # next trigger boundary after start
    submitted: int = 0  # stage submission (ms)
    tasks: "_Tasks | None" = None
    joins: tuple[float, ...] = ()  # slots that joined the running stage (s from submission)


@dataclass
class _Tasks:
    """The tasks of one stage run, sorted by finish time; ``folded`` of them are in the windows."""

    partition: np.ndarray
    launch_ms: np.ndarray
    finish_ms: np.ndarray
    service_s: np.ndarray
    rows: np.ndarray
    folded: int = 0


def list_schedule(service: np.ndarray, slots: int, later: tuple[float, ...] = ()) -> tuple[np.ndarray, np.ndarray]:
    """(launch, finish) of tasks run in order, each on the slot that frees first (s from submission).
    ``later``: slots that join at these times (s from submission; executors registering while the
    stage runs), at most ``len(service)`` slots in all."""
    n = len(service)
    if slots >= n:
        return np.zeros(n), service.astype(float)
    free = sorted([0.0] * slots + sorted(later)[:n - slots])
    launch = np.empty(n)
    for i, d in enumerate(service.tolist()):
        t = free[0]
        launch[i] = t
        heapq.heapreplace(free, t + d)
    return launch, launch + service
