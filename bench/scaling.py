"""``spark-governor bench scaling``: executor policies compared on a simulated micro-batch job.

Every (rate profile, policy) pair runs in ``bench.scaling_sim`` with the same seed (the same
noise draws per batch index) and parameters. Units: seconds, rows/s, executor-seconds.

Policies are the entries of :data:`POLICIES`; adding one is one line, e.g.
``PolicyEntry("kingman", governed("kingman", {"some_field": 1}))``: a governed entry loads the
policy from the ``spark_governor.policies`` entry points and validates its config like the control
plane (``min_value``/``max_value`` = the simulated bounds and, where the config has the field,
``trigger_interval_s`` = the simulated trigger interval), starting at the minimum executors
(Spark's ``initialExecutors`` default). Static entries never change the executors.

Metrics per pair (latency of a batch: see ``bench.scaling_sim``; target ``slo_s``, default 2 T):

* ``slo_attainment``: fraction of batches with latency ≤ target; ``slo_attainment_rows`` weights
  each batch by its rows (a backlogged job runs few, huge, late batches, which the batch fraction
  under-weights);
* ``executor_seconds``: ∫ allocated executors dt over the run; ``ratio_vs_baseline`` divides it
  by that of :data:`BASELINE` (static at max) on the same profile;
* ``actions``: executor directives issued;
* ``oscillations``: direction reversals — an action whose direction (up/down) differs from the
  previous action's and which comes at most ``oscillation_intervals`` evaluation intervals
  (default 12, i.e. 120 s: two of the threshold rule's 60 s scaling intervals) after it;
* ``mean_executors`` (= executor_seconds / duration), ``max_executors`` (allocated), ``batches``,
  latency p50/p95/max, ``unprocessed_rows`` at the end.
"""
from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass

import numpy as np

from bench.scaling_sim import (
    DEFAULT_PARAMS,
    Controller,
    RateFn,
    SimParams,
    SimResult,
    StaticPolicy,
    simulate,
)
from policies.registry import get_policy, validate_config
from policies.safety import SafetyConfig

# -- rate profiles: duration (s) -> rate(t) rows/s; defaults chosen so that the static size for
#    the mean rate falls behind at the peak (capacity 2 000 rows/s per executor by default) ------


def step(duration_s: float, low: float = 2000, high: float = 8000, at: float = 0.5) -> RateFn:
    """``low`` rows/s, then ``high`` from ``at`` × duration on."""
    return lambda t: np.where(t < at * duration_s, low, high)


def staircase(duration_s: float, levels: tuple[float, ...] = (2000, 4000, 6000, 8000, 6000, 4000, 2000)) -> RateFn:
    """Equal-length steps through ``levels`` rows/s (up, then down)."""
    lv = np.asarray(levels, dtype=float)
    return lambda t: lv[np.minimum((t / duration_s * len(lv)).astype(int), len(lv) - 1)]


def sinusoid(duration_s: float, mean: float = 5000, amplitude: float = 3000, periods: float = 2) -> RateFn:
    """``mean`` + ``amplitude`` · sin(2π · periods · t / duration) rows/s."""
    return lambda t: mean + amplitude * np.sin(2 * math.pi * periods * t / duration_s)


def spike(duration_s: float, base: float = 3000, peak: float = 10000, at: float = 0.5,
          length_s: float = 60) -> RateFn:
    """``base`` rows/s with a burst of ``peak`` for ``length_s`` seconds from ``at`` × duration."""
    start = at * duration_s
    return lambda t: np.where((t >= start) & (t < start + length_s), peak, base)


PROFILES: dict[str, Callable[[float], RateFn]] = {
    "step": step, "staircase": staircase, "sinusoid": sinusoid, "spike": spike}


def rate_series(profile: str, duration_s: float, points: int = 600) -> tuple[np.ndarray, np.ndarray]:
    """(t s, rows/s) sampled evenly over the run."""
    t = np.linspace(0, duration_s, points, endpoint=False)
    return t, np.broadcast_to(np.asarray(PROFILES[profile](duration_s)(t), dtype=float), t.shape)


# -- policies --------------------------------------------------------------------------------
Builder = Callable[[SimParams, float], Controller]  # (params, mean rate rows/s) -> controller


@dataclass(frozen=True)
class PolicyEntry:
    name: str
    build: Builder


def static(size: Callable[[SimParams, float], int]) -> Builder:
    """A fixed allocation of ``size(params, mean_rate)`` executors."""
    return lambda p, mean: Controller(StaticPolicy(), SafetyConfig(min_value=p.min_executors,
                                                                   max_value=p.max_executors), size(p, mean))


def governed(policy: str, config: dict | None = None) -> Builder:
    """A registered policy with ``config`` on top of the simulated bounds and trigger interval."""
    def build(p: SimParams, mean: float) -> Controller:
        cls = get_policy(policy)
        raw = {"min_value": p.min_executors, "max_value": p.max_executors}
        if "trigger_interval_s" in cls.Config.model_fields:
            raw["trigger_interval_s"] = p.trigger_s
        return Controller(cls(), validate_config(cls, {**raw, **(config or {})}), p.min_executors)
    return build


POLICIES: list[PolicyEntry] = [
    PolicyEntry("static-min", static(lambda p, mean: p.min_executors)),
    PolicyEntry("static-mean", static(lambda p, mean: p.executors_for_rate(mean))),
    PolicyEntry("static-max", static(lambda p, mean: p.max_executors)),
    PolicyEntry("threshold", governed("threshold")),
]
BASELINE = "static-max"


