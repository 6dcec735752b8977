"""The partitioner interface: key counts of one micro-batch in, a partition plan out.

Every micro-batch partitioner of the product — Prompt (SIGMOD'20, digest 000 §2), its baselines
(time-based, shuffle, hash, PK-2, PK-5, cAM; digest §1.4/§5) and any later one (e.g. Dalton,
Fang et al.'s routing tables) — implements :class:`Partitioner` and is found by name through
:func:`policies.partitioning.registry.get_partitioner`. The offline command
``spark-governor plan <name> --counts FILE --partitions P [--reduce R] --json``, the benchmark
``spark-governor bench partitioners`` and the job-side applier
(``collectors.partition_plan``) use nothing else, so a partitioner registered here works in all
three without further code.

Plugging in a partitioner (no other file needs to know it)::

    from spark_governor.policies.partitioning.base import Fragments, KeyCounts, Partitioner, PartitionerOptions
    from spark_governor.policies.partitioning.registry import register

    class MyOptions(PartitionerOptions):      # pydantic, unknown fields refused
        hot_keys: int = 10

    @register
    class MyPartitioner(Partitioner):
        name = "mine"                         # the CLI/bench/registry name
        description = "one line for --help and the bench table"
        Options = MyOptions
        needs_arrival = False                 # True: decides per tuple in arrival order

        def assign_blocks(self, batch: KeyCounts, partitions: int) -> Fragments:
            ...                               # return Fragments(key_index, block, count)

        # optional: the Reduce side; the default sends key k to bucket stable_hash(k) % R
        def assign_buckets(self, batch, fragments, reduce) -> np.ndarray: ...

then add the module's dotted name to ``BUILTIN_MODULES`` in ``registry.py`` (or expose the
class under the entry-point group ``spark_governor.partitioners``).

Data model (units: tuples = records of the micro-batch, keys = distinct partitioning keys):

- :class:`KeyCounts` — the batch statistics a plan is made from: ``keys`` (strings; integer keys
  are written ``str(k)``, as Spark's ``CAST(k AS STRING)`` writes them), ``counts`` (tuples per
  key, int64 > 0) and optionally ``arrival`` (the key index of each tuple in arrival order, for
  per-tuple partitioners such as shuffle and PK-d). Without ``arrival`` the batch is taken to
  arrive grouped by key in ``keys`` order (digest §7.1's convention);
  :meth:`KeyCounts.with_arrival` makes a seeded random arrival order. ``order`` (optional) is a
  quasi-sorted key order from Algorithm 1's CountTree; :meth:`KeyCounts.descending` returns it
  instead of the exact count order.
- :class:`Fragments` — a key fragment is the tuples of one key inside one Map block (digest §3):
  three parallel int64 arrays ``key`` (index into ``keys``), ``block`` (0..P-1) and ``count``
  (tuples, > 0).
- :class:`PartitionPlan` — fragments + ``bucket`` (the Reduce bucket of every key, 0..R-1) and
  the per-block loads (tuples per Map block), cardinalities (keys per block) and per-bucket loads
  (tuples per Reduce bucket, no map-side combining). The constructor checks conservation (the
  fragments of a key sum to its count) and ranges, so every partitioner is checked on every plan.
  ``to_dict``/``from_dict`` give the JSON form used by the CLI, the API and the wire protocol.

Hashing: :func:`stable_hash` is CRC-32 of the key's UTF-8 bytes (``zlib.crc32``), identical to
Spark's ``F.crc32(col.cast("string"))`` for seed 0, so the job can compute the hash fallback in
SQL; seeds > 0 (further hash functions) mix the CRC with splitmix64. Never use Python's ``hash()`` (salted per process; digest §8.20).
"""
from __future__ import annotations

import itertools

import time
import zlib
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar, Iterable, Mapping, Optional, Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict

__all__ = ["KeyCounts", "Fragments", "PartitionPlan", "Partitioner", "PartitionerOptions",
           "PlanError", "stable_hash", "stable_hashes"]


class PlanError(ValueError):
    """Invalid input or an inconsistent plan; the message names the offending item."""


# -- hashing ------------------------------------------------------------------------------------

_GOLDEN = 0x9E3779B97F4A7C15
_MASK64 = (1 << 64) - 1


