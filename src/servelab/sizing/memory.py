"""Memory budget: resident weights + KV pool + runtime overhead against device memory.

With ``--kv-cache-memory-bytes`` vLLM skips memory profiling and uses exactly that pool
(gpu_memory_utilization is ignored for the pool; its start-up check still runs). Without it,
vLLM gives the KV cache what is left of ``ceil(gpu_memory_utilization x memory)`` after
weights and the profiled activation peak; that peak is not knowable before a run, so
servelab uses an overhead **estimate** (flagged as such) which the user can override.

``memory`` is the device's memory as the engine sees it: what CUDA reports in all where the
profile states it (``[profile.NAME.engine_memory]``: a DGX Spark's GB10 reports about 121.7
GiB of its 128 GB), else the part's memory. The utilization an engine starts with when none
is given is vLLM's default, :data:`DEFAULT_GPU_MEMORY_UTILIZATION`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from servelab.errors import UsageError
from servelab.hardware.profiles import HardwareProfile
from servelab.units import GIB

DEFAULT_OVERHEAD_BYTES = 2 * GIB

DEFAULT_GPU_MEMORY_UTILIZATION = 0.92
"""vLLM's default ``gpu_memory_utilization`` in every release from 0.24.0 to 0.33.0
(``vllm/config/cache.py`` ``CacheConfig.gpu_memory_utilization``; 0.34.0's
``DEFAULT_GPU_MEMORY_UTILIZATION`` when the extensible KV cache is off). servelab had assumed
0.9 until issue 40."""
UTILIZATION_SOURCE = (f"vLLM's default {DEFAULT_GPU_MEMORY_UTILIZATION} "
                      "(vllm/config/cache.py CacheConfig)")


@dataclass(frozen=True)
class MemoryPlan:
    """Where one GPU's memory goes, and whether it fits.

    With a parallel layout every figure is per GPU: ``weights_bytes`` is the fullest
    GPU's share and ``kv_pool_bytes`` the pool each rank gets (the smallest rank's when
    pipeline stages differ); ``stage_kv_pool_bytes`` lists each stage's own.
    """

    hardware: str
    memory_bytes: int
    unified: bool
    gpu_memory_utilization: float
    budget_bytes: int
    weights_bytes: int
    kv_pool_bytes: int
    kv_pool_source: str
    overhead_bytes: int
    overhead_source: str
    total_bytes: int
    headroom_bytes: int
    fits: bool
    gpus: int = 1
    stage_kv_pool_bytes: tuple[int, ...] = ()
    device_memory_bytes: int = 0
    """The part's own memory (``memory_bytes`` is what the engine sees of it)."""
    memory_source: str = ""
    """Where ``memory_bytes`` comes from (the part's memory, or CUDA's total as stated)."""
    utilization_source: str = ""
    """``--gpu-memory-utilization``, or the engine's default and where it is read."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return asdict(self)


# what the overhead is called off CUDA, where there is no CUDA context and no CUDA graph
_RUNTIME = {"cpu": "CPU", "mps": "Metal"}


def overhead_estimate(platform: str) -> str:
    """What the default overhead estimate stands for on ``platform`` (a profile's): CUDA's
    context and graphs on CUDA; elsewhere the engine process's own memory and the activation
    peak, named for what runs there."""
    if platform == "cuda":
        what = "CUDA context + activation peak + CUDA graphs"
    else:
        where = _RUNTIME.get(platform, platform)
        what = f"runtime overhead ({where}): engine process + activation peak"
    return f"estimate: {what} ({DEFAULT_OVERHEAD_BYTES // GIB} GiB default)"


def plan_memory(
    hardware: HardwareProfile,
    *,
    weights_bytes: int,
    kv_cache_memory_bytes: int | None,
    gpu_memory_utilization: float | None = None,
    overhead_bytes: int | None = None,
    stage_weights_bytes: Sequence[int] = (),
    gpus: int = 1,
) -> MemoryPlan:
    """Budget one GPU's memory. The KV pool is given, or what the budget leaves.

    ``weights_bytes`` is the fullest GPU's weights; ``stage_weights_bytes`` (pipeline
    parallel) each stage's, so that each stage's profiled pool can be told apart.
    ``gpu_memory_utilization``: ``None`` is vLLM's default
    (:data:`DEFAULT_GPU_MEMORY_UTILIZATION`).
    """
    util = (DEFAULT_GPU_MEMORY_UTILIZATION if gpu_memory_utilization is None
            else gpu_memory_utilization)
    util_src = UTILIZATION_SOURCE if gpu_memory_utilization is None else \
        "--gpu-memory-utilization"
    if not 0 < util <= 1:
        raise UsageError("--gpu-memory-utilization must be in (0, 1]")
    over = DEFAULT_OVERHEAD_BYTES if overhead_bytes is None else overhead_bytes
    over_src = overhead_estimate(hardware.platform) if overhead_bytes is None else "given"
    mem, mem_src = engine_visible_memory(hardware)
    stages = tuple(stage_weights_bytes) or (weights_bytes,)
    if kv_cache_memory_bytes is not None:
        budget = mem
        kv = kv_cache_memory_bytes
        stage_kv = tuple(kv for _ in stages)
        kv_src = "--kv-cache-memory-bytes (memory profiling skipped)"
    else:
        budget = math.ceil(mem * util)  # vLLM's request_memory
        stage_kv = tuple(max(budget - w - over, 0) for w in stages)
        kv = min(stage_kv)
        kv_src = (
            f"estimate: {util:g} x memory - weights - overhead "
            "(vLLM profiles the real figure at start-up)"
        )
    total = weights_bytes + kv + over
    return MemoryPlan(
        hardware=hardware.name,
        memory_bytes=mem,
        unified=hardware.unified,
        gpu_memory_utilization=util,
        budget_bytes=budget,
        weights_bytes=weights_bytes,
        kv_pool_bytes=kv,
        kv_pool_source=kv_src,
        overhead_bytes=over,
        overhead_source=over_src,
        total_bytes=total,
        headroom_bytes=budget - total,
        fits=total <= budget and kv > 0,
        gpus=gpus,
        stage_kv_pool_bytes=stage_kv,
        device_memory_bytes=hardware.memory_bytes,
        memory_source=mem_src,
        utilization_source=util_src,
    )


def engine_visible_memory(hardware: HardwareProfile) -> tuple[int, str]:
    """The device memory an engine budgets from, and where that figure comes from: CUDA's
    total where the profile states it (``engine_memory``), else the part's memory."""
    em = hardware.engine_memory
    if em is not None:
        return em.total_bytes, (
            f"CUDA's total on {hardware.name}: {em.total_bytes / GIB:.2f} GiB of the part's "
            f"{hardware.memory_bytes / GIB:.0f} GiB (sources: servelab hardware show "
            f"{hardware.name})")
    return hardware.memory_bytes, hardware.sources.get("memory", "the profile's memory")
