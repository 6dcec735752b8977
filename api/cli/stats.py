"""``spark-governor stats``: read a job's statistics from a running control plane and print them."""
from __future__ import annotations

import json
from typing import Optional

import click
import requests

DEFAULT_ENDPOINT = "http://127.0.0.1:8787"


def get_json(endpoint: str, path: str) -> dict:
    """``GET endpoint + path`` as JSON; a :class:`click.ClickException` when unreachable or not 200."""
    try:
        resp = requests.get(endpoint.rstrip("/") + path, timeout=10)
    except requests.RequestException as exc:
        raise click.ClickException(f"cannot reach {endpoint}: {exc.__class__.__name__}") from None
    if resp.status_code != 200:
        try:
            message = resp.json().get("error", resp.text)
        except ValueError:
            message = resp.text
        raise click.ClickException(f"{path}: HTTP {resp.status_code}: {message}")
    return resp.json()


def echo_job_stats(endpoint: str, job: str, windows: int, batches: int, as_json: bool = False,
                   run: Optional[str] = None) -> None:
    """Print JOB's per-stage statistics over the last ``windows`` windows and its last ``batches`` micro-batches,
    of one run (``run``: a run id, ``all``, or None for the latest)."""
    from urllib.parse import quote

    from spark_governor.api.tables import batches_table, stages_table

    run_arg = f"&run={quote(run, safe='')}" if run else ""
    stages = get_json(endpoint, f"/api/v1/jobs/{job}/stages?windows={windows}{run_arg}")
    recent = get_json(endpoint, f"/api/v1/jobs/{job}/batches?limit={batches}{run_arg}")
    if as_json:
        click.echo(json.dumps({"run": stages.get("run"), "stages": stages["stages"], "batches": recent}, indent=2))
        return
    shown = stages.get("run")
    if shown is not None or run == "all":
        runs = get_json(endpoint, f"/api/v1/jobs/{job}/runs")["runs"]
        label = "all runs merged" if shown is None else f"run {shown['run_id']}" + (" (latest)" if shown["latest"] else "")
        others = f"; {len(runs)} runs, pick one with --run RUN_ID or --run all" if len(runs) > 1 else ""
        click.echo(f"{job}: {label}{others}")
    click.echo(stages_table(stages["stages"]))
    click.echo()
    click.echo(batches_table(recent))


@click.command()
@click.argument("job")
@click.option("--endpoint", default=DEFAULT_ENDPOINT, show_default=True)
@click.option("--windows", default=12, show_default=True, type=click.IntRange(1, 1000),
              help="Number of recent windows to summarise.")
@click.option("--json", "as_json", is_flag=True, help="Print the API's JSON instead of a table.")
@click.option("--run", default=None, metavar="RUN_ID",
              help="The run to show (GET /api/v1/jobs/JOB/runs); 'all' merges every run. Default: the latest.")
def stats(job: str, endpoint: str, windows: int, as_json: bool, run: Optional[str]) -> None:
    """Print per-stage statistics of JOB from a running control plane (its latest run by default)."""
    echo_job_stats(endpoint, job, windows, batches=1000, as_json=as_json, run=run)
