"""Verified actions: did an applied change make the job measurably worse? Then undo it.

The effectiveness check (``policies.safety.judge_effect``) asks whether a change did what its policy
predicted. This module asks a policy-independent question about the *job*: a few evaluation intervals
after a directive took effect (the policy's ``effectiveness_intervals``), the job's health is compared
with its health when the decision was taken, from the same kind of view:

* **SLO**: the latency constraint held (measured mean latency ≤ bound) and is now violated, and the
  latency rose;
* **throughput**: the job kept up (batches within the trigger interval, backlog not growing) and now
  falls behind: batches longer than the trigger interval *and* a backlog that grows (by at least
  ``backlog_growth`` seconds of work per second; where no source counts its backlog, the batches alone
  decide), over at least ``MIN_BATCHES`` micro-batches since the change. One slow batch right after an
  executor left (its tasks are re-run) is not falling behind: a backlog that shrinks again says so;
* **balance** (partition plans): the partitions' max/mean load rose by more than ``harm_balance_fraction``.

Two confounders are not the action's doing, so they are not harm (issue #14; measured on the standalone
cluster, where a 2 → 4 scale-up during a 4× rate step was rolled back because the latency, still
draining the step's backlog, rose above the bound):

* an action that **added capacity** (more executors) cannot make the latency or the throughput worse:
  for it only the balance rule counts (a scale-up that did not help is ``ineffective``, not harmful);
* when the **arrival rate rose** by more than ``load_tolerance`` (10 %) from before to after, a worse
  latency or falling behind is the load's; the policies answer that by themselves. Only for knobs
  whose change cannot move the measured rate (:data:`RATE_NEUTRAL_KNOBS`): a paced source's measured
  rate follows the batch interval, so a longer interval "raises" it (measured on local Spark).

An action that did any of these is *harmful*: the governor rolls it back to the previous value (a new
decision and directive), marks it ``rolled-back`` with this evidence, and refuses the same action
(same knob, same value) for ``rollback_cooloff_s``. Otherwise it is ``verified`` (the predicted effect,
or no prediction to compare) or ``ineffective`` (``judge_effect`` said the predicted effect did not
come). Rollback can be switched off per policy (``rollback: false``): harm is then only reported.

Not from the papers: Lohrmann's thesis and the Flink autoscaler stop at detecting ineffective
scale-ups; undoing a harmful action is our extension. Units: seconds, rows per second, fractions.
"""
from __future__ import annotations

from typing import Optional

from spark_governor.policies.base import JobView
from spark_governor.policies.rate_model import arrival_rate

#: knobs whose change cannot move the measured arrival rate, so a rate rise is the load's (module docstring)
RATE_NEUTRAL_KNOBS = ("executors",)
#: the throughput rule needs this many micro-batches completed since the change
MIN_BATCHES = 2
#: what a decision's verification can say
VERIFICATIONS = ("verified", "ineffective", "rolled-back", "harmful")


def snapshot(view: JobView) -> dict:
    """The job's health quantities in ``view`` (seconds, rows/s, fractions; absent where unknown):
    ``latency_s`` and ``bound_s`` of the tightest latency constraint, ``batch_s`` (mean processing time of
    the view's window's batches), ``trigger_s``, ``backlog_growth`` (seconds of work per second) and
    ``max_mean_load`` (latest partitioned batch), ``batches`` (completed in the window), ``rate_rows_s``
    (arrival rate over the window, rows/s)."""
    out: dict = {}
    if view.constraints:
        c = min(view.constraints, key=lambda k: k.bound_s)
        out["bound_s"] = c.bound_s
        if c.latency_s is not None:
            out["latency_s"] = c.latency_s
    since = view.since_ms(view.window_s)
    recent = [b for b in view.batches if b.trigger_ms >= since]
    out["batches"] = len(recent)
    if recent:
        out["batch_s"] = sum(b.processing_s for b in recent) / len(recent)
        rate = arrival_rate(view)
        if rate:
            out["rate_rows_s"] = rate
    t = view.trigger_interval_s()
    if t:
        out["trigger_s"] = t
    if view.live is not None:
        g = view.live.backlog_growth_ratio()
        if g is not None:
            out["backlog_growth"] = g
    loads = [p.max_mean_load for p in view.partition_stats if p.max_mean_load is not None]
    if loads:
        out["max_mean_load"] = loads[-1]
    return out


