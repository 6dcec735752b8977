"""Evaluate → decide → realize, once per evaluation interval for every job with enabled policies.

For each enabled policy of a job: collect its ``JobView`` (aggregators.view), let the policy
evaluate it, pass each proposal through the shared safety rules (policies.safety), persist the
decision, and — in ``act`` mode, for an actuatable knob — issue a new directive version in the
same transaction (the decision row is written first). A knob the job cannot actuate (executors in
``local[*]``) keeps the decision as a recommendation with status ``not_actuatable``, in either mode.
Only active jobs are evaluated (``aggregators.job_state``): a job that stopped reporting, or whose
streaming queries all terminated, gets no decisions.

Effectiveness: ``effectiveness_intervals`` evaluation intervals after a decision was applied, the
policy's ``observe`` is compared with the decision's prediction (``judge_effect``); ineffective
scale-ups in a row put the knob on hold (an event, the API and ``/metrics`` show it). The
decision's ``outcome`` then also holds its latency prediction error (:func:`prediction_error`).

Verification (``policies.verification``): at the same time, the job's health after the change (from
the change on) is compared with its health when the decision was taken (``inputs.health_before``). A
change that made the job measurably worse is rolled back to the previous value by a new decision and
directive (``inputs.rollback_of``), marked ``rolled-back`` with the evidence in its outcome, and the
same change is refused for the policy's ``rollback_cooloff_s``. A decision is verified once the
quantities measured before are measured again (at most ``VERIFY_WAIT_INTERVALS`` intervals late).
Only the knob's latest change is rolled back: once a newer decision moved the knob again, harm is
reported (``harmful``), not undone.

Before the policies run, the job's cluster profile (``aggregators.cluster_profile``: provisioning
delay, executor warm-up, driver overhead) is measured and stored; the views carry it.

One job's or one policy's failure is recorded as a ``policy_error`` event and never stops the
others.
"""
from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field

from sqlalchemy import func, select, update
from sqlalchemy.engine import Engine
from sqlalchemy.exc import InterfaceError, OperationalError

from spark_governor.aggregators import cluster_profile
from spark_governor.aggregators import directives as repo
from spark_governor.aggregators.job_state import STOPPED_AFTER_S, job_state
from spark_governor.aggregators.models import batches, decisions, jobs, policy_configs
from spark_governor.aggregators.view import build_view
from spark_governor.policies.registry import get_policy, validate_config
from spark_governor.policies.safety import guard, judge_effect, next_history
from spark_governor.policies.verification import confounders, judge_harm, snapshot, verification

log = logging.getLogger("spark_governor.governor")
#: errors that mean the database is unreachable, not that one job or policy failed
DATABASE_DOWN = (OperationalError, InterfaceError)

#: a decision whose effect cannot be measured yet is judged at the latest this many evaluation
#: intervals after its effectiveness window (then with what is measured)
VERIFY_WAIT_INTERVALS = 20


