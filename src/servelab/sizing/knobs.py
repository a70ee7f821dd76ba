"""The serving engine's flags a plan follows, as one value: what an engine hands the planner
for its ``[engine]`` table (``Engine.plan_knobs``), and what ``servelab plan``'s options and
``servelab choose`` make for a checkpoint. Defaults resolved: a field that is the engine's
default holds that default (``None`` where the engine sizes it from the model or hardware).
Pure values.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from servelab.sizing.layout import ParallelLayout
from servelab.sizing.specsource import SpecConfig
from servelab.sizing.startup import StartupOptions

__all__ = ["EngineKnobs"]


@dataclass(frozen=True)
class EngineKnobs:
    """The engine flags that size memory and the KV pool, its parallel layout, what it drafts
    and what its start-up rules read (vLLM's names; llama.cpp's own cache flags reach the
    planner in its KV arithmetic)."""

    max_model_len: int | None = None
    kv_cache_memory_bytes: int | None = None
    gpu_memory_utilization: float | None = None
    """``None``: the engine's default (vLLM's 0.92, :data:`servelab.sizing.memory.
    DEFAULT_GPU_MEMORY_UTILIZATION`)."""
    kv_cache_dtype: str = "auto"
    enable_prefix_caching: bool = True
    overhead_bytes: int | None = None
    """Runtime overhead to budget (``None``: servelab's estimate for the platform)."""
    block_size: int | None = None
    """The KV cache block size (``None``: the engine's, aligned as it aligns it)."""
    dtype: str | None = None
    """The engine's ``--dtype`` (``None`` or ``auto``: the checkpoint's)."""
    layout: ParallelLayout = field(default_factory=ParallelLayout)
    speculative: SpecConfig | None = None
    """Speculative decoding's method and tokens per step (None: the engine does not draft)."""
    startup: StartupOptions = field(default_factory=StartupOptions)
    """What the start-up rules read (max_num_seqs, CUDA graph flags)."""
    attention_backend: str | None = None
    """The attention backend asked for (vLLM's ``--attention-backend``); ``None``: the
    engine picks (on a CPU by the CPU's features, which the plan then follows)."""
