"""Replay a whole event-log directory as the History Server keeps it: every application into one table (issue #43).

``spark.eventLog.dir`` / ``spark.history.fs.logDirectory`` holds one entry per application: a file (plain, or
``.lz4`` / ``.lzf`` / ``.snappy`` / ``.zstd``; ``.inprogress`` while the application runs) or a rolling log's
``eventlog_v2_<appId>`` directory. :func:`application_logs` lists them (hidden files and anything else skipped);
:func:`replay_directory` imports each with ``api.replay.Replay`` — in ``workers`` processes, one application at a time
each (a replay streams its log, so a worker's memory stays bounded) — and returns one :class:`AppRow` per entry.

* Each application becomes a job named after it (its app name made a valid job name; when two applications of
  the directory, or a job already in the database, share the name, ``<name>-<appId>``), its run the app id.
* Its latency SLO: ``bound_ms`` for every application, or the bound its own trigger implies (2 × the trigger
  interval read back from the log, ``collectors.trigger_inference``); the row says which.
* Its verdict at its end and its timeline (``aggregators.health_timeline``), its SLO attainment and the
  executor-seconds it used (task-slot-seconds in local mode).
* A log that cannot be read or imported is a row with the reason (``error``), not an abort.
* With ``predict`` (the CLI passes ``bench.replay_prediction.replay_prediction``: the API's modules do not import the
  benchmarks), what each executor policy would have used and kept, from the simulator calibrated on the log.

:func:`worst_first` orders rows for the table: by verdict severity (:data:`SEVERITY`), then lower SLO attainment,
then more executor-seconds; unreadable logs last.
"""
from __future__ import annotations

import multiprocessing
import os
import re
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from spark_governor.collectors.event_log import EventLogError, log_files

#: verdicts from the most to the least in need of a person (``aggregators.health.STATES``)
SEVERITY = ("unhealthy", "no-progress", "underprovisioned", "overprovisioned", "unknown", "idle", "optimal")
_JOB_CHARS = re.compile(r"[^A-Za-z0-9._-]+")
#: a worker process's engine per database URL (``_import``)
_ENGINES: dict = {}


@dataclass
class AppRow:
    """One application of the directory (units: seconds of log time, executor-seconds)."""

    path: str
    application: Optional[str] = None
    app_id: Optional[str] = None
    job: Optional[str] = None
    streaming: bool = False
    queries: list = field(default_factory=list)
    duration_s: Optional[float] = None
    batches: int = 0
    rows: int = 0
    tasks: int = 0
    events: int = 0  # events read from the log
    verdict: Optional[str] = None
    reason: Optional[str] = None
    slo: Optional[dict] = None
    executor_seconds: Optional[float] = None
    unit: str = "executors"
    timeline: list = field(default_factory=list)
    in_progress: bool = False  # the log is still being written (``.inprogress``): judged at its last event
    error: Optional[str] = None
    #: what each executor policy would have done (``bench.replay_prediction.predict``), or why there is no prediction
    prediction: Optional[dict] = None
    prediction_reason: Optional[str] = None

    def to_json(self) -> dict:
        return dict(self.__dict__)


def application_logs(directory: str | os.PathLike) -> list[Path]:
    """The applications' event logs in ``directory`` (files and rolling ``eventlog_v2_*`` directories), by name."""
    d = Path(directory)
    if not d.is_dir():
        raise EventLogError(f"path: {d} is not a directory")
    out = []
    for p in sorted(d.iterdir()):
        if p.name.startswith(".") or p.name.endswith(".crc"):
            continue
        if p.is_file() or (p.is_dir() and p.name.startswith("eventlog_v2_")):
            out.append(p)
    return out


