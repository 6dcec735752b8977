"""Driver of tests/integration/test_launch_hold.py, run as its own process against a standalone cluster (the
plugin must be on the driver's class path when its JVM starts): one warm executor runs a stage of 4 tasks of
4 s each, and while its first task runs the driver asks for 2 more executors. With ``--hold`` the listener jar's
launch hold is on (``spark.plugins=io.sparkgovernor.LaunchHold``, ``spark.governor.launchHoldMax`` 60 s,
``spark.governor.launchHoldWaves`` 10: held whatever waits).
Prints one JSON line: the executors, each task of the stage (executor, launch ms), the seconds each added
executor was held, where each warm-up task ran, and the plugin's rule (``LaunchHold.hold``) on a few cases.

Usage: python launch_hold_job.py MASTER JAR [--hold]
"""
import json
import sys
import threading
import time

from pyspark.sql import SparkSession

from spark_governor.bench.warmup_job import one_executor, wait
from spark_governor.collectors import attach
from spark_governor.collectors.appliers import ExecutorApplier
from spark_governor.collectors.launch_hold import PLUGIN_CLASS


def main() -> None:
    master, jar = sys.argv[1], sys.argv[2]
    hold = "--hold" in sys.argv
    builder = (SparkSession.builder.master(master).appName("sg-launch-hold-test").config("spark.executor.cores", 1)
               .config("spark.executor.memory", "512m").config("spark.dynamicAllocation.enabled", "false")
               .config("spark.ui.enabled", "false").config("spark.driver.host", "127.0.0.1")
               .config("spark.driver.extraClassPath", jar).config("spark.executor.extraClassPath", jar))
    if hold:
        # held whatever waits (3 tasks behind 1 running would start a cold executor at the default of 1 wave)
        builder = (builder.config("spark.plugins", PLUGIN_CLASS).config("spark.governor.launchHoldMax", "60s")
                   .config("spark.governor.launchHoldWaves", "10"))
    spark = builder.getOrCreate()
    sc = spark.sparkContext
    sizer = ExecutorApplier(sc)
    one_executor(sizer)
    handle = attach(spark, job="launch-hold-test", endpoint="http://127.0.0.1:9")  # reports nowhere (dropped)

    def work(frames):
        for pdf in frames:
            time.sleep(4.0)
            yield pdf

    df = spark.range(0, 4, 1, 4)
    df.mapInPandas(lambda fs: (p for p in fs), df.schema).write.format("noop").mode("overwrite").save()  # warm
    first = set(sizer.executor_ids())
    def probe():  # job groups are per thread (PySpark's pinned threads): set it in the job's own
        sc.setJobGroup("probe", "the stage of 4 tasks of 4 s")
        df.mapInPandas(work, df.schema).write.format("noop").mode("overwrite").save()

    job = threading.Thread(target=probe)
    job.start()
    wait(lambda: sc.statusTracker().getJobIdsForGroup("probe"), 30, "the probe job")
    handle.reporter.appliers["executors"](3)
    wait(lambda: len(sizer.executor_ids()) == 3, 120, "three executors")
    added = sorted(set(sizer.executor_ids()) - first)
    job.join(120)
    if hold:  # without it the added executors took the stage's tasks cold, and their warm-up was skipped
        wait(lambda: set(added) <= set(handle.warmer.ran_on), 120, "warm-up of the added executors")
    jobs = sc.statusTracker().getJobIdsForGroup("probe")
    stage = sc.statusTracker().getJobInfo(max(jobs)).stageIds[0]
    store = sc._jsc.sc().statusStore()
    wait(lambda: store.taskList(stage, 0, 10).size() == 4, 10, "the probe's tasks in the status store")
    listed = store.taskList(stage, 0, 10)
    tasks = [{"executor": listed.apply(i).executorId(), "launch_ms": listed.apply(i).launchTime().getTime()}
             for i in range(listed.size())]
    hold_rule = sc._jvm.io.sparkgovernor.LaunchHold.hold  # (waiting, running, waves) -> the executor waits
    rule = [hold_rule(w, r, v) for w, r, v in ((0, 1, 1.0), (1, 1, 1.0), (2, 1, 1.0), (2, 2, 1.0), (3, 1, 10.0))]
    print(json.dumps({"hold": hold, "first": sorted(first), "added": added, "tasks": tasks, "rule": rule,
                      "held_s": dict(handle.warmer.held_s), "ran_on": dict(handle.warmer.ran_on)}), flush=True)
    handle.detach(2)
    spark.stop()


if __name__ == "__main__":
    main()