def _keeps_up(s: dict, growth_limit: float) -> Optional[bool]:
    """True: batches within the trigger interval and no growing backlog; False: batches beyond it and the
    backlog growing (or not measured); None: unknown or in between."""
    batch, trigger, growth = s.get("batch_s"), s.get("trigger_s"), s.get("backlog_growth")
    if batch is None or trigger is None:
        return None
    growing = None if growth is None else growth >= growth_limit
    if batch <= trigger and not growing:
        return True
    if batch > trigger and growing is not False:
        return False
    return None


def confounders(knob: str, old, new, load_tolerance: float = 0.1) -> dict:
    """:func:`judge_harm`'s keywords for a change of ``knob`` from ``old`` to ``new`` (module docstring):
    ``capacity_added`` for more executors, ``load_tolerance`` only for knobs in :data:`RATE_NEUTRAL_KNOBS`."""
    numeric = isinstance(old, (int, float)) and isinstance(new, (int, float))
    return {"capacity_added": knob == "executors" and numeric and new > old,
            "load_tolerance": load_tolerance if knob in RATE_NEUTRAL_KNOBS else None}


def judge_harm(before: dict, after: dict, *, backlog_growth: float = 0.05, balance_fraction: float = 0.1,
               capacity_added: bool = False, load_tolerance: Optional[float] = 0.1) -> list[str]:
    """The ways the job got measurably worse from ``before`` to ``after`` (two :func:`snapshot` s), in
    words with the numbers; empty when none. ``capacity_added``: the action added capacity (more
    executors); ``load_tolerance``: the arrival-rate rise (fraction) beyond which latency and throughput
    are the load's (module docstring; None: never)."""
    evidence = []
    mb, ma = before.get("max_mean_load"), after.get("max_mean_load")
    if mb is not None and ma is not None and ma > mb * (1 + balance_fraction):
        evidence.append(f"balance worse: max/mean load {ma:.3f} (before {mb:.3f})")
    rb, ra = before.get("rate_rows_s"), after.get("rate_rows_s")
    if capacity_added or (load_tolerance is not None and rb and ra and ra > rb * (1 + load_tolerance)):
        return evidence
    bound = after.get("bound_s", before.get("bound_s"))
    lb, la = before.get("latency_s"), after.get("latency_s")
    if bound is not None and lb is not None and la is not None and lb <= bound < la and la > lb:
        evidence.append(f"SLO violated: latency {la:.2f} s > bound {bound:.2f} s (it held before: {lb:.2f} s)")
    kb, ka = _keeps_up(before, backlog_growth), _keeps_up(after, backlog_growth)
    if kb is True and ka is False and after.get("batches", MIN_BATCHES) >= MIN_BATCHES:
        growth = after.get("backlog_growth")
        evidence.append(f"falls behind: batches take {after['batch_s']:.2f} s against a {after['trigger_s']:.2f} s "
                        f"trigger (before {before['batch_s']:.2f} s)"
                        + (f", backlog grows by {growth:.2f} s of work per second" if growth is not None else ""))
    return evidence


def verification(effective: Optional[bool], harm: list[str], rollback: bool) -> str:
    """``rolled-back`` (harmful, rollback on), ``harmful`` (harmful, rollback off), ``ineffective``
    (``effective`` is False) or ``verified``."""
    if harm:
        return "rolled-back" if rollback else "harmful"
    return "ineffective" if effective is False else "verified"
