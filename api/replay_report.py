"""``spark-governor replay … --report FILE.html``: one self-contained page for a replayed run or a directory of them
(issue #43).

Per application: its numbers (verdict, SLO, executor-seconds, each policy's prediction), one figure over the run's
log time — input rate against processing rate (rows/s), batch duration against the trigger interval (s), the mean
record latency per constraint span against the bound (s), the executors the run had against each policy's
predicted ones, the health timeline as coloured bands — and the decisions (the replayed policy's and each predicted
policy's first-seed run) with their reasons. For a directory, the table first (worst first), then a section per
application that has micro-batches. The figures are SVG inside the page (matplotlib's Agg/SVG backend): the page
needs no network and no other file. The numbers come from the store the replay wrote (``aggregators``) and the
rows of ``api.replay_dir`` / ``api.replay.ReplayResult.to_json()`` with their ``prediction``
(``bench.replay_prediction``); nothing here imports the benchmarks.
"""
from __future__ import annotations

import html
import io
import math
import os
import time
from typing import Optional

from sqlalchemy import select
from sqlalchemy.engine import Engine

from spark_governor.aggregators import constraints as constraint_store
from spark_governor.aggregators.models import batches, decisions, executor_events, jobs

#: health states' colours in the timeline band (``aggregators.health.STATES``)
STATE_COLOURS = {"optimal": "#2ca02c", "idle": "#9edae5", "overprovisioned": "#bcbd22", "underprovisioned": "#ff7f0e",
                 "no-progress": "#d62728", "unhealthy": "#8c564b", "unknown": "#c7c7c7"}
POLICY_COLOURS = {"kingman": "tab:purple", "threshold": "tab:orange", "utilization-target": "tab:green"}
#: at most this many decisions listed per policy
MAX_DECISIONS = 40

_CSS = """body{font-family:sans-serif;margin:1.5em;max-width:1200px}table{border-collapse:collapse;font-size:13px}
td,th{border:1px solid #ccc;padding:3px 6px;text-align:left}th{background:#f3f3f3}h2{margin-top:2em}
.small{font-size:12px;color:#555}svg{max-width:100%;height:auto}"""


def _e(x) -> str:
    return html.escape("" if x is None else str(x))


def _pct(x) -> str:
    return "n/a" if x is None else f"{100 * x:.0f}%"


def _series(engine: Engine, job: str, row: dict) -> Optional[dict]:
    """The run's series from the store: its main query's batches, the SLO spans, executors over time."""
    with engine.connect() as conn:
        jid = conn.execute(select(jobs.c.id).where(jobs.c.name == job)).scalar()
        if jid is None:
            return None
        bs = conn.execute(select(batches).where(batches.c.job_id == jid).order_by(batches.c.trigger_ms)).all()
        if not bs:
            return None
        by_query: dict[str, int] = {}
        for b in bs:
            by_query[b.query_id] = by_query.get(b.query_id, 0) + (b.num_input_rows or 0)
        main = max(by_query, key=by_query.get)
        bs = [b for b in bs if b.query_id == main]
        t0 = bs[0].trigger_ms
        out = {"t0_ms": t0, "t": [(b.trigger_ms - t0) / 1000.0 for b in bs],
               "duration_s": [b.batch_duration_ms / 1000.0 for b in bs],
               "input_rate": [b.input_rows_per_second for b in bs],
               "processed_rate": [b.processed_rows_per_second for b in bs],
               "spans": [], "bound_s": None, "executors": [], "decisions": []}
        slo = row.get("slo") or {}
        c = constraint_store.find(conn, jid, slo["name"]) if slo.get("name") else None
        if c is not None:
            end = bs[-1].trigger_ms + bs[-1].batch_duration_ms
            span_ms = int(c.span_s * 1000)
            m = constraint_store.measure(conn, job, jid, c, end + span_ms, max(1, math.ceil((end - t0) / span_ms) + 1))
            out["bound_s"] = c.bound_ms / 1000.0
            out["spans"] = [((s["start_ms"] - t0) / 1000.0, (s["start_ms"] - t0) / 1000.0 + c.span_s,
                             s["latency_ms"] / 1000.0) for s in m["spans"] if s.get("latency_ms") is not None]
        evs = conn.execute(select(executor_events.c.added_ms, executor_events.c.removed_ms)
                           .where(executor_events.c.job_id == jid, executor_events.c.executor_id != "driver")).all()
        changes = sorted([(e.added_ms, 1) for e in evs if e.added_ms] + [(e.removed_ms, -1) for e in evs if e.removed_ms])
        n = 0
        for t, d in changes:
            n += d
            out["executors"].append(((t - t0) / 1000.0, n))
        out["decisions"] = [((d.created_ms - t0) / 1000.0, d.policy, d.knob, d.old_value, d.new_value, d.reason)
                            for d in conn.execute(select(decisions).where(decisions.c.job_id == jid)
                                                  .order_by(decisions.c.created_ms)).all()[:MAX_DECISIONS]]
    return out


