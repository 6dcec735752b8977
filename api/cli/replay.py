"""``spark-governor replay PATH``: import a Spark event log as a job, optionally with a policy's what-if.

The import itself is ``api.replay``; this module parses options, shows a progress bar over the bytes
of the log read (compressed bytes for compressed logs) and prints the summary. Exit codes: 0 done
(also when lines or blocks were skipped: the summary says what), 2 bad usage or input (Click's
convention; the message names the option or field), 1 nothing could be imported.
"""
from __future__ import annotations

import json
import os
import sys
from typing import Optional

import click

from spark_governor.aggregators.db import DEFAULT_DB_URL


def _fmt(x, unit: str = "") -> str:
    if x is None:
        return "n/a"
    if isinstance(x, float):
        return f"{x:.3g}{unit}" if abs(x) < 1000 else f"{x:,.0f}{unit}"
    return f"{x}{unit}"


def summary_lines(r: dict) -> list[str]:
    """The human-readable summary of a ``ReplayResult.to_json()``."""
    read = r["read"]
    kind = ("streaming application, " + ", ".join(q["name"] or q["id"] for q in r["queries"])
            if r["streaming"] else "batch application (no streaming query): stages and tasks only")
    span = (r["last_ms"] - r["first_ms"]) / 1000.0 if r["first_ms"] and r["last_ms"] else None
    lines = [f"job {r['job']!r}: {kind}",
             f"  app {r['app_name']!r} ({r['app_id']}, master {r['master']}), {_fmt(span, ' s')} of log time",
             f"  imported: {r['batches']} micro-batches ({r['rows']} input rows), {r['stages']} stages, "
             f"{r['tasks']} tasks, in {r['reports']} reports",
             f"  read: {read['events']} events from {read['files']} file(s), {read['bytes_read']:,} bytes"]
    skipped = dict(read["skipped"])
    if r["reports_failed"]:
        skipped[f"reports refused ({r['records_lost']} records)"] = r["reports_failed"]
    if r["orphaned_tasks"]:
        skipped["tasks of stages never started in the log"] = r["orphaned_tasks"]
    if skipped:
        lines.append("  skipped: " + ", ".join(f"{n} {reason}" for reason, n in sorted(skipped.items())))
        if read["unknown_events"]:
            lines.append("    unknown event types: " + ", ".join(f"{k} ({v})" for k, v in
                                                                  sorted(read["unknown_events"].items())[:10]))
        for note in read["notes"][:10] + r["failures"][:5]:
            lines.append(f"    {note}")
    else:
        lines.append("  skipped: nothing")
    h = r.get("health")
    if h:
        lines.append(f"health at the log's end: {h['state']} ({h['reason']})")
        if len(r.get("timeline") or []) > 1:
            t0 = r["first_ms"] or 0
            lines.append("  timeline: " + ", ".join(f"{seg['state']} {(seg['from_ms'] - t0) / 1000:.0f}-"
                                                    f"{(seg['to_ms'] - t0) / 1000:.0f} s" for seg in r["timeline"]))
    slo = r.get("slo")
    if slo:
        pct = "n/a" if slo.get("attainment") is None else f"{100 * slo['attainment']:.0f}%"
        lines.append(f"SLO: {pct} of {slo.get('spans', 0)} spans within {_fmt(slo['bound_ms'], ' ms')} ({slo['source']})"
                     if slo.get("bound_ms") is not None else f"SLO: none ({slo['source']})")
    if r.get("executor_seconds") is not None:
        unit = "task-slot-seconds" if r["master"] and str(r["master"]).startswith("local") else "executor-seconds"
        lines.append(f"{unit} used: {_fmt(r['executor_seconds'])}")
    w = r.get("what_if")
    if w:
        lines.append(f"what-if: policy {w['policy']} (dry-run) evaluated {w['evaluations']} times, every "
                     f"{_fmt(float(w['evaluation_interval_s']), ' s')} of log time")
        lines.append(f"  actions: {w['actions']}" + (
            " (" + ", ".join(f"{k}: {v}" for k, v in sorted(w["actions_by_knob"].items())) + ")"
            if w["actions_by_knob"] else ""))
        unit = "task-slot-seconds" if w["unit"] == "task slots" else "executor-seconds"
        lines.append(f"  {unit}: actual {_fmt(w.get('actual_executor_seconds'))}, "
                     f"policy's {_fmt(w.get('predicted_executor_seconds'))}")
        c = w.get("constraint")
        if c:
            pct = (lambda v: "n/a" if v is None else f"{100 * v:.0f}%")
            lines.append(f"  SLO {c['name']} (mean latency <= {c['bound_ms']:g} ms per {c['span_s']:g} s span): "
                         f"actual attainment {pct(c['actual_attainment'])} over {c['spans']} spans, "
                         f"predicted {pct(c['predicted_attainment'])} over {c['predicted_spans']} spans "
                         "with a prediction in force")
        else:
            lines.append("  SLO: no latency constraint given (add \"constraint\": {\"bound_ms\": ...} to --config)")
    return lines + prediction_lines(r.get("prediction"), r.get("prediction_reason"))


