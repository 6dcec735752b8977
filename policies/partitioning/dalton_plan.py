"""Dalton as registered micro-batch partitioners (digest 001 §2.7, §8.2): ``dalton`` runs the
default variant (``dalton.VARIANT``: full-information updates, no exploration, the cold-floor
guard, blocks of ≥ 1/64 of the mean load, reward weights 0.8/0.2; why: ``policies.partitioning.
dalton``), ``dalton-paper`` the paper's configuration (``dalton.PAPER``). Every option can be set
on either.

The driver is the agent (:class:`policies.partitioning.dalton.MicroBatchAgent`): the instance
keeps its Q-table, row expirations and load window across calls, so consecutive ``plan`` calls
on the batches of one stream learn like the paper's micro-batch partitioner (one agent per
number of blocks P). Cold keys go to ``crc32(key) mod P`` (the ``hash`` baseline's block); hot
keys are split by the bandit, deciding per block of tuples. Arrival order: the batch's
``arrival`` when given (``plan dalton --arrival shuffled --seed S`` replays the counts as a
shuffled stream), else each key's tuples spread evenly over the batch.
"""
from __future__ import annotations

from typing import Optional

import numpy as np
from pydantic import Field

from spark_governor.policies.partitioning.base import Fragments, KeyCounts, KeyIndex, Partitioner, PartitionerOptions
from spark_governor.policies.partitioning.dalton import PAPER, VARIANT, BatchRouting, MicroBatchAgent
from spark_governor.policies.partitioning.registry import register


class DaltonOptions(PartitionerOptions):
    seed: int = Field(0, description="seed of the exploration RNG (per batch: seed and batch number)")
    epsilon: float = Field(VARIANT["epsilon"], ge=0, le=1, description="ε-greedy exploration probability (paper 0.1)")
    gamma: float = Field(VARIANT["gamma"], gt=0, le=1, description="step size of Eq. 5 (paper 0.1)")
    block: Optional[int] = Field(None, ge=1, description="tuples per bandit decision (default: adaptive)")
    decisions_per_key: int = Field(4096, ge=1, description="bandit decisions per hot key and batch when block is adaptive")
    load_window: int = Field(1, ge=1, description="batches in the load window L (1: per micro-batch)")
    hot_factor: float = Field(1.0, ge=1, le=100, description="heavy hitter: count ≥ total / (hot_factor·n); "
                                                             "1 is the paper's Def. 3.3 (ours: > 1)")
    p1: float = Field(VARIANT["p1"], ge=0, le=1, description="weight of the load-imbalance cost CI (paper 0.5)")
    p2: float = Field(VARIANT["p2"], ge=0, le=1, description="weight of the fragmentation cost CA (paper 0.5)")
    full_information: bool = Field(VARIANT["full_information"],
                                   description="update every arm with the reward it would get (ours; paper: false)")
    block_resolution: Optional[int] = Field(VARIANT["block_resolution"], ge=1,
                                            description="blocks of at least total/(n·resolution) tuples (ours; paper: none)")
    cold_target: Optional[float] = Field(VARIANT["cold_target"], gt=0, description=(
        "also route through the bandit the heaviest non-heavy keys of any combiner whose hashed non-heavy "
        "keys exceed cold_target·mean (ours; paper: none)"))


class DaltonPaperOptions(DaltonOptions):
    epsilon: float = Field(PAPER["epsilon"], ge=0, le=1, description="ε-greedy exploration probability")
    gamma: float = Field(PAPER["gamma"], gt=0, le=1, description="step size of Eq. 5")
    p1: float = Field(PAPER["p1"], ge=0, le=1, description="weight of the load-imbalance cost CI")
    p2: float = Field(PAPER["p2"], ge=0, le=1, description="weight of the fragmentation cost CA")
    full_information: bool = Field(PAPER["full_information"], description="update every arm (ours)")
    block_resolution: Optional[int] = Field(PAPER["block_resolution"], ge=1, description="minimum block (ours)")
    cold_target: Optional[float] = Field(PAPER["cold_target"], gt=0, description="cold-floor guard (ours)")


@register
class Dalton(Partitioner):
    name = "dalton"
    description = ("Dalton (PVLDB'22): contextual bandit for heavy hitters, hash for the rest — default variant "
                   "(full-information updates, cold-floor guard)")
    Options = DaltonOptions
    needs_arrival = True

    def __init__(self, **options):
        super().__init__(**options)
        self._agents: dict[int, MicroBatchAgent] = {}
        self.last_routing: Optional[BatchRouting] = None
        self.index = KeyIndex()

    def agent(self, partitions: int) -> MicroBatchAgent:
        if partitions not in self._agents:
            o = self.options
            self._agents[partitions] = MicroBatchAgent(partitions, seed=o.seed, block=o.block,
                                                       decisions_per_key=o.decisions_per_key,
                                                       load_window=o.load_window, gamma=o.gamma,
                                                       epsilon=o.epsilon, hot_factor=o.hot_factor,
                                                       p1=o.p1, p2=o.p2, full_information=o.full_information,
                                                       block_resolution=o.block_resolution,
                                                       cold_target=o.cold_target)
        return self._agents[partitions]

    def assign_blocks(self, batch: KeyCounts, partitions: int) -> Fragments:
        ids = self.index.lookup(batch.keys)
        self._batch_ids = ids
        hashed = self.index.crc(ids) % partitions
        routing = self.agent(partitions).route_batch(ids, batch.counts, hashed, batch.arrival)
        self.last_routing = routing
        self._last_keys = batch.keys
        return Fragments(routing.frag_key, routing.frag_block, routing.frag_count)

    def assign_buckets(self, batch: KeyCounts, fragments: Fragments, reduce: int) -> np.ndarray:
        """crc32(key) mod R, as the default, from the cached hashes."""
        ids = getattr(self, "_batch_ids", None)
        if ids is None or len(ids) != batch.num_keys:
            ids = self.index.lookup(batch.keys)
        return self.index.crc(ids) % reduce

    def hot_keys(self) -> list[str]:
        """Keys the last batch routed through the bandit."""
        if self.last_routing is None:
            return []
        return sorted(self._last_keys[i] for i in self.last_routing.hot.tolist())

    def report(self) -> dict:
        """Extra plan output: the bandit-routed keys and the number of bandit decisions."""
        r = self.last_routing
        return {"dalton": {"hot_keys": self.hot_keys(), "decisions": 0 if r is None else r.decisions}}


@register
class DaltonPaper(Dalton):
    name = "dalton-paper"
    description = "Dalton (PVLDB'22) in the paper's configuration (ε = γ = 0.1, p1 = p2 = 0.5, Def. 3.3)"
    Options = DaltonPaperOptions
