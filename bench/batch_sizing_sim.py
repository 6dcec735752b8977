"""Queueing simulation of a micro-batch system under a batch-interval controller (Das et al. §2).

The EVENT model of digest 002 §6 (and §1.2), in seconds:

* Batch i covers arrival time [B_{i-1}, B_i), B_i = B_{i-1} + x_i, B_0 = 0; it is enqueued at B_i
  and served FIFO by one processing module: S_i = max(B_i, E_{i-1}), E_i = S_i + p_i;
  queueing q_i = S_i − B_i; latency L_i = E_i − (arrival of its oldest row) = x_i + q_i + p_i.
* At B_i the controller chooses x_{i+1} from the jobs completed by then (E_j ≤ B_i, ties count as
  completed), which gives the paper's one-batch control lag.
* ``fastest`` (Spark's default trigger): a batch forms as soon as the previous one finished
  (polling every ``poll_s`` = 10 ms), holding everything that arrived since the previous one formed.
* A rate-limited controller (``pid-rate``) admits at most ``cap`` rows into a batch; the rest waits
  in the source (lossless), and the latency of such a batch is counted from its oldest row's arrival.

Arrivals: ``rate_profile`` gives the cumulative rows A(t) exactly (piecewise constant or
sinusoidal rates). Processing time of a batch of N rows: ``a + c·N`` (linear) or ``a + k·N²``
(superlinear, a join of two streams), times a seeded lognormal noise of mean 1 (``noise_sigma``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence

import numpy as np

from spark_governor.policies.batch_sizing import FixedPointController, PidRateEstimator


# -- arrivals --------------------------------------------------------------------------------
@dataclass(frozen=True)
class StepRate:
    """Rows/s ``rates[k]`` from ``starts[k]`` (s) on; ``starts[0]`` must be 0."""

    starts: tuple[float, ...]
    rates: tuple[float, ...]

    def rate(self, t: float) -> float:
        k = max(i for i, s in enumerate(self.starts) if s <= t)
        return self.rates[k]

    def cumulative(self, t: float) -> float:
        total = 0.0
        for k, s in enumerate(self.starts):
            end = self.starts[k + 1] if k + 1 < len(self.starts) else math.inf
            if t <= s:
                break
            total += self.rates[k] * (min(t, end) - s)
        return total

    def steps(self) -> tuple[float, ...]:
        return self.starts[1:]


@dataclass(frozen=True)
class SineRate:
    """Rows/s ``mean + amplitude·sin(2πt/period)``."""

    mean: float
    amplitude: float
    period_s: float

    def rate(self, t: float) -> float:
        return self.mean + self.amplitude * math.sin(2 * math.pi * t / self.period_s)

    def cumulative(self, t: float) -> float:
        w = 2 * math.pi / self.period_s
        return self.mean * t + self.amplitude * (1 - math.cos(w * t)) / w

    def steps(self) -> tuple[float, ...]:
        return ()


def arrival_time(profile, rows: float, hi: float) -> float:
    """The time at which the cumulative arrivals reach ``rows`` (bisection, ≤ 1 µs)."""
    lo = 0.0
    while hi - lo > 1e-6:
        mid = (lo + hi) / 2
        if profile.cumulative(mid) < rows:
            lo = mid
        else:
            hi = mid
    return hi


@dataclass(frozen=True)
class Workload:
    """Processing time p(N) = (a + c·N + k·N²)·noise, noise lognormal with mean 1 (seeded)."""

    name: str
    profile: object
    a: float
    c: float = 0.0
    k: float = 0.0
    noise_sigma: float = 0.0
    horizon_s: float = 90.0
    warmup_s: float = 10.0

    def processing(self, rows: float, rng: np.random.Generator) -> float:
        p = self.a + self.c * rows + self.k * rows * rows
        if self.noise_sigma > 0:
            p *= float(rng.lognormal(-self.noise_sigma ** 2 / 2, self.noise_sigma))
        return p


# -- controllers -----------------------------------------------------------------------------
@dataclass
class Job:
    index: int
    start_boundary: float  # B_{i-1}
    x: float
    rows: float
    p: float
    q: float
    end: float  # E_i
    latency: float


class Controller:
    """Base: ``first_interval``; ``next_interval(B, done, x)`` at each boundary; ``cap``."""

    name = "controller"
    fastest = False

    def first_interval(self) -> float:
        raise NotImplementedError

    def next_interval(self, boundary: float, done: Sequence[Job], x: float) -> float:
        raise NotImplementedError

    def cap(self, x: float) -> Optional[float]:
        return None


class FixedPoint(Controller):
    """``FixedPointController(**params)``: named ``fixed-point`` at its defaults (the adaptive
    variant), ``fixed-point paper`` with ``slack="paper"``, plus `` rho=…`` when ρ is not 0.7."""

    def __init__(self, **params) -> None:
        self.ctl = FixedPointController(**params)
        self.name = "fixed-point" + ("" if self.ctl.adaptive else " paper")
        if self.ctl.rho != 0.7:
            self.name += f" rho={self.ctl.rho:g}"
        self.branches: list[str] = []
        self.rhos: list[float] = []

    def first_interval(self) -> float:
        return self.ctl.first_interval()

    def next_interval(self, boundary, done, x):
        d = self.ctl.decide([(j.x, j.p) for j in done[-self.ctl.history:]], x)
        self.branches.append(d.branch)
        self.rhos.append(d.rho)
        return d.interval_s


class Static(Controller):
    def __init__(self, x: float) -> None:
        self.x = x
        self.name = f"static {x:.1f}s"

    def first_interval(self):
        return self.x

    def next_interval(self, boundary, done, x):
        return self.x


class Fastest(Static):
    """Spark's default trigger: the next batch forms when the previous one has finished."""

    fastest = True

    def __init__(self) -> None:
        super().__init__(0.0)
        self.name = "fastest-trigger"


