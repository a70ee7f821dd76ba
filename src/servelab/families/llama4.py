"""Llama 4 (``llama4`` multimodal, ``llama4_text``): chunked local attention on the RoPE
layers, full (NoPE) attention on every ``no_rope_layer_interval``-th layer.

transformers' ``Llama4TextConfig`` derives ``no_rope_layers`` (empty in the published
config) and ``layer_types`` from them (Scout: 36 chunked of ``attention_chunk_size``
8192 + 12 full); vLLM's llama4 makes the same layers chunked-local. MoE per
``interleave_moe_layer_step``: ``num_local_experts`` fused experts (``feed_forward.experts.
gate_up_proj`` [E, H, 2I]) + a shared expert; dense layers use ``intermediate_size_mlp``.
Text under ``language_model.``, the vision tower under ``vision_model.``.
GGUF architecture ``llama4``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from servelab.families.base import Family, GgufNames, Preset, ReplicaSink, read_softmax
from servelab.families.dims import ModelDims
from servelab.families.layout import attention, cfg_int, gated_mlp


def read(raw: Mapping[str, Any], source: str) -> ModelDims:
    """Llama 4: chunked / full per the derived ``layer_types``."""
    return read_softmax("llama4", raw, source, "num_local_experts")


def _vision(b: ReplicaSink, v: Mapping[str, Any]) -> None:
    d, inter = cfg_int(v, "hidden_size"), cfg_int(v, "intermediate_size")
    patch, size = cfg_int(v, "patch_size"), cfg_int(v, "image_size")
    proj_in, out = cfg_int(v, "projector_input_dim"), cfg_int(v, "projector_output_dim")
    p = "vision_model"
    b.param(f"{p}.class_embedding", d)
    b.param(f"{p}.positional_embedding_vlm", (size // patch) ** 2 + 1, d)
    b.linear(f"{p}.patch_embedding.linear", d, 3 * patch * patch, quantizable=False)
    for n in ("layernorm_pre", "layernorm_post"):
        b.param(f"{p}.{n}.weight", d)
        b.param(f"{p}.{n}.bias", d)
    for i in range(cfg_int(v, "num_hidden_layers")):
        q = f"{p}.model.layers.{i}"
        for n in ("input_layernorm", "post_attention_layernorm"):
            b.param(f"{q}.{n}.weight", d)
            b.param(f"{q}.{n}.bias", d)
        for n in ("q_proj", "k_proj", "v_proj", "o_proj"):
            b.linear(f"{q}.self_attn.{n}", d, d, bias=True, quantizable=False)
        b.linear(f"{q}.mlp.fc1", inter, d, bias=True, quantizable=False)
        b.linear(f"{q}.mlp.fc2", d, inter, bias=True, quantizable=False)
    # pixel shuffle feeds the adapter MLP its intermediate_size channels per position
    b.linear(f"{p}.vision_adapter.mlp.fc1", proj_in, inter, quantizable=False)
    b.linear(f"{p}.vision_adapter.mlp.fc2", out, proj_in, quantizable=False)


def replica(b: ReplicaSink, cfg: Mapping[str, Any]) -> None:
    """Llama 4's tensors: text (MoE + shared expert), vision tower, projector."""
    t = cfg["text_config"]
    h, vocab = cfg_int(t, "hidden_size"), cfg_int(t, "vocab_size")
    e, inter = cfg_int(t, "num_local_experts"), cfg_int(t, "intermediate_size")
    step = cfg_int(t, "interleave_moe_layer_step", 1)
    pre = "language_model.model"
    b.param(f"{pre}.embed_tokens.weight", vocab, h)
    for i in range(cfg_int(t, "num_hidden_layers")):
        p = f"{pre}.layers.{i}"
        b.param(f"{p}.input_layernorm.weight", h)
        attention(b, f"{p}.self_attn", t)
        b.param(f"{p}.post_attention_layernorm.weight", h)
        if step and (i + 1) % step == 0:
            b.linear(f"{p}.feed_forward.router", e, h, quantizable=False)
            b.param(f"{p}.feed_forward.experts.gate_up_proj", e, h, 2 * inter)
            b.param(f"{p}.feed_forward.experts.down_proj", e, inter, h)
            gated_mlp(b, f"{p}.feed_forward.shared_expert", h, inter)
        else:
            gated_mlp(b, f"{p}.feed_forward", h, cfg_int(t, "intermediate_size_mlp"))
    b.param(f"{pre}.norm.weight", h)
    b.linear("language_model.lm_head", vocab, h, quantizable=False)
    v = cfg.get("vision_config")
    if isinstance(v, Mapping):
        _vision(b, v)
        b.linear("multi_modal_projector.linear_1", h, cfg_int(v, "vision_output_dim"),
                 quantizable=False)


def llama_4_scout() -> dict[str, Any]:
    """meta-llama/Llama-4-Scout-17B-16E-Instruct config.json (huggingface.co/meta-llama/
    Llama-4-Scout-17B-16E-Instruct/blob/main/config.json)."""
    return {
        "architectures": ["Llama4ForConditionalGeneration"],
        "model_type": "llama4",
        "boi_token_index": 200080,
        "eoi_token_index": 200081,
        "image_token_index": 200092,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "text_config": {
            "model_type": "llama4_text",
            "hidden_size": 5120,
            "intermediate_size": 8192,
            "intermediate_size_mlp": 16384,
            "num_hidden_layers": 48,
            "num_attention_heads": 40,
            "num_key_value_heads": 8,
            "head_dim": 128,
            "num_local_experts": 16,
            "num_experts_per_tok": 1,
            "interleave_moe_layer_step": 1,
            "attention_chunk_size": 8192,
            "no_rope_layers": [],
            "use_qk_norm": True,
            "attn_temperature_tuning": True,
            "floor_scale": 8192,
            "attn_scale": 0.1,
            "vocab_size": 202048,
            "max_position_embeddings": 10485760,
            "rope_theta": 500000.0,
            "rope_scaling": {
                "rope_type": "llama3", "factor": 16.0, "high_freq_factor": 1.0,
                "low_freq_factor": 1.0, "original_max_position_embeddings": 8192,
            },
            "rms_norm_eps": 1e-05,
            "torch_dtype": "bfloat16",
        },
        "vision_config": {
            "model_type": "llama4_vision_model",
            "hidden_size": 1408,
            "intermediate_size": 5632,
            "num_hidden_layers": 34,
            "num_attention_heads": 16,
            "image_size": 336,
            "patch_size": 14,
            "pixel_shuffle_ratio": 0.5,
            "projector_input_dim": 4096,
            "projector_output_dim": 4096,
            "vision_output_dim": 4096,
            "rope_theta": 10000,
        },
    }


FAMILY = Family(
    name="llama4",
    model_types=("llama4", "llama4_text"),
    read=read,
    gguf=GgufNames("llama4", model_type="llama4_text"),
    replica=replica,
    presets=(
        Preset("llama-4-scout", "huggingface.co/meta-llama/Llama-4-Scout-17B-16E-Instruct",
               llama_4_scout),
    ),
)