#: the executor policies the table predicts, with their column heads
PREDICTED = (("kingman", "kingman"), ("threshold", "threshold"), ("utilization-target", "util-target"))


def _pct(x) -> str:
    return "n/a" if x is None else f"{100 * x:.0f}%"


def prediction_cells(p: Optional[dict], reason: Optional[str]) -> tuple[str, ...]:
    """Per predicted policy "executor-seconds (attainment)", then the saving of the cheapest policy that keeps
    95 % of the spans (``bench.replay_prediction.best``); "-" and the reason when there is no prediction."""
    from spark_governor.bench.replay_prediction import best

    if not p:
        return ("-",) * len(PREDICTED) + (f"- ({reason})" if reason else "-",)
    cells = []
    for name, _ in PREDICTED:
        x = p["policies"].get(name)
        cells.append("-" if x is None else f"{x['executor_seconds']:,.0f} ({_pct(x['attainment'])})")
    b = best(p)
    cells.append(f"{100 * p['policies'][b]['saving']:.0f}% {b}" if b else "none keeps 95%")
    return tuple(cells)


def prediction_lines(p: Optional[dict], reason: Optional[str]) -> list[str]:
    """The summary's lines of a run's prediction (``bench.replay_prediction.predict``)."""
    if not p:
        return [f"prediction: none ({reason})"] if reason else []
    lines = [f"prediction (simulator calibrated on this log; {p['duration_s']:.0f} s from the first trigger, "
             f"bound {p['bound_s']:g} s per {p['span_s']:g} s span, 1..{p['max_executors']} executors, "
             f"seeds {p['seeds'][0]}..{p['seeds'][-1]}):",
             f"  as run: {p['executor_seconds']:,.0f} executor-seconds, {_pct(p['measured_attainment'])} of spans "
             f"(simulated {_pct(p['policies']['as run']['attainment'])})"]
    for name, x in p["policies"].items():
        if name != "as run":
            lines.append(f"  {name}: {x['executor_seconds']:,.0f} executor-seconds ({x['ratio_vs_run']:.2f}x), "
                         f"{_pct(x['attainment'])} of spans, {x['actions']:.1f} actions")
    if p.get("defaults"):
        lines.append("  not in the log (simulator defaults): " + ", ".join(p["defaults"]))
    return lines


