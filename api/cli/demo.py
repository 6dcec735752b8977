"""``spark-governor demo``: the product doing its job — on a standalone Spark cluster started on 127.0.0.1, a load
step that Kingman (in act mode) scales the job out for and back in after (``spark_governor.api.demo_cluster``); with
``--local`` (or by itself where no cluster can start) the local-mode demo of a policy's recommendation
(``spark_governor.api.demo``)."""
from __future__ import annotations

from typing import Optional

import click

from spark_governor.api.demo import DEFAULT_BOUND_MS, DEFAULT_OUT_DIR, DemoError, run_demo

#: the local demo's length when --seconds is not given
LOCAL_SECONDS = 60.0


@click.command()
@click.option("--seconds", default=None, type=click.FloatRange(5),
              help="How long the load runs: on the cluster, the three levels together (default 120); with --local, "
                   "the job after its warm-up batches (default 60).")
@click.option("--local", is_flag=True, help="The local-mode demo (local[2], Kingman in dry run): for machines where a "
                                            "standalone cluster cannot start.")
@click.option("--keep", is_flag=True, help="Afterwards, keep the control plane and the job running (until Ctrl-C) and "
                                           "say where to look: Swagger UI, /metrics, the job's API.")
@click.option("--rate", default=2000, show_default=True, type=click.IntRange(1),
              help="--local: source rows per second.")
@click.option("--keys", default=1000, show_default=True, type=click.IntRange(1), help="--local: Zipf keys.")
@click.option("--skew", default=1.1, show_default=True, type=click.FloatRange(0), help="--local: Zipf exponent.")
@click.option("--bound-ms", default=DEFAULT_BOUND_MS, show_default=True, type=click.FloatRange(min=1),
              help="--local: the latency constraint's bound on the mean record latency, milliseconds (the cluster "
                   "demo's is 14 s per 8 s span).")
@click.option("--port", default=0, type=click.IntRange(0, 65535), help="Control plane port (0: a free one).")
@click.option("--db", "db_url", default=None, help="Database URL (default: a temporary SQLite file).")
@click.option("--out-dir", default=DEFAULT_OUT_DIR, show_default=True, type=click.Path(file_okay=False),
              help="Where the figure of the run (<job>.png) and the API answers it shows (<job>.json) are written.")
def demo(seconds: Optional[float], local: bool, keep: bool, rate: int, keys: int, skew: float, bound_ms: float,
         port: int, db_url: Optional[str], out_dir: str) -> None:
    """Show the product doing its job on a Spark standalone cluster started here.

    Starts a master and a worker on 127.0.0.1 and a control plane (SQLite); runs the bundled paced Zipf job
    on one executor with a latency constraint and Kingman in act mode; steps the load 2 000 → 16 000 → 2 000
    rows/s. One line per micro-batch and per decision; then the spans within the bound, the executor-seconds
    against a static allocation for the peak, the decisions, and a PNG of the run in OUT_DIR. Ctrl-C stops
    everything it started.
    """
    from spark_governor.api.demo_cluster import (ClusterUnavailable, DEFAULT_SECONDS, Interrupted,
                                                 run_cluster_demo)

    def err(msg: str) -> None:
        click.echo(msg, err=True)

    if not local:
        try:
            run_cluster_demo(seconds=seconds or DEFAULT_SECONDS, port=port, db_url=db_url, out_dir=out_dir,
                             keep=keep, out=click.echo, err=err)
            return
        except ClusterUnavailable as exc:
            err(f"a standalone cluster cannot start here: {exc}; running the local-mode demo instead (--local)")
        except Interrupted as exc:
            err(f"{exc}: everything the demo started is stopped")
            raise SystemExit(130) from None
        except RuntimeError as exc:
            raise click.ClickException(str(exc)) from None
    if keep:
        err("--keep applies to the cluster demo; the local demo stops when its job ends")
    try:
        run_demo(seconds=seconds or LOCAL_SECONDS, rate=rate, keys=keys, skew=skew, port=port, db_url=db_url,
                 bound_ms=bound_ms, out_dir=out_dir, out=click.echo, err=err)
    except DemoError as exc:
        raise click.ClickException(str(exc)) from None
