"""``spark-governor bench load``: many simulated reporters against a real ``serve`` (gunicorn) process.

Each simulated job sends one report per second (open loop: a late answer does not delay the next
report), the report a real reporter sends for a second in which ``tasks`` tasks of two stages finished
(``bench.reports.make_report``: folded at the edge, or ``shape="whole"`` every task a row as reporters of
before schema v3 send them), one micro-batch progress record and the query's state; gzip JSON with a report
token, over kept-alive connections. Every measured report is built before the clock starts, timed for when it
is due. A share of the jobs has a policy configured (dry-run), so the
scheduler evaluates them while the load runs.

Printed: offered vs achieved reports per second, accepted vs stored (counted in the database after
the run), p50/p99 answer time, the server's CPU seconds per report (its processes' user + system
time from ``/proc``), and for a PostgreSQL on this machine the database's too (the postmaster found
as the parent of a backend, ``pg_backend_pid()``; every process of that cluster), the load generator's
own CPU per report (it shares the machine), the ingest transactions and reports per transaction (group
commit), the policy evaluation runs during the load (from the
server's ``/metrics``: how many, their mean and longest bucket, and whether any overran the evaluation
interval), errors by kind, and the load average of the machine.
"""
from __future__ import annotations

import gzip
import http.client
import os
import queue
import random
import resource
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Optional

import orjson

from spark_governor.bench.reports import make_report

TOKEN = "bench-load-report-token"
ADMIN = "bench-load-admin-token"


@dataclass
class LoadResult:
    jobs: int
    seconds: float
    db: str
    workers: int
    tasks: int
    replicas: int = 1
    shape: str = "folded"  # the reports: folded at the edge (schema v3) or whole task rows (v2, the baseline)
    report_s: int = 1  # each job sends a report every report_s seconds, holding that many seconds of the job
    build_s: float = 0.0  # building the measured reports, before the clock started
    start_late_s: float = 0.0  # the clock started this much after the reports' planned start
    offered: int = 0
    answered: int = 0
    accepted: int = 0
    duplicates: int = 0  # answered 200 with duplicate: true (not stored again)
    stored: int = 0
    errors: dict = field(default_factory=dict)
    p50_s: Optional[float] = None
    p99_s: Optional[float] = None
    max_lateness_s: float = 0.0
    elapsed_s: float = 0.0  # from the first offered report to the last answer
    server_cpu_s: float = 0.0
    database_cpu_s: Optional[float] = None  # PostgreSQL on this machine: its processes' CPU seconds
    generator_cpu_s: float = 0.0  # this process (the simulated reporters), while the load ran
    evaluation_interval_s: float = 10.0
    evaluation_runs: int = 0  # policy evaluation runs that finished while the load ran
    evaluation_run_mean_s: Optional[float] = None
    evaluation_runs_over_interval: int = 0  # runs longer than the evaluation interval
    evaluations_skipped: int = 0  # runs skipped (the previous one still going, or the database failed them)
    transactions: int = 0  # ingest transactions committed while the load ran (group commit)
    reports_per_transaction: Optional[float] = None
    loadavg_before: tuple = ()
    loadavg_after: tuple = ()
    reporter_us_per_task: Optional[float] = None  # CPU of the Python reporter's edge fold per finished task (µs)

    @property
    def offered_per_s(self) -> float:
        return self.offered / self.seconds

    @property
    def achieved_per_s(self) -> float:
        """Accepted reports per second of the whole run, until the last answer (a backlog lowers it)."""
        return self.accepted / max(self.seconds, self.elapsed_s)

    @property
    def cpu_ms_per_report(self) -> Optional[float]:
        return 1000 * self.server_cpu_s / self.accepted if self.accepted else None

    @property
    def database_cpu_ms_per_report(self) -> Optional[float]:
        if self.database_cpu_s is None or not self.accepted:
            return None
        return 1000 * self.database_cpu_s / self.accepted

    @property
    def server_and_database_ms_per_job_second(self) -> Optional[float]:
        """Server plus database CPU per second of a job's life (a report holds ``report_s`` of them)."""
        if self.cpu_ms_per_report is None:
            return None
        return (self.cpu_ms_per_report + (self.database_cpu_ms_per_report or 0.0)) / self.report_s

    @property
    def generator_cpu_ms_per_report(self) -> Optional[float]:
        return 1000 * self.generator_cpu_s / self.offered if self.offered else None

    def as_dict(self) -> dict:
        return {**asdict(self), "offered_per_s": self.offered_per_s, "achieved_per_s": self.achieved_per_s,
                "cpu_ms_per_report": self.cpu_ms_per_report,
                "database_cpu_ms_per_report": self.database_cpu_ms_per_report,
                "generator_cpu_ms_per_report": self.generator_cpu_ms_per_report,
                "server_and_database_ms_per_job_second": self.server_and_database_ms_per_job_second,
                "achieved_ratio": self.accepted / self.offered if self.offered else None}