def table_lines(rows: list[dict]) -> list[str]:
    """The directory's table (``api.replay_dir``), worst first, one line per application."""
    head = ("job (application)", "queries", "duration", "verdict", "SLO attained (bound)", "exec-s used",
            *(f"{h} exec-s (SLO)" for _, h in PREDICTED), "saving")
    body = []
    for r in rows:
        if r.get("error"):
            body.append((os.path.basename(r["path"]), "-", "-", "unreadable", r["error"][:120], "-",
                         *("-",) * (len(PREDICTED) + 1)))
            continue
        slo = r.get("slo") or {}
        if slo.get("bound_ms") is not None:
            att = "n/a" if slo.get("attainment") is None else f"{100 * slo['attainment']:.0f}%"
            src = "trigger" if slo["source"].startswith("2 x") else slo["source"].lstrip("-")
            slo_text = f"{att} ({slo['bound_ms']:g} ms, {src})"
        else:
            slo_text = "n/a (no bound)" if r.get("streaming") else "n/a (batch)"
        exec_s = "-" if r.get("executor_seconds") is None else f"{r['executor_seconds']:,.0f}" + (
            " slot" if r.get("unit") == "task slots" else "")
        body.append((r["job"], ",".join(r["queries"]) or "-",
                     _fmt(r.get("duration_s"), " s") + (" (in progress)" if r.get("in_progress") else ""),
                     r.get("verdict") or "-", slo_text, exec_s,
                     *prediction_cells(r.get("prediction"), r.get("prediction_reason"))))
    widths = [max(len(str(row[i])) for row in (head, *body)) for i in range(len(head))]
    return ["  ".join(str(c).ljust(w) for c, w in zip(row, widths)).rstrip() for row in (head, *body)]


def _write_report(report: Optional[str], db_url: str, rows: list[dict], title: str,
                  table: Optional[list[str]] = None) -> None:
    if report is None:
        return
    from spark_governor.aggregators.db import make_engine
    from spark_governor.api.replay_report import write_report

    engine = make_engine(db_url)
    try:
        write_report(report, engine, rows, title, table)
    except OSError as exc:
        raise click.ClickException(f"--report: cannot write {report}: {exc.strerror or exc}") from None
    finally:
        engine.dispose()
    click.echo(f"wrote {report}", err=True)


def directory_constraint(config: dict) -> tuple[float, float]:
    """(bound ms, span s) of a directory's ``--config``: only ``{"constraint": {"bound_ms", "span_s"?}}`` (there is no
    policy to configure); click's BadParameter naming the field otherwise."""
    extra = set(config) - {"constraint"}
    c = config.get("constraint")
    if extra or not isinstance(c, dict):
        raise click.BadParameter('for a directory, only {"constraint": {"bound_ms": ..., "span_s": ...}}'
                                 + (f" (unknown field {sorted(extra)[0]!r})" if extra else ""), param_hint="--config")
    bound, span = c.get("bound_ms"), c.get("span_s", 5.0)
    for name, v in (("bound_ms", bound), ("span_s", span)):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
            raise click.BadParameter(f"constraint.{name}: must be a positive number", param_hint="--config")
    unknown = set(c) - {"bound_ms", "span_s"}
    if unknown:
        raise click.BadParameter(f"constraint.{sorted(unknown)[0]}: unknown field", param_hint="--config")
    return float(bound), float(span)


def _replay_directory(path: str, db_url: str, bound_ms: Optional[float], span_s: Optional[float], workers: int,
                      as_json: bool, no_progress: bool, report: Optional[str]) -> None:
    from spark_governor.api.replay_dir import application_logs, directory_options, replay_directory
    from spark_governor.bench.replay_prediction import replay_prediction

    n = len(application_logs(path))
    if n == 0:
        raise click.ClickException(f"{path}: no event logs in the directory")
    options = directory_options(bound_ms, span_s, timeline=as_json or report is not None)
    if no_progress or as_json:
        rows = replay_directory(db_url, path, workers, options, predict=replay_prediction)
    else:
        with click.progressbar(length=n, label=f"replaying {n} applications", file=sys.stderr) as bar:
            rows = replay_directory(db_url, path, workers, options, progress=lambda _row: bar.update(1),
                                    predict=replay_prediction)
    if as_json:
        click.echo(json.dumps({"directory": path, "applications": rows}, indent=2, default=str))
    else:
        for line in table_lines(rows):
            click.echo(line)
    _write_report(report, db_url, rows, f"replay of {path}", table_lines(rows))
    if all(r.get("error") for r in rows):
        raise click.ClickException(f"nothing imported from {path}")


