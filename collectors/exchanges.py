"""Optional exchanges: the job-side half of the ``chaining`` policy (knob ``exchanges``).

A job marks the shuffles it does not need for correctness::

    from spark_governor.collectors.exchanges import OptionalExchanges, ExchangesApplier
    from spark_governor.collectors.supervisor import QuerySupervisor

    exchanges = OptionalExchanges()

    def build(settings):                       # called at start and at every supervised restart
        exchanges.set(settings.get("exchanges", {}))
        src = spark.readStream.format("zipf").load()
        df = exchanges.exchange(src, "spread", partitions=6)   # present: repartition(6); removed: src
        return df.groupBy("key").count().writeStream...start()

    supervisor = QuerySupervisor(spark, build, {"exchanges": {}}, min_spacing_s=30)
    attach(spark, job="clicks", appliers={"exchanges": ExchangesApplier(
        exchanges, restart=lambda value: supervisor.restart(exchanges=value), query=lambda: supervisor.query)})

*Present* is ``repartition(n)`` (a round-robin shuffle: the stages before and after it run as two
stages, the second with ``n`` tasks); *removed* chains the two stages into one, as Lohrmann's
dynamic task chaining fuses tasks (thesis §4.7; digest 004 §11.7). Removing or restoring one
changes the query's plan, so it is applied by a supervised restart from the checkpoint between
micro-batches. Only round-robin repartitions may be optional: removing a key shuffle that feeds
an aggregation, a join or state would change results or break the checkpoint.

The applier reports, as ``knob_state``, each declared exchange with the ordinal of the stage it
ends (present) or of the fused stage holding it (removed), found in the query's executed plan:
the plan's shuffle exchanges, source first, are the stage boundaries of a micro-batch, and the
declared (present) ones are its ``REPARTITION_BY_NUM`` round-robin exchanges, matched in
declaration order. This holds for a linear query with one Spark job per micro-batch; another
``repartition(n)`` of the user's own on the same path would be mistaken for a declared one.
"""
from __future__ import annotations

import logging
import threading
from typing import Any, Callable, Optional

log = logging.getLogger("spark_governor.exchanges")

PRESENT, REMOVED = "present", "removed"


