"""``spark-governor serve``: the control plane (HTTP API, /metrics and the scheduler) on gunicorn.

Every option can also be set by an environment variable (shown in ``--help``; the table is in
docs/deployment.md). Flags win over the environment.
"""
from __future__ import annotations

import os

import click

from spark_governor.aggregators.db import DEFAULT_DB_URL


def _tokens(tokens: tuple[str, ...]) -> dict:
    from spark_governor.api.auth import parse_token_option

    named = {}
    for item in [*tokens, *filter(None, os.environ.get("SPARK_GOVERNOR_TOKENS", "").split(","))]:
        try:
            name, spec = parse_token_option(item.strip())
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--token") from None
        named[name] = spec
    return named


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True, envvar="SPARK_GOVERNOR_HOST", help="Address to bind.")
@click.option("--port", default=8787, show_default=True, type=click.IntRange(0, 65535), envvar="SPARK_GOVERNOR_PORT")
@click.option("--db", "db_url", default=DEFAULT_DB_URL, show_default=True, envvar="SPARK_GOVERNOR_DB",
              help="SQLAlchemy URL.")
@click.option("--workers", default=2, show_default=True, type=click.IntRange(1, 64), envvar="SPARK_GOVERNOR_WORKERS",
              help="gunicorn worker processes (use about one per core).")
@click.option("--threads", default=8, show_default=True, type=click.IntRange(1, 256), envvar="SPARK_GOVERNOR_THREADS",
              help="Threads per worker (concurrent requests per worker).")
@click.option("--window-seconds", default=5.0, show_default=True, type=click.FloatRange(0.1, 3600),
              envvar="SPARK_GOVERNOR_WINDOW_SECONDS", help="Length of a statistics window.")
@click.option("--retention-hours", default=24.0, show_default=True, type=click.FloatRange(0.001),
              envvar="SPARK_GOVERNOR_RETENTION_HOURS", help="Statistics older than this are deleted.")
@click.option("--metrics-expiry", default=600.0, show_default=True, type=click.FloatRange(0),
              envvar="SPARK_GOVERNOR_METRICS_EXPIRY",
              help="Seconds without a report after which a job's series leave /metrics (0: never); its job_up "
                   "and report age stay for a day. Its history stays in the database.")
@click.option("--migrate/--no-migrate", default=None, envvar="SPARK_GOVERNOR_MIGRATE",
              help="Run migrations at start (default: only for SQLite).")
@click.option("--evaluation-seconds", default=10.0, show_default=True, type=click.FloatRange(0.1, 3600),
              envvar="SPARK_GOVERNOR_EVALUATION_SECONDS", help="Policy evaluation interval.")
@click.option("--surge-ratio", default=0.25, show_default=True, type=click.FloatRange(0),
              envvar="SPARK_GOVERNOR_SURGE_RATIO",
              help="Evaluate a job at once when its probed arrival rate rises by this share (0: only every interval).")
@click.option("--token", "tokens", multiple=True, metavar="NAME[:SCOPES[:JOBS]]=SECRET",
              help="A configured API token (repeatable; also SPARK_GOVERNOR_TOKENS=t1,t2). SCOPES: report, read, "
                   "write, admin joined by '+' (default admin); JOBS: job-name patterns joined by '+'.")
@click.option("--anonymous-reports", is_flag=True, envvar="SPARK_GOVERNOR_ANONYMOUS_REPORTS",
              help="Accept reports without a token (local development only: anyone who reaches the port "
                   "can feed statistics).")
@click.option("--reads", type=click.Choice(["open", "token"]), default="open", show_default=True,
              envvar="SPARK_GOVERNOR_READS", help="token: GET endpoints and /metrics need a read token.")
@click.option("--max-inflight-reports", default=4, show_default=True, type=click.IntRange(1, 256),
              envvar="SPARK_GOVERNOR_MAX_INFLIGHT_REPORTS",
              help="Reports parsed at once per worker (bounds memory; more wait up to 1 s, then 503).")
@click.option("--max-queued-reports", default=512, show_default=True, type=click.IntRange(1, 100_000),
              envvar="SPARK_GOVERNOR_MAX_QUEUED_REPORTS",
              help="Reports waiting to be stored per worker (group commit); more get 503 with Retry-After.")
@click.option("--max-queued-tasks", default=200_000, show_default=True, type=click.IntRange(1, 100_000_000),
              envvar="SPARK_GOVERNOR_MAX_QUEUED_TASKS",
              help="Task records waiting to be stored per worker (bounds the memory of parsed reports); more: 503.")
