"""The replay prediction checked against the real thing (issue #43, "Predictions that can be checked").

``bench scaling-real`` runs the static allocation with Spark's event log on. This module replays that log into a
store of its own (``api.replay``, as ``spark-governor replay`` does: nothing from the live control plane), predicts
from it what each executor policy would do on the static run's own arrivals (``bench.replay_prediction``: the
simulator calibrated from the log, over the static run's staircase window, with the bench's control-plane settings
and the job's attach options), and sets each prediction beside the same policy's live run of the same invocation
on the same staircase. Goal: attainment within :data:`ATTAINMENT_GOAL_POINTS` points and executor-seconds within
:data:`EXEC_SECONDS_GOAL` (relative) for every policy. Units: seconds, executor-seconds, points (100 × a share).
"""
from __future__ import annotations

from pathlib import Path

from spark_governor.bench.replay_prediction import log_report, predict

ATTAINMENT_GOAL_POINTS = 5.0
EXEC_SECONDS_GOAL = 0.10
SEEDS = 5


def static_prediction(report: dict, workdir: Path, seeds: int = SEEDS) -> dict:
    """Replay the static run's event log of ``report`` (``bench scaling-real``'s, before its ``prediction`` is
    set) and compare its predictions with the live runs; JSON-ready. ValueError when the report has no static run
    with an event log."""
    from spark_governor.aggregators.db import make_engine, upgrade
    from spark_governor.api.replay import Replay

    static = next((r for r in report["results"] if r["policy"].startswith("static") and r.get("event_log")), None)
    if static is None:
        raise ValueError("no static run with an event log in the report")
    db = f"sqlite:///{Path(workdir) / 'replay.db'}"
    upgrade(db)
    engine = make_engine(db)
    try:
        result = Replay(engine, static["event_log"], "replayed-static", window_ms=int(report["window_ms"]),
                        evaluation_interval_s=float(report["evaluation_interval_s"])).run()
        log = log_report(engine, result.job, bound_s=report["bound_s"], span_s=report["span_s"],
                         trigger_s=report["trigger_s"], start_ms=static["t0_ms"], end_ms=static["t_end_ms"],
                         max_executors=report["max_executors"], evaluation_interval_s=report["evaluation_interval_s"],
                         window_ms=report["window_ms"], source_probe=report["source_probe"],
                         warm_executors=report["warm_executors"], launch_hold=report["launch_hold"],
                         surge_ratio=report.get("surge_ratio"))
    finally:
        engine.dispose()
    pred = predict(log, seeds=seeds)
    rows = []
    for r in report["results"]:
        name = "as run" if r is static else r["policy"]
        p = pred["policies"].get(name)
        if p is None:
            continue
        real_att, real_es = r.get("slo_attainment_windows"), r["executor_seconds"]
        gap = None if p["attainment"] is None or real_att is None else 100 * (p["attainment"] - real_att)
        ratio = p["executor_seconds"] / real_es if real_es else None
        rows.append({"policy": r["policy"], "real_attainment": real_att, "predicted_attainment": p["attainment"],
                     "predicted_range": p["attainment_range"], "gap_points": gap, "real_executor_seconds": real_es,
                     "predicted_executor_seconds": p["executor_seconds"], "exec_seconds_ratio": ratio,
                     "within_goal": gap is not None and abs(gap) <= ATTAINMENT_GOAL_POINTS + 1e-9
                     and ratio is not None and abs(ratio - 1) <= EXEC_SECONDS_GOAL + 1e-9})
    return {"event_log": static["event_log"], "seeds": pred["seeds"], "prediction": pred, "rows": rows,
            "goal": {"attainment_points": ATTAINMENT_GOAL_POINTS, "exec_seconds": EXEC_SECONDS_GOAL},
            "within_goal": bool(rows) and all(r["within_goal"] for r in rows if r["policy"] != static["policy"])}


def format_prediction(out: dict) -> str:
    """Predicted from the static run's log vs measured live, per policy."""
    head = (f"{'policy':<20} {'live SLO':>8} {'predicted':>9} {'gap pts':>8} {'live exec-s':>11} "
            f"{'predicted':>9} {'ratio':>6}  within goal")
    lines = [f"prediction from the static run's event log ({out['event_log']}), seeds "
             f"{out['seeds'][0]}..{out['seeds'][-1]}", head, "-" * len(head)]
    f = (lambda x, spec: "-" if x is None else format(x, spec))
    for r in out["rows"]:
        lines.append(f"{r['policy']:<20} {f(r['real_attainment'], '.3f'):>8} {f(r['predicted_attainment'], '.3f'):>9} "
                     f"{f(r['gap_points'], '+.1f'):>8} {r['real_executor_seconds']:>11.0f} "
                     f"{r['predicted_executor_seconds']:>9.0f} {f(r['exec_seconds_ratio'], '.2f'):>6}  "
                     f"{'yes' if r['within_goal'] else 'no'}")
    p = out["prediction"]
    lines.append(f"calibrated from the log: {', '.join(f'{k} {v:.3g}' for k, v in p['cluster'].items() if v is not None)}"
                 f"; registration {', '.join(f'{x:.1f}' for x in p['registration_s'] or [])} s")
    if p.get("defaults"):
        lines.append("not in the log (simulator defaults): " + ", ".join(p["defaults"]))
    return "\n".join(lines)