@click.command("replay")
@click.argument("path", type=click.Path(exists=True, dir_okay=True, file_okay=True))
@click.option("--job", default=None, help="Job name to import as (default: the log's application name).")
@click.option("--db", "db_url", default=DEFAULT_DB_URL, show_default=True, envvar="SPARK_GOVERNOR_DB",
              help="Database URL of the control plane (created / migrated when needed).")
@click.option("--policy", default=None, help="Run this policy in dry-run mode over the replayed timeline.")
@click.option("--config", "config_json", default=None, metavar="JSON",
              help='The policy\'s config as JSON; may carry a latency constraint as '
                   '"constraint": {"bound_ms": 2000, "span_s": 5} (for a directory: only that constraint, '
                   'which every application is judged by).')
@click.option("--window-seconds", default=5.0, show_default=True, type=click.FloatRange(0.1, 3600),
              help="Length of a statistics window (as the control plane's serve --window-seconds).")
@click.option("--evaluation-seconds", default=10.0, show_default=True, type=click.FloatRange(0.1, 3600),
              help="Policy evaluation interval, in seconds of log time.")
@click.option("--bound-ms", default=None, type=click.FloatRange(min=0, min_open=True),
              help="Latency bound of the SLO the run is judged by (default: 2 x the trigger interval its batches "
                   "show; a --config constraint takes precedence).")
@click.option("--workers", default=2, show_default=True, type=click.IntRange(1, 64),
              help="Applications imported at once (a directory of applications).")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON instead of the summary.")
@click.option("--no-progress", is_flag=True, help="Do not show the progress bar.")
@click.option("--report", default=None, type=click.Path(dir_okay=False, writable=True), metavar="FILE.html",
              help="Also write one self-contained HTML page: per run its figure (rates, batch durations, latency vs "
                   "the bound, executors vs each policy's prediction, health timeline) and decisions.")
def replay_command(path: str, job: Optional[str], db_url: str, policy: Optional[str], config_json: Optional[str],
                   window_seconds: float, evaluation_seconds: float, bound_ms: Optional[float], workers: int,
                   as_json: bool, no_progress: bool, report: Optional[str]) -> None:
    """Import the Spark event log at PATH (a file, plain or .lz4/.zstd/.snappy, or a rolling
    eventlog_v2_* directory) as a job, with the log's own timestamps; or every application of an event-log
    directory as the History Server keeps it, ending with one table, worst first."""
    from spark_governor.aggregators.db import make_engine, upgrade
    from spark_governor.api.replay import Replay, ReplayError
    from spark_governor.api.replay_dir import is_application_directory
    from spark_governor.collectors.event_log import EventLogError

    directory = is_application_directory(path)
    if directory:
        for name, value in (("--job", job), ("--policy", policy)):
            if value is not None:
                raise click.UsageError(f"{name} is for one log, not a directory of applications")
    config = None
    if config_json is not None:
        if policy is None and not directory:
            raise click.UsageError("--config needs --policy")
        try:
            config = json.loads(config_json)
        except ValueError as exc:
            raise click.BadParameter(f"not JSON: {exc}", param_hint="--config") from None
        if not isinstance(config, dict):
            raise click.BadParameter("must be a JSON object", param_hint="--config")
    span_s = None
    if directory and config is not None:  # checked before the database is touched
        bound_ms, span_s = directory_constraint(config)
    try:
        upgrade(db_url)
    except Exception as exc:
        raise click.ClickException(f"--db: cannot open or migrate {db_url}: {exc.__class__.__name__}: {exc}") from None
    if directory:
        return _replay_directory(path, db_url, bound_ms, span_s, workers, as_json, no_progress, report)
    engine = make_engine(db_url)
    try:
        try:
            rep = Replay(engine, path, job, window_ms=int(window_seconds * 1000),
                         evaluation_interval_s=evaluation_seconds, policy=policy, policy_config=config,
                         slo_bound_ms=bound_ms, slo_from_trigger=bound_ms is None)
        except (ReplayError, EventLogError) as exc:
            raise click.UsageError(str(exc)) from None
        if no_progress or as_json:
            result = rep.run()
        else:
            with click.progressbar(length=max(1, rep.reader.total_bytes), label=f"replaying {rep.job}",
                                   show_pos=False, file=sys.stderr) as bar:
                rep.progress = bar.update
                result = rep.run()
        out = result.to_json()
        from spark_governor.bench.replay_prediction import replay_prediction

        p = replay_prediction(engine, rep.job, out)
        out["prediction"], out["prediction_reason"] = p.get("prediction"), p.get("reason")
    finally:
        engine.dispose()
    if as_json:
        click.echo(json.dumps(out, indent=2, default=str))
    else:
        for line in summary_lines(out):
            click.echo(line)
    if result.reports == 0 or (result.tasks == 0 and result.batches == 0 and result.stages == 0):
        raise click.ClickException(f"nothing imported from {path}")
    _write_report(report, db_url, [out], f"replay of {os.path.basename(path)}")


