"""The JVM listener jar: attach spark-governor to a job by configuration only, no code change.

::

    spark-submit --jars "$(spark-governor jar)" \\
      --conf spark.extraListeners=io.sparkgovernor.SparkGovernorListener \\
      --conf spark.sql.streaming.streamingQueryListeners=io.sparkgovernor.SparkGovernorQueryListener \\
      --conf spark.governor.endpoint=http://127.0.0.1:8787 --conf spark.governor.job=clicks-agg app.py

The Java sources live in ``src/`` beside this file and are compiled (``javac --release 17``) against the jars of the
installed pyspark by :mod:`spark_governor.collectors.jvm.build`; the jar ships inside the package as
``spark-governor-listener.jar``. It speaks the same wire protocol as the Python reporter (``collectors/reporter.py``,
``policies/wire.py``) and translates listener events into the same records (``collectors/events.py``).
"""
from __future__ import annotations

_EXPORTS = ("CONFS", "JAR_NAME", "LISTENER_CLASS", "QUERY_LISTENER_CLASS", "JarUnavailable", "build_jar", "find_jar",
            "submit_args", "submit_confs")


def __getattr__(name: str):
    # lazy, so that ``python -m spark_governor.collectors.jvm.build`` does not import its module twice
    if name in _EXPORTS:
        from spark_governor.collectors.jvm import build

        return getattr(build, name)
    raise AttributeError(f"module 'spark_governor.collectors.jvm' has no attribute {name!r}")


__all__ = list(_EXPORTS)