class PidRate(Static):
    """Spark's back-pressure PID at a fixed interval: admits at most rate × interval rows."""

    def __init__(self, x: float, **gains) -> None:
        super().__init__(x)
        self.name = f"pid-rate {x:.1f}s"
        self.pid = PidRateEstimator(batch_interval_ms=x * 1000.0, **gains)
        self.rate: Optional[float] = None
        self.fed = 0

    def next_interval(self, boundary, done, x):
        for j in done[self.fed:]:  # each completed batch once, in order
            new = self.pid.compute(int(round((j.start_boundary + j.x) * 1000)), int(j.rows), j.p * 1000.0, j.q * 1000.0)
            if new is not None:
                self.rate = new
        self.fed = len(done)
        return self.x

    def cap(self, x):
        return None if self.rate is None else self.rate * x


# -- the simulation --------------------------------------------------------------------------
def simulate(workload: Workload, controller: Controller, seed: int = 0, poll_s: float = 0.01,
             max_batches: int = 100_000) -> list[Job]:
    """Run ``controller`` on ``workload`` until arrival time ``horizon_s``; returns every batch."""
    rng = np.random.default_rng(seed)
    prof = workload.profile
    jobs: list[Job] = []
    boundary, admitted, end_prev = 0.0, 0.0, 0.0
    x = controller.first_interval()
    while boundary < workload.horizon_s and len(jobs) < max_batches:
        if controller.fastest:
            nxt = max(end_prev, boundary + poll_s)
        else:
            nxt = boundary + x
        x = nxt - boundary
        arrived = prof.cumulative(nxt)
        rows = arrived - admitted
        cap = controller.cap(x)
        oldest = boundary
        if cap is not None and rows > cap:
            rows = cap
        if admitted < prof.cumulative(boundary) - 1e-9:  # a backlog left by a cap
            oldest = arrival_time(prof, admitted, nxt)
        p = workload.processing(rows, rng)
        start = max(nxt, end_prev)
        end = start + p
        jobs.append(Job(len(jobs) + 1, boundary, x, rows, p, start - nxt, end, end - oldest))
        admitted += rows
        end_prev = end
        boundary = nxt
        if not controller.fastest:
            done = [j for j in jobs if j.end <= boundary]
            x = controller.next_interval(boundary, done, x)
    return jobs


@dataclass(frozen=True)
class Summary:
    controller: str
    batches: int
    mean_latency_s: float
    p95_latency_s: float
    unstable_fraction: float
    max_unstable_after_step: int  # unstable batches after a step before two stable ones in a row
    final_backlog_rows: float = 0.0
    intervals: tuple = field(default=(), repr=False)


def unstable_after_step(jobs: Sequence[Job], step_s: float) -> int:
    """Unstable batches (p > x) from the first batch that holds rows of the new rate until two
    consecutive stable batches (the stability condition of §2.2.2 regained)."""
    after = [j for j in jobs if j.start_boundary + j.x > step_s]
    count = 0
    for a, b in zip(after, after[1:]):
        if a.p <= a.x and b.p <= b.x:
            return count
        count += a.p > a.x
    return count + sum(j.p > j.x for j in after[-1:])


def summarize(workload: Workload, controller: Controller, jobs: Sequence[Job]) -> Summary:
    measured = [j for j in jobs if j.start_boundary >= workload.warmup_s] or list(jobs)
    lat = np.array([j.latency for j in measured])
    unstable = np.mean([j.p > j.x for j in measured]) if measured else 0.0
    steps = getattr(workload.profile, "steps", lambda: ())()
    worst = max((unstable_after_step(jobs, s) for s in steps), default=0)
    backlog = workload.profile.cumulative(jobs[-1].start_boundary + jobs[-1].x) - sum(j.rows for j in jobs)
    return Summary(controller.name, len(measured), float(lat.mean()), float(np.percentile(lat, 95)),
                   float(unstable), int(worst), float(backlog),
                   tuple((round(j.start_boundary + j.x, 4), round(j.x, 4), round(j.p, 4)) for j in jobs))


def run(workload: Workload, controller: Controller, seed: int = 0) -> Summary:
    return summarize(workload, controller, simulate(workload, controller, seed))


def event_table(omega: Callable[[int, float, float, float], float], n: int, x1: float = 0.1,
                controller: Optional[FixedPointController] = None) -> list[tuple]:
    """The digest's reference EVENT simulator (§10) with ``p = omega(i, B_prev, B, x)``; rows
    ``(i, B_prev, x, p, q, L, x_next, branch)`` — the oracle tables of §6.5–6.8 (the paper's rule,
    unrounded, unless ``controller`` is given)."""
    ctl = controller or FixedPointController(slack="paper", rounding="none", max_interval_s=None)
    boundary = end_prev = 0.0
    x = x1
    jobs: list[tuple[float, float, float]] = []
    rows = []
    for i in range(1, n + 1):
        b_prev, boundary = boundary, boundary + x
        p = omega(i, b_prev, boundary, x)
        start = max(boundary, end_prev)
        end_prev = start + p
        jobs.append((x, p, end_prev))
        done = [(jx, jp) for jx, jp, je in jobs if je <= boundary]
        d = ctl.decide(done, x)
        rows.append((i, b_prev, x, p, start - boundary, end_prev - b_prev, d.interval_s, d.branch))
        x = d.interval_s
    return rows
