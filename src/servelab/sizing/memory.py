"""Memory budget: resident weights + KV pool + runtime overhead against device memory.

With ``--kv-cache-memory-bytes`` vLLM skips memory profiling and uses exactly that pool
(gpu_memory_utilization is ignored). Without it, vLLM gives the KV cache what is left of
``gpu_memory_utilization x memory`` after weights and the profiled activation peak; that
peak is not knowable before a run, so servelab uses an overhead **estimate** (flagged as
such) which the user can override.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from servelab.errors import UsageError
from servelab.hardware.profiles import HardwareProfile
from servelab.units import GIB

DEFAULT_OVERHEAD_BYTES = 2 * GIB


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
    gpu_memory_utilization: float = 0.9,
    overhead_bytes: int | None = None,
    stage_weights_bytes: Sequence[int] = (),
    gpus: int = 1,
) -> MemoryPlan:
    """Budget one GPU's memory. The KV pool is given, or what the budget leaves.

    ``weights_bytes`` is the fullest GPU's weights; ``stage_weights_bytes`` (pipeline
    parallel) each stage's, so that each stage's profiled pool can be told apart.
    """
    if not 0 < gpu_memory_utilization <= 1:
        raise UsageError("--gpu-memory-utilization must be in (0, 1]")
    over = DEFAULT_OVERHEAD_BYTES if overhead_bytes is None else overhead_bytes
    over_src = overhead_estimate(hardware.platform) if overhead_bytes is None else "given"
    mem = hardware.memory_bytes
    stages = tuple(stage_weights_bytes) or (weights_bytes,)
    if kv_cache_memory_bytes is not None:
        budget = mem
        kv = kv_cache_memory_bytes
        stage_kv = tuple(kv for _ in stages)
        kv_src = "--kv-cache-memory-bytes (memory profiling skipped)"
    else:
        budget = int(mem * gpu_memory_utilization)
        stage_kv = tuple(max(budget - w - over, 0) for w in stages)
        kv = min(stage_kv)
        kv_src = (
            f"estimate: {gpu_memory_utilization:g} x memory - weights - overhead "
            "(vLLM profiles the real figure at start-up)"
        )
    total = weights_bytes + kv + over
    return MemoryPlan(
        hardware=hardware.name,
        memory_bytes=mem,
        unified=hardware.unified,
        gpu_memory_utilization=gpu_memory_utilization,
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
    )
