"""collectors.executor_warmup in local mode (real Spark): the warm-up job runs a task per executor and imports
the modules the worker has; the listener hook ignores local mode and the driver. Placement on added executors
of a real standalone cluster: tests/integration/test_executor_warmup.py."""
import pytest

from spark_governor.collectors.executor_warmup import JOB_GROUP, ExecutorWarmer, executor_location

pytestmark = pytest.mark.spark


def test_a_warm_up_job_imports_the_modules_on_each_executor_and_says_where_it_ran(spark):
    warmer = ExecutorWarmer(spark, ("pandas", "pyarrow", "no_such_module_sg"))
    assert warmer.warm({"driver": "localhost"}) == ["pandas", "pyarrow"]  # the missing module is skipped...
    # ...and said: which module, and why
    assert list(warmer.import_errors) == ["no_such_module_sg"]
    assert warmer.import_errors["no_such_module_sg"].startswith("ModuleNotFoundError: No module named")
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


class _Context:
    """A context's conf without a running context of its own (``launch_hold`` reads only these two)."""

    def __init__(self, conf, jvm):
        self.conf, self._jvm = conf, jvm

    def getConf(self):
        return self.conf


def test_the_launch_hold_is_off_unless_spark_plugins_names_it_and_its_bound_is_a_spark_time(spark):
    from pyspark import SparkConf

    from spark_governor.collectors import launch_hold

    sc = spark.sparkContext
    assert not launch_hold.configured(sc) and not ExecutorWarmer(spark).hold  # the test session has no plugin
    jvm = sc._jvm
    on = SparkConf(loadDefaults=False).set("spark.plugins", f"a.B, {launch_hold.PLUGIN_CLASS}")
    assert launch_hold.configured(_Context(on, jvm))
    assert launch_hold.max_hold_s(_Context(on, jvm)) == launch_hold.DEFAULT_MAX_S == 10.0
    assert launch_hold.max_hold_s(_Context(on.set("spark.governor.launchHoldMax", "1min"), jvm)) == 60.0
    assert not launch_hold.configured(_Context(SparkConf(loadDefaults=False).set("spark.plugins", "a.B"), jvm))
    # no executor was let launch by a plugin: the warmer's wait ends at its timeout with None
    assert launch_hold.launched_at_ms(sc, "7") is None and launch_hold.held_s(sc, "7") is None
    assert launch_hold.wait_launched(sc, "7", timeout_s=0.2) is None