def _mix(crc: np.ndarray, seed: int) -> np.ndarray:
    """splitmix64 finaliser of crc + seed·golden, low 32 bits (uint64 arithmetic wraps)."""
    with np.errstate(over="ignore"):
        x = crc.astype(np.uint64) + np.uint64((seed * _GOLDEN) & _MASK64)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        x = x ^ (x >> np.uint64(31))
    return (x & np.uint64(0xFFFFFFFF)).astype(np.int64)


def stable_hash(key: str, seed: int = 0) -> int:
    """Process-independent 32-bit hash of a key.

    Seed 0: ``zlib.crc32(key.encode('utf-8'))``, equal to Spark's ``crc32(CAST(key AS STRING))``.
    Seed s > 0 (the independent hash functions of PK-d / cAM, digest §1.4): the splitmix64
    finaliser of ``crc32 + s·0x9E3779B97F4A7C15``, low 32 bits. (CRC is affine, so CRC with
    another initial value or prefix would only XOR a constant into equal-length keys' hashes and
    give every key the same candidate blocks modulo a power of two.)"""
    return int(stable_hashes([key], seed)[0])


def stable_hashes(keys: Sequence[str], seed: int = 0) -> np.ndarray:
    """:func:`stable_hash` of every key, as an int64 array (one hash per key, not per tuple)."""
    crc = np.fromiter((zlib.crc32(k.encode("utf-8")) for k in keys), dtype=np.int64, count=len(keys))
    return crc if seed == 0 else _mix(crc, seed)


# -- inputs -------------------------------------------------------------------------------------

@dataclass(frozen=True)
class KeyCounts:
    """Tuples per key of one micro-batch (optionally with the arrival order of the tuples)."""

    keys: tuple[str, ...]
    counts: np.ndarray  # int64 per key, > 0
    arrival: Optional[np.ndarray] = None  # int64 key index per tuple, arrival order
    #: key indices in the order Algorithm 1's CountTree gives (approximate counts DESC, key ASC);
    #: None: exact counts DESC. Sizes are always the exact ``counts`` (digest §8.2).
    order: Optional[np.ndarray] = None

    def __post_init__(self):
        counts = np.asarray(self.counts, dtype=np.int64)
        object.__setattr__(self, "counts", counts)
        object.__setattr__(self, "keys", tuple(self.keys))
        if counts.ndim != 1 or len(counts) != len(self.keys):
            raise PlanError(f"counts: expected {len(self.keys)} counts, got shape {counts.shape}")
        if len(counts) and counts.min() <= 0:
            i = int(np.argmin(counts))
            raise PlanError(f"counts: key {self.keys[i]!r} has count {int(counts[i])}; counts must be > 0")
        if len(set(self.keys)) != len(self.keys):
            raise PlanError("keys: duplicate keys")
        if self.arrival is not None:
            arr = np.asarray(self.arrival, dtype=np.int64)
            object.__setattr__(self, "arrival", arr)
            if len(arr) != self.total or (len(arr) and not np.array_equal(
                    np.bincount(arr, minlength=len(counts)), counts)):
                raise PlanError("arrival: must hold every key index exactly count times")
        if self.order is not None:
            order = np.asarray(self.order, dtype=np.int64)
            object.__setattr__(self, "order", order)
            if not np.array_equal(np.sort(order), np.arange(len(counts))):
                raise PlanError("order: must be a permutation of the key indices")

    @classmethod
    def from_mapping(cls, counts: Mapping[Any, int] | Iterable[tuple[Any, int]]) -> "KeyCounts":
        pairs = list(counts.items()) if isinstance(counts, Mapping) else list(counts)
        return cls(tuple(str(k) for k, _ in pairs), np.array([int(c) for _, c in pairs], dtype=np.int64))

    @property
    def total(self) -> int:
        """N_C: tuples in the batch."""
        return int(self.counts.sum())

    @property
    def num_keys(self) -> int:
        """K: distinct keys in the batch."""
        return len(self.keys)

    def descending(self) -> np.ndarray:
        """Key indices by count DESC, ties by key ASC (digest §8.1/§8.9), or the given quasi-sorted
        ``order`` (Algorithm 1's CountTree walk)."""
        if self.order is not None:
            return self.order
        if not self.keys:
            return np.zeros(0, dtype=np.int64)
        key_rank = np.argsort(np.array(self.keys, dtype=object), kind="stable")
        rank = np.empty(len(self.keys), dtype=np.int64)
        rank[key_rank] = np.arange(len(self.keys))
        return np.lexsort((rank, -self.counts)).astype(np.int64)

    def arrival_order(self) -> np.ndarray:
        """The key index of each tuple in arrival order (grouped by key when not given)."""
        if self.arrival is not None:
            return self.arrival
        return np.repeat(np.arange(len(self.keys), dtype=np.int64), self.counts)

    def with_arrival(self, seed: int = 0) -> "KeyCounts":
        """The same counts with a seeded uniformly random arrival order of the tuples."""
        rng = np.random.default_rng(seed)
        arr = np.repeat(np.arange(len(self.keys), dtype=np.int64), self.counts)
        rng.shuffle(arr)
        return KeyCounts(self.keys, self.counts, arr, self.order)


