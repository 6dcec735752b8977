"""The ``dalton`` and ``dalton-paper`` policies: Dalton's learned split of the heavy hitters for
the next micro-batch (PVLDB'22, digest 001 §2.7, §8.2). Knob ``partition_plan``.

``dalton`` runs the default variant (``policies.partitioning.dalton.VARIANT``: full-information
updates, no exploration, reward weights 0.8/0.2, blocks of ≥ 1/64 of the mean load, the
cold-floor guard), which reaches max/mean ≤ 1.1 after convergence where the paper's
configuration stays at 1.5–1.65 (drifting Zipf z = 1, 16 partitions); ``dalton-paper`` runs the
paper's configuration (``PAPER``). Why each change: ``policies.partitioning.dalton``.

The control plane plays the micro-batch driver agent: every evaluation that sees a batch newer
than the one the current plan was made from replays the reported batches (``JobView.
partition_stats``, oldest first) through a :class:`~policies.partitioning.dalton.MicroBatchAgent`
seeded with ``seed`` — so the Q-table is a pure function of the view — and the routing of the
latest batch is the plan for the next one. Keys the job summarised as ``other`` are cold (they
are below the batch's top keys, hence below total/P unless the job reports too few keys); they
are replayed as 2P equal pseudo-keys spread over the blocks. Cold keys go to crc32(key) mod P,
so the directive lists only the bandit-routed keys with their per-block tuple counts
(``PartitionPlan.to_dict`` form, the job realises it with ``collectors.partition_plan.realize``).

Prediction: the max/mean block load of the latest batch as routed; ``observe`` reports the
measured max/mean of the latest batch the job ran.
"""
from __future__ import annotations

from typing import Optional

import numpy as np
from pydantic import Field

from spark_governor.policies.base import JobView, Policy, Proposal
from spark_governor.policies.partitioning.base import stable_hashes
from spark_governor.policies.partitioning.dalton import PAPER, VARIANT, MicroBatchAgent
from spark_governor.policies.plan_inputs import measured_balance, unplanned_batches
from spark_governor.policies.safety import SafetyConfig


class DaltonConfig(SafetyConfig):
    min_value: Optional[float] = Field(None, description="Unused: the knob's value is a plan, not a number")
    partitions: int = Field(4, ge=1, le=4096, description="Map blocks (combiners) P, unless the batches report theirs")
    reduce: Optional[int] = Field(None, ge=1, le=4096, description="Reduce buckets R (default: P)")
    seed: int = Field(0, description="Exploration seed (per batch: seed and batch number)")
    epsilon: float = Field(VARIANT["epsilon"], ge=0, le=1, description="ε-greedy exploration (paper 0.1)")
    gamma: float = Field(VARIANT["gamma"], gt=0, le=1, description="Step size of Eq. 5 (paper 0.1)")
    decisions_per_key: int = Field(4096, ge=1, description="Bandit decisions per hot key and batch")
    hot_factor: float = Field(1.0, ge=1, le=100, description="Heavy hitter: count ≥ total / (hot_factor·n); 1 is "
                                                             "the paper's Def. 3.3 (ours: > 1 also routes the keys "
                                                             "just below 1/n)")
    p1: float = Field(VARIANT["p1"], ge=0, le=1, description="Reward weight of load imbalance CI (paper 0.5)")
    p2: float = Field(VARIANT["p2"], ge=0, le=1, description="Reward weight of fragmentation CA (paper 0.5)")
    full_information: bool = Field(VARIANT["full_information"], description="Update every arm with the reward "
                                                                            "it would get (ours; paper false)")
    block_resolution: Optional[int] = Field(VARIANT["block_resolution"], ge=1, description="Blocks of at least "
                                            "total/(n·resolution) tuples (ours; paper none)")
    cold_target: Optional[float] = Field(VARIANT["cold_target"], gt=0, description="Cold-floor guard: bandit-route "
                                         "the heaviest non-heavy keys of combiners above cold_target·mean (ours; "
                                         "paper none)")


