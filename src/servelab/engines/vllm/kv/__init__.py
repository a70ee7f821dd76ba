"""vLLM's KV-cache arithmetic, reproduced from its own source, per version and platform.

* :mod:`~servelab.engines.vllm.kv.rules`: which accounting rules a version follows;
* :mod:`~servelab.engines.vllm.kv.pool`: pages, groups, the pool, "KV cache size" and
  "Maximum concurrency" (:func:`plan_kv_pool`);

:data:`VLLM_KV` is what the vLLM engine hands the planner
(:class:`~servelab.plan.kvseam.PooledKvArithmetic`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from servelab.engines.vllm.kv.pool import largest_context, plan_kv_pool, plan_kv_pool_dims
from servelab.families import ModelDims
from servelab.plan.kvpool import KvOptions, KvPoolPlan

__all__ = ["VLLM_KV", "VllmKvArithmetic", "largest_context", "plan_kv_pool", "plan_kv_pool_dims"]


@dataclass(frozen=True)
class VllmKvArithmetic:
    """vLLM's pool arithmetic behind the planner's seam."""

    label: str = "vLLM"

    def pool(
        self,
        dims: ModelDims,
        kv_cache_memory_bytes: int,
        opts: KvOptions,
        *,
        stage_memory_bytes: Sequence[int] = (),
    ) -> KvPoolPlan:
        """:func:`plan_kv_pool_dims`."""
        return plan_kv_pool_dims(
            dims, kv_cache_memory_bytes, opts, stage_memory_bytes=stage_memory_bytes
        )

    def largest_context(
        self,
        dims: ModelDims,
        kv_cache_memory_bytes: int,
        opts: KvOptions,
        *,
        limit: int | None = None,
        stage_memory_bytes: Sequence[int] = (),
    ) -> int:
        """:func:`largest_context`."""
        return largest_context(
            dims, kv_cache_memory_bytes, opts, limit=limit, stage_memory_bytes=stage_memory_bytes
        )


VLLM_KV = VllmKvArithmetic()
