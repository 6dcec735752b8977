"""Driver-side collectors: attach spark-governor's reporters to a PySpark job.

``from collectors import attach; attach(spark, job="clicks-agg")`` is the one call a job needs.
"""
from collectors.attach import Attachment, attach

__all__ = ["attach", "Attachment"]