SHAPES = ("folded", "whole")


def job_report(job: str, reporter_id: str, seq: int, tasks: int, now_ms: int, rng: random.Random,
               shape: str = "folded", seconds: int = 1) -> dict:
    """``seconds`` seconds of a streaming job (those before ``now_ms``) as its reporter sends them
    (``bench.reports.make_report``): each a micro-batch of two stages of ``tasks`` / 2 partitions. ``shape``
    ``folded``: today's reporter (schema v3, the tasks folded at the edge); ``whole``: a reporter of before the
    edge fold (schema v2, every task a row), the baseline."""
    return make_report(job, n_tasks=tasks, seq=seq, reporter_id=reporter_id, partitions=max(1, tasks // 2),
                       start_ms=now_ms - 1000 * seconds, seed=rng.randrange(2**31), batches=1, seconds=seconds,
                       **({"schema_version": 2} if shape == "whole" else {}))


def _body(report: dict) -> bytes:
    return gzip.compress(orjson.dumps(report), 1)


def prebuilt_reports(names: list[str], rounds: int, tasks: int, start_s: float, rng: random.Random,
                     shape: str = "folded", report_s: int = 1) -> list[list[bytes]]:
    """The gzip JSON bodies of every measured report, built before the clock starts (so that building them costs
    the server no CPU while it is measured): ``[round][job]``, job ``i``'s report of round ``r`` due at
    ``start_s + (r + i / len(names)) * report_s`` (epoch seconds), holding the ``report_s`` seconds before, its seq
    ``r + 2`` (seq 1 is the warm-up report)."""
    n = len(names)
    return [[_body(job_report(names[i], names[i], r + 2, tasks, int((start_s + (r + i / n) * report_s) * 1000),
                              rng, shape, report_s)) for i in range(n)] for r in range(rounds)]


def _cpu_seconds(root_pid: int) -> float:
    """User + system CPU seconds of ``root_pid``, its live children (gunicorn workers, PostgreSQL backends) and
    the children it has reaped."""
    tick = os.sysconf("SC_CLK_TCK")
    pids = {root_pid}
    try:
        out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(root_pid)], capture_output=True, text=True).stdout
        pids |= {int(x) for x in out.split()}
    except OSError:
        pass
    total = 0.0
    for pid in pids:
        try:
            fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / tick  # utime, stime
        if pid == root_pid:  # cutime, cstime: children that exited (and were waited for) count too
            total += (int(fields[13]) + int(fields[14])) / tick
    return total


