"""Synthetic :class:`ModelDims` for KV-arithmetic tests: layers given one by one."""

from __future__ import annotations

from collections.abc import Sequence

from servelab.families import (
    FULL,
    AttentionLayer,
    LinearAttentionDims,
    Mamba2Dims,
    MlaDims,
    ModelDims,
)


def full(heads: int = 2, head_dim: int = 64) -> AttentionLayer:
    """A full-attention layer."""
    return AttentionLayer(FULL, heads, head_dim, head_dim)


def sliding(window: int, heads: int = 2, head_dim: int = 64, *, sinks: bool = False
            ) -> AttentionLayer:
    """A sliding-window layer."""
    return AttentionLayer("sliding_attention", heads, head_dim, head_dim, window=window,
                          sinks=sinks)


def chunked(chunk: int, heads: int = 2, head_dim: int = 64) -> AttentionLayer:
    """A chunked-local attention layer."""
    return AttentionLayer("chunked_attention", heads, head_dim, head_dim, chunk=chunk)


def make_dims(
    layers: Sequence[AttentionLayer | str],
    *,
    dtype: str = "float32",
    mla: MlaDims | None = None,
    linear: LinearAttentionDims | None = None,
    mamba: Mamba2Dims | None = None,
    mamba_ssm_dtype: str | None = None,
    heads: int | None = None,
    max_position_embeddings: int | None = None,
) -> ModelDims:
    """ModelDims whose layer ``i`` is ``layers[i]`` (an attention layer, or a kind string
    for MLA, Gated DeltaNet, Mamba2 and cache-less layers)."""
    types = tuple(x.kind if isinstance(x, AttentionLayer) else x for x in layers)
    attention = tuple(x if isinstance(x, AttentionLayer) else None for x in layers)
    first = next((x for x in attention if x is not None), None)
    kv_heads = first.num_kv_heads if first else 1
    head_dim = first.head_dim if first else (mla.latent_dim if mla else 64)
    return ModelDims(
        model_type="synthetic",
        architecture=None,
        dtype=dtype,
        num_layers=len(types),
        layer_types=types,
        num_attention_heads=heads or max(kv_heads, 1) * 4,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        hidden_size=1024,
        vocab_size=32000,
        max_position_embeddings=max_position_embeddings,
        linear=linear,
        mamba_ssm_dtype=mamba_ssm_dtype,
        mtp_layers=0,
        num_experts=0,
        experts_per_token=0,
        sliding_window=None,
        attention=attention,
        mla=mla,
        mamba=mamba,
    )
