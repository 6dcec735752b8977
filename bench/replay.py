"""Replay throughput: events per second and peak memory importing a large event log (``spark-governor bench replay``).

The large log is generated from a real Spark event log (the *template*, e.g. the one
``tests/data/replay_template.jsonl.gz`` holds: Spark 4.3, one streaming query, a keyed count over the rate
source): its streaming section (first Spark job of a query to its last progress event) is repeated
until the log reaches the target size, each copy with job, stage and task ids, micro-batch ids and every
timestamp shifted past the previous copy, so the import sees one long, consistent run. Written plain or
zstd-compressed (Spark 4's default codec).

Measured: wall seconds (and CPU seconds of the process, telling a busy machine from a slow import) of
``api.replay.Replay.run`` into a fresh SQLite file (no policy), events read per
second (every event of the log, as ``collectors.event_log.ReadStats.events``), MB of log per second and
the process's peak RSS (``resource.getrusage``, MiB) before and after, for two log sizes: a memory bound
shows as the same peak for both.
"""
from __future__ import annotations

import gzip
import json
import os
import resource
import tempfile
import time
from pathlib import Path
from typing import Callable, Optional

TIME_KEYS = frozenset({"Submission Time", "Completion Time", "Launch Time", "Finish Time", "Getting Result Time",
                       "Timestamp", "time"})
QUERY_ID = "sql.streaming.queryId"
BATCH_ID = "streaming.sql.batchId"