class OptionalExchanges:
    """The declared optional exchanges of one query and whether each is present (default) or removed."""

    def __init__(self, removed: tuple[str, ...] = ()) -> None:
        self._lock = threading.Lock()
        self._removed = set(removed)
        self._declared: dict[str, int] = {}  # name -> partitions, in declaration (source-first) order
        self._present_ordinal: dict[str, int] = {}  # name -> stage it ended when last seen present
        self._described: Optional[tuple[Any, list[dict]]] = None  # (run id, description)

    def exchange(self, df, name: str, partitions: int):
        """``df.repartition(partitions)`` when ``name`` is present, ``df`` itself when removed."""
        if not name or int(partitions) < 1:
            raise ValueError(f"an optional exchange needs a name and partitions >= 1 (got {name!r}, {partitions!r})")
        with self._lock:
            known = self._declared.get(name)
            if known is not None and known != int(partitions):
                raise ValueError(f"exchange {name!r} declared with {known} and {partitions} partitions")
            self._declared[name] = int(partitions)
            removed = name in self._removed
        return df if removed else df.repartition(int(partitions))

    def settings(self) -> dict[str, str]:
        """``{name: "present" | "removed"}`` for every declared exchange."""
        with self._lock:
            return {n: REMOVED if n in self._removed else PRESENT for n in self._declared}

    def set(self, value: dict) -> None:
        """Adopt ``{name: "present" | "removed"}`` for the next ``exchange`` calls (a plan being built)."""
        with self._lock:
            for name, state in (value or {}).items():
                if state == REMOVED:
                    self._removed.add(name)
                elif state == PRESENT:
                    self._removed.discard(name)
                else:
                    raise ValueError(f"exchanges.{name}: expected 'present' or 'removed', got {state!r}")
            self._described = None

    def check(self, value: Any) -> Optional[str]:
        """Why ``value`` is not a valid directive for these exchanges (None when it is)."""
        if not isinstance(value, dict):
            return f"expected an object {{name: 'present' | 'removed'}}, got {type(value).__name__}"
        with self._lock:
            declared = set(self._declared)
        for name, state in value.items():
            if name not in declared:
                return f"exchanges.{name}: not declared by the job (declared: {sorted(declared)})"
            if state not in (PRESENT, REMOVED):
                return f"exchanges.{name}: expected 'present' or 'removed', got {state!r}"
        return None

    def describe(self, query) -> list[dict]:
        """Each declared exchange with ``partitions``, ``removed`` and ``stage`` (see the module doc);
        ``stage`` is None until the query has executed a batch with its current plan. The plan is
        read once per query run."""
        run_id = None
        plan = None
        if query is not None:
            try:
                run_id = str(query.runId)
                with self._lock:
                    if self._described is not None and self._described[0] == run_id:
                        return self._described[1]
                execution = query._jsq.streamingQuery().lastExecution()
                plan = execution.executedPlan() if execution is not None else None
            except Exception as exc:  # the query may be stopping or restarting
                log.debug("executed plan: %r", exc)
        exchanges = source_first_exchanges(plan) if plan is not None else None
        with self._lock:
            declared = list(self._declared.items())
            removed = set(self._removed)
            out = [{"name": n, "partitions": p, "removed": n in removed, "stage": None} for n, p in declared]
            if exchanges is not None:
                optional = [i for i, (origin, _) in enumerate(exchanges) if origin == "REPARTITION_BY_NUM"]
                present = [e for e in out if not e["removed"]]
                for e, i in zip(present, optional):
                    e["stage"] = i
                    self._present_ordinal[e["name"]] = i
                for e in out:  # a removed one: the stage it ended when present, less the removed ones before it
                    if e["removed"] and e["name"] in self._present_ordinal:
                        before = [x for x in out[:out.index(e)] if x["removed"]]
                        e["stage"] = self._present_ordinal[e["name"]] - len(before)
                self._described = (run_id, out)
            return out


def source_first_exchanges(plan) -> list[tuple[str, int]]:
    """(shuffle origin, partitions) of every ``ShuffleExchangeExec`` of a JVM physical plan, children
    before parents (for a linear plan: source first, one per stage boundary)."""
    out: list[tuple[str, int]] = []

    def walk(node) -> None:
        kids = node.children()
        for i in range(kids.size()):
            walk(kids.apply(i))
        if node.nodeName() == "Exchange" and node.getClass().getSimpleName() == "ShuffleExchangeExec":
            out.append((str(node.shuffleOrigin().toString()), int(node.outputPartitioning().numPartitions())))

    walk(plan)
    return out


class ExchangesApplier:
    """Applies an ``exchanges`` directive ``{name: "present" | "removed"}`` with ``restart(value)``
    (a supervised restart of the query from its checkpoint with the new plan) and reports the
    declared exchanges as the knob's state. Called from the reporter thread; never raises."""

    knob = "exchanges"

    def __init__(self, exchanges: OptionalExchanges, restart: Callable[[dict], Any],
                 query: Callable[[], Any]) -> None:
        self.exchanges = exchanges
        self.restart = restart
        self.query = query

    def state(self) -> dict:
        return {"exchanges": self.exchanges.describe(self.query()), "value": self.exchanges.settings()}

    def __call__(self, value: Any) -> tuple[str, Optional[str]]:
        problem = self.exchanges.check(value)
        if problem:
            return "failed", problem
        current = self.exchanges.settings()
        wanted = {**current, **value}
        if wanted == current:
            return "applied", "no change"
        try:
            result = self.restart(wanted)
        except Exception as exc:
            return "failed", f"restart: {exc.__class__.__name__}: {str(exc)[:300]}"
        changed = ", ".join(f"{n} {wanted[n]}" for n in sorted(wanted) if wanted[n] != current[n])
        return "applied", f"{changed}; restarted: {result}"
