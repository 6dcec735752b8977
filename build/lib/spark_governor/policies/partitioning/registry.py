"""Partitioners by name, for ``spark-governor plan <name>``, the benchmark and the job applier.

Built-in partitioners register themselves with :func:`register` when their module is imported;
the modules are listed in ``BUILTIN_MODULES``. Third-party partitioners can instead be exposed
under the entry-point group ``spark_governor.partitioners`` (``name = "pkg.module:Class"``).
"""
from __future__ import annotations

import importlib
import logging
from importlib.metadata import entry_points
from typing import Any

from pydantic import ValidationError

from spark_governor.policies.partitioning.base import Partitioner, PlanError

GROUP = "spark_governor.partitioners"
BUILTIN_MODULES = (
    "spark_governor.policies.partitioning.prompt",
    "spark_governor.policies.partitioning.baselines",
    "spark_governor.policies.partitioning.dalton_plan",
    "spark_governor.policies.partitioning.routing_plan",
)
_REGISTRY: dict[str, type[Partitioner]] = {}
_loaded = False
log = logging.getLogger("spark_governor.partitioning")


def register(cls: type[Partitioner]) -> type[Partitioner]:
    """Class decorator: make ``cls`` available under ``cls.name``."""
    if not (isinstance(cls, type) and issubclass(cls, Partitioner)):
        raise TypeError(f"{cls!r} is not a Partitioner subclass")
    other = _REGISTRY.get(cls.name)
    if other is not None and other is not cls:
        raise TypeError(f"partitioner name {cls.name!r} already used by {other.__module__}.{other.__name__}")
    _REGISTRY[cls.name] = cls
    return cls


def _load() -> None:
    global _loaded
    if _loaded:
        return
    _loaded = True
    for mod in BUILTIN_MODULES:
        importlib.import_module(mod)
    for ep in entry_points(group=GROUP):
        try:
            cls = ep.load()
            register(cls)
        except Exception as exc:  # a broken plugin must not hide the built-ins
            log.error("partitioner %s could not be loaded: %s", ep.name, exc)


def partitioners() -> dict[str, type[Partitioner]]:
    """name → partitioner class, sorted by name."""
    _load()
    return dict(sorted(_REGISTRY.items()))


def get_partitioner(name: str, **options: Any) -> Partitioner:
    """An instance of the partitioner ``name`` with ``options`` (validated; errors name the field)."""
    found = partitioners()
    if name not in found:
        raise PlanError(f"unknown partitioner {name!r}; available: {', '.join(found)}")
    try:
        return found[name](**options)
    except ValidationError as exc:
        parts = [f"option {'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()[:5]]
        raise PlanError(f"{name}: " + "; ".join(parts)) from None