class DaltonPaperConfig(DaltonConfig):
    epsilon: float = Field(PAPER["epsilon"], ge=0, le=1)
    gamma: float = Field(PAPER["gamma"], gt=0, le=1)
    p1: float = Field(PAPER["p1"], ge=0, le=1)
    p2: float = Field(PAPER["p2"], ge=0, le=1)
    full_information: bool = PAPER["full_information"]
    block_resolution: Optional[int] = Field(PAPER["block_resolution"], ge=1)
    cold_target: Optional[float] = Field(PAPER["cold_target"], gt=0)


def _batch_arrays(key_counts, other_keys: int, other_tuples: int, P: int):
    keys = [k for k, _ in key_counts]
    counts = [int(c) for _, c in key_counts]
    hashed = list((stable_hashes(keys) % P).tolist()) if keys else []
    if other_tuples > 0:
        n = 2 * P
        share = [other_tuples // n + (1 if i < other_tuples % n else 0) for i in range(n)]
        for i, c in enumerate(share):
            if c:
                keys.append(f"\x00other{i}"); counts.append(c); hashed.append(i % P)
    return keys, np.array(counts, dtype=np.int64), np.array(hashed, dtype=np.int64)


class DaltonPolicy(Policy):
    name = "dalton"
    knobs = ("partition_plan",)
    Config = DaltonConfig
    description = ("Dalton (PVLDB'22): contextual-bandit split of heavy hitters, hash for the rest — default variant "
                   "(full-information updates, cold-floor guard)")

    def evaluate(self, view: JobView, config: DaltonConfig) -> list[Proposal]:
        found = unplanned_batches(view)
        if found is None:
            return []
        stats, latest = found.stats, found.latest
        P = int(latest.partitions or config.partitions)
        R = int(config.reduce or latest.reduce or P)
        agent = MicroBatchAgent(P, seed=config.seed, decisions_per_key=config.decisions_per_key,
                                epsilon=config.epsilon, gamma=config.gamma, hot_factor=config.hot_factor,
                                p1=config.p1, p2=config.p2, full_information=config.full_information,
                                block_resolution=config.block_resolution, cold_target=config.cold_target)
        routing = keys = None
        for s in stats:
            keys, counts, hashed = _batch_arrays(s.key_counts, s.other_keys, s.other_tuples, P)
            routing = agent.route_batch(keys, counts, hashed)
        loads = np.bincount(routing.frag_block, weights=routing.frag_count, minlength=P)
        predicted = float(loads.max() / loads.mean()) if loads.sum() else 1.0
        hot = set(routing.hot.tolist())
        assignment: dict[str, dict] = {}
        for k, b, n in zip(routing.frag_key.tolist(), routing.frag_block.tolist(), routing.frag_count.tolist()):
            if k in hot:
                entry = assignment.setdefault(keys[k], {"blocks": [], "bucket": int(stable_hashes([keys[k]])[0] % R)})
                entry["blocks"].append([b, n])
        for entry in assignment.values():
            entry["blocks"].sort()
        value = {"algorithm": "dalton", "partitions": P, "reduce": R, "assignment": assignment,
                 "options": {"seed": config.seed, "epsilon": config.epsilon, "gamma": config.gamma,
                             "variant": self.name},
                 "q_table": {k: [round(q, 6) for q in row] for k, row in sorted(agent.Q.items())},
                 "based_on": found.based_on()}
        inputs = {"batches_replayed": len(stats), "tuples": latest.tuples, "keys": latest.keys,
                  "hot_keys": sorted(assignment), "measured_max_mean_load": latest.max_mean_load}
        reason = (f"{'Dalton' if self.name == 'dalton' else 'Dalton (paper)'} from {len(stats)} batches (latest {latest.batch_id}): {len(assignment)} hot keys split, "
                  f"predicted max/mean load {predicted:.3f}")
        return [Proposal("partition_plan", value, reason, inputs, {"max_mean_load": predicted})]

    def observe(self, view: JobView, knob: str, config: DaltonConfig) -> dict:
        return measured_balance(view)


class DaltonPaperPolicy(DaltonPolicy):
    name = "dalton-paper"
    Config = DaltonPaperConfig
    description = "Dalton (PVLDB'22) in the paper's configuration (ε = γ = 0.1, p1 = p2 = 0.5, Def. 3.3)"
