"""Task slots the reporter reports (``collectors.attach.live_slots``): on a cluster, executors × their
cores, not Spark's defaultParallelism, which a cluster backend reports as max(total cores, 2)."""
from spark_governor.collectors.attach import live_slots


def test_one_one_core_executor_is_one_slot_not_two():
    assert live_slots(2, 1, "1", 1, "spark://127.0.0.1:7077") == 1
    assert live_slots(8, 4, "2", 1, "spark://h:7077") == 8 and live_slots(8, 4, "2", 2, "yarn") == 4
    assert live_slots(0, 0, "1", 1, "spark://h:7077") == 0  # every executor gone


def test_local_mode_and_unknown_cores_keep_the_default_parallelism():
    assert live_slots(4, 0, "1", 1, "local[4]") == 4
    assert live_slots(6, 3, None, 1, "spark://h:7077") == 6
    assert live_slots(6, 3, "two", 2, "spark://h:7077") == 3