@click.option("--max-batch-reports", default=64, show_default=True, type=click.IntRange(1, 10_000),
              envvar="SPARK_GOVERNOR_MAX_BATCH_REPORTS",
              help="Most reports stored in one transaction (group commit).")
@click.option("--max-batch-tasks", default=20_000, show_default=True, type=click.IntRange(1, 10_000_000),
              envvar="SPARK_GOVERNOR_MAX_BATCH_TASKS",
              help="Most task records stored in one transaction (a larger report goes alone).")
@click.option("--batch-linger-ms", default=25.0, show_default=True, type=click.FloatRange(0, 1000),
              envvar="SPARK_GOVERNOR_BATCH_LINGER_MS",
              help="How long the oldest waiting report waits for more to share its transaction (group commit): "
                   "less CPU per report under load, that much more latency.")
@click.option("--queue-deadline-seconds", default=30.0, show_default=True, type=click.FloatRange(0.1, 3600),
              envvar="SPARK_GOVERNOR_QUEUE_DEADLINE_SECONDS",
              help="A report not committed within this many seconds is answered 503 (the reporter re-sends it; "
                   "if it was stored after all, the answer is duplicate: true). Keep it below gunicorn's 60 s "
                   "worker timeout.")
@click.option("--max-body-mib", default=16, show_default=True, type=click.IntRange(1, 1024),
              envvar="SPARK_GOVERNOR_MAX_BODY_MIB", help="Largest report as sent (compressed).")
def serve(host: str, port: int, db_url: str, workers: int, threads: int, window_seconds: float,
          retention_hours: float, metrics_expiry: float, migrate, evaluation_seconds: float, surge_ratio: float, tokens: tuple[str, ...],
          anonymous_reports: bool, reads: str, max_inflight_reports: int, max_queued_reports: int,
          max_queued_tasks: int, max_batch_reports: int, max_batch_tasks: int, batch_linger_ms: float,
          queue_deadline_seconds: float, max_body_mib: int) -> None:
    """Start the control plane (HTTP API, /metrics and the scheduler) on gunicorn."""
    import socket

    from spark_governor.api.server import use_worker_metrics_dir

    own_metrics_dir = use_worker_metrics_dir()  # before prometheus_client is imported (api.app imports it)
    from spark_governor.api.app import Settings
    from spark_governor.api.server import ProductionConfig, SchemaNotCurrent, run_production
    from spark_governor.aggregators.db import NoDatabase

    try:  # the metrics directory made above is removed on every way out (a failed start included)
        named = _tokens(tokens)
        settings = Settings(window_ms=int(window_seconds * 1000), evaluation_interval_s=evaluation_seconds,
                            surge_ratio=surge_ratio,
                            require_report_token=not anonymous_reports, open_reads=reads == "open",
                            max_inflight_reports=max_inflight_reports, max_queued_reports=max_queued_reports,
                            max_queued_tasks=max_queued_tasks, max_batch_reports=max_batch_reports,
                            max_batch_tasks=max_batch_tasks, queue_deadline_s=queue_deadline_seconds,
                            batch_linger_s=batch_linger_ms / 1000.0, max_body_bytes=max_body_mib * 1024 * 1024,
                            metrics_expiry_s=metrics_expiry)
        if port == 0:  # gunicorn needs a concrete port to report
            with socket.socket() as s:
                s.bind((host, 0))
                port = s.getsockname()[1]
        else:
            with socket.socket() as s:  # a clear error before forking workers
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                try:
                    s.bind((host, port))
                except OSError as exc:
                    raise click.ClickException(f"cannot listen on {host}:{port}: {exc}") from None
        cfg = ProductionConfig(db_url=db_url, host=host, port=port, workers=workers, threads=threads, settings=settings,
                               retention_s=retention_hours * 3600, migrate=migrate, tokens=named)
        click.echo(f"spark-governor control plane on http://{host}:{port} (db {db_url}, {workers} workers)", err=True)
        run_production(cfg)
    except (SchemaNotCurrent, NoDatabase) as exc:
        raise click.ClickException(str(exc)) from None
    finally:
        if own_metrics_dir:
            import shutil

            shutil.rmtree(own_metrics_dir, ignore_errors=True)
            os.environ.pop("PROMETHEUS_MULTIPROC_DIR", None)