def is_application_directory(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a directory of applications' logs rather than one rolling log."""
    p = Path(path)
    if not p.is_dir():
        return False
    try:
        log_files(p)
        return False
    except EventLogError:
        return True


def job_name(app_name: Optional[str], app_id: Optional[str], fallback: str) -> str:
    """A valid job name (``policies.wire.JobName``) for an application."""
    base = _JOB_CHARS.sub("-", app_name or app_id or fallback).strip("-._") or "app"
    return base[:128]


def _names(scans: list[tuple[Path, dict]], taken: set[str]) -> dict[Path, str]:
    bases = {p: job_name(s.get("app_name"), s.get("app_id"), p.name) for p, s in scans}
    counts: dict[str, int] = {}
    for b in bases.values():
        counts[b] = counts.get(b, 0) + 1
    out = {}
    for p, s in scans:
        name = bases[p]
        if counts[name] > 1 or name in taken:
            name = job_name(f"{name}-{s.get('app_id') or p.name}", None, p.name)
        n, unique = 2, name
        while unique in taken:
            unique = f"{name[:120]}-{n}"
            n += 1
        taken.add(unique)
        out[p] = unique
    return out


def _files(path: str) -> list[Path]:
    try:
        return log_files(path)
    except EventLogError:
        return []


def _scan(path: str) -> tuple[Optional[dict], Optional[str]]:
    """``api.replay.scan`` of one log (run in a worker process) → (its first look, None) or (None, why not)."""
    from spark_governor.api.replay import scan

    try:
        return scan(path), None
    except (EventLogError, ValueError, OSError) as exc:
        return None, str(exc)
    except Exception as exc:
        return None, f"{exc.__class__.__name__}: {exc}"


def _import(db_url: str, path: str, job: str, options: dict, predict: Optional[Callable] = None) -> dict:
    """Import one application (run in a worker process) → :class:`AppRow` as a dict; ``predict(engine, job,
    result)`` → ``{"prediction": …}`` or ``{"reason": …}``."""
    from spark_governor.aggregators.db import make_engine
    from spark_governor.api.replay import Replay, ReplayError

    row = AppRow(path=path, job=job, in_progress=any(f.name.endswith(".inprogress") for f in _files(path)))
    engine = _ENGINES.get(db_url)
    if engine is None:  # one per worker process: its compiled statements serve every application it imports
        engine = _ENGINES[db_url] = make_engine(db_url)
    try:
        r = Replay(engine, path, job, **options).run()
    except (ReplayError, EventLogError, ValueError, OSError) as exc:
        row.error = str(exc)
        return row.to_json()
    except Exception as exc:  # a log no rule foresaw: a row with the reason, not an abort
        row.error = f"{exc.__class__.__name__}: {exc}"
        return row.to_json()
    row.application, row.app_id, row.streaming = r.app_name, r.app_id, r.streaming
    row.queries = [q["name"] or q["id"] for q in r.queries]
    row.duration_s = (r.last_ms - r.first_ms) / 1000.0 if r.first_ms and r.last_ms else None
    row.batches, row.rows, row.tasks, row.events = r.batches, r.rows, r.tasks, r.read.get("events", 0)
    row.verdict = (r.health or {}).get("state")
    row.reason = (r.health or {}).get("reason")
    row.slo, row.executor_seconds, row.timeline = r.slo, r.executor_seconds, r.timeline
    row.unit = "task slots" if r.master and str(r.master).startswith("local") else "executors"
    if r.reports == 0 or (r.tasks == 0 and r.batches == 0 and r.stages == 0):
        row.error = "nothing imported: " + (", ".join(f"{n} {why}" for why, n in sorted(r.read["skipped"].items()))
                                            or "no events the import reads")
    elif predict is not None:
        try:
            p = predict(engine, job, r.to_json())
        except Exception as exc:  # a prediction that fails leaves the row's import standing
            p = {"reason": f"{exc.__class__.__name__}: {exc}"}
        row.prediction, row.prediction_reason = p.get("prediction"), p.get("reason")
    return row.to_json()


def directory_options(bound_ms: Optional[float], span_s: Optional[float], timeline: bool) -> dict:
    """``api.replay.Replay``'s options for every application of a directory: the SLO (``bound_ms`` or the one the
    trigger implies), and each run's health timeline only where it is shown (``--json``, ``--report``): up to 120
    verdicts an application, it made a 40 × 20 MB directory 5 times slower (4 467 against 19 754–23 720 events/s,
    docs/benchmarks.md). ``timeline``: whether to compute it."""
    return {"slo_bound_ms": bound_ms, "slo_from_trigger": bound_ms is None, "timeline": timeline,
            **({"slo_span_s": span_s} if span_s is not None else {})}


def replay_directory(db_url: str, directory: str, workers: int = 2, options: Optional[dict] = None,
                     progress: Optional[Callable[[dict], None]] = None,
                     predict: Optional[Callable] = None) -> list[dict]:
    """Import every application of ``directory`` into the database at ``db_url`` (migrated beforehand); rows as
    :class:`AppRow` dicts in :func:`worst_first` order. ``options``: ``api.replay.Replay``'s keyword options for
    every application. ``progress(row)`` is called as each application is done. ``predict``: a module-level
    function (it is sent to the worker processes) called after each import (:func:`_import`)."""
    from sqlalchemy import select

    from spark_governor.aggregators.db import make_engine
    from spark_governor.aggregators.models import jobs

    logs = application_logs(directory)
    engine = make_engine(db_url)
    try:
        with engine.connect() as conn:
            taken = set(conn.execute(select(jobs.c.name)).scalars())
    finally:
        engine.dispose()
    scans, rows = [], []
    # spawned, not forked: the caller may hold threads (a server, a Spark gateway) that a fork would copy mid-lock
    with ProcessPoolExecutor(max_workers=max(1, workers), mp_context=multiprocessing.get_context("spawn")) as pool:
        for p, (info, error) in zip(logs, pool.map(_scan, [str(p) for p in logs])):
            if error is None:
                scans.append((p, info))
                continue
            rows.append(AppRow(path=str(p), error=error).to_json())
            if progress is not None:
                progress(rows[-1])
        names = _names(scans, taken)
        futures = [pool.submit(_import, db_url, str(p), names[p], dict(options or {}), predict) for p, _ in scans]
        for f in as_completed(futures):
            rows.append(f.result())
            if progress is not None:
                progress(rows[-1])
    return worst_first(rows)


def worst_first(rows: list[dict]) -> list[dict]:
    def key(r: dict):
        if r.get("error"):
            return (1, 0, 0.0, 0.0, r["path"])
        sev = SEVERITY.index(r["verdict"]) if r.get("verdict") in SEVERITY else len(SEVERITY)
        att = (r.get("slo") or {}).get("attainment")
        return (0, sev, 2.0 if att is None else att, -(r.get("executor_seconds") or 0.0), r["path"])

    return sorted(rows, key=key)
