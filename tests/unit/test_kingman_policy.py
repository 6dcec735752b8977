"""The Kingman executor policy on hand-built job views: model mapping, decisions, predictions."""
import math

import pytest

from spark_governor.policies.base import BatchStats, ConstraintStats, JobView, StageStats
from spark_governor.policies.kingman import KingmanPolicy, vertex_model
from spark_governor.policies.kingman_config import KingmanConfig
from spark_governor.policies.queueing import kingman_wait

NOW = 1_000_000_000


def stage(rho=0.8, S=1.0, p=4, max_tasks=16, w=None, windows=3, key="s1", cA=1.0, cS=1.0):
    w = kingman_wait(S, S / rho, cA, cS) if w is None else w
    return StageStats(key=key, name=key, tasks=100, service_mean_s=S, latency_mean_s=S + w, utilization=rho,
                      parallelism=p, records_in_per_second=None, utilization_windows=(rho,) * windows,
                      service_cv=cS, arrival_cv=cA, wait_mean_s=w, max_tasks=max_tasks, span_s=30.0)


def view(stages, constraints, executors=4, slots=None, batches=()):
    return JobView(job="j", now_ms=NOW, window_s=30.0, stages=tuple(stages), batches=tuple(batches),
                   executors=executors, slots=slots if slots is not None else executors,
                   constraints=tuple(constraints))


def constraint(latency_s, bound_s, name="c1", vertices=None):
    return ConstraintStats(name=name, vertices=vertices, bound_s=bound_s, span_s=5.0, latency_s=latency_s)


# the literal model mapping (measured c_A, no scale-down margin); the Spark extensions that
# are on by default (bulk c_A, scale-down margin, spare, waves) have their own tests in test_kingman_rules.py
CFG = KingmanConfig(trigger_interval_s=10.0, min_value=1, max_value=64, bulk_arrivals=False, scale_down_margin=0,
                    spare_executors=0,
                    wave_sizing=False)  # the thesis' sizes (the oracle); waves: test_kingman_waves.py


def smallest_meeting(models, fixed, bound, spe=1, hi=64):
    """Brute force: the fewest executors, each stage at or under its 90 % utilization floor, whose
    predicted latency meets the bound."""
    for n in range(1, hi + 1):
        lat, _ = KingmanPolicy.predict(models, fixed, n, spe)
        if lat is not None and lat <= bound and all(min(n * spe, m.p_max) >= m.floor() for m in models):
            return n
    return None


def test_stage_statistics_map_onto_the_gg1_model():
    m = vertex_model(stage(rho=0.8, S=2.0, p=4, w=20.0), CFG)
    assert (m.p, m.S, m.p_max) == (4, 2.0, 16) and m.A == pytest.approx(2.5)
    assert m.utilization == pytest.approx(0.8)
    # Kingman at p: 2·0.8/0.2·1 = 8 s; measured 20 s → e = 2.5 (the authors' code would clamp it to 1.2)
    assert m.kingman_unfitted == pytest.approx(8.0) and m.e == pytest.approx(2.5)
    assert vertex_model(stage(rho=0.8, S=2.0, p=4, w=9.6), CFG).e == pytest.approx(1.2)
    assert vertex_model(stage(rho=0.8, S=2.0, p=4, w=200.0), CFG).e == pytest.approx(10.0)  # clamped (E_CLAMP)
    assert vertex_model(stage(rho=0.8, S=2.0, p=4, w=8.0), CFG).e == pytest.approx(1.0)


def test_violated_constraint_scales_up_to_the_fewest_executors_that_meet_it():
    # W(4) = 4 s measured, L = 6 s → fixed part 2 s; bound 3 s → W(p*) = 4/(1.25p* − 4) ≤ 1 → p* = 7
    v = view([stage()], [constraint(6.0, 3.0)])
    (p,) = KingmanPolicy().evaluate(v, CFG)
    assert p.value == 7
    models = [vertex_model(stage(), CFG)]
    assert smallest_meeting(models, 2.0, 3.0) == 7
    assert p.prediction["latency_s"] == pytest.approx(2.0 + 4 / (1.25 * 7 - 4))
    assert p.prediction["constraints"] == {"c1": pytest.approx(2.0 + 4 / (1.25 * 7 - 4))}
    assert p.prediction["utilization"] == pytest.approx(0.8 * 4 / 7)
    assert p.inputs["latency_s"] == 6.0 and p.inputs["infeasible"] == []
    assert p.inputs["plan"]["constraints"]["c1"]["feasible"] is True


