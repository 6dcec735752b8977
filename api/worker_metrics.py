"""``/metrics`` across gunicorn workers: the counters that live in process memory (reports received,
ingest duration) are summed over every worker through prometheus_client's multiprocess mode
(``PROMETHEUS_MULTIPROC_DIR``, set by ``serve`` before the workers start); everything else is read
from SQL at scrape time, so any worker answers the same."""
from __future__ import annotations

import os

from prometheus_client import CollectorRegistry


class _Without:
    """The collectors of ``registry`` except the metric families named in ``names``."""

    def __init__(self, registry: CollectorRegistry, names: set[str]) -> None:
        self.registry, self.names = registry, names

    def collect(self):
        for family in self.registry.collect():
            if family.name not in self.names:
                yield family


def exposition_registry(registry: CollectorRegistry, process_metrics) -> CollectorRegistry:
    """``registry`` itself in one process; with ``PROMETHEUS_MULTIPROC_DIR``, a registry that takes the
    in-process ``process_metrics`` (prometheus_client metrics) from every worker's files instead."""
    path = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if not path or not os.path.isdir(path):
        return registry
    from prometheus_client import multiprocess

    names = {m._name for m in process_metrics}
    exposed = CollectorRegistry()
    exposed.register(_Without(registry, names))
    multiprocess.MultiProcessCollector(exposed)
    return exposed
