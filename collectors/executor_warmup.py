"""Warm a new executor before the job's tasks reach it (issue 14, "Learn the cluster from the job").

A PySpark executor added while a streaming job runs is slow at first: its Python worker daemon is not
started, the worker has not imported pandas/pyarrow, the JVM has not loaded the Arrow and Python
runner classes. On the 2-core standalone cluster, the first ``mapInPandas`` task of an executor held
its slot ×2.2 as long as the same task on a warm one (run 89, 2026-11-27: 12.0 s against 5.5 s for
49 000 records, 2.1 s of it task deserialisation), and an executor that registered while a batch ran
sat idle until the next batch only to pay that start-up inside it.

:class:`ExecutorWarmer` runs, as soon as the driver sees an executor registered, a small Spark job with
one task preferring that executor (``executor_<host>_<id>``, Spark's
process-local task location; ``SparkContext.makeRDD`` with locations, over py4j). Its task is a
``mapInPandas`` function that imports the modules the job's Python workers need (``modules``; by default
pandas, pyarrow and numpy). A ``mapInPandas`` task, as a pandas UDF's, starts the executor's Python
daemon for SQL UDFs (Spark keys its daemons and idle workers by the runner's environment, which differs
between RDD and SQL Python code), the worker imports pandas/pyarrow and the modules, and with
``spark.python.worker.reuse`` (Spark's default) that worker serves the job's next Python UDF task there.

- Each executor's job runs in its own daemon thread, at once, so the executors of a scale-out warm in
  parallel. It never raises into the caller (a failed warm-up is counted in ``failed``).
- An executor that already runs a task of the job when its registration is seen (Spark offers a
  registering executor the running batch's waiting tasks first: FIFO, the batch's job is older) is not
  warmed: that task warms it, cold, and a warm-up task would wait for it (below) and then run on another
  executor. It is listed in ``busy``.
- Its jobs carry no streaming query id, so the reporters do not count them in any statistic
  (``collectors.events`` tracks only jobs of streaming queries).
- The warm-up runs on executors that would otherwise sit idle until the next batch. On the standalone
  cluster an executor's first task after it held its slot 1.30 s against 3.75 s cold and 1.12 s on a
  warm executor (``spark-governor bench warmup --reps 2``, 2026-11-28).
- A task waits ``spark.locality.wait`` (3 s by default) for its executor before Spark runs it anywhere
  on the host: then it warms another executor, which costs a few milliseconds.
- With the launch hold (``collectors.launch_hold``: the listener jar's Spark plugin keeps a new executor
  from tasks while a stage has tasks waiting) the warm-up waits until the executor launched; ``held_s``
  records how long each was held. Its task then ends in the jar's ``io.sparkgovernor.SlotHold``: after the
  imports it keeps the executor's slot while the hold's rule says the job's waiting tasks are the old
  executors' to take (a warmed executor's first task still runs ×1.6–1.8, so taking one of them the moment
  the warm-up ends would end the stage later); ``slot_held_s`` records how long.

Units: seconds.
"""
from __future__ import annotations

import logging
import threading
import time
from typing import Any, Iterable, Optional, Sequence

from spark_governor.collectors.appliers import active_tasks
from spark_governor.collectors.launch_hold import configured as hold_configured
from spark_governor.collectors.launch_hold import max_hold_s, wait_launched

log = logging.getLogger("spark_governor.executor_warmup")

#: the modules a PySpark job's Python workers load for pandas/Arrow UDFs (``mapInPandas``, ``pandas_udf``)
DEFAULT_MODULES = ("pandas", "pyarrow", "numpy")

#: the row ``io.sparkgovernor.SlotHold`` ends each warm-up partition with (``SlotHold.HELD`` + ms)
SLOT_HELD_PREFIX = "slot-held-ms:"

#: the row the warm-up task yields for a module its worker could not import (+ ``<module>: <error>``)
IMPORT_FAILED_PREFIX = "import-failed:"

#: the Spark job group of warm-up jobs (``SparkContext.setJobGroup``; ``JOB_GROUP:<executor id>`` per executor)
JOB_GROUP = "spark-governor-warmup"


def executor_location(host: str, executor_id: str) -> str:
    """Spark's process-local task location of an executor (``ExecutorCacheTaskLocation.toString``)."""
    return f"executor_{host}_{executor_id}"


