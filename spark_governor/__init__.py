"""spark-governor: observability and autoscaling control plane for Spark Structured Streaming.

The one call a job needs: ``from spark_governor import attach; attach(spark, job="clicks-agg")``.

The repository keeps one folder per responsibility (collectors/, aggregators/, policies/, api/, dashboards/,
migrations/, bench/); ``pyproject.toml`` installs each as a subpackage of this one, so nothing of ours lands at the
top of site-packages.
"""
from importlib.metadata import PackageNotFoundError, version as _version

try:
    __version__ = _version("spark-governor")
except PackageNotFoundError:  # pragma: no cover - running from a checkout that was never installed
    __version__ = "0+unknown"


def __getattr__(name: str):
    # attach() pulls in the collectors (py4j, requests); import it on first use so that the control plane and the
    # policies can import ``spark_governor.*`` without the driver-side machinery.
    if name in ("attach", "Attachment"):
        from spark_governor.collectors.attach import Attachment, attach
        return {"attach": attach, "Attachment": Attachment}[name]
    raise AttributeError(f"module 'spark_governor' has no attribute {name!r}")


__all__ = ["attach", "Attachment", "__version__"]