def _load(template: str) -> list[dict]:
    opener = gzip.open if template.endswith(".gz") else open
    with opener(template, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def _split(events: list[dict]) -> tuple[list, list, list]:
    """(prefix, streaming section, suffix) of the template."""
    first = next(i for i, e in enumerate(events) if e["Event"] == "SparkListenerJobStart"
                 and QUERY_ID in (e.get("Properties") or {}))
    last = max(i for i, e in enumerate(events) if e["Event"].endswith("QueryProgressEvent"))
    return events[:first], events[first:last + 1], events[last + 1:]


def _shift(obj, dt: int, ids: dict):
    """A copy of ``obj`` with times shifted by ``dt`` ms and ids by ``ids`` (job, stage, task, batch)."""
    if isinstance(obj, dict):
        out = {}
        for k, v in obj.items():
            if k in TIME_KEYS and isinstance(v, int) and v > 0:
                out[k] = v + dt
            elif k == "Stage ID" and isinstance(v, int):
                out[k] = v + ids["stage"]
            elif k == "Job ID" and isinstance(v, int):
                out[k] = v + ids["job"]
            elif k == "Task ID" and isinstance(v, int):
                out[k] = v + ids["task"]
            elif k in ("Parent IDs", "Stage IDs") and isinstance(v, list):
                out[k] = [x + ids["stage"] for x in v]
            elif k == BATCH_ID and isinstance(v, str) and v.isdigit():
                out[k] = str(int(v) + ids["batch"])
            else:
                out[k] = _shift(v, dt, ids)
        return out
    if isinstance(obj, list):
        return [_shift(v, dt, ids) for v in obj]
    return obj


def _iso_shift(ts: str, dt: int) -> str:
    from datetime import datetime, timedelta

    t = datetime.fromisoformat(ts.replace("Z", "+00:00")) + timedelta(milliseconds=dt)
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond // 1000:03d}Z"


def _span(section: list[dict]) -> tuple[int, dict]:
    times, ids = [], {"job": 0, "stage": 0, "task": 0, "batch": 0}

    def walk(o):
        if isinstance(o, dict):
            for k, v in o.items():
                if k in TIME_KEYS and isinstance(v, int) and v > 0:
                    times.append(v)
                elif k == "Stage ID" and isinstance(v, int):
                    ids["stage"] = max(ids["stage"], v + 1)
                elif k == "Job ID" and isinstance(v, int):
                    ids["job"] = max(ids["job"], v + 1)
                elif k == "Task ID" and isinstance(v, int):
                    ids["task"] = max(ids["task"], v + 1)
                else:
                    walk(v)
        elif isinstance(o, list):
            for v in o:
                walk(v)

    walk(section)
    for e in section:
        if e["Event"].endswith("QueryProgressEvent"):
            ids["batch"] = max(ids["batch"], int(e["progress"]["batchId"]) + 1)
    return max(times) - min(times) + 1000, ids


def generate_log(template: str, out: str, target_bytes: int, codec: Optional[str] = None,
                 app_id: Optional[str] = None, app_name: Optional[str] = None) -> dict:
    """Write a log of about ``target_bytes`` (uncompressed) at ``out`` from ``template``, as application
    ``app_id`` named ``app_name`` when given; returns counts."""
    events = _load(template)
    if app_id or app_name:
        events = [{**e, **({"App ID": app_id} if app_id else {}), **({"App Name": app_name} if app_name else {})}
                  if e["Event"] == "SparkListenerApplicationStart" else e for e in events]
    prefix, section, suffix = _split(events)
    period, step = _span(section)
    lines = [json.dumps(e, separators=(",", ":")) for e in section]
    size = sum(len(x) + 1 for x in lines)
    copies = max(1, target_bytes // max(1, size))
    if codec == "zstd":
        import zstandard

        raw = open(out, "wb")
        f = zstandard.ZstdCompressor(level=1).stream_writer(raw)
    elif codec is None:
        raw = None
        f = open(out, "wb")
    else:
        raise ValueError(f"codec: {codec!r} (plain or zstd)")
    written = n = 0
    try:
        for e in prefix:
            b = (json.dumps(e, separators=(",", ":")) + "\n").encode()
            f.write(b)
            written, n = written + len(b), n + 1
        for k in range(copies):
            ids = {key: v * k for key, v in step.items()}
            dt = period * k
            for e in section:
                c = _shift(e, dt, ids)
                if c["Event"].endswith("QueryProgressEvent"):
                    p = c["progress"]
                    p["batchId"] = int(p["batchId"]) + ids["batch"]
                    p["timestamp"] = _iso_shift(p["timestamp"], dt)
                b = (json.dumps(c, separators=(",", ":")) + "\n").encode()
                f.write(b)
                written, n = written + len(b), n + 1
        for e in suffix:
            c = _shift(e, period * (copies - 1), {"job": 0, "stage": 0, "task": 0, "batch": 0})
            b = (json.dumps(c, separators=(",", ":")) + "\n").encode()
            f.write(b)
            written, n = written + len(b), n + 1
    finally:
        f.close()
        if raw is not None and not raw.closed:
            raw.close()
    return {"events": n, "bytes": written, "file_bytes": os.path.getsize(out), "copies": copies,
            "batches": copies * sum(1 for e in section if e["Event"].endswith("QueryProgressEvent"))}


def _peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def measure(log: str, workdir: str) -> dict:
    """Import ``log`` into a fresh SQLite file under ``workdir``; wall time, events/s and peak RSS."""
    from spark_governor.aggregators.db import make_engine, upgrade
    from spark_governor.api.replay import Replay

    db = Path(workdir) / f"bench-{time.time_ns()}.db"
    url = f"sqlite:///{db}"
    upgrade(url)
    engine = make_engine(url)
    try:
        rss_before = _peak_rss_mib()
        rep = Replay(engine, log, "bench-replay")
        t0, c0 = time.perf_counter(), time.process_time()
        result = rep.run()
        seconds, cpu_seconds = time.perf_counter() - t0, time.process_time() - c0
    finally:
        engine.dispose()
        db.unlink(missing_ok=True)  # a throwaway store (tens of MB for 1 GB of log)
    events = result.read["events"]
    return {"log": log, "file_bytes": os.path.getsize(log), "seconds": seconds, "events": events,
            "events_per_second": events / seconds, "mb_per_second": os.path.getsize(log) / 1e6 / seconds,
            "cpu_seconds": cpu_seconds, "events_per_cpu_second": events / cpu_seconds if cpu_seconds > 0 else None,
            "tasks": result.tasks, "batches": result.batches, "skipped": result.read["skipped"],
            "peak_rss_mib_before": rss_before, "peak_rss_mib_after": _peak_rss_mib()}


def run_replay_bench(template: str, sizes_mb: tuple = (50, 200), codec: Optional[str] = None,
                     workdir: Optional[str] = None, log: Callable[[str], None] = print) -> dict:
    """Generate one log per size (MB, uncompressed) and import each; see the module docstring."""
    tmp = workdir or tempfile.mkdtemp(prefix="sg-bench-replay-")
    runs = []
    for mb in sizes_mb:
        path = str(Path(tmp) / (f"local-bench-{mb}mb" + (f".{codec}" if codec else "")))
        gen = generate_log(template, path, int(mb * 1e6), codec)
        log(f"generated {path}: {gen['events']} events, {gen['bytes'] / 1e6:.0f} MB ({gen['file_bytes'] / 1e6:.0f} MB "
            f"on disk), {gen['batches']} micro-batches")
        m = measure(path, tmp)
        log(f"imported in {m['seconds']:.1f} s ({m['cpu_seconds']:.1f} s of CPU): {m['events_per_second']:,.0f} events/s, "
            f"{m['mb_per_second']:.1f} MB/s, peak RSS {m['peak_rss_mib_after']:.0f} MiB")
        runs.append({**gen, **m, "size_mb": mb})
        os.remove(path)
    return {"template": template, "codec": codec or "plain", "runs": runs,
            "summary": {"events_per_second": [round(r["events_per_second"]) for r in runs],
                        "peak_rss_mib": [round(r["peak_rss_mib_after"]) for r in runs],
                        "size_mb": [r["size_mb"] for r in runs]}}


def run_dir_bench(template: str, apps: int = 200, mb_each: float = 1.0, workers: int = 2,
                  codec: Optional[str] = "zstd", workdir: Optional[str] = None,
                  log: Callable[[str], None] = print) -> dict:
    """``bench replay --dir``: a History Server directory of ``apps`` applications generated from ``template``
    (each about ``mb_each`` MB of uncompressed JSON, renamed: its own app id and name), replayed by
    ``api.replay_dir.replay_directory`` with ``workers`` processes into a fresh SQLite file, as
    ``spark-governor replay DIR`` does for its table (``api.replay_dir.directory_options``: SLO and verdict at each
    end, no timeline, the prediction hook). Events per second over the whole
    directory (wall clock), the slowest application, and the peak RSS of the parent and of the largest worker."""
    from spark_governor.aggregators.db import upgrade
    from spark_governor.api.replay_dir import directory_options, replay_directory
    from spark_governor.bench.replay_prediction import replay_prediction

    tmp = Path(workdir or tempfile.mkdtemp(prefix="sg-bench-replay-dir-"))
    logs = tmp / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    events = 0
    for i in range(apps):
        app_id = f"local-{1_700_000_000_000 + i}"
        gen = generate_log(template, str(logs / (app_id + (f".{codec}" if codec else ""))), int(mb_each * 1e6),
                           codec, app_id=app_id, app_name=f"bench-app-{i:04d}")
        events += gen["events"]
    log(f"generated {apps} applications in {logs}: {events:,} events, "
        f"{sum(f.stat().st_size for f in logs.iterdir()) / 1e6:.0f} MB on disk")
    db = tmp / "bench.db"
    url = f"sqlite:///{db}"
    upgrade(url)
    t0 = time.perf_counter()
    # what ``spark-governor replay DIR`` runs for its table (``api.cli.replay``): the SLO its trigger implies, the
    # verdict at each end, each application's prediction (none here: the template ran in local mode)
    rows = replay_directory(url, str(logs), workers, directory_options(None, None, timeline=False),
                            predict=replay_prediction)
    seconds = time.perf_counter() - t0
    read = sum(r.get("events") or 0 for r in rows)
    failed = [r for r in rows if r.get("error")]
    out = {"template": template, "apps": apps, "mb_each": mb_each, "workers": workers, "codec": codec or "plain",
           "cpus": os.cpu_count(), "seconds": seconds, "events": read, "events_generated": events,
           "events_per_second": read / seconds, "failed": len(failed),
           "verdicts": {v: sum(1 for r in rows if r.get("verdict") == v) for v in {r.get("verdict") for r in rows}},
           "peak_rss_mib_parent": _peak_rss_mib(),
           "peak_rss_mib_worker": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024.0}
    log(f"replayed {apps} applications ({len(failed)} failed) in {seconds:.1f} s with {workers} workers: "
        f"{out['events_per_second']:,.0f} events/s; peak RSS {out['peak_rss_mib_worker']:.0f} MiB per worker")
    db.unlink(missing_ok=True)
    for f in logs.iterdir():
        f.unlink()
    return out
