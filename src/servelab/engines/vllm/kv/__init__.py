"""vLLM's KV-cache arithmetic, reproduced from its own source, per version and platform.

* :mod:`~servelab.engines.vllm.kv.rules`: which accounting rules a version follows;
* :mod:`~servelab.engines.vllm.kv.pool`: pages, groups, the pool, "KV cache size" and
  "Maximum concurrency" (:func:`plan_kv_pool`);

:data:`VLLM_KV` is what the vLLM engine hands the planner
(:class:`~servelab.sizing.kvseam.PooledKvArithmetic`).
"""

from __future__ import annotations

from dataclasses import dataclass

from servelab.engines.vllm.kv.pool import largest_context, plan_kv_pool, plan_kv_pool_dims

__all__ = ["VLLM_KV", "VllmKvArithmetic", "largest_context", "plan_kv_pool", "plan_kv_pool_dims"]


@dataclass(frozen=True)
class VllmKvArithmetic:
    """vLLM's pool arithmetic behind the planner's seam."""

    label: str = "vLLM"
    pool = staticmethod(plan_kv_pool_dims)
    largest_context = staticmethod(largest_context)


VLLM_KV = VllmKvArithmetic()
