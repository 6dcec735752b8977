"""collectors.executor_warmup in local mode (real Spark): the warm-up job runs a task per executor and imports
the modules the worker has; the listener hook ignores local mode and the driver. Placement on added executors
of a real standalone cluster: tests/integration/test_executor_warmup.py."""
import pytest

from spark_governor.collectors.executor_warmup import JOB_GROUP, ExecutorWarmer, executor_location

pytestmark = pytest.mark.spark


def test_a_warm_up_job_imports_the_modules_on_each_executor_and_says_where_it_ran(spark):
    warmer = ExecutorWarmer(spark, ("pandas", "pyarrow", "no_such_module_sg"))
    assert warmer.warm({"driver": "localhost"}) == ["pandas", "pyarrow"]  # the missing module is skipped
    assert warmer.placements(["driver"]) == {"driver": "driver"}
    job = max(spark.sparkContext.statusTracker().getJobIdsForGroup(JOB_GROUP))
    assert spark.sparkContext.statusTracker().getJobInfo(job).status == "SUCCEEDED"
    # the caller's thread keeps no job group of ours
    assert spark.sparkContext.getLocalProperty("spark.jobGroup.id") is None
    assert executor_location("10.0.0.7", "12") == "executor_10.0.0.7_12"
    assert warmer.running_tasks("driver") == 0 and warmer.running_tasks("no-such-executor") == 0


def test_modules_given_as_a_generator_are_kept(spark):
    assert ExecutorWarmer(spark, (m for m in ("pandas", "numpy"))).modules == ("pandas", "numpy")


def test_the_hook_ignores_the_driver_and_local_mode_and_never_raises(spark):
    warmer = ExecutorWarmer(spark)
    added = {"Event": "SparkListenerExecutorAdded", "Executor ID": "3", "Executor Info": {"Host": "127.0.0.1"}}
    warmer(added)  # local mode: there are no executors to add
    warmer({**added, "Executor ID": "driver"})
    warmer({"Event": "SparkListenerExecutorAdded"})
    assert warmer._threads == [] and warmer.warmed == [] and warmer.failed == 0
