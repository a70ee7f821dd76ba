"""Mistral (``mistral``) and Mixtral (``mixtral``): Llama layout; a model-level
``sliding_window`` makes every layer sliding (vLLM applies it to layers that name no
window of their own); Mixtral's experts are ``block_sparse_moe.experts.N.w1/w2/w3``.

GGUF architecture ``llama`` for both (llama.cpp converts Mistral and Mixtral to it).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from servelab.families.base import Family, GgufNames, Preset, ReplicaSink, read_softmax
from servelab.families.dims import ModelDims
from servelab.families.layout import block_sparse_moe, llama_like
from servelab.families.llama import LLAMA_GGUF_TENSORS


def read_mistral(raw: Mapping[str, Any], source: str) -> ModelDims:
    """Mistral: all full, or all sliding with the config's ``sliding_window``."""
    return read_softmax("mistral", raw, source)


def read_mixtral(raw: Mapping[str, Any], source: str) -> ModelDims:
    """Mixtral: as Mistral, plus ``num_local_experts`` experts, top ``num_experts_per_tok``."""
    return read_softmax("mixtral", raw, source, "num_local_experts")


def mistral_replica(b: ReplicaSink, cfg: Mapping[str, Any]) -> None:
    """Mistral's tensors (the Llama layout)."""
    llama_like(b, cfg, tied=bool(cfg.get("tie_word_embeddings", False)))


def mixtral_replica(b: ReplicaSink, cfg: Mapping[str, Any]) -> None:
    """Mixtral's tensors: Llama attention, ``block_sparse_moe`` gate + per-expert w1/w2/w3."""
    block_sparse_moe(b, cfg)


def mistral_7b() -> dict[str, Any]:
    """mistralai/Mistral-7B-v0.1 config.json (huggingface.co/mistralai/Mistral-7B-v0.1/
    blob/main/config.json): 32 layers, sliding_window 4096."""
    return {
        "architectures": ["MistralForCausalLM"],
        "model_type": "mistral",
        "hidden_size": 4096,
        "intermediate_size": 14336,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "vocab_size": 32000,
        "max_position_embeddings": 32768,
        "rope_theta": 10000.0,
        "sliding_window": 4096,
        "rms_norm_eps": 1e-05,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
    }


def mixtral_8x7b() -> dict[str, Any]:
    """mistralai/Mixtral-8x7B-v0.1 config.json (huggingface.co/mistralai/Mixtral-8x7B-v0.1/
    blob/main/config.json): 8 experts, top 2, no sliding window."""
    return {
        "architectures": ["MixtralForCausalLM"],
        "model_type": "mixtral",
        "hidden_size": 4096,
        "intermediate_size": 14336,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "num_local_experts": 8,
        "num_experts_per_tok": 2,
        "vocab_size": 32000,
        "max_position_embeddings": 32768,
        "rope_theta": 1000000.0,
        "sliding_window": None,
        "rms_norm_eps": 1e-05,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
    }


MISTRAL = Family(
    name="mistral",
    model_types=("mistral",),
    read=read_mistral,
    gguf=GgufNames("llama", LLAMA_GGUF_TENSORS),
    replica=mistral_replica,
    presets=(Preset("mistral-7b", "huggingface.co/mistralai/Mistral-7B-v0.1", mistral_7b),),
)

MIXTRAL = Family(
    name="mixtral",
    model_types=("mixtral",),
    read=read_mixtral,
    gguf=GgufNames(
        "llama",
        {
            **LLAMA_GGUF_TENSORS,
            "model.layers.#.block_sparse_moe.gate.weight": "blk.#.ffn_gate_inp.weight",
            "model.layers.#.block_sparse_moe.experts.#.w1.weight": "blk.#.ffn_gate_exps.weight",
            "model.layers.#.block_sparse_moe.experts.#.w2.weight": "blk.#.ffn_down_exps.weight",
            "model.layers.#.block_sparse_moe.experts.#.w3.weight": "blk.#.ffn_up_exps.weight",
        },
    ),
    replica=mixtral_replica,
    presets=(Preset("mixtral-8x7b", "huggingface.co/mistralai/Mixtral-8x7B-v0.1", mixtral_8x7b),),
)
