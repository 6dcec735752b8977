"""Driver-side collectors: attach spark-governor's reporters to a PySpark job.

``from spark_governor import attach; attach(spark, job="clicks-agg")`` is the one call a job needs.
"""
from spark_governor.collectors.attach import Attachment, attach

__all__ = ["attach", "Attachment"]
