"""Issue #15: attach and detach are clean.

After ``handle.detach()`` no listener of ours is left on Spark's listener bus or on the streaming
query manager (checked by listing both over py4j), and a driver whose Python exits before
``spark.stop()`` logs nothing about our listeners (before the fix, the JVM logged ``Listener …
threw … Connection refused`` for the py4j proxy left on the bus).
"""
import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.spark


def bus_listeners(spark) -> list[str]:
    ls = spark.sparkContext._jsc.sc().listenerBus().listeners()
    return sorted(ls.get(i).getClass().getName() for i in range(ls.size()))


def py4j_proxies(spark) -> int:
    jvm = spark.sparkContext._gateway.jvm
    ls = spark.sparkContext._jsc.sc().listenerBus().listeners()
    return sum(1 for i in range(ls.size()) if jvm.java.lang.reflect.Proxy.isProxyClass(ls.get(i).getClass()))


def query_listeners(spark) -> list[str]:
    return sorted(l.getClass().getName() for l in spark._jsparkSession.streams().listListeners())


def test_detach_leaves_no_listener_of_ours(spark, control_plane):
    from spark_governor.collectors import attach

    spark.range(10).count()  # listeners Spark adds lazily (SQL UI) are there before we compare
    before_bus, before_proxies, before_queries = bus_listeners(spark), py4j_proxies(spark), query_listeners(spark)
    handle = attach(spark, job="detach-check", endpoint=control_plane.url)
    assert py4j_proxies(spark) == before_proxies + 1
    assert len(query_listeners(spark)) == len(before_queries) + 1
    spark.range(1000).repartition(2).count()
    handle.detach(2.0)
    assert py4j_proxies(spark) == before_proxies
    # Spark's own buses (StreamingQueryListenerBus appears with the first streaming listener) may stay
    assert [n for n in bus_listeners(spark) if not n.startswith("org.apache.spark.")] == \
        [n for n in before_bus if not n.startswith("org.apache.spark.")]
    assert query_listeners(spark) == before_queries
    handle.detach(2.0)  # idempotent


@pytest.mark.parametrize("bad", ["pandas", ("pandas", 3), 3])
def test_a_bad_warm_modules_is_refused_before_anything_is_attached(spark, bad):
    from spark_governor.collectors import attach

    spark.range(10).count()
    before_proxies, before_queries = py4j_proxies(spark), query_listeners(spark)
    with pytest.raises(TypeError, match="warm_modules"):
        attach(spark, job="bad-warm", endpoint="http://127.0.0.1:9", warm_modules=bad)
    assert py4j_proxies(spark) == before_proxies and query_listeners(spark) == before_queries


EXIT_SCRIPT = textwrap.dedent("""
    import sys, time
    from spark_governor.collectors import attach
    from spark_governor.collectors.demo_job import build_session

    spark = build_session("local[2]", shuffle_partitions=2, app_name="exit-check")
    handle = attach(spark, job="exit-check", endpoint=sys.argv[1])
    query = (spark.readStream.format("rate").option("rowsPerSecond", 50).load()
             .writeStream.format("noop").trigger(processingTime="500 milliseconds").start())
    deadline = time.time() + 60
    while time.time() < deadline and len(query.recentProgress) < 2:
        time.sleep(0.2)
    spark.range(1000).repartition(2).count()
    print("PROGRESS", len(query.recentProgress), flush=True)
    # exit with the query running: neither query.stop(), handle.detach() nor spark.stop()
""")


def test_python_exiting_before_spark_stop_logs_nothing_about_our_listeners(control_plane, tmp_path):
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable,
           "PYSPARK_DRIVER_PYTHON": sys.executable}
    proc = subprocess.run([sys.executable, "-c", EXIT_SCRIPT, control_plane.url], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=240)
    out = proc.stdout + proc.stderr
    assert "PROGRESS" in proc.stdout, out[-3000:]
    for needle in ("Connection refused", "threw an exception", "Py4JException", "Py4JNetworkError",
                   "Error while sending or receiving"):
        assert needle not in out, f"{needle!r} logged at exit:\n{out[-4000:]}"


def test_detach_after_stopping_a_query_waits_for_its_killed_tasks(spark, control_plane, sqlite_url):
    """A query stopped in the middle of a micro-batch: its tasks are killed after ``StreamingQuery.stop()``
    returns (a Python task with its worker, up to ``spark.python.task.killTimeout`` later), and ``detach()``
    waits for them, so the control plane has what the event log has (the replay test's 2 missing tasks of 30, CI
    2026-12-07, when killed tasks still counted as failed ones)."""
    import time

    from pyspark.sql import functions as F
    from sqlalchemy import select

    from spark_governor.aggregators.db import make_engine
    from spark_governor.aggregators.models import jobs, tasks
    from spark_governor.collectors import attach

    def slow(value):
        import time as t
        t.sleep(30)
        return value

    handle = attach(spark, job="stop-check", endpoint=control_plane.url)
    query = (spark.readStream.format("rate").option("rowsPerSecond", 10).option("numPartitions", 2).load()
             .select(F.udf(slow, "long")("value").alias("v"))
             .writeStream.format("noop").trigger(processingTime="500 milliseconds").start())
    tracker = spark.sparkContext._jsc.sc().statusTracker()

    def running() -> int:
        return sum(i.numRunningTasks() for i in tracker.getExecutorInfos())

    deadline = time.time() + 60
    while time.time() < deadline and not (query.recentProgress and running() == 2):
        time.sleep(0.05)
    assert running() == 2
    query.stop()
    handle.detach(15.0)
    engine = make_engine(sqlite_url)
    try:
        with engine.connect() as conn:
            ended = conn.execute(select(tasks.c.successful).join(jobs, jobs.c.id == tasks.c.job_id)
                                 .where(jobs.c.name == "stop-check")).scalars().all()
    finally:
        engine.dispose()
    # detach() returned once its listener had seen both killed tasks end (they were still running when stop()
    # returned); a killed task is in no window and travels as no row (policies.task_fold.killed): none is failed
    listener = handle.python_listener
    assert listener.tasks_started >= 2 and listener.tasks_ended == listener.tasks_started
    assert ended.count(False) == 0, ended
