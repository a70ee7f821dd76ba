"""gpt-oss (``gpt_oss``): alternating sliding-window (128) and full layers, learned
attention sinks, MXFP4 routed experts.

``layer_types`` as transformers' ``GptOssConfig`` gives them (sliding first, as vLLM's
gpt_oss windows the even layers). Experts ship fused in MXFP4: ``mlp.experts.
gate_up_proj_blocks`` U8 [E, 2I, H/32, 16] + ``gate_up_proj_scales`` U8 (E8M0) [E, 2I, H/32]
+ a BF16 bias, the same for ``down_proj``; the router is ``mlp.router``; the
``quantization_config`` ignore list is transformers-style globs (``model.layers.*.
self_attn``). GGUF architecture ``gpt-oss``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from servelab.families.base import Family, GgufNames, Preset, ReplicaSink, read_softmax
from servelab.families.dims import ModelDims
from servelab.families.layout import attention, cfg_int

#: MXFP4: 32 values share one E8M0 scale; two FP4 values per byte.
MXFP4_BLOCK = 32


def read(raw: Mapping[str, Any], source: str) -> ModelDims:
    """gpt-oss: sliding/full per ``layer_types``, sinks on every attention layer."""
    return read_softmax("gpt_oss", raw, source, "num_local_experts", sinks=True)


def _mxfp4(b: ReplicaSink, p: str, e: int, out: int, inp: int) -> None:
    b.param(f"{p}_blocks", e, out, inp // MXFP4_BLOCK, MXFP4_BLOCK // 2, dtype="U8")
    b.param(f"{p}_scales", e, out, inp // MXFP4_BLOCK, dtype="U8")
    b.param(f"{p}_bias", e, out)


def replica(b: ReplicaSink, cfg: Mapping[str, Any]) -> None:
    """gpt-oss's tensors: biased attention + sinks, router, MXFP4 fused experts."""
    h, vocab = cfg_int(cfg, "hidden_size"), cfg_int(cfg, "vocab_size")
    inter, e = cfg_int(cfg, "intermediate_size"), cfg_int(cfg, "num_local_experts")
    nh = cfg_int(cfg, "num_attention_heads")
    b.param("model.embed_tokens.weight", vocab, h)
    for i in range(cfg_int(cfg, "num_hidden_layers")):
        p = f"model.layers.{i}"
        b.param(f"{p}.input_layernorm.weight", h)
        attention(b, f"{p}.self_attn", cfg, qkv_bias=True, o_bias=True)
        b.param(f"{p}.self_attn.sinks", nh)
        b.param(f"{p}.post_attention_layernorm.weight", h)
        b.linear(f"{p}.mlp.router", e, h, bias=True, quantizable=False)
        _mxfp4(b, f"{p}.mlp.experts.gate_up_proj", e, 2 * inter, h)
        _mxfp4(b, f"{p}.mlp.experts.down_proj", e, h, inter)
    b.param("model.norm.weight", h)
    b.linear("lm_head", vocab, h, quantizable=False)


def _gpt_oss(layers: int, experts: int) -> dict[str, Any]:
    return {
        "architectures": ["GptOssForCausalLM"],
        "model_type": "gpt_oss",
        "hidden_size": 2880,
        "intermediate_size": 2880,
        "num_hidden_layers": layers,
        "num_attention_heads": 64,
        "num_key_value_heads": 8,
        "head_dim": 64,
        "num_local_experts": experts,
        "num_experts_per_tok": 4,
        "experts_per_token": 4,
        "vocab_size": 201088,
        "sliding_window": 128,
        "layer_types": ["sliding_attention", "full_attention"] * (layers // 2),
        "max_position_embeddings": 131072,
        "initial_context_length": 4096,
        "rope_theta": 150000,
        "rope_scaling": {
            "rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0,
            "truncate": False, "original_max_position_embeddings": 4096,
        },
        "attention_bias": True,
        "swiglu_limit": 7.0,
        "rms_norm_eps": 1e-05,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "quantization_config": {
            "quant_method": "mxfp4",
            "modules_to_not_convert": [
                "model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens",
                "lm_head",
            ],
        },
    }


def gpt_oss_120b() -> dict[str, Any]:
    """openai/gpt-oss-120b config.json (huggingface.co/openai/gpt-oss-120b/blob/main/
    config.json): 36 layers, 128 experts top 4."""
    return _gpt_oss(36, 128)


def gpt_oss_20b() -> dict[str, Any]:
    """openai/gpt-oss-20b config.json (huggingface.co/openai/gpt-oss-20b/blob/main/
    config.json): 24 layers, 32 experts top 4."""
    return _gpt_oss(24, 32)


FAMILY = Family(
    name="gpt_oss",
    model_types=("gpt_oss",),
    read=read,
    gguf=GgufNames(
        "gpt-oss",
        {
            "model.layers.#.self_attn.sinks": "blk.#.attn_sinks.weight",
            "model.layers.#.mlp.router.weight": "blk.#.ffn_gate_inp.weight",
            "model.layers.#.mlp.experts.down_proj_blocks": "blk.#.ffn_down_exps.weight",
        },
    ),
    replica=replica,
    presets=(
        Preset("gpt-oss-120b", "huggingface.co/openai/gpt-oss-120b", gpt_oss_120b, "native"),
        Preset("gpt-oss-20b", "huggingface.co/openai/gpt-oss-20b", gpt_oss_20b, "native"),
    ),
)
