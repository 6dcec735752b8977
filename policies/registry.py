"""Policies available to the control plane, loaded from the entry-point group
``spark_governor.policies`` (``name = "package.module:PolicyClass"``), so a third party can ship a
policy in its own distribution.

The group is read again only when a folder of ``sys.path`` changed (its modification time: installing or
removing a distribution changes its site-packages folder): scanning the installed distributions' metadata
cost ~5 ms, which every policy evaluation paid (about 40 % of an evaluation run), and a policy installed
while the control plane runs is still found at once."""
from __future__ import annotations

import logging
import os
import sys
from functools import lru_cache
from importlib.metadata import entry_points

from pydantic import ValidationError

from spark_governor.policies.base import KNOBS, Policy, PolicyConfig
from spark_governor.policies.safety import SafetyConfig

GROUP = "spark_governor.policies"
log = logging.getLogger("spark_governor.policies")


class PolicyNotFound(LookupError):
    pass


class InvalidConfig(ValueError):
    """A config the policy's schema refuses; the message names the field."""


def load_policies() -> tuple[dict[str, type[Policy]], dict[str, str]]:
    """(name → policy class, name → load error) for every entry point of the group (read once per
    process; the dicts are the caller's own)."""
    found, errors = _discover(_path_state())
    return dict(found), dict(errors)


def _path_state() -> tuple:
    """``sys.path`` with each folder's modification time (ns): changes when a distribution is installed or
    removed there (a few ``stat`` calls, microseconds)."""
    state = []
    for p in sys.path:
        try:
            state.append((p, os.stat(p or ".").st_mtime_ns))
        except OSError:
            state.append((p, None))
    return tuple(state)


@lru_cache(maxsize=1)
def _discover(_state: tuple) -> tuple[dict[str, type[Policy]], dict[str, str]]:
    """The group's policies for one state of ``sys.path`` (``_path_state``)."""
    found: dict[str, type[Policy]] = {}
    errors: dict[str, str] = {}
    for ep in entry_points(group=GROUP):
        try:
            cls = ep.load()
            if not (isinstance(cls, type) and issubclass(cls, Policy)):
                raise TypeError(f"{ep.value} is not a Policy subclass")
            if cls.name != ep.name:
                raise TypeError(f"entry point {ep.name!r} names a policy called {cls.name!r}")
            if not (isinstance(cls.Config, type) and issubclass(cls.Config, SafetyConfig)):
                raise TypeError(f"{cls.__name__}.Config must extend policies.safety.SafetyConfig")
            unknown = set(cls.knobs) - set(KNOBS)
            if unknown:
                raise TypeError(f"unknown knobs {sorted(unknown)}; knobs are {list(KNOBS)}")
            found[ep.name] = cls
        except Exception as exc:  # a broken plugin must not take the control plane down
            errors[ep.name] = f"{exc.__class__.__name__}: {exc}"
            log.error("policy %s could not be loaded: %s", ep.name, errors[ep.name])
    return found, errors


def get_policy(name: str) -> type[Policy]:
    policies, errors = load_policies()
    if name in policies:
        return policies[name]
    if name in errors:
        raise PolicyNotFound(f"policy {name!r} failed to load: {errors[name]}")
    raise PolicyNotFound(f"policy {name!r} not found; available: {sorted(policies)}")


def validate_config(cls: type[Policy], raw: dict) -> PolicyConfig:
    try:
        return cls.Config.model_validate(raw or {})
    except ValidationError as exc:
        parts = [f"{'.'.join(['config', *map(str, e['loc'])])}: {e['msg']}" for e in exc.errors()[:5]]
        raise InvalidConfig("; ".join(parts)) from None


def describe(cls: type[Policy]) -> dict:
    """JSON description of a policy for ``GET /api/v1/policies``."""
    return {"name": cls.name, "knobs": list(cls.knobs), "description": cls.description,
            "config_schema": cls.Config.model_json_schema()}
