"""The driver's side of the launch hold (``io.sparkgovernor.LaunchHold``, the listener jar's Spark plugin;
issue #14): whether it is on, and when it let an executor launch.

With ``spark.plugins=io.sparkgovernor.LaunchHold`` (the jar on the driver's and the executors' class path)
an executor added while a job runs takes no task until no active stage has a task waiting, or until
``spark.governor.launchHoldMax`` (10 s) has passed: the old, warm executors take the waiting tasks, and
the new one launches idle, where ``collectors.executor_warmup`` warms it. Spark posts the executor's
``ExecutorAdded`` at its registration, before the hold, so the warmer waits for the launch
(:func:`wait_launched`): a warm-up task submitted during the hold would be a waiting task itself, and
after ``spark.locality.wait`` it would run on another executor.

Units: seconds (milliseconds where the JVM's values are passed through).
"""
from __future__ import annotations

import time
from typing import Optional

#: the plugin's class (``spark.plugins``; ``collectors.jvm.build`` adds it to the ``spark-submit`` arguments)
PLUGIN_CLASS = "io.sparkgovernor.LaunchHold"
#: the hold's default bound (``spark.governor.launchHoldMax``), seconds
DEFAULT_MAX_S = 10.0


def configured(sc) -> bool:
    """Whether ``spark.plugins`` of the running context names the launch hold."""
    plugins = sc.getConf().get("spark.plugins", "") or ""
    return PLUGIN_CLASS in [p.strip() for p in plugins.split(",")]


def max_hold_s(sc) -> float:
    """The hold's bound in seconds (``spark.governor.launchHoldMax``, a Spark time string)."""
    raw = sc.getConf().get("spark.governor.launchHoldMax", None)
    if raw is None:
        return DEFAULT_MAX_S
    return sc._jvm.org.apache.spark.network.util.JavaUtils.timeStringAsMs(raw) / 1000.0


def launched_at_ms(sc, executor_id: str) -> Optional[int]:
    """Wall-clock ms the driver let ``executor_id`` launch, None before (or without the plugin's class)."""
    try:
        at = int(sc._jvm.io.sparkgovernor.LaunchHold.launchedAt(str(executor_id)))
    except Exception:  # the class is not on the driver's class path
        return None
    return at if at >= 0 else None


def held_s(sc, executor_id: str) -> Optional[float]:
    """Seconds ``executor_id`` was held before it launched, None if unknown."""
    try:
        ms = int(sc._jvm.io.sparkgovernor.LaunchHold.heldMs(str(executor_id)))
    except Exception:
        return None
    return ms / 1000.0 if ms >= 0 else None


def wait_launched(sc, executor_id: str, timeout_s: float, poll_s: float = 0.05) -> Optional[float]:
    """Block until the driver has let ``executor_id`` launch; the seconds it was held, or None when it
    did not launch within ``timeout_s`` (or the plugin's class is missing)."""
    deadline = time.monotonic() + timeout_s
    while True:
        if launched_at_ms(sc, executor_id) is not None:
            held = held_s(sc, executor_id)
            return 0.0 if held is None else held
        if time.monotonic() >= deadline:
            return None
        time.sleep(poll_s)