@dataclass
class Governor:
    engine: Engine
    evaluation_interval_s: float = 10.0
    window_ms: int = 5000
    stopped_after_s: float = STOPPED_AFTER_S  # aggregators.job_state: stopped jobs get no decisions
    # evaluate a job at once when its probed arrival rate rose by this share since (api.surge_watch);
    # None: only every evaluation interval
    surge_ratio: float | None = 0.25
    # one job evaluation at a time per process (the scheduler's runs, a surge's, the API's)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def evaluate_all(self, now_ms: int | None = None) -> None:
        with self.engine.connect() as conn:
            job_ids = [r.job_id for r in conn.execute(
                select(policy_configs.c.job_id).where(policy_configs.c.enabled).distinct())]
        for job_id in job_ids:
            try:
                self.evaluate_job(job_id, now_ms)
            except DATABASE_DOWN:
                raise  # the database is gone: the scheduler counts the skipped evaluation (api.scheduler)
            except Exception as exc:  # never let one job stop the others
                log.exception("evaluating job %s failed", job_id)
                with self.engine.begin() as conn:
                    repo.record_event(conn, job_id, "policy_error", f"evaluation failed: {exc!r}",
                                      int(time.time() * 1000))

    def evaluate_job(self, job_id: int, now_ms: int | None = None) -> list[int]:
        """Evaluate every enabled policy of one job; returns the ids of new decisions. A job that is not
        active (``aggregators.job_state``: stopped, or never reported) is not evaluated."""
        with self.lock:
            return self._evaluate_job(job_id, now_ms)

    def _evaluate_job(self, job_id: int, now_ms: int | None) -> list[int]:
        now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        created: list[int] = []
        with self.engine.connect() as conn:
            row = conn.execute(select(jobs).where(jobs.c.id == job_id)).one()
            if not job_state(conn, row, now_ms, self.stopped_after_s).active:
                return created  # registered (never reported) or stopped: nothing to decide about
            job = row.name
            configs = conn.execute(select(policy_configs).where(policy_configs.c.job_id == job_id,
                                                                policy_configs.c.enabled)).all()
        try:  # what the job taught about its cluster, for the policies' views (never stops them)
            with self.engine.begin() as conn:
                cluster_profile.refresh(conn, job, job_id, now_ms,
                                        min_interval_s=cluster_profile.refresh_interval_s(conn, job_id, now_ms))
        except Exception:
            log.exception("cluster profile of job %s failed", job)
        for pc in configs:
            try:
                created += self._evaluate_policy(job_id, job, pc, now_ms)
            except DATABASE_DOWN:
                raise
            except Exception as exc:
                log.exception("policy %s of job %s failed", pc.policy, job)
                with self.engine.begin() as conn:
                    repo.record_event(conn, job_id, "policy_error", f"{exc.__class__.__name__}: {exc}", now_ms,
                                      policy=pc.policy)
        return created

    def _evaluate_policy(self, job_id: int, job: str, pc, now_ms: int) -> list[int]:
        cls = get_policy(pc.policy)
        cfg = validate_config(cls, pc.config)
        policy = cls()
        span_s = max(self.evaluation_interval_s * cfg.effectiveness_intervals,
                     getattr(cfg, "scaling_interval_s", 0) or 0, self.window_ms / 1000.0)
        created = []
        with self.engine.begin() as conn:
            view = build_view(conn, job, span_s, self.window_ms, now_ms)
            self._judge_applied(conn, job_id, policy, cfg, view, now_ms)
            for p in policy.evaluate(view, cfg):
                if p.knob not in cls.knobs:
                    raise ValueError(f"policy {cls.name} proposed knob {p.knob!r} it does not own")
                current = view.current(p.knob)
                history = repo.knob_history(conn, job_id, p.knob)
                g = guard(p.value, current, cfg, history, now_ms, self.evaluation_interval_s)
                if g.value is None:
                    if g.note and g.note.startswith("held"):
                        repo.record_event(conn, job_id, "hold", f"{p.knob}: {g.note} ({p.reason})", now_ms, cls.name)
                    continue
                if self._cooling_off(conn, job_id, p.knob, g.value, now_ms, cfg.rollback_cooloff_s):
                    continue  # the same change was rolled back within the cool-off
                reason = p.reason + (f" [{g.note}]" if g.note else "")
                not_actuatable = view.not_actuatable.get(p.knob)
                if not_actuatable:  # a recommendation, in either mode: it can be neither issued nor approved
                    status, message = "not_actuatable", f"not actuatable: {not_actuatable}"
                elif pc.mode != "act":
                    status, message = "recorded", "dry-run"
                else:
                    status, message = "issued", None
                decision_id = repo.record_decision(
                    conn, job_id=job_id, policy=cls.name, knob=p.knob, old_value=current, new_value=g.value,
                    reason=reason, inputs={**p.inputs, "health_before": snapshot(view)}, prediction=p.prediction,
                    mode=pc.mode, status=status, status_message=message, created_ms=now_ms)
                if status == "issued":
                    self.issue(conn, job_id, decision_id, p.knob, current, g.value, now_ms)
                created.append(decision_id)
        return created

    @staticmethod
    def issue(conn, job_id: int, decision_id: int, knob: str, old, new, now_ms: int) -> int:
        """Realize a persisted decision as the next directive version."""
        version = repo.issue_directive(conn, job_id, knob, new, decision_id, now_ms)
        conn.execute(update(decisions).where(decisions.c.id == decision_id).values(
            directive_version=version, status="issued"))
        direction = 0
        if isinstance(old, (int, float)) and isinstance(new, (int, float)):
            direction = 1 if new > old else -1
        repo.save_knob_history(conn, job_id, knob,
                               next_history(repo.knob_history(conn, job_id, knob), changed_ms=now_ms,
                                            direction=direction))
        return version

    @staticmethod
    def _cooling_off(conn, job_id: int, knob: str, value, now_ms: int, cooloff_s: float) -> bool:
        """Was the change of ``knob`` to ``value`` rolled back within the last ``cooloff_s`` seconds?"""
        if cooloff_s <= 0:
            return False
        rows = conn.execute(select(decisions.c.new_value, decisions.c.outcome).where(
            decisions.c.job_id == job_id, decisions.c.knob == knob,
            decisions.c.outcome_ms >= now_ms - int(cooloff_s * 1000))).all()
        return any((r.outcome or {}).get("verification") == "rolled-back" and r.new_value == value for r in rows)

    def _verify(self, conn, job_id: int, job: str, d, cfg, now_ms: int) -> tuple[str, list[str], dict, dict] | None:
        """The job's health since decision ``d`` took effect vs before it: (verification, evidence, before,
        after); None while what was measured before is not measured again yet (and the wait is not over)."""
        before = (d.inputs or {}).get("health_before") or {}
        late = now_ms - d.applied_ms > (cfg.effectiveness_intervals + VERIFY_WAIT_INTERVALS) * self.evaluation_interval_s * 1000
        # judged on what ran under the new value: from the first micro-batch triggered after it took effect
        first = conn.execute(select(func.min(batches.c.trigger_ms)).where(
            batches.c.job_id == job_id, batches.c.trigger_ms >= d.applied_ms)).scalar()
        if first is None and not late and ("batch_s" in before or "latency_s" in before):
            return None
        since_ms = d.applied_ms if first is None else first
        after_view = build_view(conn, job, max((now_ms - since_ms) / 1000.0, self.window_ms / 1000.0),
                                self.window_ms, now_ms)
        after = snapshot(after_view)
        unmeasured = any(k in before and k not in after for k in ("latency_s", "batch_s", "max_mean_load"))
        if not late and unmeasured:
            return None
        harm = judge_harm(before, after, **confounders(d.knob, d.old_value, d.new_value))
        latest = next((x for x in repo.current_directives(conn, job_id) if x["knob"] == d.knob), None)
        rollback = (cfg.rollback and d.mode == "act" and not (d.inputs or {}).get("rollback_of")
                    and d.old_value is not None and latest is not None and latest["decision_id"] == d.id)
        return verification(None, harm, rollback), harm, before, after

    def _roll_back(self, conn, job_id: int, policy: str, d, harm: list[str], after: dict, now_ms: int) -> int:
        """Undo decision ``d``: a new decision back to its old value, issued at once (no cool-down)."""
        reason = f"rollback of decision {d.id} ({d.old_value} → {d.new_value}): " + "; ".join(harm)
        decision_id = repo.record_decision(
            conn, job_id=job_id, policy=policy, knob=d.knob, old_value=d.new_value, new_value=d.old_value,
            reason=reason, inputs={"rollback_of": d.id, "evidence": harm, "health_before": after}, prediction={},
            mode="act", status="issued", status_message=None, created_ms=now_ms)
        self.issue(conn, job_id, decision_id, d.knob, d.new_value, d.old_value, now_ms)
        repo.record_event(conn, job_id, "rollback", reason, now_ms, policy)
        return decision_id

    def _judge_applied(self, conn, job_id: int, policy, cfg, view, now_ms: int) -> None:
        due = now_ms - int(cfg.effectiveness_intervals * self.evaluation_interval_s * 1000)
        for d in conn.execute(select(decisions).where(
                decisions.c.job_id == job_id, decisions.c.policy == policy.name, decisions.c.status == "applied",
                decisions.c.outcome_ms.is_(None), decisions.c.applied_ms <= due)).all():
            verified = self._verify(conn, job_id, view.job, d, cfg, now_ms)
            if verified is None:
                continue  # not measurable yet
            observed = policy.observe(view, d.knob, cfg)
            effective = judge_effect(d.inputs or {}, d.prediction or {}, observed, cfg.effective_fraction)
            outcome = {"observed": observed, "predicted": d.prediction}
            error = prediction_error(d.prediction or {}, observed)
            if error is not None:
                outcome["prediction_error"] = error
            word, harm, before, after = verified
            if word == "verified" and effective is False:
                word = "ineffective"
            outcome.update(verification=word, evidence=harm, health_before=before, health_after=after)
            if word == "rolled-back":
                outcome["rollback_decision"] = self._roll_back(conn, job_id, policy.name, d, harm, after, now_ms)
            conn.execute(update(decisions).where(decisions.c.id == d.id).values(
                outcome=outcome, effective=effective, outcome_ms=now_ms))
            scale_up = isinstance(d.new_value, (int, float)) and isinstance(d.old_value, (int, float)) \
                and d.new_value > d.old_value
            if scale_up and effective is not None:
                before = repo.knob_history(conn, job_id, d.knob)
                after = next_history(before, effective=effective, cfg=cfg)
                repo.save_knob_history(conn, job_id, d.knob, after)
                if after.held and not before.held:
                    repo.record_event(conn, job_id, "hold", f"{d.knob}: scale-ups held after "
                                      f"{after.consecutive_ineffective_ups} ineffective ones", now_ms, policy.name)


def prediction_error(prediction: dict, observed: dict) -> dict | None:
    """The decision's latency prediction against the latency measured once it took effect:
    ``{"predicted_latency_s", "measured_latency_s", "rel": (predicted − measured) / measured,
    "abs_rel": |rel|}``; None when either is missing or the measured latency is not positive."""
    p, m = prediction.get("latency_s"), observed.get("latency_s")
    if not isinstance(p, (int, float)) or not isinstance(m, (int, float)) or m <= 0:
        return None
    rel = (p - m) / m
    return {"predicted_latency_s": float(p), "measured_latency_s": float(m), "rel": rel, "abs_rel": abs(rel)}
