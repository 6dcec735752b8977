"""Driver of ``bench warmup`` and of tests/integration/test_executor_warmup.py, run as its own process against a
standalone cluster: one warm executor, then two more requested while no job runs; ``attach`` warms them
(``collectors.executor_warmup``) unless ``--no-warm``. Then one ``mapInPandas`` job with a task per executor
(20 000 rows, 1 s of sleep each). Prints one JSON line: where each warm-up task ran, each warm-up job's
seconds, and each probe task's executor, slot time (launch → finish, ms) and deserialisation time (ms).

Usage: python -m spark_governor.bench.warmup_job MASTER ENDPOINT [--no-warm]
"""
import json
import sys
import time

from pyspark.sql import SparkSession

from spark_governor.collectors import attach
from spark_governor.collectors.appliers import ExecutorApplier


def wait(cond, timeout_s, what):
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        if cond():
            return
        time.sleep(0.2)
    raise SystemExit(f"timed out: {what}")


def one_executor(sizer: ExecutorApplier) -> None:
    """Bring a standalone app to one executor: it takes every free core at start and executors launched before
    the limit register later, so kill idle extras until the count has stayed at one for a few seconds (as
    bench.scaling_job)."""
    sizer(1)
    deadline, stable_since = time.time() + 120, None
    while time.time() < deadline and (stable_since is None or time.time() - stable_since < 4):
        sizer.reconcile()
        stable_since = (stable_since or time.time()) if len(sizer.executor_ids()) == 1 else None
        time.sleep(0.5)
    if len(sizer.executor_ids()) != 1:
        raise SystemExit(f"timed out: one executor (have {sizer.executor_ids()})")


def main() -> None:
    master, endpoint = sys.argv[1], sys.argv[2]
    warm = "--no-warm" not in sys.argv
    spark = (SparkSession.builder.master(master).appName("sg-warmup-test").config("spark.executor.cores", 1)
             .config("spark.executor.memory", "512m").config("spark.dynamicAllocation.enabled", "false")
             .config("spark.ui.enabled", "false").config("spark.driver.host", "127.0.0.1").getOrCreate())
    sc = spark.sparkContext
    sizer = ExecutorApplier(sc)
    one_executor(sizer)
    handle = attach(spark, job="warmup-test", endpoint=endpoint, **({} if warm else {"warm_modules": None}))

    def work(frames):
        for pdf in frames:
            time.sleep(len(pdf) * 50e-6)
            yield pdf

    df = spark.range(0, 60_000, 1, 3)

    def run():  # one stage of three tasks
        df.mapInPandas(work, df.schema).write.format("noop").mode("overwrite").save()

    for _ in range(2):  # the first executor is warm
        run()
    first = set(sizer.executor_ids())
    handle.reporter.appliers["executors"](3)
    wait(lambda: len(sizer.executor_ids()) == 3, 120, "three executors")
    added = sorted(set(sizer.executor_ids()) - first)
    if warm:
        wait(lambda: set(added) <= set(handle.warmer.ran_on), 120, "warm-up of the added executors")
    else:
        time.sleep(10)  # as long as a warm-up takes on a quiet machine
    run()
    jobs = sorted(sc.statusTracker().getJobIdsForGroup(None))  # the jobs of no group: not the warm-ups
    stage = sc.statusTracker().getJobInfo(jobs[-1]).stageIds[0]
    store = sc._jsc.sc().statusStore()
    tasks = []
    wait(lambda: store.taskList(stage, 0, 10).size() == 3, 10, "the probe's tasks in the status store")
    listed = store.taskList(stage, 0, 10)
    for i in range(listed.size()):
        t = listed.apply(i)
        m = t.taskMetrics().get()
        tasks.append({"executor": t.executorId(), "slot_ms": int(t.duration().get()),
                      "deserialize_ms": int(m.executorDeserializeTime())})
    print(json.dumps({"warm": warm, "first": sorted(first), "added": added,
                      "ran_on": dict(handle.warmer.ran_on) if handle.warmer else None,
                      "job_s": list(handle.warmer.job_s) if handle.warmer else None, "probe": tasks}), flush=True)
    handle.detach(2)
    spark.stop()


if __name__ == "__main__":
    main()
