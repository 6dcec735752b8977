"""The ``spark-governor`` command line: the top-level group, and the one place where every command group is added.

Each command group lives in its own module (``serve``, ``db``, ``stats``, ``plan``, ``dashboards``, ``bench``,
``demo``); none of them imports this one, so nothing imports back into the CLI.
"""
from __future__ import annotations

import logging

import click

from spark_governor import __version__
from spark_governor.api.cli.bench import bench
from spark_governor.api.cli.dashboards import dashboards
from spark_governor.api.cli.db import db
from spark_governor.api.cli.demo import demo
from spark_governor.api.cli.jar import jar
from spark_governor.api.cli.plan import plan_command
from spark_governor.api.cli.replay import bench_replay, replay_command
from spark_governor.api.cli.serve import serve
from spark_governor.api.cli.stats import stats
from spark_governor.api.cli.token import token


@click.group()
@click.version_option(__version__, prog_name="spark-governor")
@click.option("-v", "--verbose", is_flag=True, help="Log at INFO level.")
def main(verbose: bool) -> None:
    """spark-governor: observability and autoscaling for Spark Structured Streaming."""
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")


for _command in (serve, db, stats, plan_command, dashboards, bench, demo, jar, token, replay_command):
    main.add_command(_command)
del _command
bench.add_command(bench_replay)
