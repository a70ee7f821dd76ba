"""DeepSeek-V2/V3/R1 (``deepseek_v2``, ``deepseek_v3``) and Kimi-K2 (``kimi_k2``, read
with DeepSeek-V3's config class, as its remote code does): multi-head latent attention on
every layer.

MLA caches one latent per token: ``kv_lora_rank + qk_rope_head_dim`` values, shared by
all heads (vLLM: one KV head of that size). The first ``first_k_dense_replace`` layers
have a dense MLP, the rest ``n_routed_experts`` routed experts (top
``num_experts_per_tok``) plus ``n_shared_experts`` shared ones. MTP:
``num_nextn_predict_layers`` layers appended as ``model.layers.<num_hidden_layers>``.
GGUF architecture ``deepseek2``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from servelab.families.base import (
    Family,
    GgufNames,
    Preset,
    ReplicaSink,
    dims,
    experts,
    get_int,
    opt_int,
    read_config,
)
from servelab.families.dims import ModelDims
from servelab.families.layers import MLA, MlaDims
from servelab.families.layout import cfg_int, gated_mlp, per_expert


def _read(family: str, raw: Mapping[str, Any], source: str, model_type: str | None) -> ModelDims:
    r = read_config(raw, source, model_type, mla=True)
    c, t = r.common, r.text
    mla = MlaDims(
        kv_lora_rank=get_int(t, "kv_lora_rank", source),
        qk_rope_head_dim=get_int(t, "qk_rope_head_dim", source),
        qk_nope_head_dim=get_int(t, "qk_nope_head_dim", source),
        v_head_dim=get_int(t, "v_head_dim", source),
        q_lora_rank=opt_int(t, "q_lora_rank", source),
    )
    n_exp, top_k = experts(t, source, "n_routed_experts")
    kinds = (MLA,) * c.num_layers
    c = replace(c, kv_heads=1, head_dim=mla.latent_dim)  # vLLM: one latent "head"
    return dims(
        family, raw, r.outer, t, c, source,
        layer_types=kinds,
        attention=(None,) * c.num_layers,
        num_experts=n_exp,
        experts_per_token=top_k,
        mtp_layers=opt_int(t, "num_nextn_predict_layers", source) or 0,
        mla=mla,
        notes=r.notes,
    )


def read(raw: Mapping[str, Any], source: str) -> ModelDims:
    """DeepSeek-V2/V3: MLA on every layer."""
    return _read("deepseek", raw, source, None)


def read_kimi(raw: Mapping[str, Any], source: str) -> ModelDims:
    """Kimi-K2: DeepSeek-V3's architecture under its own model_type."""
    return _read("deepseek", raw, source, "deepseek_v3")


def _mla_attention(b: ReplicaSink, p: str, cfg: Mapping[str, Any]) -> None:
    h, nh = cfg_int(cfg, "hidden_size"), cfg_int(cfg, "num_attention_heads")
    kv_lora, rope = cfg_int(cfg, "kv_lora_rank"), cfg_int(cfg, "qk_rope_head_dim")
    nope, vd = cfg_int(cfg, "qk_nope_head_dim"), cfg_int(cfg, "v_head_dim")
    q_lora = cfg.get("q_lora_rank")
    if q_lora:
        b.linear(f"{p}.q_a_proj", int(q_lora), h)
        b.param(f"{p}.q_a_layernorm.weight", int(q_lora))
        b.linear(f"{p}.q_b_proj", nh * (nope + rope), int(q_lora))
    else:
        b.linear(f"{p}.q_proj", nh * (nope + rope), h)
    b.linear(f"{p}.kv_a_proj_with_mqa", kv_lora + rope, h)
    b.param(f"{p}.kv_a_layernorm.weight", kv_lora)
    b.linear(f"{p}.kv_b_proj", nh * (nope + vd), kv_lora)
    b.linear(f"{p}.o_proj", h, nh * vd)


def decoder_layer(b: ReplicaSink, p: str, cfg: Mapping[str, Any], index: int,
                  attn: Any = _mla_attention, bias_dtype: str = "F32") -> None:
    """One DeepSeek-layout decoder layer: attention, then dense MLP (first
    ``first_k_dense_replace`` layers) or routed + shared experts with a scored gate."""
    h = cfg_int(cfg, "hidden_size")
    b.param(f"{p}.input_layernorm.weight", h)
    attn(b, f"{p}.self_attn", cfg)
    b.param(f"{p}.post_attention_layernorm.weight", h)
    if index < cfg_int(cfg, "first_k_dense_replace", 0):
        gated_mlp(b, f"{p}.mlp", h, cfg_int(cfg, "intermediate_size"))
        return
    e, inter = cfg_int(cfg, "n_routed_experts"), cfg_int(cfg, "moe_intermediate_size")
    b.linear(f"{p}.mlp.gate", e, h, quantizable=False)
    if cfg.get("topk_method", "noaux_tc") == "noaux_tc":
        b.param(f"{p}.mlp.gate.e_score_correction_bias", e, dtype=bias_dtype)
    per_expert(b, f"{p}.mlp.experts", e, h, inter)
    shared = cfg_int(cfg, "n_shared_experts", 0)
    if shared:
        gated_mlp(b, f"{p}.mlp.shared_experts", h, inter * shared)