@dataclass(frozen=True)
class Fragments:
    """Key fragments: ``count`` tuples of key ``key`` (index) placed in Map block ``block``."""

    key: np.ndarray
    block: np.ndarray
    count: np.ndarray

    @classmethod
    def from_lists(cls, key: Sequence[int], block: Sequence[int], count: Sequence[int]) -> "Fragments":
        return cls(np.asarray(key, dtype=np.int64), np.asarray(block, dtype=np.int64),
                   np.asarray(count, dtype=np.int64))

    @classmethod
    def from_tuples(cls, tuple_keys: np.ndarray, tuple_blocks: np.ndarray, partitions: int) -> "Fragments":
        """Fragments of a per-tuple assignment (tuple i of key ``tuple_keys[i]`` → block ``tuple_blocks[i]``)."""
        code = np.asarray(tuple_keys, dtype=np.int64) * partitions + np.asarray(tuple_blocks, dtype=np.int64)
        uniq, cnt = np.unique(code, return_counts=True)
        return cls(uniq // partitions, uniq % partitions, cnt.astype(np.int64))

    def merged(self, partitions: int) -> "Fragments":
        """Sorted by (key, block) with equal (key, block) pairs summed and empty fragments dropped."""
        code = self.key * partitions + self.block
        uniq, inv = np.unique(code, return_inverse=True)
        cnt = np.bincount(inv, weights=self.count, minlength=len(uniq)).astype(np.int64)
        keep = cnt > 0
        return Fragments(uniq[keep] // partitions, uniq[keep] % partitions, cnt[keep])


# -- the plan -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class PartitionPlan:
    """Keys → Map blocks (with tuple counts) and key → Reduce bucket for one micro-batch.

    ``planning_s`` is the wall time (seconds) the partitioner spent on ``assign_blocks`` plus
    ``assign_buckets``; ``planning_cpu_s`` the CPU time of the planning thread over the same span
    (one core; unaffected by other processes competing for the CPU)."""

    algorithm: str
    partitions: int
    reduce: int
    keys: tuple[str, ...]
    counts: np.ndarray
    fragments: Fragments
    bucket: np.ndarray
    options: dict = field(default_factory=dict)
    planning_s: float = 0.0
    planning_cpu_s: float = 0.0

    def __post_init__(self):
        P, R, K = self.partitions, self.reduce, len(self.keys)
        if P < 1 or R < 1:
            raise PlanError(f"partitions and reduce must be >= 1 (got {P}, {R})")
        f = self.fragments.merged(P)
        object.__setattr__(self, "fragments", f)
        object.__setattr__(self, "counts", np.asarray(self.counts, dtype=np.int64))
        object.__setattr__(self, "bucket", np.asarray(self.bucket, dtype=np.int64))
        if len(f.key) and (f.key.min() < 0 or f.key.max() >= K):
            raise PlanError("fragments: key index out of range")
        if len(f.block) and (f.block.min() < 0 or f.block.max() >= P):
            raise PlanError(f"fragments: block out of range 0..{P - 1}")
        placed = np.bincount(f.key, weights=f.count, minlength=K).astype(np.int64)
        if not np.array_equal(placed, self.counts):
            bad = int(np.nonzero(placed != self.counts)[0][0])
            raise PlanError(f"{self.algorithm}: key {self.keys[bad]!r} has {int(self.counts[bad])} tuples "
                            f"but its fragments hold {int(placed[bad])}")
        if self.bucket.shape != (K,) or (K and (self.bucket.min() < 0 or self.bucket.max() >= R)):
            raise PlanError(f"bucket: need one bucket in 0..{R - 1} per key")

    # -- derived quantities (digest §3) --
    @property
    def total(self) -> int:
        return int(self.counts.sum())

    def block_loads(self) -> np.ndarray:
        """|Block_i|: tuples per Map block."""
        return np.bincount(self.fragments.block, weights=self.fragments.count,
                           minlength=self.partitions).astype(np.int64)

    def block_cardinalities(self) -> np.ndarray:
        """||Block_i||: distinct keys per Map block."""
        return np.bincount(self.fragments.block, minlength=self.partitions).astype(np.int64)

    def bucket_loads(self) -> np.ndarray:
        """|Bucket_j|: tuples per Reduce bucket (records, no map-side combining; digest §8.21)."""
        return np.bincount(self.bucket, weights=self.counts, minlength=self.reduce).astype(np.int64)

    def fragments_per_key(self) -> np.ndarray:
        return np.bincount(self.fragments.key, minlength=len(self.keys)).astype(np.int64)

    def split_keys(self) -> list[str]:
        return [self.keys[i] for i in np.nonzero(self.fragments_per_key() > 1)[0]]

    def blocks_of(self, key: str) -> list[tuple[int, int]]:
        """[(block, tuples)] of one key, by block id."""
        i = self.keys.index(key)
        sel = self.fragments.key == i
        return list(zip(self.fragments.block[sel].tolist(), self.fragments.count[sel].tolist()))

    def assignment(self) -> dict[str, dict]:
        """key → {"blocks": [[block, tuples], ...], "bucket": j}."""
        out: dict[str, dict] = {k: {"blocks": [], "bucket": int(b)} for k, b in zip(self.keys, self.bucket)}
        for k, b, n in zip(self.fragments.key.tolist(), self.fragments.block.tolist(), self.fragments.count.tolist()):
            out[self.keys[k]]["blocks"].append([b, n])
        return out

    def to_dict(self) -> dict:
        return {"algorithm": self.algorithm, "partitions": self.partitions, "reduce": self.reduce,
                "options": dict(self.options), "planning_s": self.planning_s, "planning_cpu_s": self.planning_cpu_s,
                "assignment": self.assignment(), "block_loads": self.block_loads().tolist(),
                "block_cardinalities": self.block_cardinalities().tolist(),
                "bucket_loads": self.bucket_loads().tolist()}

    @classmethod
    def from_dict(cls, d: Mapping) -> "PartitionPlan":
        """Inverse of :meth:`to_dict` (the derived loads are recomputed, not trusted)."""
        try:
            assignment = d["assignment"]
            keys = tuple(assignment)
            fk, fb, fc, counts, bucket = [], [], [], [], []
            for i, k in enumerate(keys):
                entry = assignment[k]
                n = 0
                for b, c in entry["blocks"]:
                    fk.append(i); fb.append(int(b)); fc.append(int(c)); n += int(c)
                counts.append(n)
                bucket.append(int(entry["bucket"]))
            return cls(str(d["algorithm"]), int(d["partitions"]), int(d["reduce"]), keys,
                       np.array(counts, dtype=np.int64), Fragments.from_lists(fk, fb, fc),
                       np.array(bucket, dtype=np.int64), dict(d.get("options") or {}),
                       float(d.get("planning_s") or 0.0))
        except (KeyError, TypeError, ValueError) as exc:
            if isinstance(exc, PlanError):
                raise
            raise PlanError(f"plan: malformed ({exc.__class__.__name__}: {exc})") from None


class KeyIndex:
    """Integer ids for every key a stateful partitioner has seen (first-seen order), with
    their crc32 and their hash instance per P, cached across batches: a batch costs one dict
    lookup per key, and hashing only its new keys (the per-batch bookkeeping is numpy)."""

    def __init__(self):
        self.ids: dict[str, int] = {}
        self.names: list[str] = []
        self._names_arr = np.empty(0, dtype="<U1")
        self._crc = np.empty(0, dtype=np.int64)
        self._instances: dict[tuple, np.ndarray] = {}

    def __len__(self) -> int:
        return len(self.names)

    def lookup(self, keys) -> np.ndarray:
        """The ids of ``keys`` (new keys get the next ids)."""
        ids = self.ids
        keys = keys if isinstance(keys, (list, tuple)) else list(keys)
        out = np.fromiter(map(ids.get, keys, itertools.repeat(-1)), dtype=np.int64, count=len(keys))
        missing = np.nonzero(out < 0)[0].tolist()
        if missing:
            new = list(dict.fromkeys(keys[i] for i in missing))
            base = len(self.names)
            ids.update(zip(new, range(base, base + len(new))))
            self.names.extend(new)
            self._names_arr = np.concatenate([self._names_arr, np.array(new, dtype=str)])
            self._crc = np.concatenate([self._crc, stable_hashes(new)])
            out[missing] = [ids[keys[i]] for i in missing]
        return out

    def crc(self, ids: np.ndarray) -> np.ndarray:
        return self._crc[ids]

    def instances(self, ids: np.ndarray, partitions: int, hash_keys=None) -> np.ndarray:
        """h(k) per id: crc32 mod P (``hash_keys`` None, or a function marked ``crc32 = True``),
        else ``hash_keys(keys, P)`` (cached per P)."""
        if hash_keys is None or getattr(hash_keys, "crc32", False):
            return self._crc[ids] % partitions
        key = (partitions, id(hash_keys))
        cached = self._instances.get(key, np.empty(0, dtype=np.int64))
        if len(cached) < len(self.names):
            more = np.asarray(hash_keys(tuple(self.names[len(cached):]), partitions), dtype=np.int64)
            cached = self._instances[key] = np.concatenate([cached, more])
        return cached[ids]

    def name_order(self, ids: np.ndarray) -> np.ndarray:
        """``ids`` sorted by key name (the key index order of the planners' tie-breaks)."""
        return ids[np.argsort(self._names_arr[ids], kind="stable")]



# -- the interface ------------------------------------------------------------------------------

class PartitionerOptions(BaseModel):
    """Base of every partitioner's options (pydantic; unknown fields are refused)."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class Partitioner(ABC):
    """A micro-batch partitioner. Subclass, set ``name``/``description``/``Options``, implement
    :meth:`assign_blocks` (and optionally :meth:`assign_buckets`), decorate with
    ``policies.partitioning.registry.register``."""

    name: ClassVar[str]
    description: ClassVar[str] = ""
    Options: ClassVar[type[PartitionerOptions]] = PartitionerOptions
    needs_arrival: ClassVar[bool] = False  # decides per tuple in arrival order (KeyCounts.arrival)

    def __init__(self, **options: Any) -> None:
        self.options = self.Options.model_validate(options)

    @abstractmethod
    def assign_blocks(self, batch: KeyCounts, partitions: int) -> Fragments:
        """The Map side: split the batch's tuples into ``partitions`` blocks."""

    def assign_buckets(self, batch: KeyCounts, fragments: Fragments, reduce: int) -> np.ndarray:
        """The Reduce side: bucket per key (default: ``stable_hash(key) % reduce``)."""
        return stable_hashes(batch.keys) % reduce

    def plan(self, batch: KeyCounts, partitions: int, reduce: Optional[int] = None) -> PartitionPlan:
        """Blocks and buckets for ``batch``; ``reduce`` defaults to ``partitions``."""
        if int(partitions) < 1:
            raise PlanError(f"partitions must be >= 1 (got {partitions})")
        reduce = int(partitions if reduce is None else reduce)
        if reduce < 1:
            raise PlanError(f"reduce must be >= 1 (got {reduce})")
        t0, c0 = time.perf_counter(), time.thread_time()
        frags = self.assign_blocks(batch, int(partitions))
        bucket = self.assign_buckets(batch, frags, reduce)
        elapsed, cpu = time.perf_counter() - t0, time.thread_time() - c0
        return PartitionPlan(self.name, int(partitions), reduce, batch.keys, batch.counts, frags, bucket,
                             self.options.model_dump(), elapsed, cpu)
