"""The seam between the planner and an engine's KV arithmetic: the planner asks the engine.

Each engine keeps its own KV arithmetic in its folder (``servelab.engines.vllm.kv``,
``servelab.engines.llamacpp.kv``) and hands the planner an object satisfying one of two
protocols (``Engine.kv_arithmetic`` in :mod:`servelab.engines.base`):

* :class:`PooledKvArithmetic`: the engine carves a block pool out of the memory its
  weights leave (vLLM): memory in, :class:`~servelab.sizing.kvpool.KvPoolPlan` out;
* :class:`AllocatedKvArithmetic`: the engine allocates a cache from its own flags,
  whatever memory is left (llama.cpp): model in, a :class:`KvCache` out.

The planner (:func:`servelab.plan.build.build_plan`) never imports an engine: callers
(the CLI, the pipeline) pass the engine's arithmetic in.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol, TypeAlias, runtime_checkable

from servelab.families import ModelDims
from servelab.sizing.kvpool import KvOptions, KvPoolPlan

__all__ = ["AllocatedKvArithmetic", "KvArithmetic", "KvCache", "PlannedKv", "PooledKvArithmetic"]


@runtime_checkable
class PooledKvArithmetic(Protocol):
    """An engine that sizes a shared block pool from the memory left after weights."""

    @property
    def label(self) -> str:
        """Whose arithmetic, for labels (``"vLLM"``)."""
        ...

    def pool(
        self,
        dims: ModelDims,
        kv_cache_memory_bytes: int,
        opts: KvOptions,
        *,
        stage_memory_bytes: Sequence[int] = (),
    ) -> KvPoolPlan:
        """The pool the engine builds from ``kv_cache_memory_bytes`` per worker."""
        ...

    def largest_context(
        self,
        dims: ModelDims,
        kv_cache_memory_bytes: int,
        opts: KvOptions,
        *,
        stage_memory_bytes: Sequence[int] = (),
        limit: int | None = None,
    ) -> int:
        """The largest max-model-len whose one request the engine accepts (0: none)."""
        ...


class KvCache(Protocol):
    """A KV cache an engine allocates from its flags, as the planner reads it."""

    @property
    def tokens(self) -> int:
        """Tokens the whole cache holds."""
        ...

    @property
    def total_bytes(self) -> int:
        """Bytes the cache allocates."""
        ...

    @property
    def n_ctx_seq(self) -> int:
        """The longest context one request may use."""
        ...

    @property
    def kv_dtype_bytes(self) -> int:
        """Bytes per cached K/V value, for the speed model."""
        ...

    @property
    def notes(self) -> tuple[str, ...]:
        """What the plan should say about this cache."""
        ...

    @property
    def source(self) -> str:
        """Where the cache's size comes from, for the memory table."""
        ...

    @property
    def log_line(self) -> str:
        """The line the engine prints for this cache."""
        ...

    def rows(self) -> list[tuple[str, str]]:
        """(label, value) rows for tables."""
        ...

    def to_dict(self) -> dict[str, Any]:
        """JSON form (the plan's ``kv_pool``)."""
        ...


@runtime_checkable
class AllocatedKvArithmetic(Protocol):
    """An engine whose cache is fixed by its own flags (llama.cpp)."""

    @property
    def label(self) -> str:
        """Whose arithmetic, for labels (``"llama.cpp"``)."""
        ...

    def cache(self, dims: ModelDims, config: Mapping[str, Any]) -> KvCache:
        """The cache the engine allocates for this model (a clear refusal when the engine's
        arithmetic is not reproduced for it)."""
        ...


KvArithmetic: TypeAlias = PooledKvArithmetic | AllocatedKvArithmetic

PlannedKv: TypeAlias = KvPoolPlan | KvCache
"""A plan's KV cache, whichever arithmetic made it: a pool or an allocated cache."""
