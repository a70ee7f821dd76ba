"""Llama (``llama``): every layer full attention, dense SwiGLU MLP.

GGUF architecture ``llama``. Replica layout: ``model.layers.N.self_attn``/``mlp``
(``attention_bias`` biases q, k, v and o alike, as LlamaAttention does).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from servelab.families.base import Family, GgufNames, ReplicaSink, read_softmax
from servelab.families.dims import ModelDims
from servelab.families.layout import llama_like

#: Hugging Face -> llama.cpp tensor names shared by the Llama-layout families.
LLAMA_GGUF_TENSORS: Mapping[str, str] = {
    "model.embed_tokens.weight": "token_embd.weight",
    "model.norm.weight": "output_norm.weight",
    "lm_head.weight": "output.weight",
    "model.layers.#.input_layernorm.weight": "blk.#.attn_norm.weight",
    "model.layers.#.self_attn.q_proj.weight": "blk.#.attn_q.weight",
    "model.layers.#.self_attn.k_proj.weight": "blk.#.attn_k.weight",
    "model.layers.#.self_attn.v_proj.weight": "blk.#.attn_v.weight",
    "model.layers.#.self_attn.o_proj.weight": "blk.#.attn_output.weight",
    "model.layers.#.post_attention_layernorm.weight": "blk.#.ffn_norm.weight",
    "model.layers.#.mlp.gate_proj.weight": "blk.#.ffn_gate.weight",
    "model.layers.#.mlp.up_proj.weight": "blk.#.ffn_up.weight",
    "model.layers.#.mlp.down_proj.weight": "blk.#.ffn_down.weight",
}


def read(raw: Mapping[str, Any], source: str) -> ModelDims:
    """Llama: all full attention (a model-level ``sliding_window`` would make all sliding)."""
    return read_softmax("llama", raw, source)


def replica(b: ReplicaSink, cfg: Mapping[str, Any]) -> None:
    """Llama's tensors."""
    bias = bool(cfg.get("attention_bias", False))
    llama_like(b, cfg, qkv_bias=bias, o_bias=bias,
               tied=bool(cfg.get("tie_word_embeddings", False)))


FAMILY = Family(
    name="llama",
    model_types=("llama",),
    read=read,
    gguf=GgufNames("llama", LLAMA_GGUF_TENSORS),
    replica=replica,
)
