"""Job-side appliers of directives: each turns a knob's desired value into a change of the job.

An applier is called from the reporter's thread with the directive's value and returns
``(status, message)`` with status ``applied``, ``failed`` or ``not_actuatable``; it must not raise.
"""
from __future__ import annotations

from typing import Any, Optional


class ExecutorApplier:
    """Sets the number of executors with the SparkContext developer API over py4j.

    Scale-up: ``requestTotalExecutors(n, 0, {})``. Scale-down: kill executors that run no task
    (from Spark's status store), oldest ids first, with ``killExecutors`` (which also lowers the
    target), then ``requestTotalExecutors(n, ...)`` so the cluster manager keeps that target. In
    ``local[*]`` mode the knob is not actuatable.
    """

    knob = "executors"

    def __init__(self, sc) -> None:
        self.sc = sc
        self.jsc = sc._jsc.sc()
        self.jvm = sc._jvm
        self.utils = sc._jvm.org.apache.spark.api.python.PythonUtils

    def not_actuatable(self) -> Optional[str]:
        return "local mode" if self.sc.master.startswith("local") else None

    def executor_ids(self) -> list[str]:
        ids = self.jsc.getExecutorIds()
        return [ids.apply(i) for i in range(ids.size())]

    def idle_executor_ids(self) -> list[str]:
        """Executors with no running task, oldest (smallest numeric id) first."""
        summaries = self.jsc.statusStore().executorList(True)
        idle = []
        for i in range(summaries.size()):
            s = summaries.apply(i)
            if s.id() != "driver" and s.activeTasks() == 0:
                idle.append(s.id())
        return sorted(idle, key=lambda x: (len(x), x))

    def _request_total(self, n: int) -> bool:
        no_locality = self.utils.toScalaMap(self.jvm.java.util.HashMap())
        return bool(self.jsc.requestTotalExecutors(n, 0, no_locality))

    def __call__(self, value: Any) -> tuple[str, Optional[str]]:
        reason = self.not_actuatable()
        if reason:
            return "not_actuatable", f"not actuatable: {reason}"
        try:
            target = int(value)
            if target < 0:
                return "failed", f"invalid executor count {value!r}"
            current = self.executor_ids()
            killed: list[str] = []
            if target < len(current):
                victims = self.idle_executor_ids()[: len(current) - target]
                if victims:
                    seq = self.utils.toSeq(self.jvm.java.util.ArrayList(victims))
                    killed = list(victims) if self.jsc.killExecutors(seq) else []
            ok = self._request_total(target)
            if not ok:
                return "failed", f"cluster manager refused a total of {target} executors"
            message = f"requested {target} executors (had {len(current)})"
            if killed:
                message += f"; killed idle {', '.join(killed)}"
            elif target < len(current):
                message += "; no idle executor to kill yet, target lowered"
            return "applied", message
        except Exception as exc:  # report, never raise into the reporter
            return "failed", f"{exc.__class__.__name__}: {str(exc)[:300]}"