def test_over_provisioned_job_scales_down_one_executor_at_a_time():
    # ρ = 0.4 → W(4) = 2/3 s; L = 1.5 s; bound 3 s → plan 3 executors (floor 2)
    s = stage(rho=0.4)
    (p,) = KingmanPolicy().evaluate(view([s], [constraint(1.5, 3.0)], executors=4), CFG)
    assert p.value == 3
    assert KingmanPolicy().plan(view([s], [constraint(1.5, 3.0)], executors=4), CFG)["executors"] == 3
    # from 6 executors the plan is still 3 (scaled model), but the step is one
    s6 = stage(rho=0.4 * 4 / 6, p=6)
    (p,) = KingmanPolicy().evaluate(view([s6], [constraint(1.5, 3.0)], executors=6), CFG)
    assert p.value == 5


def test_bottleneck_doubles_and_overrunning_batches_count_as_one():
    (p,) = KingmanPolicy().evaluate(view([stage(rho=0.995)], [constraint(6.0, 3.0)]), CFG)
    assert p.value == 8 and p.reason.startswith("bottleneck")
    # stage utilization fine but every batch overran its 10 s trigger by 30 %
    batches = [BatchStats(i, NOW - 20_000 + i * 1000, 13.0, 100, None, None) for i in range(5)]
    (p,) = KingmanPolicy().evaluate(view([stage(rho=0.5)], [constraint(6.0, 30.0)], batches=batches), CFG)
    assert p.value == math.ceil(2 * 4 * 1.3) and p.inputs["plan"]["constraints"]["c1"]["bottleneck"]


def test_infeasible_constraint_asks_for_p_max_and_says_so():
    (p,) = KingmanPolicy().evaluate(view([stage()], [constraint(6.0, 2.0)]), CFG)
    assert p.value == 16 and p.inputs["infeasible"] == ["c1"] and "infeasible" in p.reason


def test_warm_up_and_missing_data_mean_no_decision():
    assert KingmanPolicy().evaluate(view([stage(windows=1)], [constraint(6.0, 3.0)]), CFG) == []
    assert KingmanPolicy().evaluate(view([stage()], [constraint(None, 3.0)]), CFG) == []
    assert KingmanPolicy().evaluate(view([stage()], []), CFG) == []


def test_slots_per_executor_and_several_constraints_share_one_pool():
    a, b = stage(key="a"), stage(key="b", rho=0.4)
    cons = [constraint(6.0, 3.0, "tight", ("a",)), constraint(1.5, 3.0, "loose", ("b",))]
    plan = KingmanPolicy().plan(view([a, b], cons, executors=2, slots=4), CFG)
    assert plan["slots_per_executor"] == 2
    assert plan["constraints"]["tight"]["slots"] == 7 and plan["constraints"]["loose"]["slots"] == 3
    assert plan["executors"] == 4  # max over constraints of ceil(slots / 2)


@pytest.mark.parametrize("seed", range(40))
def test_decision_equals_brute_force_on_random_single_stage_jobs(seed):
    import random

    rng = random.Random(seed)
    p = rng.randint(2, 12)
    rho = rng.uniform(0.3, 0.95)
    S = rng.uniform(0.1, 3.0)
    st = stage(rho=rho, S=S, p=p, max_tasks=rng.randint(p, 40), cA=rng.uniform(0.2, 2), cS=rng.uniform(0.2, 2))
    m = vertex_model(st, CFG)
    fixed = rng.uniform(0.5, 5.0)
    latency = fixed + m.wait(p)
    bound = fixed + m.wait(p) * rng.uniform(0.1, 3.0)
    plan = KingmanPolicy().plan(view([st], [constraint(latency, bound)], executors=p), CFG)
    expected = smallest_meeting([m], fixed, bound, hi=m.p_max)
    if plan["constraints"]["c1"]["feasible"]:
        assert plan["executors"] == expected
    else:
        assert expected is None and plan["executors"] == m.p_max


