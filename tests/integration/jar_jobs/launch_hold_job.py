"""Driver of tests/integration/test_launch_hold.py, run as its own process against a standalone cluster (the
plugin must be on the driver's class path when its JVM starts): one warm executor runs a stage of 4 tasks of
4 s each, and while its first task runs the driver asks for 2 more executors. With ``--hold`` the listener jar's
launch hold is on (``spark.plugins=io.sparkgovernor.LaunchHold``, ``spark.governor.launchHoldMax`` 60 s,
``spark.governor.launchHoldWaves`` 10: held whatever waits).
Prints one JSON line: the executors, each task of the stage (executor, launch ms), the seconds each added
executor was held, where each warm-up task ran, and the plugin's rule (``LaunchHold.hold``) on a few cases.

With ``--slot`` the 2 executors are added while nothing runs (they launch at once and warm: a Python worker
starts and imports pandas, about 4 s here); the stage of 4 tasks is submitted as their warm-up tasks start.
With ``--hold`` each warm-up task then keeps its slot (``io.sparkgovernor.SlotHold``) until the stage's tasks
are all launched on the warm executor (``spark.governor.slotHoldFactor`` 100: however long that takes); without
it the warmed executors take waiting tasks. The slot rule (``LaunchHold.holdSlot``) is checked on a few cases.

Usage: python launch_hold_job.py MASTER JAR [--hold] [--slot]
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
    hold, slot = "--hold" in sys.argv, "--slot" in sys.argv
    builder = (SparkSession.builder.master(master).appName("sg-launch-hold-test").config("spark.executor.cores", 1)
               .config("spark.executor.memory", "512m").config("spark.dynamicAllocation.enabled", "false")
               .config("spark.ui.enabled", "false").config("spark.driver.host", "127.0.0.1")
               .config("spark.driver.extraClassPath", jar).config("spark.executor.extraClassPath", jar))
    if hold:
        # held whatever waits (3 tasks behind 1 running would start a cold executor at the default of 1 wave)
        builder = (builder.config("spark.plugins", PLUGIN_CLASS).config("spark.governor.launchHoldMax", "60s")
                   .config("spark.governor.launchHoldWaves", "10")
                   # a warmed executor keeps its slot however long the warm one takes to launch the waiting tasks
                   .config("spark.governor.slotHoldFactor", "100"))
    spark = builder.getOrCreate()
    sc = spark.sparkContext
    sizer = ExecutorApplier(sc)
    tracker = sc.statusTracker()
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
    if slot:  # added while idle: they launch at once and warm, and the stage comes during the warm-up
        handle.reporter.appliers["executors"](3)
        wait(lambda: len(sizer.executor_ids()) == 3, 120, "three executors")
        added = sorted(set(sizer.executor_ids()) - first)
        wait(lambda: all(any(tracker.getJobInfo(j).status == "RUNNING"
                             for j in tracker.getJobIdsForGroup(f"spark-governor-warmup:{e}"))
                         for e in added), 60, "the warm-up jobs of the added executors")
        job.start()
        job.join(120)
        wait(lambda: set(added) <= set(handle.warmer.ran_on), 120, "warm-up of the added executors")
    else:
        job.start()
        wait(lambda: sc.statusTracker().getJobIdsForGroup("probe"), 30, "the probe job")
        handle.reporter.appliers["executors"](3)
        wait(lambda: len(sizer.executor_ids()) == 3, 120, "three executors")
        added = sorted(set(sizer.executor_ids()) - first)
        job.join(120)
    if hold and not slot:  # without it the added executors took the stage's tasks cold, and their warm-up was skipped
        wait(lambda: set(added) <= set(handle.warmer.ran_on), 120, "warm-up of the added executors")
    jobs = sc.statusTracker().getJobIdsForGroup("probe")
    stage = sc.statusTracker().getJobInfo(max(jobs)).stageIds[0]
    store = sc._jsc.sc().statusStore()
    wait(lambda: store.taskList(stage, 0, 10).size() == 4, 10, "the probe's tasks in the status store")
    listed = store.taskList(stage, 0, 10)
    tasks = [{"executor": listed.apply(i).executorId(), "launch_ms": listed.apply(i).launchTime().getTime()}
             for i in range(listed.size())]
    warm_task_s = {}  # executor -> seconds its warm-up task ran (the import, and the slot kept after it)
    for e in added:
        ids = tracker.getJobIdsForGroup(f"spark-governor-warmup:{e}") if slot else []
        for j in ids:
            for st in tracker.getJobInfo(j).stageIds:
                ts = store.taskList(st, 0, 5)
                warm_task_s[e] = [ts.apply(i).duration().get() / 1000.0 for i in range(ts.size())]
    hold_rule = sc._jvm.io.sparkgovernor.LaunchHold.hold  # (waiting, running, waves) -> the executor waits
    rule = [hold_rule(w, r, v) for w, r, v in ((0, 1, 1.0), (1, 1, 1.0), (2, 1, 1.0), (2, 2, 1.0), (3, 1, 10.0))]
    # (waiting, running, waves, ms to the old slot, a task's ms, factor) -> the warmed executor keeps its slot
    slot_rule = sc._jvm.io.sparkgovernor.LaunchHold.holdSlot
    slot_cases = ((2, 2, 1.0, 100, 4000, 1.6), (2, 2, 1.0, 3000, 4000, 1.6), (2, 2, 1.0, 0, -1, 1.6),
                  (3, 1, 1.0, 0, 4000, 1.6))
    rule_slot = [slot_rule(*case) for case in slot_cases]
    print(json.dumps({"hold": hold, "first": sorted(first), "added": added, "tasks": tasks, "rule": rule,
                      "rule_slot": rule_slot, "warm_task_s": warm_task_s,
                      "held_s": dict(handle.warmer.held_s), "ran_on": dict(handle.warmer.ran_on),
                      "slot_held_s": dict(handle.warmer.slot_held_s), "warm_job_s": list(handle.warmer.job_s)}),
          flush=True)
    handle.detach(2)
    spark.stop()


if __name__ == "__main__":
    main()
