"""Per-batch event-time statistics for sources whose rows carry a timestamp.

``observe_event_time(df, "event_time")`` wraps ``DataFrame.observe`` so that every micro-batch's
progress carries, under ``policies.wire.EVENT_TIME_METRIC``: the number of records, the
minimum and maximum event time (epoch µs) and the mean wait from event time to the batch's
start (``current_timestamp()`` is fixed per micro-batch; digest 004 §11.3). The control plane
derives the mean record interarrival time of a batch as (max − min)/(records − 1) seconds.
"""
from __future__ import annotations

from spark_governor.policies.wire import EVENT_TIME_METRIC


def observe_event_time(df, column: str = "event_time"):
    """Return ``df`` with the event-time observation attached (use on the source DataFrame)."""
    from pyspark.sql import functions as F

    ts = F.unix_micros(F.col(column).cast("timestamp"))
    return df.observe(
        EVENT_TIME_METRIC,
        F.count(ts).alias("records"),
        F.min(ts).alias("min_us"),
        F.max(ts).alias("max_us"),
        F.avg(F.unix_micros(F.current_timestamp()) - ts).alias("wait_us_avg"),
    )
