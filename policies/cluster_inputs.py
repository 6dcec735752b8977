"""What an executor policy reads about the job's cluster (issue #14): the measured provisioning
delay, executor warm-up and driver overhead (``aggregators.cluster_profile``), carried by the view.

``ClusterInputs`` is pure data (seconds; ``warmup_factor`` dimensionless); ``ClusteredJobView`` is a
``JobView`` with it (``aggregators.view.build_view`` returns one); :func:`cluster_of` reads it from
any view, None when the job has no measured profile — then the policies use the paper's literal
model (no overhead terms).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from spark_governor.policies.base import JobView


@dataclass(frozen=True)
class ClusterInputs:
    provisioning_delay_s: Optional[float] = None  # directive sent → first task finished on a new executor
    register_s: Optional[float] = None  # directive sent → new executor registered (offered tasks)
    warmup_factor: Optional[float] = None  # a new executor's first tasks' service / the steady one
    warmup_s: Optional[float] = None  # how long a new executor stays slow
    driver_overhead_s: Optional[float] = None  # mean per micro-batch: batch duration − its tasks' span

    @property
    def known(self) -> bool:
        return any(v is not None for v in (self.provisioning_delay_s, self.register_s, self.warmup_factor,
                                           self.driver_overhead_s))


@dataclass(frozen=True)
class ClusteredJobView(JobView):
    cluster: Optional[ClusterInputs] = None


def cluster_of(view: JobView) -> Optional[ClusterInputs]:
    c = getattr(view, "cluster", None)
    return c if c is not None and c.known else None