@click.command("replay")
@click.option("--template", default="tests/data/replay_template.jsonl.gz", show_default=True,
              type=click.Path(exists=True, dir_okay=False),
              help="A real Spark event log (plain, optionally .gz) whose streaming section is repeated.")
@click.option("--sizes-mb", default="100,400", show_default=True,
              help="Comma-separated sizes of the generated logs, in MB of uncompressed JSON.")
@click.option("--codec", default="plain", show_default=True, type=click.Choice(["plain", "zstd"]))
@click.option("--dir", "apps", default=None, type=click.IntRange(1, 100_000), metavar="N",
              help="Instead: a History Server directory of N applications generated from the template "
                   "(--mb-each MB each, renamed), replayed as `replay DIR` does.")
@click.option("--mb-each", default=1.0, show_default=True, type=click.FloatRange(min=0, min_open=True),
              help="With --dir: MB of uncompressed JSON per application.")
@click.option("--workers", default=2, show_default=True, type=click.IntRange(1, 64), help="With --dir: workers.")
@click.option("--out", default="bench-results/replay.json", show_default=True, type=click.Path(dir_okay=False))
def bench_replay(template: str, sizes_mb: str, codec: str, apps: Optional[int], mb_each: float, workers: int,
                 out: str) -> None:
    """Replay throughput (events/s, MB/s) and peak memory on generated large event logs, or (--dir N) on a
    generated directory of N applications."""
    from spark_governor.bench.output import write_json
    from spark_governor.bench.replay import run_dir_bench, run_replay_bench

    if apps is not None:
        result = run_dir_bench(template, apps, mb_each, workers, None if codec == "plain" else codec,
                               log=lambda m: click.echo(m, err=True))
        write_json(result, out, indent=2)
        click.echo(json.dumps({k: result[k] for k in ("apps", "workers", "seconds", "events", "events_per_second",
                                                     "failed", "peak_rss_mib_worker")}, indent=2))
        click.echo(f"wrote {out}", err=True)
        return

    try:
        sizes = tuple(float(x) for x in sizes_mb.split(",") if x.strip())
    except ValueError:
        raise click.BadParameter("comma-separated numbers", param_hint="--sizes-mb") from None
    if not sizes or any(s <= 0 for s in sizes):
        raise click.BadParameter("positive sizes", param_hint="--sizes-mb")
    result = run_replay_bench(template, sizes, None if codec == "plain" else codec,
                              log=lambda m: click.echo(m, err=True))
    write_json(result, out, indent=2)
    click.echo(json.dumps(result["summary"], indent=2))
    click.echo(f"wrote {out}", err=True)
