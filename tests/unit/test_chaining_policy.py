"""The ``chaining`` policy over a JobView: which optional exchanges it removes or puts back."""
import pytest

from spark_governor.policies.base import BatchStats, DirectiveState, JobView, StageStats
from spark_governor.policies.chaining_policy import ChainingConfig, ChainingPolicy, current_stages, merged_rhos
from spark_governor.policies.chaining import Boundary

NOW = 1_000_000


def stage(ordinal, rho_max, busy, tasks, key=None, seen=NOW - 500):
    return StageStats(key=key or f"t{ordinal}", name=f"s{ordinal}", tasks=10, service_mean_s=0.1, latency_mean_s=0.2,
                      utilization=rho_max, parallelism=tasks, records_in_per_second=100.0, max_tasks=tasks,
                      span_s=10.0, busy_slots=busy, ordinal=ordinal, utilization_max=rho_max, last_seen_ms=seen)


def view(stages, exchanges, directives=None, last_decision=None):
    return JobView(job="j", now_ms=NOW, window_s=10.0, stages=tuple(stages),
                   batches=tuple(BatchStats(b, NOW - 2000 * (8 - b), 0.5, 100, 50.0, 200.0) for b in range(8)),
                   directives=directives or {}, last_decision_ms=last_decision or {},
                   knob_state={"exchanges": {"exchanges": exchanges}})


CFG = ChainingConfig()


def test_light_stages_are_chained():
    # scan stage (2 partitions) → optional exchange → 6-partition map stage → required shuffle → state stage
    v = view([stage(0, 0.10, 0.15, 2), stage(1, 0.05, 0.24, 6), stage(2, 0.08, 0.2, 4)],
             [{"name": "spread", "partitions": 6, "removed": False, "stage": 0}])
    [p] = ChainingPolicy().evaluate(v, CFG)
    assert p.knob == "exchanges" and p.value == {"spread": "removed"}
    # the map stage's work, fused into the scan's 2 partitions: 0.24 / 2
    assert p.inputs["rho_at_merged_partitions"] == pytest.approx([0.10, 0.12, 0.08])
    assert p.prediction == {"chain.0+1.utilization": pytest.approx(0.22)}


def test_heavy_pair_keeps_its_exchange():
    v = view([stage(0, 0.5, 1.0, 2), stage(1, 0.3, 1.0, 6), stage(2, 0.1, 0.1, 4)],
             [{"name": "spread", "partitions": 6, "removed": False, "stage": 0}])
    # 0.5 + 1.0/2 = 1.0 > 0.9: fusing would create a bottleneck
    assert ChainingPolicy().evaluate(v, CFG) == []


def test_literal_mode_refuses_equal_loads_recommended_chains():
    v = view([stage(0, 0.3, 0.6, 2), stage(1, 0.1, 0.6, 6)],
             [{"name": "spread", "partitions": 6, "removed": False, "stage": 0}])
    assert ChainingPolicy().evaluate(v, ChainingConfig(mode="literal")) == []  # digest D3: stdVar 0
    [p] = ChainingPolicy().evaluate(v, CFG)
    assert p.value == {"spread": "removed"}


def test_fused_stage_above_bound_is_unchained():
    v = view([stage(0, 0.95, 1.9, 2), stage(1, 0.1, 0.2, 4)],
             [{"name": "spread", "partitions": 6, "removed": True, "stage": 0}])
    [p] = ChainingPolicy().evaluate(v, CFG)
    assert p.value == {"spread": "present"} and "unchain spread" in p.reason
    v = view([stage(0, 0.85, 1.7, 2), stage(1, 0.1, 0.2, 4)],
             [{"name": "spread", "partitions": 6, "removed": True, "stage": 0}])
    assert ChainingPolicy().evaluate(v, CFG) == []


def test_waits_for_positions_pending_directive_and_spacing():
    stages = [stage(0, 0.1, 0.1, 2), stage(1, 0.1, 0.1, 6)]
    ex = [{"name": "spread", "partitions": 6, "removed": False, "stage": 0}]
    assert ChainingPolicy().evaluate(view(stages, [dict(ex[0], stage=None)]), CFG) == []
    pending = {"exchanges": DirectiveState("exchanges", 3, {"spread": "removed"}, 2, "pending")}
    assert ChainingPolicy().evaluate(view(stages, ex, directives=pending), CFG) == []
    assert ChainingPolicy().evaluate(view(stages, ex, last_decision={"exchanges": NOW - 30_000}), CFG) == []
    assert ChainingPolicy().evaluate(view(stages, ex, last_decision={"exchanges": NOW - 90_000}), CFG)
    # a plan that has run fewer than min_batches batches since the last decision waits
    assert ChainingPolicy().evaluate(view(stages, ex, last_decision={"exchanges": NOW - 9_000}),
                                     ChainingConfig(min_change_spacing_s=5, min_batches=5)) == []
    assert ChainingPolicy().evaluate(view(stages, ex, last_decision={"exchanges": NOW - 11_000}),
                                     ChainingConfig(min_change_spacing_s=5, min_batches=5))


def test_only_stages_of_the_latest_batch_count():
    old_plan = [stage(0, 0.9, 0.9, 2, key="old0", seen=NOW - 60_000), stage(1, 0.9, 0.9, 6, key="old1", seen=NOW - 60_000)]
    new_plan = [stage(0, 0.1, 0.1, 2), stage(1, 0.1, 0.1, 6)]
    v = view(old_plan + new_plan, [{"name": "spread", "partitions": 6, "removed": False, "stage": 0}])
    assert [s.key for s in current_stages(v)] == ["t0", "t1"]
    assert ChainingPolicy().evaluate(v, CFG)[0].value == {"spread": "removed"}


def test_merged_rhos_restart_at_required_boundaries():
    stages = [stage(0, 0.2, 0.4, 2), stage(1, 0.1, 0.6, 6), stage(2, 0.3, 0.8, 4), stage(3, 0.1, 0.4, 8)]
    rhos = merged_rhos(stages, [Boundary.OPTIONAL, Boundary.REQUIRED, Boundary.OPTIONAL])
    assert rhos == pytest.approx([0.2, 0.3, 0.3, 0.1])


def test_two_exchanges_one_chain_each_run():
    # two optional exchanges in one run: Algorithm 10 picks the partitioning, not each pair alone
    stages = [stage(0, 0.3, 0.6, 2), stage(1, 0.1, 0.6, 6), stage(2, 0.1, 1.0, 6)]
    ex = [{"name": "a", "partitions": 6, "removed": False, "stage": 0},
          {"name": "b", "partitions": 6, "removed": False, "stage": 1}]
    [p] = ChainingPolicy().evaluate(view(stages, ex), CFG)
    # ρ at 2 partitions: 0.3, 0.3, 0.5 → all three 1.1 > 0.9; (0.3+0.3)(0.5) var 0.0025 < std var → chain a only
    assert p.value == {"a": "removed", "b": "present"}
