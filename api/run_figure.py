"""A figure of one run of a job, from the control plane's API answers: input rate, latency against
the constraint's bound, task slots (or executors), and the policy's decisions as markers.

``run_series`` turns ``GET …/batches``, ``…/constraints`` and ``…/decisions`` into plain series
(seconds since the first batch; milliseconds for latencies); ``plot_run`` draws them with
matplotlib's Agg backend (no display needed) and saves a PNG with ``bench.output.save_figure``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional


@dataclass
class RunSeries:
    t0_ms: int
    batch_t: list[float] = field(default_factory=list)  # batch end, s since t0
    input_rate: list[Optional[float]] = field(default_factory=list)  # rows/s
    batch_latency_ms: list[Optional[float]] = field(default_factory=list)  # mean record latency of the batch
    processing_ms: list[float] = field(default_factory=list)
    spans: list[tuple[float, float, float, bool]] = field(default_factory=list)  # start, end, latency ms, measured
    bound_ms: Optional[float] = None
    decision_t: list[float] = field(default_factory=list)
    decision_old: list = field(default_factory=list)
    decision_new: list = field(default_factory=list)
    decision_predicted_ms: list[Optional[float]] = field(default_factory=list)
    decision_policy: list[str] = field(default_factory=list)
    unit: str = "executors"
    capacity: Optional[int] = None  # what the job runs with (task slots in local mode, else executors)
    end_t: float = 0.0
    # the executors the job had over time, [(s since t0, executors)] (a standalone run), and the static size for
    # the run's peak it is compared with (None: not drawn)
    executors: list[tuple[float, int]] = field(default_factory=list)
    static_peak: Optional[int] = None


def run_series(batches: list[dict], decisions: list[dict], constraint: Optional[dict], job: dict) -> RunSeries:
    """Series of one run from the API's answers (``batches`` oldest first, ``decisions`` any order)."""
    items = sorted(batches, key=lambda b: b["trigger_ms"])
    t0 = items[0]["trigger_ms"] if items else min((d["created_ms"] for d in decisions), default=0)
    s = RunSeries(t0_ms=t0)
    for b in items:
        processing_ms = float((b.get("durations_ms") or {}).get("triggerExecution", b["batch_duration_ms"]))
        end_ms = b["trigger_ms"] + processing_ms
        s.batch_t.append((end_ms - t0) / 1000.0)
        s.input_rate.append(b.get("input_rows_per_second") if b.get("num_input_rows") else 0.0)
        wait = b.get("record_wait_s")
        s.batch_latency_ms.append(None if wait is None or not b.get("num_input_rows")
                                  else max(wait, 0.0) * 1000.0 + processing_ms)
        s.processing_ms.append(processing_ms)
    if constraint is not None:
        s.bound_ms = constraint.get("bound_ms")
        span_ms = constraint.get("span_s", 5.0) * 1000.0
        for sp in constraint.get("spans") or []:
            start = (sp["start_ms"] - t0) / 1000.0
            # an "in-flight" span has no completed batch: its latency is a lower bound
            s.spans.append((start, start + span_ms / 1000.0, sp["latency_ms"], sp.get("source") != "in-flight"))
    for d in sorted(decisions, key=lambda d: d["created_ms"]):
        s.decision_t.append((d["created_ms"] - t0) / 1000.0)
        s.decision_old.append(d.get("old_value"))
        s.decision_new.append(d.get("new_value"))
        s.decision_policy.append(d.get("policy", ""))
        predicted = (d.get("prediction") or {}).get("latency_s")
        s.decision_predicted_ms.append(None if predicted is None else predicted * 1000.0)
        s.unit = (d.get("inputs") or {}).get("unit") or s.unit
    local = (job.get("not_actuatable") or {}).get("executors") and not job.get("executors")
    if local:
        s.unit, s.capacity = "task slots", job.get("slots")
    else:
        s.capacity = job.get("executors")
    s.end_t = max([*s.batch_t, *s.decision_t, *(sp[1] for sp in s.spans), 0.0])
    return s


