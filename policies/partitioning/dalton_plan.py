"""Dalton as a registered micro-batch partitioner (``dalton``; digest 001 §2.7, §8.2).

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

from pydantic import Field

from spark_governor.policies.partitioning.base import Fragments, KeyCounts, Partitioner, PartitionerOptions, stable_hashes
from spark_governor.policies.partitioning.dalton import BatchRouting, MicroBatchAgent
from spark_governor.policies.partitioning.registry import register


class DaltonOptions(PartitionerOptions):
    seed: int = Field(0, description="seed of the exploration RNG (per batch: seed and batch number)")
    epsilon: float = Field(0.1, ge=0, le=1, description="ε-greedy exploration probability")
    gamma: float = Field(0.1, gt=0, le=1, description="step size of Eq. 5")
    block: Optional[int] = Field(None, ge=1, description="tuples per bandit decision (default: adaptive)")
    decisions_per_key: int = Field(4096, ge=1, description="bandit decisions per hot key and batch when block is adaptive")
    load_window: int = Field(1, ge=1, description="batches in the load window L (1: per micro-batch)")
    hot_factor: float = Field(1.0, ge=1, le=100, description="heavy hitter: count ≥ total / (hot_factor·n); "
                                                             "1 is the paper's Def. 3.3 (ours: > 1)")


@register
class Dalton(Partitioner):
    name = "dalton"
    description = "Dalton (PVLDB'22): contextual bandit for heavy hitters, hash for the rest"
    Options = DaltonOptions
    needs_arrival = True

    def __init__(self, **options):
        super().__init__(**options)
        self._agents: dict[int, MicroBatchAgent] = {}
        self.last_routing: Optional[BatchRouting] = None

    def agent(self, partitions: int) -> MicroBatchAgent:
        if partitions not in self._agents:
            o = self.options
            self._agents[partitions] = MicroBatchAgent(partitions, seed=o.seed, block=o.block,
                                                       decisions_per_key=o.decisions_per_key,
                                                       load_window=o.load_window, gamma=o.gamma,
                                                       epsilon=o.epsilon, hot_factor=o.hot_factor)
        return self._agents[partitions]

    def assign_blocks(self, batch: KeyCounts, partitions: int) -> Fragments:
        hashed = stable_hashes(batch.keys) % partitions
        routing = self.agent(partitions).route_batch(batch.keys, batch.counts, hashed, batch.arrival)
        self.last_routing = routing
        self._last_keys = batch.keys
        return Fragments(routing.frag_key, routing.frag_block, routing.frag_count)

    def hot_keys(self) -> list[str]:
        """Keys the last batch routed through the bandit."""
        if self.last_routing is None:
            return []
        return sorted(self._last_keys[i] for i in self.last_routing.hot.tolist())

    def report(self) -> dict:
        """Extra plan output: the bandit-routed keys and the number of bandit decisions."""
        r = self.last_routing
        return {"dalton": {"hot_keys": self.hot_keys(), "decisions": 0 if r is None else r.decisions}}
