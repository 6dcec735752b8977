"""``spark-governor dashboards``: list, export and push the Grafana dashboards shipped with spark-governor."""
from __future__ import annotations

import json

import click


@click.group()
def dashboards() -> None:
    """Grafana dashboards shipped with spark-governor."""


@dashboards.command("list")
def dashboards_list() -> None:
    """List the dashboards and their panel counts."""
    from spark_governor.dashboards import load_all

    for d in load_all():
        click.echo(f"{d['uid']}: {d['title']} ({len(d['panels'])} panels)")


@dashboards.command("export")
@click.argument("uid")
def dashboards_export(uid: str) -> None:
    """Print dashboard UID as JSON."""
    from spark_governor.dashboards import load_all

    for d in load_all():
        if d["uid"] == uid:
            click.echo(json.dumps(d, indent=2))
            return
    raise click.ClickException(f"no dashboard with uid {uid!r}")


@dashboards.command("push")
@click.option("--grafana-url", required=True, help="e.g. http://127.0.0.1:3000")
@click.option("--token", envvar="GRAFANA_TOKEN", default=None, help="API token (or GRAFANA_TOKEN).")
@click.option("--user", envvar="GRAFANA_USER", default=None)
@click.option("--password", envvar="GRAFANA_PASSWORD", default=None)
@click.option("--datasource-uid", default=None, help="Prometheus datasource uid to bind panels to.")
@click.option("--folder-uid", default=None, help="Grafana folder uid.")
def dashboards_push(grafana_url: str, token, user, password, datasource_uid, folder_uid) -> None:
    """Create or update every dashboard in Grafana (grafana-client)."""
    from spark_governor.dashboards.push import PushError, push_all

    try:
        for uid, status in push_all(grafana_url, token=token, user=user, password=password,
                                    datasource_uid=datasource_uid, folder_uid=folder_uid):
            click.echo(f"{uid}: {status}")
    except PushError as exc:
        raise click.ClickException(str(exc)) from None