def plot_run(series: RunSeries, path: str, title: str) -> str:
    """Draw ``series`` (three panels over a shared time axis) and save it as a PNG at ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from spark_governor.bench.output import save_figure

    s = series
    fig, (ax_rate, ax_lat, ax_cap) = plt.subplots(3, 1, sharex=True, figsize=(10, 8.5),
                                                  gridspec_kw={"height_ratios": [1, 1.6, 1]})
    fig.suptitle(title, fontsize=11)
    rate = [(t, r) for t, r in zip(s.batch_t, s.input_rate) if r is not None]
    if rate:
        ax_rate.step([t for t, _ in rate], [r for _, r in rate], where="pre", color="tab:blue", lw=1.5)
        ax_rate.set_ylim(0, max(max(r for _, r in rate), 1.0) * 1.2)
    ax_rate.set_ylabel("input rows/s")
    ax_rate.set_title("input rate per micro-batch", fontsize=9, loc="left")

    lat = [(t, v) for t, v in zip(s.batch_t, s.batch_latency_ms) if v is not None]
    if lat:
        ax_lat.plot([t for t, _ in lat], [v for _, v in lat], "o", ms=3, color="tab:gray", alpha=0.7,
                    label="batch: mean record latency")
    ax_lat.plot(s.batch_t, s.processing_ms, lw=0.8, color="tab:green", alpha=0.8, label="batch processing time")
    for measured, style, label in ((True, "-", "constraint: mean record latency per span"),
                                   (False, ":", "constraint: in-flight lower bound (no batch completed)")):
        segs = [sp for sp in s.spans if sp[3] == measured]
        if segs:
            ax_lat.hlines([v for _, _, v, _ in segs], [a for a, _, _, _ in segs], [b for _, b, _, _ in segs],
                          colors="tab:blue", linestyles=style, lw=2, label=label)
    if s.bound_ms is not None:
        ax_lat.axhline(s.bound_ms, color="tab:red", ls="--", lw=1.2, label=f"bound {s.bound_ms:,.0f} ms")
    predicted = [(t, v) for t, v in zip(s.decision_t, s.decision_predicted_ms) if v is not None]
    if predicted:
        ax_lat.plot([t for t, _ in predicted], [v for _, v in predicted], "X", color="tab:purple", ms=8,
                    label="policy: predicted latency after its decision")
    ax_lat.set_ylabel("latency (ms)")
    tops = [v for _, v in lat] + s.processing_ms + [sp[2] for sp in s.spans] + [v for _, v in predicted]
    ax_lat.set_ylim(0, max([*tops, s.bound_ms or 0, 1.0]) * 1.45)  # headroom for the legend
    ax_lat.legend(fontsize=7, loc="upper left", ncol=3)
    ax_lat.set_title("latency against the constraint's bound", fontsize=9, loc="left")

    if s.executors:
        ax_cap.step([t for t, _ in s.executors], [n for _, n in s.executors], where="post", color="tab:blue", lw=2,
                    label="executors the job had")
        if s.static_peak is not None:
            ax_cap.hlines(s.static_peak, 0, max(s.end_t, 1.0), color="tab:gray", ls="--", lw=1.2,
                          label=f"static allocation for the peak: {s.static_peak}")
    elif s.capacity is not None:
        ax_cap.hlines(s.capacity, 0, max(s.end_t, 1.0), color="tab:blue", lw=2,
                      label=f"the job's {s.unit}: {s.capacity}")
    if s.decision_t:
        ups = [(t, v) for t, o, v in zip(s.decision_t, s.decision_old, s.decision_new)
               if isinstance(v, (int, float)) and isinstance(o, (int, float)) and v > o]
        downs = [(t, v) for t, o, v in zip(s.decision_t, s.decision_old, s.decision_new)
                 if isinstance(v, (int, float)) and isinstance(o, (int, float)) and v < o]
        for points, marker, label in ((ups, "^", "decision: more"), (downs, "v", "decision: fewer")):
            if points:
                ax_cap.plot([t for t, _ in points], [v for _, v in points], marker, ms=9, color="tab:purple",
                            ls="none", label=f"{label} {s.unit}")
        for ax in (ax_rate, ax_lat, ax_cap):
            for t in s.decision_t:
                ax.axvline(t, color="tab:purple", lw=0.6, ls=":", alpha=0.6)
    values = [v for v in (s.capacity, s.static_peak, *s.decision_new, *s.decision_old, *(n for _, n in s.executors))
              if isinstance(v, (int, float))]
    ax_cap.set_ylim(0, max(values, default=1) + 1)
    ax_cap.yaxis.get_major_locator().set_params(integer=True)
    ax_cap.set_ylabel(s.unit)
    ax_cap.set_xlabel("seconds since the first reported micro-batch")
    ax_cap.legend(fontsize=7, loc="lower right")
    ax_cap.set_title(f"{s.unit}: what the job has, what the policy recommends", fontsize=9, loc="left")
    fig.tight_layout()
    save_figure(fig, path)
    return path
