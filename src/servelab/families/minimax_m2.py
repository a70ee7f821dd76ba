"""MiniMax-M2 (``minimax_m2``): full attention with whole-projection q/k norms, 256
experts ``block_sparse_moe.experts.N.w1/w2/w3`` (top 8) with a scored gate, FP8 block
weights. ``attn_type_list`` marks every layer full (1); a 0 (lightning / linear
attention, MiniMax-Text-01's kind) is refused. GGUF architecture ``minimax-m2``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from servelab.errors import ConfigError
from servelab.families.base import Family, GgufNames, Preset, ReplicaSink, raw_text, read_softmax
from servelab.families.dims import ModelDims
from servelab.families.layout import block_sparse_moe


def read(raw: Mapping[str, Any], source: str) -> ModelDims:
    """MiniMax-M2: all full attention, ``num_local_experts`` experts."""
    kinds = raw_text(raw).get("attn_type_list")
    if isinstance(kinds, list):
        bad = [i for i, k in enumerate(kinds) if k != 1]
        if bad:
            raise ConfigError(
                f"{source}: attn_type_list[{bad[0]}] = {kinds[bad[0]]!r}: only full attention "
                "(1) is a layer type servelab knows for minimax_m2"
            )
    return read_softmax("minimax_m2", raw, source, "num_local_experts")


def replica(b: ReplicaSink, cfg: Mapping[str, Any]) -> None:
    """MiniMax-M2's tensors (no MTP modules ship): the Mixtral layout with whole-projection
    q/k norms and a routing bias."""
    block_sparse_moe(b, cfg, qk_norm="proj", routing_bias=True)


def minimax_m2() -> dict[str, Any]:
    """MiniMaxAI/MiniMax-M2 config.json (huggingface.co/MiniMaxAI/MiniMax-M2/blob/main/
    config.json)."""
    return {
        "architectures": ["MiniMaxM2ForCausalLM"],
        "model_type": "minimax_m2",
        "hidden_size": 3072,
        "intermediate_size": 1536,
        "num_hidden_layers": 62,
        "num_attention_heads": 48,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "rotary_dim": 64,
        "num_local_experts": 256,
        "num_experts_per_tok": 8,
        "scoring_func": "sigmoid",
        "use_routing_bias": True,
        "use_qk_norm": True,
        "qk_norm_type": "per_layer",
        "attn_type_list": [1] * 62,
        "vocab_size": 200064,
        "max_position_embeddings": 196608,
        "rope_theta": 5000000,
        "rms_norm_eps": 1e-06,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "use_mtp": True,
        "num_mtp_modules": 3,
        "mtp_transformer_layers": 1,
        "quantization_config": {
            "quant_method": "fp8", "fmt": "float8_e4m3fn", "activation_scheme": "dynamic",
            "weight_block_size": [128, 128],
            "modules_to_not_convert": ["gate", "e_score_correction_bias", "lm_head"],
        },
    }


FAMILY = Family(
    name="minimax_m2",
    model_types=("minimax_m2",),
    read=read,
    gguf=GgufNames("minimax-m2"),
    replica=replica,
    presets=(
        Preset("minimax-m2", "huggingface.co/MiniMaxAI/MiniMax-M2", minimax_m2, "fp8-block",
               (r"\.layers\.\d+\.(self_attn|block_sparse_moe\.experts)\.",)),
    ),
)
