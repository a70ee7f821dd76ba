"""Phi-3 / Phi-4 (``phi3``): fused ``qkv_proj`` and ``gate_up_proj``; a model-level
``sliding_window`` (Phi-3-mini: 2047) windows every layer, Phi-4 has none.

GGUF architecture ``phi3``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from servelab.families.base import Family, GgufNames, Preset, ReplicaSink, read_softmax
from servelab.families.dims import ModelDims
from servelab.families.layout import cfg_int, embeddings_and_head, head_dim


def read(raw: Mapping[str, Any], source: str) -> ModelDims:
    """Phi-3/4: all full, or all sliding with the config's ``sliding_window``."""
    return read_softmax("phi3", raw, source)


def replica(b: ReplicaSink, cfg: Mapping[str, Any]) -> None:
    """Phi-3's tensors: ``self_attn.qkv_proj``/``o_proj``, ``mlp.gate_up_proj``/``down_proj``."""
    h, vocab = cfg_int(cfg, "hidden_size"), cfg_int(cfg, "vocab_size")
    nh = cfg_int(cfg, "num_attention_heads")
    nkv = cfg_int(cfg, "num_key_value_heads", nh)
    hd, inter = head_dim(cfg), cfg_int(cfg, "intermediate_size")
    b.param("model.embed_tokens.weight", vocab, h)
    for i in range(cfg_int(cfg, "num_hidden_layers")):
        p = f"model.layers.{i}"
        b.param(f"{p}.input_layernorm.weight", h)
        b.linear(f"{p}.self_attn.qkv_proj", (nh + 2 * nkv) * hd, h)
        b.linear(f"{p}.self_attn.o_proj", h, nh * hd)
        b.param(f"{p}.post_attention_layernorm.weight", h)
        b.linear(f"{p}.mlp.gate_up_proj", 2 * inter, h)
        b.linear(f"{p}.mlp.down_proj", h, inter)
    embeddings_and_head(b, "model", cfg, tied=bool(cfg.get("tie_word_embeddings", False)))


def phi_4() -> dict[str, Any]:
    """microsoft/phi-4 config.json (huggingface.co/microsoft/phi-4/blob/main/config.json)."""
    return {
        "architectures": ["Phi3ForCausalLM"],
        "model_type": "phi3",
        "hidden_size": 5120,
        "intermediate_size": 17920,
        "num_hidden_layers": 40,
        "num_attention_heads": 40,
        "num_key_value_heads": 10,
        "vocab_size": 100352,
        "max_position_embeddings": 16384,
        "original_max_position_embeddings": 16384,
        "rope_theta": 250000,
        "sliding_window": None,
        "rms_norm_eps": 1e-05,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
    }


FAMILY = Family(
    name="phi3",
    model_types=("phi3",),
    read=read,
    gguf=GgufNames(
        "phi3",
        {
            "model.layers.#.self_attn.qkv_proj.weight": "blk.#.attn_qkv.weight",
            "model.layers.#.mlp.gate_up_proj.weight": "blk.#.ffn_up.weight",
        },
    ),
    replica=replica,
    presets=(Preset("phi-4", "huggingface.co/microsoft/phi-4", phi_4),),
)
