"""GLM-4.5 / GLM-4.6 (``glm4_moe``): full attention (GQA, q/k/v biases, q/k norms),
DeepSeek-style MoE (``n_routed_experts``, shared experts, scored gate, dense first
``first_k_dense_replace`` layers) and one MTP layer appended as
``model.layers.<num_hidden_layers>`` (``num_nextn_predict_layers``).
GGUF architecture ``glm4moe``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from servelab.families.base import Family, GgufNames, Preset, ReplicaSink, read_softmax
from servelab.families.deepseek import decoder_layer, mtp_layer
from servelab.families.dims import ModelDims
from servelab.families.layout import attention, cfg_int


def read(raw: Mapping[str, Any], source: str) -> ModelDims:
    """GLM-4.5/4.6: all full attention, routed experts, NextN layers."""
    return read_softmax("glm4_moe", raw, source, "n_routed_experts",
                        mtp_key="num_nextn_predict_layers")


def _attn(b: ReplicaSink, p: str, cfg: Mapping[str, Any]) -> None:
    attention(b, p, cfg, qkv_bias=bool(cfg.get("attention_bias", False)),
              qk_norm="head" if cfg.get("use_qk_norm") else None)


def replica(b: ReplicaSink, cfg: Mapping[str, Any]) -> None:
    """GLM-4.5's tensors, its MTP layer included."""
    h, vocab = cfg_int(cfg, "hidden_size"), cfg_int(cfg, "vocab_size")
    n = cfg_int(cfg, "num_hidden_layers")
    b.param("model.embed_tokens.weight", vocab, h)
    for i in range(n):
        decoder_layer(b, f"model.layers.{i}", cfg, i, _attn)
    for j in range(cfg_int(cfg, "num_nextn_predict_layers", 0)):
        mtp_layer(b, f"model.layers.{n + j}", cfg, n + j, _attn)
    b.param("model.norm.weight", h)
    b.linear("lm_head", vocab, h, quantizable=False)


def glm_4_5() -> dict[str, Any]:
    """zai-org/GLM-4.5 config.json (huggingface.co/zai-org/GLM-4.5/blob/main/config.json)."""
    return {
        "architectures": ["Glm4MoeForCausalLM"],
        "model_type": "glm4_moe",
        "hidden_size": 5120,
        "intermediate_size": 12288,
        "moe_intermediate_size": 1536,
        "num_hidden_layers": 92,
        "num_attention_heads": 96,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "partial_rotary_factor": 0.5,
        "attention_bias": True,
        "use_qk_norm": True,
        "n_routed_experts": 160,
        "n_shared_experts": 1,
        "num_experts_per_tok": 8,
        "first_k_dense_replace": 3,
        "n_group": 1,
        "topk_group": 1,
        "norm_topk_prob": True,
        "routed_scaling_factor": 2.5,
        "num_nextn_predict_layers": 1,
        "vocab_size": 151552,
        "max_position_embeddings": 131072,
        "rope_theta": 1000000,
        "rms_norm_eps": 1e-05,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
    }


def glm_4_6() -> dict[str, Any]:
    """zai-org/GLM-4.6 config.json (huggingface.co/zai-org/GLM-4.6/blob/main/config.json):
    GLM-4.5's dimensions with a 202,752-token context."""
    return {**glm_4_5(), "max_position_embeddings": 202752}


FAMILY = Family(
    name="glm4_moe",
    model_types=("glm4_moe",),
    read=read,
    gguf=GgufNames("glm4moe"),
    replica=replica,
    presets=(
        Preset("glm-4.5", "huggingface.co/zai-org/GLM-4.5", glm_4_5),
        Preset("glm-4.6", "huggingface.co/zai-org/GLM-4.6", glm_4_6),
    ),
)