# -- through the control plane: reports → statistics → constraint → decision ----------------------
def test_governor_decides_from_reported_statistics_and_a_declared_constraint(sqlite_url):
    import time

    from spark_governor.aggregators import db
    from spark_governor.api.app import Settings, create_app
    from spark_governor.api.auth import store_tokens
    from spark_governor.bench.reports import gz

    db.upgrade(sqlite_url)
    eng = db.make_engine(sqlite_url)
    store_tokens(eng, {"ops": "t"})
    app = create_app(eng, Settings(window_ms=5000, evaluation_interval_s=10))
    c = app.test_client()
    auth = {"Authorization": "Bearer t"}
    now = int(time.time() * 1000)
    start = now - now % 5000 - 60_000
    tasks, batches, stages, tid = [], [], [], 0
    for b in range(12):  # a batch every 5 s: 4 tasks of 1.5 s on 2 slots (two waves: wait 0 or 1.5 s)
        sub = start + b * 5000
        for part in range(4):
            launch = sub + (part // 2) * 1500
            tasks.append({"template_key": "t-agg", "query_id": "q", "batch_id": b, "stage_id": b, "stage_attempt": 0,
                          "task_id": tid, "partition": part, "attempt": 0, "executor_id": str(part % 2 + 1),
                          "stage_submission_ms": sub, "launch_ms": launch, "finish_ms": launch + 1500,
                          "run_time_ms": 1500, "input_records": 100})
            tid += 1
        stages.append({"template_key": "t-agg", "query_id": "q", "batch_id": b, "stage_id": b, "attempt": 0,
                       "num_tasks": 4, "submission_ms": sub, "completion_ms": sub + 3000, "slots": 2})
        batches.append({"query_id": "q", "run_id": "run", "batch_id": b, "trigger_ms": sub, "batch_duration_ms": 3000,
                        "durations_ms": {"triggerExecution": 3000}, "num_input_rows": 400, "state_operators": [],
                        "event_time": {}, "observed_metrics": {}})
    for job in ("kj", "kj-tight"):
        rep = {"schema_version": 1, "job": job, "reporter": {"id": job, "seq": 1, "slots": 2, "executors": 2,
                                                              "master": "spark://127.0.0.1:7077"},
               "templates": [{"key": "t-agg", "name": "agg", "ordinal": 0}], "stages": stages, "tasks": tasks,
               "batches": batches}
        assert c.post("/api/v1/reports", data=gz(rep), headers={"Content-Encoding": "gzip"}).status_code == 200
    r = c.put("/api/v1/jobs/kj/policies/kingman?register=true", json={"mode": "act", "config": {"max_utilization": 1.5}},
              headers=auth)
    assert r.status_code == 400 and "max_utilization" in r.json["error"]
    r = c.put("/api/v1/jobs/kj/policies/kingman?register=true", json={"mode": "act", "config": {"e_clamp_low": 0.5}},
              headers=auth)  # an option issue #44 removed
    assert r.status_code == 400 and "e_clamp_low" in r.json["error"]
    assert c.put("/api/v1/jobs/kj/constraints/e2e?register=true", json={"bound_ms": 4500}, headers=auth).status_code == 200
    assert c.put("/api/v1/jobs/kj/policies/kingman?register=true", headers=auth,
                 json={"mode": "act", "config": {"trigger_interval_s": 5.0, "max_value": 8}}).status_code == 200
    from sqlalchemy import select

    from spark_governor.aggregators.models import decisions, jobs
    with eng.connect() as conn:
        job_id = conn.execute(select(jobs.c.id).where(jobs.c.name == "kj")).scalar()
    (did,) = app.extensions["spark_governor.governor"].evaluate_job(job_id, now)
    (d,) = c.get("/api/v1/jobs/kj/decisions").json["decisions"]
    assert d["policy"] == "kingman" and d["old_value"] == 2 and d["new_value"] > 2 and d["status"] == "issued"
    plan = d["inputs"]["plan"]["constraints"]["e2e"]
    # measured: latency = 5 s / 2 (trigger gap) + 3 s processing = 5.5 s > 4.5 s; queueing in the batch =
    # makespan 3 s − service 1.5 s; utilization 4 × 1.5 s busy / (2 slots × 5 s) = 0.6
    assert d["inputs"]["latency_s"] == pytest.approx(5.5)
    assert plan["stages"]["t-agg"]["rho"] == pytest.approx(0.6) and plan["stages"]["t-agg"]["w"] == pytest.approx(1.5)
    assert d["prediction"]["latency_s"] <= 4.5 and d["prediction"]["constraints"]["e2e"] <= 4.5
    assert c.get("/api/v1/jobs/kj/directives").json["directives"][0]["value"] == d["new_value"]
    status = c.get("/api/v1/jobs/kj/constraints/e2e?spans=20").json
    assert status["feasible"] is True and status["spans"] and status["spans"][-1]["predicted_latency_ms"] is None
    # the driver applies it; three evaluation intervals later the effect is judged against the prediction
    ack = {"schema_version": 1, "job": "kj", "reporter": {"id": "kj", "seq": 2, "slots": d["new_value"],
                                                           "executors": d["new_value"], "applied": [
        {"knob": "executors", "version": 1, "status": "applied"}]}}
    assert c.post("/api/v1/reports", data=gz(ack), headers={"Content-Encoding": "gzip"}).status_code == 200
    with eng.begin() as conn:  # as if applied 31 s ago
        conn.execute(decisions.update().values(applied_ms=now - 31_000))
    app.extensions["spark_governor.governor"].evaluate_job(job_id, now)
    judged = c.get("/api/v1/jobs/kj/decisions").json["decisions"][-1]
    assert judged["outcome"]["predicted"]["latency_s"] == d["prediction"]["latency_s"]
    assert judged["outcome"]["observed"]["latency_s"] == pytest.approx(5.5)
    pe = judged["outcome"]["prediction_error"]  # per decision: |predicted − measured| / measured
    assert pe["measured_latency_s"] == pytest.approx(5.5)
    assert pe["abs_rel"] == pytest.approx(abs(d["prediction"]["latency_s"] - 5.5) / 5.5)
    running = c.get("/api/v1/jobs/kj/cluster").json["prediction_error"]  # the running figure
    assert running["samples"] == 1 and running["mean_abs_rel"] == pytest.approx(pe["abs_rel"])
    metrics = c.get("/metrics").get_data(as_text=True)
    err = (5.5 - d["prediction"]["latency_s"]) / d["prediction"]["latency_s"]
    assert f'spark_governor_model_prediction_error_ratio{{policy="kingman",quantity="latency_s",spark_job="kj"}} {err}' in metrics
    assert 'spark_governor_constraint_bound_seconds{constraint="e2e",spark_job="kj"} 4.5' in metrics
    assert 'spark_governor_constraint_latency_seconds{constraint="e2e",spark_job="kj"} 5.5' in metrics
    assert 'spark_governor_constraint_attainment_ratio{constraint="e2e",spark_job="kj"} 0.0' in metrics
    assert 'spark_governor_constraint_feasible{constraint="e2e",spark_job="kj"} 1.0' in metrics
    # a bound below the fixed part of the latency cannot be met: the decision and the API say so
    assert c.put("/api/v1/jobs/kj-tight/constraints/e2e?register=true", json={"bound_ms": 1000}, headers=auth).status_code == 200
    assert c.put("/api/v1/jobs/kj-tight/policies/kingman?register=true", headers=auth,
                 json={"mode": "act", "config": {"trigger_interval_s": 5.0, "max_value": 8}}).status_code == 200
    with eng.connect() as conn:
        tight_id = conn.execute(select(jobs.c.id).where(jobs.c.name == "kj-tight")).scalar()
    app.extensions["spark_governor.governor"].evaluate_job(tight_id, now)
    (latest,) = c.get("/api/v1/jobs/kj-tight/decisions").json["decisions"]
    assert latest["inputs"]["infeasible"] == ["e2e"] and "infeasible" in latest["reason"]
    assert latest["new_value"] == 4  # p_max: the stage has 4 tasks, one slot per executor
    assert c.get("/api/v1/jobs/kj-tight/constraints/e2e").json["feasible"] is False
    eng.dispose()


def test_utilization_is_the_span_work_at_the_current_parallelism():
    # 2.4 busy slots over the span; the stage ran at 4 slots last (earlier windows at 2) → ρ = 0.6
    s = StageStats(key="s", name="s", tasks=10, service_mean_s=1.0, latency_mean_s=1.5, utilization=0.9,
                   parallelism=4, records_in_per_second=None, utilization_windows=(1.0, 0.9, 0.6), wait_mean_s=0.5,
                   max_tasks=8, busy_slots=2.4)
    assert vertex_model(s, CFG).utilization == pytest.approx(0.6)


def test_bottleneck_doubles_the_current_pool_and_never_scales_down():
    # the stage ran busy on all 6 slots of the pool: Eq. 4.12 doubles the pool
    st = stage(rho=0.995, p=6, max_tasks=32)
    plan = KingmanPolicy().plan(view([st], [constraint(6.0, 3.0)], executors=6), CFG)
    assert plan["constraints"]["c1"]["slots"] == 12
    # the same busy fraction from a long batch on 1 slot from before a scale-up to 6: ρ on the pool is 0.17
    late = KingmanPolicy().plan(view([stage(rho=0.995, p=1, max_tasks=32)], [constraint(6.0, 3.0)], executors=6), CFG)
    assert not late["constraints"]["c1"]["bottleneck"]
    # a bottleneck plan below the current size must not release executors (4 tasks, all busy, 6 executors)
    capped = stage(rho=0.995, p=4, max_tasks=4)
    assert KingmanPolicy().evaluate(view([capped], [constraint(6.0, 3.0)], executors=6), CFG) == []
