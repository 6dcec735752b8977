"""Job-side appliers of ``batch_interval`` directives (values: ``policies.batch_interval``).

* :class:`BatchIntervalApplier` — for the paced sources (``collectors.sources.paced``): writes the
  interval (and the pid-rate cap) to the gate's control file; the next boundary uses it. Live, no
  restart, takes microseconds.
* :class:`TriggerRestartApplier` — for any other source: restarts the query through a
  :class:`collectors.supervisor.QuerySupervisor` with ``trigger(processingTime=...)`` (value 0:
  the default trigger). Costs seconds; the supervisor refuses restarts closer together than its
  ``min_spacing_s`` (the directive is then acknowledged ``failed`` with the reason), and the
  ``fixed-point`` policy with ``actuator="restart"`` spaces its decisions accordingly.

Both follow ``collectors.appliers``: ``applier(value) -> (status, message)``, never raise, and
are called from the reporter's thread. ``applied`` holds the last value actually applied
(``interval_s`` in seconds, ``max_rows_per_second`` when capped).
"""
from __future__ import annotations

from typing import Any, Optional

from spark_governor.collectors.sources.pacing import write_control
from spark_governor.collectors.supervisor import QuerySupervisor, RestartError, RestartRefused


def parse_interval_value(value: Any) -> tuple[float, Optional[float]]:
    """(interval s, rows/s cap or None) of a directive value; ValueError names the bad field."""
    if isinstance(value, bool):
        raise ValueError(f"batch_interval: expected seconds or an object, got {value!r}")
    if isinstance(value, (int, float)):
        interval, cap = float(value), None
    elif isinstance(value, dict):
        interval, cap = value.get("interval_s"), value.get("max_rows_per_second")
        if not isinstance(interval, (int, float)) or isinstance(interval, bool):
            raise ValueError(f"batch_interval.interval_s: expected a number, got {interval!r}")
        if cap is not None and (not isinstance(cap, (int, float)) or cap <= 0):
            raise ValueError(f"batch_interval.max_rows_per_second: expected a positive number, got {cap!r}")
        interval = float(interval)
    else:
        raise ValueError(f"batch_interval: expected seconds or an object, got {value!r}")
    if not interval >= 0:  # also NaN
        raise ValueError(f"batch_interval.interval_s: must be >= 0, got {interval!r}")
    return interval, None if cap is None else float(cap)


def _describe(interval: float, cap: Optional[float]) -> str:
    text = "fastest (default trigger)" if interval == 0 else f"interval {interval:g} s"
    return text + (f", at most {cap:g} rows/s" if cap is not None else "")


class BatchIntervalApplier:
    """Sets a paced source's interval through its control file (``intervalFile`` option)."""

    knob = "batch_interval"

    def __init__(self, control_path: str) -> None:
        self.control_path = control_path
        self.applied: Optional[dict] = None

    def __call__(self, value: Any) -> tuple[str, Optional[str]]:
        try:
            interval, cap = parse_interval_value(value)
            self.applied = write_control(self.control_path, interval, cap)
            return "applied", _describe(interval, cap)
        except Exception as exc:
            return "failed", f"{exc.__class__.__name__}: {exc}"[:500]


class TriggerRestartApplier:
    """Applies an interval by restarting the supervised query with ``trigger(processingTime=...)``.

    ``setting`` is the key of the supervisor's settings that its ``build`` reads as the trigger
    interval in seconds (None or 0: default trigger). A pid-rate cap is not applied (source rate
    limits are source-specific options); the message says so."""

    knob = "batch_interval"

    def __init__(self, supervisor: QuerySupervisor, setting: str = "trigger_interval_s") -> None:
        self.supervisor = supervisor
        self.setting = setting
        self.applied: Optional[dict] = None

    def __call__(self, value: Any) -> tuple[str, Optional[str]]:
        try:
            interval, cap = parse_interval_value(value)
            if self.supervisor.settings.get(self.setting) == (interval or None):
                self.applied = {"interval_s": interval}
                return "applied", _describe(interval, None) + " (already running with it)"
            result = self.supervisor.restart(**{self.setting: interval or None})
            self.applied = {"interval_s": interval, "restart_cost_s": result.cost_s}
            message = (f"{_describe(interval, None)} after a restart of {result.cost_s:.2f} s "
                       f"(batch {result.previous_batch_id} -> {result.resumed_batch_id})")
            if cap is not None:
                message += "; rate limit not applied by a restart"
            return "applied", message
        except RestartRefused as exc:
            return "failed", str(exc)
        except RestartError as exc:
            return "failed", f"restart did not resume cleanly: {exc}"
        except Exception as exc:
            return "failed", f"{exc.__class__.__name__}: {exc}"[:500]