def mtp_layer(b: ReplicaSink, p: str, cfg: Mapping[str, Any], index: int,
              attn: Any = _mla_attention) -> None:
    """A NextN/MTP layer: its own embedding and head, ``eh_proj`` over [emb; hidden], one
    decoder layer."""
    h, vocab = cfg_int(cfg, "hidden_size"), cfg_int(cfg, "vocab_size")
    b.param(f"{p}.embed_tokens.weight", vocab, h)
    b.param(f"{p}.enorm.weight", h)
    b.param(f"{p}.hnorm.weight", h)
    b.linear(f"{p}.eh_proj", h, 2 * h, quantizable=False)
    decoder_layer(b, p, cfg, index, attn)
    b.param(f"{p}.shared_head.norm.weight", h)
    b.linear(f"{p}.shared_head.head", vocab, h, quantizable=False)


def replica(b: ReplicaSink, cfg: Mapping[str, Any]) -> None:
    """DeepSeek-V3's tensors (V2 and Kimi-K2 alike), MTP layers included."""
    h, vocab = cfg_int(cfg, "hidden_size"), cfg_int(cfg, "vocab_size")
    n = cfg_int(cfg, "num_hidden_layers")
    b.param("model.embed_tokens.weight", vocab, h)
    for i in range(n):
        decoder_layer(b, f"model.layers.{i}", cfg, i)
    for j in range(cfg_int(cfg, "num_nextn_predict_layers", 0)):
        mtp_layer(b, f"model.layers.{n + j}", cfg, n + j)
    b.param("model.norm.weight", h)
    b.linear("lm_head", vocab, h, quantizable=False)


#: FP8 block exports quantize every linear of the decoder layers (routers stay BF16).
FP8_LINEARS = (r"\.layers\.\d+\.(self_attn|mlp)\.",)
_FP8 = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
        "weight_block_size": [128, 128]}


def deepseek_v3() -> dict[str, Any]:
    """deepseek-ai/DeepSeek-V3 config.json (huggingface.co/deepseek-ai/DeepSeek-V3/blob/
    main/config.json; DeepSeek-R1 has the same dimensions)."""
    return {
        "architectures": ["DeepseekV3ForCausalLM"],
        "model_type": "deepseek_v3",
        "hidden_size": 7168,
        "intermediate_size": 18432,
        "moe_intermediate_size": 2048,
        "num_hidden_layers": 61,
        "num_attention_heads": 128,
        "num_key_value_heads": 128,
        "n_routed_experts": 256,
        "n_shared_experts": 1,
        "num_experts_per_tok": 8,
        "first_k_dense_replace": 3,
        "moe_layer_freq": 1,
        "n_group": 8,
        "topk_group": 4,
        "topk_method": "noaux_tc",
        "routed_scaling_factor": 2.5,
        "norm_topk_prob": True,
        "scoring_func": "sigmoid",
        "q_lora_rank": 1536,
        "kv_lora_rank": 512,
        "qk_nope_head_dim": 128,
        "qk_rope_head_dim": 64,
        "v_head_dim": 128,
        "num_nextn_predict_layers": 1,
        "vocab_size": 129280,
        "max_position_embeddings": 163840,
        "rope_theta": 10000,
        "rope_scaling": {
            "type": "yarn", "factor": 40, "beta_fast": 32, "beta_slow": 1, "mscale": 1.0,
            "mscale_all_dim": 1.0, "original_max_position_embeddings": 4096,
        },
        "rms_norm_eps": 1e-06,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "quantization_config": dict(_FP8),
    }


def kimi_k2() -> dict[str, Any]:
    """moonshotai/Kimi-K2-Instruct config.json (huggingface.co/moonshotai/Kimi-K2-Instruct/
    blob/main/config.json): DeepSeek-V3 layout, 384 experts, 64 heads, no MTP."""
    cfg = deepseek_v3()
    cfg.update({
        "model_type": "kimi_k2",
        "num_attention_heads": 64,
        "num_key_value_heads": 64,
        "n_routed_experts": 384,
        "first_k_dense_replace": 1,
        "n_group": 1,
        "topk_group": 1,
        "routed_scaling_factor": 2.827,
        "num_nextn_predict_layers": 0,
        "vocab_size": 163840,
        "max_position_embeddings": 131072,
        "rope_theta": 50000.0,
        "rope_scaling": {
            "type": "yarn", "factor": 32.0, "beta_fast": 1.0, "beta_slow": 1.0, "mscale": 1.0,
            "mscale_all_dim": 1.0, "original_max_position_embeddings": 4096,
        },
    })
    return cfg


_GGUF = GgufNames(
    "deepseek2",
    {
        "model.layers.#.self_attn.q_a_proj.weight": "blk.#.attn_q_a.weight",
        "model.layers.#.self_attn.q_b_proj.weight": "blk.#.attn_q_b.weight",
        "model.layers.#.self_attn.kv_a_proj_with_mqa.weight": "blk.#.attn_kv_a_mqa.weight",
        "model.layers.#.self_attn.kv_b_proj.weight": "blk.#.attn_kv_b.weight",
        "model.layers.#.mlp.gate.e_score_correction_bias": "blk.#.exp_probs_b.bias",
    },
)

DEEPSEEK = Family(
    name="deepseek",
    model_types=("deepseek_v2", "deepseek_v3"),
    read=read,
    gguf=_GGUF,
    replica=replica,
    presets=(
        Preset("deepseek-v3", "huggingface.co/deepseek-ai/DeepSeek-V3", deepseek_v3,
               "fp8-block", FP8_LINEARS),
    ),
)

KIMI_K2 = Family(
    name="kimi_k2",
    model_types=("kimi_k2",),
    read=read_kimi,
    hf_model_type="deepseek_v3",
    gguf=_GGUF,
    replica=replica,
    presets=(
        Preset("kimi-k2", "huggingface.co/moonshotai/Kimi-K2-Instruct", kimi_k2,
               "fp8-block", FP8_LINEARS),
    ),
)