def _legend(ax, **kw) -> None:
    if ax.get_legend_handles_labels()[0]:  # a panel with nothing labelled (no SLO, no executors) has no legend
        ax.legend(**kw)


def figure_svg(s: dict, row: dict) -> str:
    """The run's figure as inline SVG (five panels over the log's seconds since its first batch)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(5, 1, sharex=True, figsize=(11, 11),
                             gridspec_kw={"height_ratios": [1, 1, 1.2, 1, 0.3]})
    ax_rate, ax_dur, ax_lat, ax_exec, ax_health = axes
    ax_rate.step(s["t"], [x or 0 for x in s["input_rate"]], where="post", label="input rows/s", color="tab:blue")
    ax_rate.step(s["t"], [x or 0 for x in s["processed_rate"]], where="post", label="processed rows/s",
                 color="tab:green", alpha=0.8)
    ax_rate.set_ylabel("rows/s")
    _legend(ax_rate, fontsize=7, loc="upper left")
    ax_dur.plot(s["t"], s["duration_s"], "o-", ms=2.5, lw=0.8, label="batch duration", color="tab:gray")
    trigger_ms = (row.get("slo") or {}).get("trigger_ms")
    if trigger_ms:
        ax_dur.axhline(trigger_ms / 1000.0, color="tab:red", ls="--", lw=1, label=f"trigger {trigger_ms / 1000:g} s")
    ax_dur.set_ylabel("s")
    _legend(ax_dur, fontsize=7, loc="upper left")
    if s["spans"]:
        ax_lat.hlines([v for *_, v in s["spans"]], [a for a, _, _ in s["spans"]], [b for _, b, _ in s["spans"]],
                      colors="tab:blue", lw=2, label="mean record latency per span")
    if s["bound_s"] is not None:
        ax_lat.axhline(s["bound_s"], color="tab:red", ls="--", lw=1.2, label=f"bound {s['bound_s']:g} s")
    ax_lat.set_ylabel("latency (s)")
    _legend(ax_lat, fontsize=7, loc="upper left")
    top = 1
    if s["executors"]:
        end = max(s["t"][-1], s["executors"][-1][0])
        xs = [t for t, _ in s["executors"]] + [end]
        ys = [n for _, n in s["executors"]]
        ax_exec.step(xs, ys + ys[-1:], where="post", color="tab:blue", lw=2.5, alpha=0.6, label="executors (as run)")
        top = max(ys)
    p = row.get("prediction")
    if p:
        shift = (p["t0_ms"] - s["t0_ms"]) / 1000.0
        for name, x in p["policies"].items():
            if name == "as run" or not x.get("timeline"):
                continue
            tl = x["timeline"]
            ax_exec.step([shift + t for t, *_ in tl] + [shift + p["duration_s"]], [r for _, r, _ in tl] + [tl[-1][1]],
                         where="post", lw=1.2, color=POLICY_COLOURS.get(name), label=f"{name} (predicted)")
            top = max(top, *(r for _, r, _ in tl))
    ax_exec.set_ylim(0, top + 1.2)
    for t, *_ in s["decisions"]:
        ax_exec.axvline(t, color="black", lw=0.5, alpha=0.5)
    ax_exec.set_ylabel("executors")
    _legend(ax_exec, fontsize=7, loc="upper left", ncol=4)
    for seg in row.get("timeline") or []:
        a, b = (seg["from_ms"] - s["t0_ms"]) / 1000.0, (seg["to_ms"] - s["t0_ms"]) / 1000.0
        ax_health.axvspan(a, max(b, a + 0.5), color=STATE_COLOURS.get(seg["state"], "#c7c7c7"))
        ax_health.text((a + b) / 2, 0.5, seg["state"], ha="center", va="center", fontsize=7)
    ax_health.set_yticks([])
    ax_health.set_ylabel("health", fontsize=8)
    ax_health.set_xlabel("seconds since the first micro-batch")
    fig.tight_layout()
    buf = io.StringIO()
    fig.savefig(buf, format="svg")
    plt.close(fig)
    text = buf.getvalue()
    return text[text.index("<svg"):]


def _numbers(row: dict) -> str:
    slo = row.get("slo") or {}
    items = [("verdict", f"{row.get('verdict') or (row.get('health') or {}).get('state')}: "
                         f"{row.get('reason') or (row.get('health') or {}).get('reason') or ''}"),
             ("SLO", f"{_pct(slo.get('attainment'))} of {slo.get('spans', 0)} spans within "
                     f"{slo.get('bound_ms')} ms ({slo.get('source')})" if slo.get("bound_ms") else "none"),
             ("executor-seconds used", f"{row['executor_seconds']:,.0f}" if row.get("executor_seconds") else "n/a")]
    body = "".join(f"<tr><th>{_e(k)}</th><td>{_e(v)}</td></tr>" for k, v in items)
    p = row.get("prediction")
    if p:
        rows = "".join(
            f"<tr><td>{_e(n)}</td><td>{x['executor_seconds']:,.0f}</td><td>{_pct(x['attainment'])}</td>"
            f"<td>{x['actions']:.1f}</td><td>{_pct(x.get('saving'))}</td></tr>"
            for n, x in p["policies"].items())
        pred = (f"<p class=small>Predicted by the simulator calibrated on this log ({p['duration_s']:.0f} s from the "
                f"first trigger, bound {p['bound_s']:g} s, 1..{p['max_executors']} executors, seeds "
                f"{p['seeds'][0]}..{p['seeds'][-1]}); measured as run: {_pct(p['measured_attainment'])} of spans."
                + (f" Not in the log (simulator defaults): {_e(', '.join(p['defaults']))}." if p.get("defaults") else "")
                + "</p><table><tr><th>policy</th><th>executor-seconds</th><th>SLO spans</th><th>actions</th>"
                  f"<th>saving</th></tr>{rows}</table>")
    else:
        pred = f"<p class=small>No prediction: {_e(row.get('prediction_reason') or 'none')}</p>"
    return f"<table>{body}</table>{pred}"


def _decisions(s: dict, row: dict) -> str:
    items = [(t, pol, f"{knob}: {old} → {new}", reason) for t, pol, knob, old, new, reason in s["decisions"]]
    p = row.get("prediction")
    if p:
        shift = (p["t0_ms"] - s["t0_ms"]) / 1000.0
        for name, x in p["policies"].items():
            for t, old, new, reason in (x.get("decisions") or [])[:MAX_DECISIONS]:
                items.append((shift + t, f"{name} (predicted)", f"executors: {old} → {new}", reason))
    if not items:
        return "<p class=small>No decisions.</p>"
    body = "".join(f"<tr><td>{t:.1f}</td><td>{_e(who)}</td><td>{_e(what)}</td><td>{_e(why)}</td></tr>"
                   for t, who, what, why in sorted(items, key=lambda x: x[0]))
    return f"<table><tr><th>s</th><th>policy</th><th>change</th><th>reason</th></tr>{body}</table>"


def section(engine: Engine, row: dict) -> str:
    """One application's section: numbers, figure, decisions."""
    title = f"{row.get('job')} ({row.get('application') or row.get('app_name') or ''}, {row.get('app_id') or ''})"
    s = _series(engine, row["job"], row) if row.get("job") else None
    if s is None:
        return f"<h2>{_e(title)}</h2>{_numbers(row)}<p class=small>No micro-batches to draw.</p>"
    return f"<h2>{_e(title)}</h2>{_numbers(row)}{figure_svg(s, row)}<h3>Decisions</h3>{_decisions(s, row)}"


def write_report(path: str, engine: Engine, rows: list[dict], title: str, table: Optional[list[str]] = None) -> None:
    """Write the page: ``table`` (the directory's lines, as printed) then a section per row (``AppRow`` dicts or a
    ``ReplayResult.to_json()`` with its ``prediction``)."""
    parts = [f"<!DOCTYPE html><html><head><meta charset=utf-8><title>{_e(title)}</title><style>{_CSS}</style></head>"
             f"<body><h1>{_e(title)}</h1><p class=small>spark-governor replay, "
             f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}</p>"]
    if table:
        parts.append("<pre>" + _e("\n".join(table)) + "</pre>")
    for row in rows:
        if not row.get("error"):
            parts.append(section(engine, row))
    parts.append("</body></html>")
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write("".join(parts))
    os.replace(tmp, path)
