"""Gemma 3 (``gemma3`` multimodal, ``gemma3_text``): sliding-window and global layers.

Published Gemma-3 configs leave the pattern implicit (``sliding_window_pattern`` 6 or
nothing); transformers' ``Gemma3TextConfig`` derives ``layer_types`` (every 6th layer
global: 27B = 52 sliding + 10 full), which is what vLLM's gemma3 reads. It also defaults
``tie_word_embeddings`` to true (no ``lm_head`` tensor ships) and the context to 131,072.

Checkpoint names: ``language_model.model.*`` (text), ``vision_tower.vision_model.*``
(SigLIP), ``multi_modal_projector.*``. GGUF architecture ``gemma3``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from servelab.families.base import Family, GgufNames, Preset, ReplicaSink, read_softmax
from servelab.families.dims import ModelDims
from servelab.families.layout import attention, cfg_int, gated_mlp


def read(raw: Mapping[str, Any], source: str) -> ModelDims:
    """Gemma 3: ``layer_types`` as transformers derives them, window ``sliding_window``."""
    return read_softmax("gemma3", raw, source)


def _siglip(b: ReplicaSink, p: str, v: Mapping[str, Any]) -> None:
    d, inter = cfg_int(v, "hidden_size"), cfg_int(v, "intermediate_size")
    patch, size = cfg_int(v, "patch_size"), cfg_int(v, "image_size")
    e = f"{p}.embeddings"
    b.param(f"{e}.patch_embedding.weight", d, 3, patch, patch)
    b.param(f"{e}.patch_embedding.bias", d)
    b.param(f"{e}.position_embedding.weight", (size // patch) ** 2, d)
    for i in range(cfg_int(v, "num_hidden_layers")):
        q = f"{p}.encoder.layers.{i}"
        for n in ("layer_norm1", "layer_norm2"):
            b.param(f"{q}.{n}.weight", d)
            b.param(f"{q}.{n}.bias", d)
        for n in ("q_proj", "k_proj", "v_proj", "out_proj"):
            b.linear(f"{q}.self_attn.{n}", d, d, bias=True, quantizable=False)
        b.linear(f"{q}.mlp.fc1", inter, d, bias=True, quantizable=False)
        b.linear(f"{q}.mlp.fc2", d, inter, bias=True, quantizable=False)
    b.param(f"{p}.post_layernorm.weight", d)
    b.param(f"{p}.post_layernorm.bias", d)


def replica(b: ReplicaSink, cfg: Mapping[str, Any]) -> None:
    """Gemma 3's tensors: four norms per layer, q/k norms, tied head, SigLIP tower."""
    t = cfg.get("text_config", cfg)
    h, vocab = cfg_int(t, "hidden_size"), cfg_int(t, "vocab_size")
    hd = cfg_int(t, "head_dim")
    pre = "language_model.model" if "text_config" in cfg else "model"
    b.param(f"{pre}.embed_tokens.weight", vocab, h)
    for i in range(cfg_int(t, "num_hidden_layers")):
        p = f"{pre}.layers.{i}"
        for n in ("input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm",
                  "post_feedforward_layernorm"):
            b.param(f"{p}.{n}.weight", h)
        attention(b, f"{p}.self_attn", {**t, "head_dim": hd}, qk_norm="head")
        gated_mlp(b, f"{p}.mlp", h, cfg_int(t, "intermediate_size"))
    b.param(f"{pre}.norm.weight", h)
    v = cfg.get("vision_config")
    if isinstance(v, Mapping):
        _siglip(b, "vision_tower.vision_model", v)
        d = cfg_int(v, "hidden_size")
        b.param("multi_modal_projector.mm_input_projection_weight", d, h)
        b.param("multi_modal_projector.mm_soft_emb_norm.weight", d)


def _gemma3(text: dict[str, Any]) -> dict[str, Any]:
    return {
        "architectures": ["Gemma3ForConditionalGeneration"],
        "model_type": "gemma3",
        "boi_token_index": 255999,
        "eoi_token_index": 256000,
        "image_token_index": 262144,
        "mm_tokens_per_image": 256,
        "initializer_range": 0.02,
        "torch_dtype": "bfloat16",
        "text_config": {
            "model_type": "gemma3_text",
            "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
            "sliding_window": 1024,
            **text,
        },
        "vision_config": {
            "model_type": "siglip_vision_model",
            "hidden_size": 1152,
            "image_size": 896,
            "intermediate_size": 4304,
            "num_attention_heads": 16,
            "num_hidden_layers": 27,
            "patch_size": 14,
            "vision_use_head": False,
        },
    }


def gemma_3_27b() -> dict[str, Any]:
    """google/gemma-3-27b-it config.json (huggingface.co/google/gemma-3-27b-it/blob/main/
    config.json): no layer_types, no tie_word_embeddings, no max_position_embeddings."""
    return _gemma3({
        "hidden_size": 5376,
        "intermediate_size": 21504,
        "num_attention_heads": 32,
        "num_hidden_layers": 62,
        "num_key_value_heads": 16,
        "head_dim": 128,
        "query_pre_attn_scalar": 168,
        "vocab_size": 262208,
    })


def gemma_3_12b() -> dict[str, Any]:
    """google/gemma-3-12b-it config.json (huggingface.co/google/gemma-3-12b-it)."""
    return _gemma3({
        "hidden_size": 3840,
        "intermediate_size": 15360,
        "num_attention_heads": 16,
        "num_hidden_layers": 48,
        "num_key_value_heads": 8,
        "head_dim": 256,
        "query_pre_attn_scalar": 256,
        "vocab_size": 262208,
    })


def gemma_3_4b() -> dict[str, Any]:
    """google/gemma-3-4b-it config.json (huggingface.co/google/gemma-3-4b-it): heads,
    head_dim and vocabulary left to Gemma3TextConfig's defaults (8 heads, 4 KV heads, 256,
    262,208)."""
    return _gemma3({
        "hidden_size": 2560,
        "intermediate_size": 10240,
        "num_hidden_layers": 34,
    })


FAMILY = Family(
    name="gemma3",
    model_types=("gemma3", "gemma3_text"),
    read=read,
    gguf=GgufNames(
        "gemma3",
        model_type="gemma3_text",
        tensors={
            "language_model.model.embed_tokens.weight": "token_embd.weight",
            "language_model.model.layers.#.pre_feedforward_layernorm.weight":
                "blk.#.ffn_norm.weight",
            "language_model.model.layers.#.post_feedforward_layernorm.weight":
                "blk.#.post_ffw_norm.weight",
            "language_model.model.layers.#.post_attention_layernorm.weight":
                "blk.#.post_attention_norm.weight",
            "language_model.model.layers.#.self_attn.q_norm.weight": "blk.#.attn_q_norm.weight",
            "language_model.model.layers.#.self_attn.k_norm.weight": "blk.#.attn_k_norm.weight",
        },
    ),
    replica=replica,
    presets=(
        Preset("gemma-3-27b", "huggingface.co/google/gemma-3-27b-it", gemma_3_27b),
        Preset("gemma-3-12b", "huggingface.co/google/gemma-3-12b-it", gemma_3_12b),
        Preset("gemma-3-4b", "huggingface.co/google/gemma-3-4b-it", gemma_3_4b),
    ),
)