def _import_modules(modules: Sequence[str]):
    """The warm-up task, a ``mapInPandas`` function (runs in the executor's Python worker for Arrow UDFs):
    import ``modules``; one row per module that imported, and for a module the worker could not import (not
    installed there, not shipped with ``--py-files``, or raising on import) a row ``import-failed:<module>:
    <error>``: the job is not failed for it, and the driver reports it (:attr:`ExecutorWarmer.import_errors`)."""
    def task(frames: Iterable[Any]):
        import importlib

        import pandas as pd

        for _ in frames:
            pass
        names = []
        for name in modules:
            try:
                importlib.import_module(name)
                names.append(name)
            except (Exception, SystemExit) as exc:  # a module may even exit; an interrupt still ends the task
                names.append(f"{IMPORT_FAILED_PREFIX}{name}: {exc.__class__.__name__}: {exc}"[:300])
        yield pd.DataFrame({"module": names})
    return task


class ExecutorWarmer:
    """Warms executors as they register. ``__call__`` takes Spark's ``SparkListenerExecutorAdded`` event (its
    event-log JSON, as the reporter decodes it) and returns at once."""

    def __init__(self, spark, modules: Sequence[str] = DEFAULT_MODULES) -> None:
        names = None if isinstance(modules, (str, bytes)) or not isinstance(modules, Iterable) else tuple(modules)
        if names is None or not all(isinstance(m, str) for m in names):
            raise TypeError(f"warm_modules must be a sequence of module names, e.g. ('pandas',), not {modules!r}")
        self.spark, self.sc = spark, spark.sparkContext
        self.modules = names
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self.warmed: list[str] = []  # executor ids, in the order their warm-up jobs ended
        self.imported: dict[str, list[str]] = {}  # executor id -> the modules its warm-up imported
        self.import_errors: dict[str, str] = {}  # module -> why an executor's worker could not import it (first seen)
        self.job_s: list[float] = []  # wall seconds of each warm-up job, submission to its end, less slot_held_s
        self.ran_on: dict[str, str] = {}  # executor id -> the executor its warm-up task ran on (Spark's status store)
        self.busy: list[str] = []  # executors not warmed: running a task of the job already when they registered
        self.failed = 0  # warm-up jobs that raised
        self.last_error: Optional[str] = None
        # with the launch hold (collectors.launch_hold) an executor launches after its registration: wait for it
        self.hold = hold_configured(self.sc)
        self.hold_timeout_s = max_hold_s(self.sc) + 5.0 if self.hold else 0.0
        self.held_s: dict[str, float] = {}  # executor id -> seconds the launch hold kept it from tasks
        self.slot_held_s: dict[str, float] = {}  # executor id -> seconds its warm-up task kept its slot (SlotHold)

    def __call__(self, event: dict) -> None:
        executor_id, host = event.get("Executor ID"), (event.get("Executor Info") or {}).get("Host")
        if not executor_id or executor_id == "driver" or not host or self.sc.master.startswith("local"):
            return
        # one thread and job per executor, at once: executors registering together (a scale-out) warm in
        # parallel, not one job behind another (run 90: two executors queued behind a third's job were still
        # warming when the next batch began)
        thread = threading.Thread(target=self._warm_one, args=(str(executor_id), str(host)),
                                  name=f"spark-governor-warmup-{executor_id}", daemon=True)
        with self._lock:
            self._threads = [t for t in self._threads if t.is_alive()] + [thread]
        thread.start()

    def join(self, timeout_s: float) -> None:
        """Wait up to ``timeout_s`` seconds in all for the running warm-ups (tests, shutdown)."""
        deadline = time.monotonic() + timeout_s
        with self._lock:
            threads = list(self._threads)
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))

    def _warm_one(self, executor_id: str, host: str) -> None:
        try:
            if self.hold:
                held = wait_launched(self.sc, executor_id, self.hold_timeout_s)
                if held is not None:
                    self.held_s[executor_id] = held
                    time.sleep(0.05)  # the executor's LaunchedExecutor reaches the driver's scheduler
            if self.running_tasks(executor_id):
                # Spark gave it a waiting task of the job as it registered: that task warms it, and a
                # warm-up task would only wait spark.locality.wait for it and then run on another executor
                self.busy.append(executor_id)
                return
            group = f"{JOB_GROUP}:{executor_id}"
            started = time.monotonic()
            self.imported[executor_id] = self.warm({executor_id: host}, group)
            # the warm-up's own time: the slot kept after it (SlotHold) is the job's waiting tasks', not its
            self.job_s.append(max(0.0, time.monotonic() - started - self.slot_held_s.get(executor_id, 0.0)))
            self.warmed.append(executor_id)
            self.ran_on.update(self.placements([executor_id], group))
        except Exception as exc:  # a stopped context, a refused job: the job itself goes on
            self.failed += 1
            self.last_error = f"{exc.__class__.__name__}: {str(exc)[:300]}"
            log.debug("executor warm-up failed: %s", self.last_error)

    def running_tasks(self, executor_id: str) -> int:
        """Tasks the executor runs now (Spark's status store; 0 for an executor it does not list)."""
        return active_tasks(self.sc).get(executor_id, 0)

    def warm(self, executors: dict[str, str], group: str = JOB_GROUP) -> list[str]:
        """Run one warm-up job in job group ``group``: a task per executor (id -> host) preferring it; returns
        the modules each task imported (one entry per import). Blocks until the job ends. With the launch hold,
        each task then keeps its slot as the hold's rule says (``SlotHold``; ``slot_held_s``)."""
        from pyspark.sql.classic.dataframe import DataFrame

        jvm, jsc = self.sc._jvm, self.sc._jsc.sc()
        to_seq = jvm.org.apache.spark.api.python.PythonUtils.toSeq
        items = jvm.java.util.ArrayList()
        for executor_id, host in executors.items():
            where = jvm.java.util.ArrayList()
            where.add(executor_location(host, executor_id))
            items.add(jvm.scala.Tuple2(executor_id, to_seq(where)))
        tag = jvm.scala.reflect.ClassTag.AnyRef()  # erased: the elements are strings
        located = jsc.makeRDD(to_seq(items), tag)  # one partition per executor, preferring it
        # a Dataset straight from the JVM RDD: no Python worker of another kind is started for the rows
        jds = self.spark._jsparkSession.createDataset(located, jvm.org.apache.spark.sql.Encoders.STRING())
        frame = DataFrame(jds.toDF(), self.spark)
        self.sc.setJobGroup(group, f"spark-governor: warm executors {', '.join(executors)}", True)
        try:
            warmed = frame.mapInPandas(_import_modules(self.modules), "module string")
            rows = [r[0] for r in warmed.collect()] if not self.hold else self._keep_slots(warmed, list(executors))
            return self._imports(rows)
        finally:
            for key in ("spark.jobGroup.id", "spark.job.description", "spark.job.interruptOnCancel"):
                self.sc.setLocalProperty(key, None)

    def _imports(self, rows: list[str]) -> list[str]:
        """The modules imported, of the warm-up's module rows; a module that failed is kept in ``import_errors``
        and logged once as a warning (the warm-up then leaves that import to the job's first task)."""
        imported = []
        for row in rows:
            if not row.startswith(IMPORT_FAILED_PREFIX):
                imported.append(row)
                continue
            name, _, error = row[len(IMPORT_FAILED_PREFIX):].partition(": ")
            with self._lock:
                first = name not in self.import_errors
                self.import_errors.setdefault(name, error)
            if first:
                log.warning("spark-governor: the executor warm-up could not import %r (%s); the job's first task "
                            "there imports it cold", name, error)
        return imported

    def _keep_slots(self, warmed, executors: list[str]) -> list[str]:
        """Collect ``warmed`` (the warm-up's rows, a partition per executor) through the jar's ``SlotHold``:
        each task keeps its slot after the imports while the launch hold's rule says so; records the seconds in
        ``slot_held_s``; returns the module rows."""
        jvm = self.sc._jvm
        hold_class = jvm.io.sparkgovernor.SlotHold
        ids = self.sc._gateway.new_array(jvm.java.lang.String, len(executors))
        for i, executor_id in enumerate(executors):
            ids[i] = executor_id
        rows = warmed._jdf.mapPartitions(hold_class(ids), jvm.org.apache.spark.sql.Encoders.STRING()).collectAsList()
        prefix, modules, part = SLOT_HELD_PREFIX, [], 0
        for row in (str(r) for r in rows):
            if not row.startswith(prefix):
                modules.append(row)
                continue
            if part < len(executors):  # the rows come partition by partition: this one closes executors[part]
                self.slot_held_s[executors[part]] = int(row[len(prefix):]) / 1000.0
            part += 1
        return modules

    def placements(self, executors: list[str], group: str = JOB_GROUP, wait_s: float = 2.0) -> dict[str, str]:
        """Where the latest warm-up job of job group ``group`` ran its tasks: {executor it was for: executor it ran on}, from Spark's
        status store (fed by the listener bus, so it is polled up to ``wait_s`` seconds). Partition i of the
        job is for ``executors[i]``. Empty when the store does not have the tasks."""
        jobs = self.sc.statusTracker().getJobIdsForGroup(group)
        info = self.sc.statusTracker().getJobInfo(max(jobs)) if jobs else None
        if info is None or not info.stageIds:
            return {}
        store = self.sc._jsc.sc().statusStore()
        deadline = time.monotonic() + wait_s
        while True:
            tasks = store.taskList(int(info.stageIds[0]), 0, len(executors) * 4)
            ran = {}
            for i in range(tasks.size()):
                t = tasks.apply(i)
                if t.status() == "SUCCESS" and 0 <= t.index() < len(executors):
                    ran[executors[t.index()]] = str(t.executorId())
            if len(ran) == len(executors) or time.monotonic() > deadline:
                return ran
            time.sleep(0.1)
