"""Qwen2 / Qwen2.5 (``qwen2``): Llama layout with q/k/v biases.

Sliding windows: transformers' ``Qwen2Config`` drops ``sliding_window`` unless
``use_sliding_window`` is true (every published Qwen2/2.5 config sets it false: all layers
full). With it true, transformers windows the layers from ``max_window_layers`` on while
vLLM refuses a window on only some layers and otherwise applies the model-level window to
all of them, so servelab refuses rather than guess which one a run gets.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from servelab.errors import ConfigError
from servelab.families.base import Family, GgufNames, Preset, ReplicaSink, raw_text, read_softmax
from servelab.families.dims import ModelDims
from servelab.families.layout import llama_like
from servelab.families.llama import LLAMA_GGUF_TENSORS


def refuse_partial_window(raw: Mapping[str, Any], source: str) -> None:
    """Refuse ``use_sliding_window: true`` (Qwen2/Qwen3 semantics differ per engine)."""
    if raw_text(raw).get("use_sliding_window"):
        raise ConfigError(
            f"{source}: use_sliding_window = true (windows from max_window_layers = "
            f"{raw_text(raw).get('max_window_layers')!r} on): transformers and vLLM apply it "
            "differently, servelab does not model it"
        )


def read(raw: Mapping[str, Any], source: str) -> ModelDims:
    """Qwen2/2.5: all full attention (see the module note on ``use_sliding_window``)."""
    refuse_partial_window(raw, source)
    return read_softmax("qwen2", raw, source)


def replica(b: ReplicaSink, cfg: Mapping[str, Any]) -> None:
    """Qwen2's tensors: the Llama layout with q/k/v biases."""
    llama_like(b, cfg, qkv_bias=True, tied=bool(cfg.get("tie_word_embeddings", False)))


def qwen2_5_7b() -> dict[str, Any]:
    """Qwen/Qwen2.5-7B-Instruct config.json (huggingface.co/Qwen/Qwen2.5-7B-Instruct/blob/
    main/config.json)."""
    return {
        "architectures": ["Qwen2ForCausalLM"],
        "model_type": "qwen2",
        "hidden_size": 3584,
        "intermediate_size": 18944,
        "num_hidden_layers": 28,
        "num_attention_heads": 28,
        "num_key_value_heads": 4,
        "vocab_size": 152064,
        "max_position_embeddings": 32768,
        "max_window_layers": 28,
        "sliding_window": 131072,
        "use_sliding_window": False,
        "rope_theta": 1000000.0,
        "rms_norm_eps": 1e-06,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
    }


FAMILY = Family(
    name="qwen2",
    model_types=("qwen2",),
    read=read,
    gguf=GgufNames(
        "qwen2",
        {
            **LLAMA_GGUF_TENSORS,
            "model.layers.#.self_attn.q_proj.bias": "blk.#.attn_q.bias",
            "model.layers.#.self_attn.k_proj.bias": "blk.#.attn_k.bias",
            "model.layers.#.self_attn.v_proj.bias": "blk.#.attn_v.bias",
        },
    ),
    replica=replica,
    presets=(Preset("qwen2.5-7b", "huggingface.co/Qwen/Qwen2.5-7B-Instruct", qwen2_5_7b),),
)
