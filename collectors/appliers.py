"""Job-side appliers of directives: each turns a knob's desired value into a change of the job.

An applier is called from the reporter's thread with the directive's value and returns
``(status, message)`` with status ``applied``, ``failed`` or ``not_actuatable``; it must not raise.
"""
from __future__ import annotations

from typing import Any, Optional


def active_tasks(sc) -> dict[str, int]:
    """Tasks each executor runs now, from Spark's status store (``executorList(activeOnly=True)``);
    the driver is left out."""
    summaries = sc._jsc.sc().statusStore().executorList(True)
    running = {}
    for i in range(summaries.size()):
        s = summaries.apply(i)
        if s.id() != "driver":
            running[s.id()] = int(s.activeTasks())
    return running


class ExecutorApplier:
    """Sets the number of executors with the SparkContext developer API over py4j.

    Scale-up: ``requestTotalExecutors(n, 0, {})``. Scale-down: lower the target with
    ``requestTotalExecutors(n, ...)`` and kill executors that run no task (from Spark's status
    store), oldest ids first, with ``killExecutors``, and only while no Spark job runs, i.e.
    between micro-batches (an idle executor may hold shuffle output the running batch still
    needs; killing it causes fetch failures and stage retries). Executors that cannot be killed
    yet are killed by ``reconcile``, which the reporter calls every cycle until the count reaches
    the target. In ``local[*]`` mode the knob is not actuatable.
    """

    knob = "executors"

    def __init__(self, sc) -> None:
        self.sc = sc
        self.jsc = sc._jsc.sc()
        self.jvm = sc._jvm
        self.utils = sc._jvm.org.apache.spark.api.python.PythonUtils
        self.target: Optional[int] = None

    def not_actuatable(self) -> Optional[str]:
        return "local mode" if self.sc.master.startswith("local") else None

    def executor_ids(self) -> list[str]:
        if self.not_actuatable():  # local mode has no executors to list (and Spark warns on every call)
            return []
        ids = self.jsc.getExecutorIds()
        return [ids.apply(i) for i in range(ids.size())]

    def idle_executor_ids(self) -> list[str]:
        """Executors with no running task, oldest (smallest numeric id) first."""
        idle = [e for e, tasks in active_tasks(self.sc).items() if tasks == 0]
        return sorted(idle, key=lambda x: (len(x), x))

    def _request_total(self, n: int) -> bool:
        no_locality = self.utils.toScalaMap(self.jvm.java.util.HashMap())
        return bool(self.jsc.requestTotalExecutors(n, 0, no_locality))

    def reconcile(self) -> list[str]:
        """Kill idle executors while more than the target are registered; returns those killed."""
        if self.target is None or self.not_actuatable():
            return []
        excess = len(self.executor_ids()) - self.target
        if excess <= 0:
            return []
        if self.sc.statusTracker().getActiveJobsIds():
            # only between micro-batches: an executor without running tasks may still hold the
            # shuffle output the running batch's next stage will fetch
            return []
        victims = self.idle_executor_ids()[:excess]
        if not victims:
            return []
        killed = self.jsc.killExecutors(self.utils.toSeq(self.jvm.java.util.ArrayList(victims)))
        if killed:
            self._request_total(self.target)  # killExecutors lowered the target; keep ours
        return list(victims) if killed else []

    def __call__(self, value: Any) -> tuple[str, Optional[str]]:
        reason = self.not_actuatable()
        if reason:
            return "not_actuatable", f"not actuatable: {reason}"
        try:
            target = int(value)
            if target < 0:
                return "failed", f"invalid executor count {value!r}"
            current = self.executor_ids()
            if not self._request_total(target):
                return "failed", f"cluster manager refused a total of {target} executors"
            self.target = target
            killed = self.reconcile()
            message = f"requested {target} executors (had {len(current)})"
            if killed:
                message += f"; killed idle {', '.join(killed)}"
            elif target < len(current):
                message += "; busy executors are released when idle"
            return "applied", message
        except Exception as exc:  # report, never raise into the reporter
            return "failed", f"{exc.__class__.__name__}: {str(exc)[:300]}"
