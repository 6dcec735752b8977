"""``spark-governor jar``: the path of the JVM listener jar (built first if missing and a JDK is available)."""
from __future__ import annotations

import shlex

import click


@click.command("jar")
@click.option("--build", "force", is_flag=True, help="Rebuild the jar from its Java sources (needs javac 17 and pyspark).")
@click.option("--submit-args", is_flag=True,
              help="Print the spark-submit arguments that attach it (--jars and the --conf switches) instead.")
@click.option("--endpoint", default="http://127.0.0.1:8787", show_default=True, help="With --submit-args: control plane URL.")
@click.option("--job", default=None, help="With --submit-args: job name (default: the application's name).")
@click.option("--token", default=None, help="With --submit-args: reporter token (sent as a bearer token).")
@click.option("--interval", default=None, help="With --submit-args: reporting interval, e.g. 1s.")
@click.option("--launch-hold/--no-launch-hold", default=True, show_default=True,
              help="With --submit-args: also the jar's Spark plugin (spark.plugins=io.sparkgovernor.LaunchHold): an "
                   "added executor takes no waiting task cold.")
def jar(force: bool, submit_args: bool, endpoint: str, job: str | None, token: str | None, interval: str | None,
        launch_hold: bool) -> None:
    """Print the path of the listener jar that attaches spark-governor by configuration only:

    spark-submit --jars "$(spark-governor jar)" --conf spark.extraListeners=io.sparkgovernor.SparkGovernorListener
    --conf spark.sql.streaming.streamingQueryListeners=io.sparkgovernor.SparkGovernorQueryListener
    --conf spark.plugins=io.sparkgovernor.LaunchHold
    --conf spark.governor.endpoint=URL --conf spark.governor.job=NAME app.py
    """
    from spark_governor.collectors.jvm import build

    log = lambda m: click.echo(m, err=True)  # noqa: E731
    try:
        path = build.build_jar(log=log) if force else build.find_jar(log=log)
    except build.JarUnavailable as exc:
        raise click.ClickException(str(exc)) from None
    if submit_args:
        click.echo(shlex.join(build.submit_args(endpoint, job, token, interval, jar=path, launch_hold=launch_hold)))
    else:
        click.echo(str(path))
