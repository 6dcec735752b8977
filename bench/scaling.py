"""``spark-governor bench scaling``: executor policies compared on a simulated micro-batch job.

Every (rate profile, policy) pair runs in ``bench.scaling_sim`` with the same seed (the same
noise draws per batch index) and parameters. Units: seconds, rows/s, executor-seconds.
``bench scaling --calibrate FILE`` instead runs the simulator with the cluster a real
``bench scaling-real`` run measured, on that run's staircase (``bench.scaling_calibrate``).

Policies are the entries of :data:`POLICIES`; adding one is one line, e.g.
``PolicyEntry("my-policy", governed("my-policy", {"some_field": 1}))``: a governed entry loads the
policy from the ``spark_governor.policies`` entry points and validates its config like the control
plane (``min_value``/``max_value`` = the simulated bounds and, where the config has the field,
``trigger_interval_s`` = the simulated trigger interval), starting at the minimum executors
(Spark's ``initialExecutors`` default). Static entries never change the executors. The governed
entries: ``threshold`` (Spark Streaming's rule), ``kingman`` (Lohrmann's queueing model under the
view's latency constraint, bound = the SLO target; config :data:`KINGMAN_CONFIG`) and
``utilization-target`` (DS2 / Flink autoscaler, defaults: target 0.7, band [0.4, 1.0]). Every
policy gets the same view: batches, the micro-batch stage's statistics and the latency constraint
(``bench.scaling_sim``) and, by default, the job's live state and cluster profile as the control
plane has them (:data:`LIVE_STATE`; ``--no-live-state``: without); ``--probe``: the job's source
probed between batches as well (:func:`bench_params`). ``--config POLICY=JSON`` overrides a
governed entry's config (:func:`configured`).

Metrics per pair (latency of a batch: see ``bench.scaling_sim``; target ``slo_s``, default 2 T):

* ``slo_attainment_windows`` (the issue's goal metric: "attainment ≥ 95 % of windows"): the share
  of constraint spans (``constraint_span_s``, 5 s) whose true mean record latency — of the rows that
  *arrived* in the span, thesis Eq. 4.1, computed exactly from the arrivals and the batches
  (``bench.latency_truth.span_truths``) — is ≤ the constraint bound the policies are given
  (``constraint_bound_s``, default the SLO target). ``windows``: their number;
  ``window_latency_p95_s``: the 95th percentile of the span means;
* ``slo_attainment``: fraction of batches whose *oldest* row is out within the SLO target;
  ``slo_attainment_rows`` weights each batch by its rows (a backlogged job runs few, huge, late
  batches, which the batch fraction under-weights). Both are stricter than the constraint (the
  oldest row waits a whole trigger gap, the mean row half of it) and are kept for comparison with
  earlier runs;
* ``executor_seconds``: ∫ allocated executors dt over the run; ``ratio_vs_baseline`` divides it
  by that of :data:`BASELINE` (static at max) on the same profile;
* ``min-static``: per profile, the smallest static executor count whose attainment
  (:data:`ATTAINMENT_METRIC`, windows) is at least :data:`ATTAINMENT_TARGET` (95 %; searched
  upwards from the minimum, every size simulated with the same seed); ``ratio_vs_min_static``
  divides each row's executor-seconds by its executor-seconds (None when even the maximum misses).
  The profile info also names the smallest sizes by the batch and row fractions
  (``min_static_batches``, ``min_static_rows``);
* ``goal`` (issue 4), per governed policy and profile: attainment (:data:`ATTAINMENT_METRIC`) ≥ 95 %,
  executor-seconds ≤ 1.10 × min-static's, and — for policies other than ``threshold`` — fewer
  executor-seconds than ``threshold`` at an equal or better attainment;
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
from dataclasses import asdict, dataclass, replace

import numpy as np

from spark_governor.bench.scaling_sim import RateFn, simulate
from spark_governor.bench.scaling_sim_control import Controller, StaticPolicy
from spark_governor.bench.scaling_sim_model import DEFAULT_PARAMS, SimParams, SimResult
from spark_governor.collectors.reporter import STATE_INTERVAL_S
from spark_governor.policies.registry import get_policy, validate_config
from spark_governor.policies.safety import SafetyConfig

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


#: The Kingman policy's config in the bench, on top of the bounds and ``trigger_interval_s`` = T
#: that :func:`governed` sets: the policy's defaults. (Before the bulk c_A, arrival-based ρ,
#: latest-window bottleneck and scale-down margin rules, the bench needed
#: ``cooldown_intervals_after_any`` 4 and ``max_utilization`` 0.75 to keep Kingman from oscillating
#: and from planning the 90 % floor; see the README, "Scaling policies".)
KINGMAN_CONFIG: dict = {}

GOVERNED = ("kingman", "threshold", "utilization-target")  # the control-plane policies the benches run
POLICIES: list[PolicyEntry] = [
    PolicyEntry("static-min", static(lambda p, mean: p.min_executors)),
    PolicyEntry("static-mean", static(lambda p, mean: p.executors_for_rate(mean))),
    PolicyEntry("static-max", static(lambda p, mean: p.max_executors)),
    PolicyEntry("threshold", governed("threshold")),
    PolicyEntry("kingman", governed("kingman", KINGMAN_CONFIG)),
    PolicyEntry("utilization-target", governed("utilization-target")),
]
BASELINE = "static-max"
MIN_STATIC = "min-static"
ATTAINMENT_TARGET = 0.95
ATTAINMENT_METRIC = "slo_attainment_windows"  # what min-static and the goal judge attainment by
EXEC_SECONDS_SLACK = 1.10  # the goal: at most 10 % more executor-seconds than min-static


#: What the product's control plane sees of a job beyond its completed batches (issue 14): the live
#: state between batches (running batch, backlog, the source's offsets) the reporter sends every
#: ``STATE_INTERVAL_S``, and the cluster profile (provisioning delay, warm-up, driver overhead) it
#: measures from the job's events. ``bench scaling`` simulates with it by default (``--live-state``);
#: without it (``--no-live-state``) the policies see the completed batches only, the thesis' view and
#: the benchmark's model until 2026-11-27.
LIVE_STATE = {"live_view": True, "state_interval_s": STATE_INTERVAL_S, "cluster_profile": True}


def bench_params(live_state: bool = True, probe: bool = False) -> SimParams:
    """The benchmark's simulator parameters: :data:`DEFAULT_PARAMS`, with :data:`LIVE_STATE` when
    ``live_state``; ``probe`` (needs the live state): the job's source is probed between batches
    (``collectors.source_probe``; ``SimParams.live_probe``, with the control plane's surge evaluations),
    as the project's own sources can be — its live arrival rate shows a rate step within a second."""
    if probe and not live_state:
        raise ValueError("a probed source needs the live state")
    return replace(DEFAULT_PARAMS, **LIVE_STATE, live_probe=probe) if live_state else DEFAULT_PARAMS


def configured(configs: dict[str, dict], policies: list[PolicyEntry] | None = None) -> list[PolicyEntry]:
    """``policies`` (default :data:`POLICIES`) with each governed entry named in ``configs`` built with
    those overrides on top of its own config (Kingman's :data:`KINGMAN_CONFIG`, the others' defaults)
    — ``bench scaling --config POLICY=JSON``. ValueError naming a policy that is not a governed entry."""
    policies = POLICIES if policies is None else policies
    names = {e.name for e in policies if e.name in GOVERNED}
    unknown = sorted(set(configs) - names)
    if unknown:
        raise ValueError(f"not a governed policy of the bench: {', '.join(unknown)} (choose from {', '.join(sorted(names))})")
    return [PolicyEntry(e.name, governed(e.name, {**(KINGMAN_CONFIG if e.name == "kingman" else {}),
                                                  **configs[e.name]}))
            if e.name in configs else e for e in policies]


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
    span_lat = np.array([x.latency_s for x in res.spans])
    return {
        "batches": len(res.batches),
        "windows": len(span_lat),
        "slo_attainment_windows": float((span_lat <= params.constraint_bound + 1e-9).mean()) if len(span_lat) else None,
        "window_latency_p95_s": float(np.percentile(span_lat, 95)) if len(span_lat) else None,
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


def min_static(run_static: Callable[[int], dict], params: SimParams, target: float = ATTAINMENT_TARGET,
               metric: str = ATTAINMENT_METRIC) -> tuple[int | None, dict | None]:
    """(size, metrics) of the smallest static executor count in [min, max] whose ``metric`` ≥ ``target``
    (``run_static(n)`` gives the metrics of n static executors); (None, None) when none meets it."""
    for n in range(params.min_executors, params.max_executors + 1):
        m = run_static(n)
        if m[metric] is not None and m[metric] >= target - 1e-12:
            return n, m
    return None, None


def goal(row: dict, threshold: dict | None) -> dict:
    """The issue's goal for one governed row (see the module docstring)."""
    att = row[ATTAINMENT_METRIC]
    meets = att is not None and att >= ATTAINMENT_TARGET - 1e-12
    ratio = row.get("ratio_vs_min_static")
    within = ratio is not None and ratio <= EXEC_SECONDS_SLACK + 1e-12
    out = {"slo_met": meets, "within_slack_of_min_static": within}
    if threshold is not None and threshold is not row:
        out["beats_threshold"] = bool(row["executor_seconds"] < threshold["executor_seconds"]
                                      and (att or 0) >= (threshold[ATTAINMENT_METRIC] or 0))
    out["met"] = all(out.values())
    return out


def run_scaling_bench(profiles: tuple[str, ...] = tuple(PROFILES), duration_s: float = 1200.0, seed: int = 0,
                      params: SimParams | None = None, policies: list[PolicyEntry] = POLICIES,
                      oscillation_intervals: int = 12, configs: dict[str, dict] | None = None) -> dict:
    """Every policy on every profile, plus the smallest static size meeting the SLO; returns the
    JSON-ready report. ``params``: default :func:`bench_params` (with the live state); ``configs``:
    overrides of governed policies' configs (:func:`configured`), recorded in the report."""
    params = bench_params() if params is None else params
    policies = configured(configs, policies) if configs else policies
    window_s = oscillation_intervals * params.eval_interval_s
    rows, timelines, profile_info = [], {}, {}
    for name in profiles:
        _, r = rate_series(name, duration_s, points=max(600, int(duration_s * 10)))
        rate = PROFILES[name](duration_s)
        statics: dict[int, tuple[dict, list]] = {}  # size -> (metrics, timeline), shared by all static runs

        def run(ctrl: Controller) -> tuple[dict, list]:
            static_size = ctrl.initial_executors if isinstance(ctrl.policy, StaticPolicy) else None
            if static_size in statics:
                return statics[static_size]
            res = simulate(rate, duration_s, ctrl, params, seed)
            out = metrics(res, params, window_s), [list(x) for x in res.timeline]
            if static_size is not None:
                statics[static_size] = out
            return out

        def run_static(n: int) -> dict:
            return run(static(lambda p, mean: n)(params, 0.0))[0]

        timelines[name] = {}
        results = {}
        for entry in policies:
            results[entry.name], timelines[name][entry.name] = run(entry.build(params, float(r.mean())))
        n_min, m_min = min_static(run_static, params)
        n_batches, _ = min_static(run_static, params, metric="slo_attainment")
        n_rows, _ = min_static(run_static, params, metric="slo_attainment_rows")
        profile_info[name] = {"mean_rows_per_second": float(r.mean()), "peak_rows_per_second": float(r.max()),
                              "executors_for_mean": params.executors_for_rate(float(r.mean())),
                              "executors_for_peak": params.executors_for_rate(float(r.max())),
                              "min_static": n_min, "min_static_batches": n_batches, "min_static_rows": n_rows}
        if m_min is not None:
            results[MIN_STATIC] = m_min
        base = results.get(BASELINE, {}).get("executor_seconds")
        least = m_min["executor_seconds"] if m_min else None
        profile_rows = []
        for policy, m in results.items():
            profile_rows.append({"profile": name, "policy": policy, **m,
                                 "static_executors": n_min if policy == MIN_STATIC else None,
                                 "ratio_vs_baseline": m["executor_seconds"] / base if base else None,
                                 "ratio_vs_min_static": m["executor_seconds"] / least if least else None})
        governed_rows = {e.name for e in policies if not isinstance(e.build(params, 0.0).policy, StaticPolicy)}
        threshold = next((x for x in profile_rows if x["policy"] == "threshold"), None)
        for x in profile_rows:
            x["goal"] = goal(x, threshold) if x["policy"] in governed_rows else None
        rows.extend(profile_rows)
    summary = {f"{r['profile']}/{r['policy']}": {k: r[k] for k in (
        "slo_attainment_windows", "slo_attainment", "slo_attainment_rows", "executor_seconds", "ratio_vs_baseline", "ratio_vs_min_static",
        "actions", "oscillations")} for r in rows}
    return {"summary": summary, "results": rows, "baseline": BASELINE, "duration_s": duration_s, "seed": seed,
            "slo_s": params.slo, "constraint_bound_s": params.constraint_bound,
            "constraint_span_s": params.constraint_span_s, "attainment_target": ATTAINMENT_TARGET,
            "attainment_metric": ATTAINMENT_METRIC,
            "oscillation_window_s": window_s, "params": asdict(params), "kingman_config": KINGMAN_CONFIG,
            "live_state": params.live_view, "probe": params.live_probe, "configs": configs or {},
            "profiles": profile_info, "timelines": timelines}


def _fmt(x, spec: str) -> str:
    return "-" if x is None else format(x, spec)


def format_table(report: dict) -> str:
    """The report's rows as a fixed-width text table, then the goal per governed policy."""
    head = (f"{'profile':<10} {'policy':<18} {'SLO windows':>11} {'SLO batches':>11} {'SLO rows':>8} {'exec-s':>8} "
            f"{'vs min-static':>13} {'vs ' + report['baseline']:>13} {'actions':>7} {'oscill.':>7} "
            f"{'mean exec':>9} {'p95 lat s':>9} {'goal':>6}")
    lines = [head, "-" * len(head)]
    for r in report["results"]:
        policy = f"{r['policy']}={r['static_executors']}" if r["policy"] == MIN_STATIC else r["policy"]
        lines.append(f"{r['profile']:<10} {policy:<18} {_fmt(r['slo_attainment_windows'], '.3f'):>11} "
                     f"{_fmt(r['slo_attainment'], '.3f'):>11} "
                     f"{_fmt(r['slo_attainment_rows'], '.3f'):>8} {r['executor_seconds']:>8.0f} "
                     f"{_fmt(r['ratio_vs_min_static'], '.3f'):>13} "
                     f"{_fmt(r['ratio_vs_baseline'], '.3f'):>13} {r['actions']:>7} {r['oscillations']:>7} "
                     f"{r['mean_executors']:>9.2f} {_fmt(r['latency_p95_s'], '.1f'):>9} "
                     f"{'-' if not r.get('goal') else 'met' if r['goal']['met'] else 'missed':>6}")
    target = report.get("attainment_target", ATTAINMENT_TARGET)
    label = {"slo_attainment_rows": "SLO rows", "slo_attainment": "SLO batches"}.get(
        report.get("attainment_metric", ATTAINMENT_METRIC), "SLO windows")
    lines += ["", f"goal: {label} ≥ {target:g}, exec-s ≤ {EXEC_SECONDS_SLACK:g} × min-static ({label} ≥ {target:g}), "
                  f"and (vs threshold) fewer exec-s at ≥ its {label}"]
    for name, info in report["profiles"].items():
        verdicts = []
        for r in report["results"]:
            if r["profile"] != name or not r.get("goal"):
                continue
            g = r["goal"]
            misses = [k for k, label in (("slo_met", "SLO"), ("within_slack_of_min_static", "exec-s"),
                                         ("beats_threshold", "vs threshold")) if g.get(k) is False
                      for k in [label]]
            verdicts.append(f"{r['policy']} {'met' if g['met'] else 'missed (' + ', '.join(misses) + ')'}")
        lines.append(f"  {name:<10} min-static {_fmt(info.get('min_static'), 'd')} "
                     f"(by SLO batches: {_fmt(info.get('min_static_batches'), 'd')}, "
                     f"rows: {_fmt(info.get('min_static_rows'), 'd')}); " + "; ".join(verdicts))
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
