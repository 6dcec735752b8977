"""What the partition-plan policies (``dalton``, ``mixed-routing``) read from a JobView: the
reported batches with key counts, the current ``partition_plan`` directive, and whether that
directive was already made from the latest batch (``based_on`` in the value)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from spark_governor.policies.base import JobView


@dataclass(frozen=True)
class PlanInputs:
    stats: tuple           # PartitionBatchStats with key counts, oldest first
    current: dict          # the current directive's value ({} when none)

    @property
    def latest(self):
        return self.stats[-1]

    def based_on(self) -> dict:
        return {"batch_id": self.latest.batch_id, "received_ms": self.latest.received_ms}


def unplanned_batches(view: JobView) -> Optional[PlanInputs]:
    """The inputs, or None when there is no reported batch or the current plan is from the latest."""
    stats = tuple(s for s in getattr(view, "partition_stats", ()) if s.key_counts)
    if not stats:
        return None
    directive = view.directives.get("partition_plan")
    value = directive.value if directive is not None and isinstance(directive.value, dict) else {}
    inputs = PlanInputs(stats, value)
    if value.get("based_on") == inputs.based_on():
        return None
    return inputs


def measured_balance(view: JobView) -> dict:
    """``observe``: the max/mean block load of the latest batch the job ran."""
    stats = getattr(view, "partition_stats", ())
    if not stats or stats[-1].max_mean_load is None:
        return {}
    return {"max_mean_load": stats[-1].max_mean_load}
