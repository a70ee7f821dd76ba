"""Replica layout pieces shared by families: the Hugging Face tensors of common blocks.

A family's ``replica`` function writes its tensors into a :class:`ReplicaSink` (the
synth builder, which applies the replica's quantization layout to ``linear`` modules).
``cfg_int`` reads the published config a preset carries; a missing key is a refusal.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from servelab.errors import ConfigError
from servelab.families.base import ReplicaSink


def cfg_int(cfg: Mapping[str, Any], key: str, default: int | None = None) -> int:
    """Integer ``key`` of a replica config (``default`` when absent), or a refusal."""
    v = cfg.get(key, default)
    if not isinstance(v, int) or isinstance(v, bool):
        raise ConfigError(f"replica config needs an integer {key!r}")
    return v


def head_dim(cfg: Mapping[str, Any]) -> int:
    """``head_dim``, or hidden / heads when the config leaves it out."""
    hd = cfg.get("head_dim")
    return int(hd) if hd else cfg_int(cfg, "hidden_size") // cfg_int(cfg, "num_attention_heads")


def attention(
    b: ReplicaSink,
    p: str,
    cfg: Mapping[str, Any],
    *,
    qkv_bias: bool = False,
    o_bias: bool = False,
    qk_norm: str | None = None,
) -> None:
    """``q_proj``/``k_proj``/``v_proj``/``o_proj`` (GQA), optional per-head (``"head"``)
    or whole-projection (``"proj"``) q/k norms."""
    h = cfg_int(cfg, "hidden_size")
    nh = cfg_int(cfg, "num_attention_heads")
    nkv = cfg_int(cfg, "num_key_value_heads", nh)
    hd = head_dim(cfg)
    b.linear(f"{p}.q_proj", nh * hd, h, bias=qkv_bias)
    b.linear(f"{p}.k_proj", nkv * hd, h, bias=qkv_bias)
    b.linear(f"{p}.v_proj", nkv * hd, h, bias=qkv_bias)
    b.linear(f"{p}.o_proj", h, nh * hd, bias=o_bias)
    if qk_norm == "head":
        b.param(f"{p}.q_norm.weight", hd)
        b.param(f"{p}.k_norm.weight", hd)
    elif qk_norm == "proj":
        b.param(f"{p}.q_norm.weight", nh * hd)
        b.param(f"{p}.k_norm.weight", nkv * hd)


def gated_mlp(b: ReplicaSink, p: str, hidden: int, inter: int) -> None:
    """SwiGLU feed-forward: ``gate_proj``, ``up_proj``, ``down_proj``."""
    b.linear(f"{p}.gate_proj", inter, hidden)
    b.linear(f"{p}.up_proj", inter, hidden)
    b.linear(f"{p}.down_proj", hidden, inter)


def per_expert(
    b: ReplicaSink, p: str, n: int, hidden: int, inter: int, *, names: str = "gate"
) -> None:
    """``n`` routed experts stored one by one: ``gate_proj/up_proj/down_proj`` or
    Mixtral's ``w1/w3/w2``."""
    for j in range(n):
        if names == "w":
            b.linear(f"{p}.{j}.w1", inter, hidden)
            b.linear(f"{p}.{j}.w2", hidden, inter)
            b.linear(f"{p}.{j}.w3", inter, hidden)
        else:
            gated_mlp(b, f"{p}.{j}", hidden, inter)


def embeddings_and_head(b: ReplicaSink, prefix: str, cfg: Mapping[str, Any], *, tied: bool,
                        head: str = "lm_head") -> None:
    """Final norm plus the output head (absent when tied to the embedding)."""
    h, vocab = cfg_int(cfg, "hidden_size"), cfg_int(cfg, "vocab_size")
    b.param(f"{prefix}.norm.weight", h)
    if not tied:
        b.linear(head, vocab, h, quantizable=False)


def llama_like(
    b: ReplicaSink,
    cfg: Mapping[str, Any],
    *,
    prefix: str = "model",
    qkv_bias: bool = False,
    o_bias: bool = False,
    tied: bool = False,
    head: str = "lm_head",
) -> None:
    """A Llama-layout decoder (Llama, Mistral, Qwen2): embedding, layers of attention +
    SwiGLU MLP with two RMS norms, final norm, head."""
    h, vocab = cfg_int(cfg, "hidden_size"), cfg_int(cfg, "vocab_size")
    inter = cfg_int(cfg, "intermediate_size")
    b.param(f"{prefix}.embed_tokens.weight", vocab, h)
    for i in range(cfg_int(cfg, "num_hidden_layers")):
        p = f"{prefix}.layers.{i}"
        b.param(f"{p}.input_layernorm.weight", h)
        attention(b, f"{p}.self_attn", cfg, qkv_bias=qkv_bias, o_bias=o_bias)
        b.param(f"{p}.post_attention_layernorm.weight", h)
        gated_mlp(b, f"{p}.mlp", h, inter)
    embeddings_and_head(b, prefix, cfg, tied=tied, head=head)


def block_sparse_moe(
    b: ReplicaSink,
    cfg: Mapping[str, Any],
    *,
    qk_norm: str | None = None,
    routing_bias: bool = False,
) -> None:
    """A Mixtral-layout MoE decoder (Mixtral, MiniMax-M2): Llama attention, then
    ``block_sparse_moe.gate`` (+ an F32 ``e_score_correction_bias`` when ``routing_bias``)
    and per-expert ``w1/w2/w3``."""
    h, vocab = cfg_int(cfg, "hidden_size"), cfg_int(cfg, "vocab_size")
    inter, e = cfg_int(cfg, "intermediate_size"), cfg_int(cfg, "num_local_experts")
    b.param("model.embed_tokens.weight", vocab, h)
    for i in range(cfg_int(cfg, "num_hidden_layers")):
        p = f"model.layers.{i}"
        b.param(f"{p}.input_layernorm.weight", h)
        attention(b, f"{p}.self_attn", cfg, qk_norm=qk_norm)
        b.param(f"{p}.post_attention_layernorm.weight", h)
        b.linear(f"{p}.block_sparse_moe.gate", e, h, quantizable=False)
        if routing_bias:
            b.param(f"{p}.block_sparse_moe.e_score_correction_bias", e, dtype="F32")
        per_expert(b, f"{p}.block_sparse_moe.experts", e, h, inter, names="w")
    embeddings_and_head(b, "model", cfg, tied=bool(cfg.get("tie_word_embeddings", False)))