# -- metrics ---------------------------------------------------------------------------------
def count_oscillations(actions, window_s: float) -> int:
    """Actions reversing the previous action's direction within ``window_s`` seconds of it."""
    count = 0
    for a, b in itertools.pairwise(actions):
        if (b.new - b.old) * (a.new - a.old) < 0 and b.t_s - a.t_s <= window_s:
            count += 1
    return count


def metrics(res: SimResult, params: SimParams, oscillation_window_s: float) -> dict:
    lat = np.array([b.latency_s for b in res.batches])
    rows = np.array([b.rows for b in res.batches], dtype=float)
    ok = lat <= params.slo + 1e-9
    return {
        "batches": len(res.batches),
        "slo_attainment": float(ok.mean()) if len(lat) else None,
        "slo_attainment_rows": float(rows[ok].sum() / rows.sum()) if rows.sum() else None,
        "latency_p50_s": float(np.percentile(lat, 50)) if len(lat) else None,
        "latency_p95_s": float(np.percentile(lat, 95)) if len(lat) else None,
        "latency_max_s": float(lat.max()) if len(lat) else None,
        "executor_seconds": res.executor_seconds,
        "actions": len(res.actions),
        "oscillations": count_oscillations(res.actions, oscillation_window_s),
        "mean_executors": res.executor_seconds / res.duration_s,
        "max_executors": max(a for _, _, a in res.timeline),
        "min_executors": min(r for _, r, _ in res.timeline),
        "unprocessed_rows": res.unprocessed_rows,
        "holds": res.holds,
    }


def run_scaling_bench(profiles: tuple[str, ...] = tuple(PROFILES), duration_s: float = 1200.0, seed: int = 0,
                      params: SimParams = DEFAULT_PARAMS, policies: list[PolicyEntry] = POLICIES,
                      oscillation_intervals: int = 12) -> dict:
    """Every policy on every profile; returns the JSON-ready report."""
    window_s = oscillation_intervals * params.eval_interval_s
    rows, timelines, profile_info = [], {}, {}
    for name in profiles:
        _, r = rate_series(name, duration_s, points=max(600, int(duration_s * 10)))
        profile_info[name] = {"mean_rows_per_second": float(r.mean()), "peak_rows_per_second": float(r.max()),
                              "executors_for_mean": params.executors_for_rate(float(r.mean())),
                              "executors_for_peak": params.executors_for_rate(float(r.max()))}
        timelines[name] = {}
        results = {}
        for entry in policies:
            ctrl = entry.build(params, float(r.mean()))
            res = simulate(PROFILES[name](duration_s), duration_s, ctrl, params, seed)
            results[entry.name] = metrics(res, params, window_s)
            timelines[name][entry.name] = [list(x) for x in res.timeline]
        base = results.get(BASELINE, {}).get("executor_seconds")
        for policy, m in results.items():
            rows.append({"profile": name, "policy": policy, **m,
                         "ratio_vs_baseline": m["executor_seconds"] / base if base else None})
    summary = {f"{r['profile']}/{r['policy']}": {k: r[k] for k in (
        "slo_attainment", "slo_attainment_rows", "executor_seconds", "ratio_vs_baseline", "actions",
        "oscillations")} for r in rows}
    return {"summary": summary, "results": rows, "baseline": BASELINE, "duration_s": duration_s, "seed": seed,
            "slo_s": params.slo, "oscillation_window_s": window_s, "params": asdict(params),
            "profiles": profile_info, "timelines": timelines}


def _fmt(x, spec: str) -> str:
    return "-" if x is None else format(x, spec)


def format_table(report: dict) -> str:
    """The report's rows as a fixed-width text table."""
    head = (f"{'profile':<10} {'policy':<12} {'SLO batches':>11} {'SLO rows':>8} {'exec-s':>8} "
            f"{'vs ' + report['baseline']:>13} {'actions':>7} {'oscill.':>7} {'mean exec':>9} {'p95 lat s':>9}")
    lines = [head, "-" * len(head)]
    for r in report["results"]:
        lines.append(f"{r['profile']:<10} {r['policy']:<12} {_fmt(r['slo_attainment'], '.3f'):>11} "
                     f"{_fmt(r['slo_attainment_rows'], '.3f'):>8} {r['executor_seconds']:>8.0f} "
                     f"{_fmt(r['ratio_vs_baseline'], '.3f'):>13} {r['actions']:>7} {r['oscillations']:>7} "
                     f"{r['mean_executors']:>9.2f} {_fmt(r['latency_p95_s'], '.1f'):>9}")
    return "\n".join(lines)


def plot_report(report: dict, path: str) -> bool:
    """Executors (registered) of every policy and the input rate over time, one panel per
    profile; False when matplotlib is not installed."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    names = list(report["timelines"])
    fig, axes = plt.subplots(len(names), 1, figsize=(10, 3 * len(names)), squeeze=False)
    duration = report["duration_s"]
    for ax, name in zip(axes[:, 0], names):
        for policy, tl in report["timelines"][name].items():
            xs = [p[0] for p in tl] + [duration]
            ys = [p[1] for p in tl] + [tl[-1][1]]
            ax.step(xs, ys, where="post", label=policy, linewidth=2 if policy not in ("static-min", "static-mean",
                                                                                     "static-max") else 1)
        ax.set_ylabel("executors")
        ax.set_title(f"{name} (SLO {report['slo_s']:g} s)")
        rate_ax = ax.twinx()
        t, r = rate_series(name, duration)
        rate_ax.plot(t, r, color="grey", alpha=0.5, linestyle=":", label="rate")
        rate_ax.set_ylabel("rows/s")
        rate_ax.set_ylim(bottom=0)
        ax.legend(loc="upper left", fontsize="small")
    axes[-1, 0].set_xlabel("time (s)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True
