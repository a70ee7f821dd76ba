"""Qwen3 (``qwen3``, ``qwen3_moe``) and Qwen's Gated DeltaNet hybrids (``qwen3_next``,
``qwen3_5``, ``qwen3_5_moe``, Qwen3.6): full attention plus, for the hybrids, linear
(Gated DeltaNet) layers per ``layer_types`` (transformers derives them from
``full_attention_interval`` when the config leaves them out). MTP:
``mtp_num_hidden_layers`` (Qwen3.5) or ``num_nextn_predict_layers`` (Qwen3-Next).

The replica layouts of these live in :mod:`servelab.synth.replica` (they predate families).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from servelab.families.base import (
    Family,
    GgufNames,
    dims,
    experts,
    get_int,
    map_layer_types,
    opt_int,
    raw_text,
    read_config,
    read_softmax,
    softmax_layers,
)
from servelab.families.dims import ModelDims
from servelab.families.layers import FULL, LINEAR, LinearAttentionDims
from servelab.families.llama import LLAMA_GGUF_TENSORS
from servelab.families.qwen2 import refuse_partial_window

_EXPERT_KEYS = ("num_experts", "num_local_experts")
_HYBRID_ALIASES = {"full_attention": FULL, "linear_attention": LINEAR}


def read_dense(raw: Mapping[str, Any], source: str) -> ModelDims:
    """Qwen3 / Qwen3-MoE: all full attention."""
    refuse_partial_window(raw, source)
    return read_softmax("qwen3", raw, source, *_EXPERT_KEYS, mtp_key="num_nextn_predict_layers")


def read_hybrid(raw: Mapping[str, Any], source: str) -> ModelDims:
    """Qwen3-Next / Qwen3.5 / Qwen3.6: Gated DeltaNet + full attention layers."""
    r = read_config(raw, source)
    c, t = r.common, r.text
    kinds = map_layer_types(getattr(t, "layer_types", None) or (), _HYBRID_ALIASES, source,
                            c.num_layers)
    linear = None
    if LINEAR in kinds:
        linear = LinearAttentionDims(
            num_key_heads=get_int(t, "linear_num_key_heads", source),
            num_value_heads=get_int(t, "linear_num_value_heads", source),
            key_head_dim=get_int(t, "linear_key_head_dim", source),
            value_head_dim=get_int(t, "linear_value_head_dim", source),
            conv_kernel=get_int(t, "linear_conv_kernel_dim", source, 4),
        )
    n_exp, top_k = experts(t, source, *_EXPERT_KEYS)
    mtp = opt_int(t, "mtp_num_hidden_layers", source) or opt_int(
        t, "num_nextn_predict_layers", source) or 0
    ssm = raw_text(raw).get("mamba_ssm_dtype")
    return dims(
        "qwen3_hybrid", raw, r.outer, t, c, source,
        layer_types=kinds,
        attention=softmax_layers(kinds, c.kv_heads, c.head_dim),
        num_experts=n_exp,
        experts_per_token=top_k,
        mtp_layers=mtp,
        linear=linear,
        mamba_ssm_dtype=str(ssm) if isinstance(ssm, str) else None,
        notes=r.notes,
    )


QWEN3 = Family(
    name="qwen3",
    model_types=("qwen3",),
    read=read_dense,
    gguf=GgufNames("qwen3", LLAMA_GGUF_TENSORS),
)

QWEN3_MOE = Family(
    name="qwen3_moe",
    model_types=("qwen3_moe",),
    read=read_dense,
    gguf=GgufNames("qwen3moe"),
)

QWEN3_HYBRID = Family(
    name="qwen3_hybrid",
    model_types=(
        "qwen3_next", "qwen3_5", "qwen3_5_text", "qwen3_5_moe", "qwen3_5_moe_text",
    ),
    read=read_hybrid,
    gguf=GgufNames("qwen3next"),
)