def _postmaster_pid(db_url: str) -> Optional[int]:
    """The PostgreSQL postmaster serving ``db_url`` when it runs on this machine (else None)."""
    if not db_url.startswith("postgresql"):
        return None
    from sqlalchemy import text

    from spark_governor.aggregators.db import make_engine

    eng = make_engine(db_url)
    try:
        with eng.connect() as conn:
            backend = int(conn.execute(text("SELECT pg_backend_pid()")).scalar())
        with open(f"/proc/{backend}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])  # ppid
    except (OSError, ValueError, IndexError):
        return None  # a remote server, or /proc not readable
    finally:
        eng.dispose()


def _sender(host: str, port: int, work: "queue.Queue", out: list, lock: threading.Lock, errors: dict) -> None:
    conn = http.client.HTTPConnection(host, port, timeout=30)
    while True:
        item = work.get()
        if item is None:
            return
        due, body = item
        start = time.monotonic()
        lateness = start - due
        try:
            conn.request("POST", "/api/v1/reports", body=body, headers={
                "Content-Type": "application/json", "Content-Encoding": "gzip", "Authorization": f"Bearer {TOKEN}"})
            resp = conn.getresponse()
            data = resp.read()
            status = resp.status
        except (OSError, http.client.HTTPException) as exc:
            conn.close()
            conn = http.client.HTTPConnection(host, port, timeout=30)
            with lock:
                errors[exc.__class__.__name__] = errors.get(exc.__class__.__name__, 0) + 1
            continue
        elapsed = time.monotonic() - start
        with lock:
            if status != 200:
                errors[f"HTTP {status}"] = errors.get(f"HTTP {status}", 0) + 1
            else:
                dup = b'"duplicate":true' in data
                out.append((elapsed + max(0.0, lateness), dup, lateness))


def _self_cpu_seconds() -> float:
    """User + system CPU seconds of this process (not of its children: ``serve`` is counted apart)."""
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def _server_figures(metrics_text: str, interval_s: float) -> tuple[int, float, int, int, int, float]:
    """From a ``/metrics`` answer: (evaluation runs, their summed seconds, runs longer than ``interval_s``,
    skipped runs of every reason, ingest transactions, reports in them), from
    ``spark_governor_evaluation_run_seconds``, ``spark_governor_evaluations_skipped_total`` and
    ``spark_governor_ingest_batch_reports`` (group commit, ``api.ingest_queue``)."""
    from prometheus_client.parser import text_string_to_metric_families

    runs, total, skipped, transactions, batched = 0, 0.0, 0, 0, 0.0
    within: dict[float, int] = {}  # bucket bound (s) -> runs at most that long
    for family in text_string_to_metric_families(metrics_text):
        for sample in family.samples:
            if sample.name == "spark_governor_evaluation_run_seconds_count":
                runs += int(sample.value)
            elif sample.name == "spark_governor_evaluation_run_seconds_sum":
                total += sample.value
            elif sample.name == "spark_governor_evaluation_run_seconds_bucket":
                le = float(sample.labels["le"])
                within[le] = within.get(le, 0) + int(sample.value)
            elif sample.name == "spark_governor_evaluations_skipped_total":
                skipped += int(sample.value)
            elif sample.name == "spark_governor_ingest_batch_reports_count":
                transactions += int(sample.value)
            elif sample.name == "spark_governor_ingest_batch_reports_sum":
                batched += sample.value
    # the largest bucket that ends within the interval (exact for the default 10 s, a bucket bound)
    bound = max((le for le in within if le <= interval_s), default=None)
    return runs, total, runs - (within[bound] if bound is not None else 0), skipped, transactions, batched


def _configure_policies(url: str, jobs: list[str], share: float) -> int:
    import requests

    chosen = jobs[: int(round(len(jobs) * share))]
    for job in chosen:
        r = requests.put(f"{url}/api/v1/jobs/{job}/policies/threshold?register=true",
                         json={"enabled": True, "mode": "dry-run", "config": {}},
                         headers={"Authorization": f"Bearer {ADMIN}"}, timeout=30)
        r.raise_for_status()
    return len(chosen)


def _stored_reports(db_url: str, prefix: str) -> int:
    from sqlalchemy import func, select

    from spark_governor.aggregators.db import make_engine
    from spark_governor.aggregators.models import jobs, reporters

    eng = make_engine(db_url)
    try:
        with eng.connect() as conn:
            return int(conn.execute(select(func.coalesce(func.sum(reporters.c.reports_total), 0))
                                    .select_from(reporters.join(jobs, jobs.c.id == reporters.c.job_id))
                                    .where(jobs.c.name.like(prefix + "%"))).scalar())
    finally:
        eng.dispose()


def run_load(jobs: int, seconds: float, db_url: str, workers: int = 2, threads: int = 8, tasks: int = 40,
             policy_share: float = 0.2, senders: int = 0, evaluation_s: float = 10.0,
             linger_ms: Optional[float] = None, log_path: Optional[str] = None, floor: bool = False,
             replicas: int = 1, shape: str = "folded", report_s: int = 1, out=print) -> LoadResult:
    """Start ``serve`` on 127.0.0.1 against ``db_url``, offer ``jobs`` reports per second for ``seconds``.
    ``floor``: instead of ``serve``, the no-storage floor (``api.load_floor``: token, gunzip and validation
    of each report on the same gunicorn workers, nothing stored, no policy; ``db_url`` unused). ``replicas``:
    that many ``serve`` processes (each of ``workers`` workers) on the same database, each job's reports sent
    to one of them (issue #42); the server CPU is theirs summed. ``shape``: the reports' (:func:`job_report`).
    ``report_s``: each job reports every ``report_s`` seconds (``seconds`` is rounded down to a multiple), each
    report holding as many seconds of the job."""
    if shape not in SHAPES:
        raise ValueError(f"shape: one of {', '.join(SHAPES)} (got {shape!r})")
    import requests

    from spark_governor.api.processes import free_port, stop_process, wait_healthy

    from spark_governor.aggregators.db import upgrade

    if not floor and not db_url.startswith("sqlite"):
        upgrade(db_url)
    log = open(log_path, "w") if log_path else subprocess.DEVNULL
    env = {k: v for k, v in os.environ.items() if k != "PROMETHEUS_MULTIPROC_DIR"}
    ports = [free_port() for _ in range(replicas)]
    commands = []
    for port in ports:
        if floor:
            from spark_governor.api.auth import hash_token
            from spark_governor.api.load_floor import TOKEN_ENV
            from spark_governor.api.server import ProductionConfig

            prod = ProductionConfig()  # serve's keep-alive, timeout and backlog: the same connection reuse
            commands.append([sys.executable, "-m", "gunicorn", "--bind", f"127.0.0.1:{port}", "--workers",
                             str(workers), "--worker-class", "gthread", "--threads", str(threads), "--log-level",
                             "warning", "--keep-alive", str(int(prod.keepalive_s)), "--timeout",
                             str(int(prod.timeout_s)), "--backlog", str(prod.backlog),
                             "spark_governor.api.load_floor:create_floor_app()"])
            env[TOKEN_ENV] = hash_token(TOKEN)
        else:
            commands.append([sys.executable, "-m", "spark_governor", "serve", "--host", "127.0.0.1", "--port",
                             str(port), "--db", db_url, "--workers", str(workers), "--threads", str(threads),
                             "--evaluation-seconds", str(evaluation_s), "--token", f"bench:report={TOKEN}",
                             "--token", f"admin={ADMIN}",
                             *(["--batch-linger-ms", str(linger_ms)] if linger_ms is not None else [])])
    procs = []
    for k, command in enumerate(commands):
        procs.append(subprocess.Popen(command, stdout=log, stderr=log, env=env))
        if k == 0 and not floor:  # the first one migrates a SQLite file before the others start
            wait_healthy(f"http://127.0.0.1:{ports[0]}", 90, proc=procs[0])
    proc, port = procs[0], ports[0]
    url = f"http://127.0.0.1:{port}"
    urls = [f"http://127.0.0.1:{p}" for p in ports]
    result = LoadResult(jobs=jobs, seconds=seconds, db="floor" if floor else db_url.split("://")[0], workers=workers,
                        tasks=tasks, evaluation_interval_s=evaluation_s, replicas=replicas, shape=shape,
                        report_s=report_s)
    try:
        for u, p in zip(urls, procs):
            wait_healthy(u, 90, proc=p)
        run = f"load{int(time.time()) % 100000}-"
        names = [f"{run}{i:05d}" for i in range(jobs)]
        # one warm-up report per job registers the jobs (not measured), then the policies
        rng = random.Random(0)
        session = requests.Session()
        for name in names:
            body = _body(job_report(name, name, 1, tasks, int(time.time() * 1000), rng, shape, report_s))
            session.post(url + "/api/v1/reports", data=body, timeout=60, headers={
                "Content-Encoding": "gzip", "Authorization": f"Bearer {TOKEN}"}).raise_for_status()
        configured = 0 if floor else _configure_policies(url, names, policy_share)
        # the measured reports are built before the clock starts, timed for a start that leaves room to build them
        probe = time.perf_counter()
        rounds = max(1, int(seconds) // report_s)
        result.seconds = rounds * report_s
        # (other names: the probe leaves the jobs' folds, carried from their warm-up reports, alone)
        prebuilt_reports([f"probe-{n}" for n in names[:min(20, jobs)]], 1, tasks, time.time(), random.Random(1),
                         shape, report_s)
        build_s = (time.perf_counter() - probe) / min(20, jobs) * jobs * rounds
        start_s = time.time() + 1.5 * build_s + 2.0
        bodies = prebuilt_reports(names, rounds, tasks, start_s, rng, shape, report_s)
        result.build_s = time.perf_counter() - probe
        time.sleep(max(0.0, start_s - time.time()))
        out(f"bench load: {jobs} jobs ({configured} with a policy), {tasks} tasks per report, {seconds:g} s, "
            f"{'the no-storage floor' if floor else result.db}, {replicas} replica{'s' if replicas > 1 else ''} x "
            f"{workers} workers x {threads} threads, a report per job every {report_s} s, reports {shape} "
            f"({'schema v3, folded at the edge' if shape == 'folded' else 'schema v2, every task a row'}; built in "
            f"{result.build_s:.1f} s before the clock)")
        answers: list = []
        lock = threading.Lock()
        n_senders = senders or min(128, max(8, jobs // 4))
        # each job's reports go through one sender, in order, as a real reporter sends them (a report
        # overtaken by the job's next one would be answered as a duplicate and not stored)
        works: list[queue.Queue] = [queue.Queue() for _ in range(n_senders)]
        # sender k (and so its jobs) to replica k mod replicas
        threads_ = [threading.Thread(target=_sender, args=("127.0.0.1", ports[k % replicas], work, answers, lock,
                                                           result.errors), daemon=True)
                    for k, work in enumerate(works)]
        for t in threads_:
            t.start()
        result.loadavg_before = os.getloadavg()
        postmaster = None if floor else _postmaster_pid(db_url)
        cpu0 = sum(_cpu_seconds(p.pid) for p in procs)
        db_cpu0 = _cpu_seconds(postmaster) if postmaster else None
        metrics0 = None if floor else _replicas_figures(urls, evaluation_s)
        self_cpu0 = _self_cpu_seconds()
        start = time.monotonic()
        result.start_late_s = max(0.0, time.time() - start_s)  # the build took longer than planned
        phases = [i / jobs for i in range(jobs)]  # spread the jobs over the second
        for r, row in enumerate(bodies):
            for i, body in enumerate(row):
                due = start + (r + phases[i]) * report_s
                delay = due - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                works[i % n_senders].put((due, body))
                result.offered += 1
        del bodies
        for work in works:
            work.put(None)
        for t in threads_:
            t.join(120)
        result.elapsed_s = time.monotonic() - start
        result.server_cpu_s = sum(_cpu_seconds(p.pid) for p in procs) - cpu0
        result.generator_cpu_s = _self_cpu_seconds() - self_cpu0
        if postmaster and db_cpu0 is not None:
            result.database_cpu_s = _cpu_seconds(postmaster) - db_cpu0
        result.loadavg_after = os.getloadavg()
        if metrics0 is not None:
            metrics1 = _replicas_figures(urls, evaluation_s)
            runs, total = metrics1[0] - metrics0[0], metrics1[1] - metrics0[1]
            result.evaluation_runs = runs
            result.evaluation_run_mean_s = total / runs if runs else None
            result.evaluation_runs_over_interval = metrics1[2] - metrics0[2]
            result.evaluations_skipped = metrics1[3] - metrics0[3]
            result.transactions = metrics1[4] - metrics0[4]
            result.reports_per_transaction = ((metrics1[5] - metrics0[5]) / result.transactions
                                              if result.transactions else None)
        latencies = sorted(a[0] for a in answers)
        result.answered = len(answers)
        result.accepted = sum(1 for a in answers if not a[1])
        result.duplicates = result.answered - result.accepted
        result.max_lateness_s = max((a[2] for a in answers), default=0.0)
        if latencies:
            result.p50_s = latencies[len(latencies) // 2]
            result.p99_s = latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))]
        result.stored = 0 if floor else _stored_reports(db_url, run) - jobs  # minus the warm-up reports
        result.reporter_us_per_task = fold_cost_us(tasks)
    finally:
        for p in procs:
            stop_process(p, 30)
    return result


def fold_cost_us(tasks: int = 40, reports: int = 300) -> float:
    """CPU microseconds the Python reporter's edge fold (``policies.task_fold.TaskFold.fold``) spends per finished
    task, on ``reports`` seconds of the load's job (``tasks`` tasks each), measured in this process."""
    from spark_governor.bench.reports import WINDOW_MS, _job_second
    from spark_governor.policies.task_fold import TaskFold

    rng = random.Random(1)
    start_ms = 1_800_000_000_000
    seconds = [_job_second(rng, tasks, seq, ("t-map", "t-reduce"), max(1, tasks // 2), start_ms + seq * 1000)
               for seq in range(1, reports + 1)]
    fold = TaskFold()
    cpu0 = time.process_time()
    for seq, (ts, stages) in enumerate(seconds, 1):
        fold.fold(ts, stages, WINDOW_MS, start_ms + (seq + 1) * 1000)
    return (time.process_time() - cpu0) / (tasks * reports) * 1e6


def _replicas_figures(urls: list[str], interval_s: float) -> tuple:
    """:func:`_server_figures` of every replica, summed (only the leading one runs evaluations)."""
    import requests

    figures = [_server_figures(requests.get(u + "/metrics", timeout=30).text, interval_s) for u in urls]
    return tuple(sum(f[k] for f in figures) for k in range(len(figures[0])))


def baseline_url(db_url: str) -> str:
    """The database of the baseline run: a SQLite file of its own beside ``db_url``'s (so that the measured run
    starts from the same empty file); a PostgreSQL database is shared (the runs' jobs have their own names)."""
    if db_url.startswith("sqlite:///") and db_url != "sqlite:///:memory:":
        path = db_url[len("sqlite:///"):]
        stem, dot, ext = path.rpartition(".")
        return "sqlite:///" + (f"{stem}-whole.{ext}" if dot and "/" not in ext else f"{path}-whole")
    return db_url


def format_ratios(folded: LoadResult, whole: LoadResult) -> str:
    """The folded run against the whole-task baseline of the same invocation."""
    def ratio(a, b) -> str:
        return f"x{a / b:.3f}" if a is not None and b else "n/a"

    return "\n".join([
        "folded at the edge / whole task rows (the baseline, same command, same machine, just before):",
        f"  server CPU per report {ratio(folded.cpu_ms_per_report, whole.cpu_ms_per_report)}, database CPU per "
        f"report {ratio(folded.database_cpu_ms_per_report, whole.database_cpu_ms_per_report)}, achieved "
        f"{ratio(folded.achieved_per_s, whole.achieved_per_s)}, p99 {ratio(folded.p99_s, whole.p99_s)}"])


def format_result(r: LoadResult) -> str:
    ratio = r.accepted / r.offered if r.offered else 0
    lines = [
        f"reports {r.shape}: {r.jobs} jobs, {r.db}, {r.replicas} replica(s), a report per job every {r.report_s} s",
        f"offered  {r.offered_per_s:8.1f} reports/s   achieved {r.achieved_per_s:8.1f} reports/s "
        f"({r.achieved_per_s / r.offered_per_s:.1%}; {ratio:.1%} of the offered reports accepted, the last "
        f"answer after {r.elapsed_s:.1f} s)",
        (f"accepted {r.accepted:8d}             stored   nothing (the no-storage floor)" if r.db == "floor" else
         f"accepted {r.accepted:8d}             stored   {r.stored:8d} (counted in the database; "
         f"{r.duplicates} answered as duplicates)"),
        f"p50 {r.p50_s if r.p50_s is not None else float('nan'):.3f} s   p99 "
        f"{r.p99_s if r.p99_s is not None else float('nan'):.3f} s   (sender lateness max {r.max_lateness_s:.3f} s)",
        f"server CPU {r.server_cpu_s:.1f} s = "
        + (f"{r.cpu_ms_per_report:.2f} ms per report" if r.cpu_ms_per_report else "n/a")
        + (f"; database CPU {r.database_cpu_s:.1f} s = {r.database_cpu_ms_per_report:.2f} ms per report"
           if r.database_cpu_ms_per_report is not None else ""),
        f"server + database CPU per job-second (a report every {r.report_s} s): "
        + (f"{r.server_and_database_ms_per_job_second:.2f} ms" if r.server_and_database_ms_per_job_second else "n/a"),
        (f"reporter's edge fold {r.reporter_us_per_task:.1f} µs CPU per task (the Python reporter, measured apart)"
         if r.reporter_us_per_task is not None else "reporter's edge fold n/a"),
        f"load generator CPU {r.generator_cpu_s:.1f} s = "
        + (f"{r.generator_cpu_ms_per_report:.2f} ms per report" if r.generator_cpu_ms_per_report else "n/a"),
        f"ingest transactions {r.transactions}, "
        + (f"{r.reports_per_transaction:.2f} reports each on average" if r.reports_per_transaction else "n/a"),
        f"policy evaluation runs {r.evaluation_runs} (every {r.evaluation_interval_s:g} s), mean "
        + (f"{r.evaluation_run_mean_s:.3f} s" if r.evaluation_run_mean_s is not None else "n/a")
        + f", {r.evaluation_runs_over_interval} longer than the interval, {r.evaluations_skipped} skipped",
        f"errors {sum(r.errors.values())} {r.errors or ''}",
        "load average before {:.2f} {:.2f} {:.2f}, after {:.2f} {:.2f} {:.2f} ({} cores)".format(
            *r.loadavg_before, *r.loadavg_after, os.cpu_count()),
    ]
    return "\n".join(lines)
