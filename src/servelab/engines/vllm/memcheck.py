"""vLLM's start-up memory check and the KV budget it leaves, on memory as the engine sees it.

At start every vLLM GPU worker takes a memory snapshot and asks for
``requested = ceil(total x gpu_memory_utilization)`` bytes; when the free memory is below
that it refuses to start (``vllm/v1/worker/utils.py`` ``request_memory``, called from
``gpu_worker.py`` ``Worker.init_device``, even with ``--kv-cache-memory-bytes``)::

    Free memory on device cuda:0 (101.3/121.69 GiB) on startup is less than desired GPU
    memory utilization (0.92, 111.95 GiB). Decrease GPU memory utilization or ...

``total`` is what CUDA reports; on a unified-memory part (DGX Spark, GH200) ``free`` is the
OS's available memory (``utils/mem_utils.py`` ``MemorySnapshot.measure``). Without
``--kv-cache-memory-bytes`` the KV cache gets ``requested`` less the profiled non-KV memory
(weights, activation peak, non-torch memory, and the CUDA-graph estimate,
``VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS`` on by default: ``gpu_worker.py``
``determine_available_memory``); with it, exactly that many bytes.

The rule, read in every release from 0.24.0 to 0.33.0 (``request_memory`` unchanged for an
engine holding its own weights; the default utilization 0.92, ``CacheConfig``). vLLM 0.34.0
sizes the KV cache differently by default: the extensible KV cache (on CUDA unless
``--kv-cache-memory-bytes`` is given) reserves address space, commits pages after warm-up and
skips the free-memory check; its default utilization is 1.0. servelab does not model that
pool (said, not guessed); with ``--kv-cache-memory-bytes`` 0.34.0 checks as before.

Pure: figures in, a frozen :class:`StartupMemory` out.
"""

from __future__ import annotations

import math

from servelab.engines.vllm.kernels.device import READ_VERSIONS, read_version, version_tuple
from servelab.hardware.profiles import EngineMemory
from servelab.sizing.memory import DEFAULT_GPU_MEMORY_UTILIZATION
from servelab.sizing.startup_memory import (
    DEPENDS,
    NO_CHECK,
    NOT_KNOWN,
    REFUSES,
    STARTS,
    FreeCheck,
    StartupMemory,
    gib_text,
)

__all__ = ["CHECK_SOURCE", "DEFAULT_UTILIZATION", "DEPENDS", "NOT_KNOWN", "NO_CHECK",
           "REFUSES", "STARTS", "FreeCheck", "StartupMemory", "free_figures",
           "passing_utilization", "requested_bytes", "startup_memory"]

#: ``CacheConfig.gpu_memory_utilization``'s default in 0.24.0-0.33.0 (``DEFAULT_GPU_MEMORY_
#: UTILIZATION`` in 0.34.0 when the extensible KV cache is off).
DEFAULT_UTILIZATION = DEFAULT_GPU_MEMORY_UTILIZATION
EXTENSIBLE_FROM = (0, 34, 0)
CHECK_SOURCE = ("vllm/v1/worker/utils.py request_memory (from gpu_worker.py "
                "Worker.init_device)")


def requested_bytes(total_bytes: int, utilization: float) -> int:
    """``math.ceil(total_memory * gpu_memory_utilization)`` (``request_memory``)."""
    return math.ceil(total_bytes * utilization)


def passing_utilization(total_bytes: int, free_bytes: int) -> float | None:
    """The largest utilization in 0.01 steps whose request fits ``free_bytes``; None below
    0.01."""
    u = math.floor(free_bytes / total_bytes * 100) / 100
    while u > 0 and requested_bytes(total_bytes, u) > free_bytes:
        u = round(u - 0.01, 2)
    return u if u > 0 else None


def free_figures(memory: EngineMemory, measured_free_bytes: int | None = None,
                 ) -> tuple[tuple[int, str], ...]:
    """The free-memory figures to check: a measurement when given, else the profile's
    default and its lowest stated figure, each with where it comes from."""
    if measured_free_bytes is not None:
        return ((measured_free_bytes, "measured"),)
    out = [(memory.free_bytes,
            f"stated default: {memory.sources.get('free_at_start', 'profile')}")]
    if memory.free_low_bytes is not None and memory.free_low_bytes < memory.free_bytes:
        out.append((memory.free_low_bytes,
                    f"lowest stated: {memory.sources.get('free_at_start_low', 'profile')}"))
    return tuple(out)


def startup_memory(
    memory: EngineMemory,
    *,
    version: str,
    weights_bytes: int,
    overhead_bytes: int,
    overhead_source: str,
    gpu_memory_utilization: float | None = None,
    kv_cache_memory_bytes: int | None = None,
    measured_free_bytes: int | None = None,
) -> StartupMemory:
    """vLLM ``version``'s start-up check on ``memory`` and the KV budget it leaves.

    ``weights_bytes`` is the planned resident weights (the plan's), ``overhead_bytes`` the
    rest of the profiled non-KV memory (activation peak, non-torch, CUDA graphs), an estimate
    until a run measures it, named by ``overhead_source``.
    """
    read = read_version(version)
    given_util = gpu_memory_utilization is not None
    if read is None:
        return StartupMemory(version, memory.total_bytes, gpu_memory_utilization or 0.0, "",
                             0, (), NOT_KNOWN, None, None, "",
                             f"vLLM {version}: its start-up check was not read (read: "
                             f"{READ_VERSIONS[0]} to {READ_VERSIONS[-1]})")
    extensible = version_tuple(read) >= EXTENSIBLE_FROM and kv_cache_memory_bytes is None
    if extensible:
        ext_util = 1.0 if gpu_memory_utilization is None else gpu_memory_utilization
        return StartupMemory(
            read, memory.total_bytes, ext_util,
            "--gpu-memory-utilization" if given_util else "vLLM 0.34.0's default with the "
            "extensible KV cache", requested_bytes(memory.total_bytes, ext_util), (),
            NO_CHECK, None, None,
            "the extensible KV cache is sized from the memory free after warm-up: not "
            "modelled", "vllm/config/cache.py enable_extensible_kv_cache; "
            "vllm/v1/worker/utils.py request_memory skips the check with it")
    util = DEFAULT_UTILIZATION if gpu_memory_utilization is None else gpu_memory_utilization
    util_src = ("--gpu-memory-utilization" if given_util else
                f"vLLM's default {DEFAULT_UTILIZATION} (vllm/config/cache.py CacheConfig)")
    req = requested_bytes(memory.total_bytes, util)
    checks = tuple(FreeCheck(b, src, b >= req, src.split(":", 1)[0])
                   for b, src in free_figures(memory, measured_free_bytes))
    passed = [c.starts for c in checks]
    verdict = STARTS if all(passed) else REFUSES if not any(passed) else DEPENDS
    lowest = min(c.free_bytes for c in checks)
    if kv_cache_memory_bytes is not None:
        kv: int | None = kv_cache_memory_bytes
        kv_src = ("--kv-cache-memory-bytes: exactly that (memory profiling skipped; the "
                  "start-up check still runs)")
    else:
        kv = req - weights_bytes - overhead_bytes
        kv_src = (f"ceil({util:g} x {gib_text(memory.total_bytes)}) - weights - overhead "
                  f"({overhead_source}): gpu_worker.py determine_available_memory")
        if kv <= 0:
            kv_src += "; nothing is left for the KV cache"
    return StartupMemory(read, memory.total_bytes, util, util_src, req, checks, verdict,
                         passing_utilization(memory.total_bytes, lowest), kv, kv_src,
                         CHECK_SOURCE)
