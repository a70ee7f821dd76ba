"""The generic config reader (Llama- and Qwen-shaped configs), until each family reads its own.

Pure: takes the parsed JSON (a mapping), returns a frozen :class:`ModelDims`. Multimodal
configs keep the language model under ``text_config``; that is what is served for text.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from servelab.errors import ConfigError
from servelab.families.dims import ModelDims
from servelab.families.layers import (
    DTYPE_BYTES,
    FULL,
    LINEAR,
    SLIDING,
    AttentionLayer,
    LinearAttentionDims,
)

# model_type values whose linear-attention layers are Gated DeltaNet (vLLM's GDN state).
_GDN_MODEL_TYPES = frozenset(
    {"qwen3_next", "qwen3_5", "qwen3_5_text", "qwen3_5_moe", "qwen3_5_moe_text"}
)

_LAYER_TYPE_ALIASES = {
    "full_attention": FULL,
    "attention": FULL,
    "global_attention": FULL,
    "linear_attention": LINEAR,
    "sliding_attention": SLIDING,
    "sliding_window_attention": SLIDING,
}


def text_config(config: Mapping[str, Any]) -> Mapping[str, Any]:
    """The language-model part of a config (``text_config`` when present)."""
    inner = config.get("text_config")
    if isinstance(inner, Mapping):
        return inner
    return config


def _int(cfg: Mapping[str, Any], key: str, default: int | None = None) -> int:
    value = cfg.get(key, default)
    if value is None:
        raise ConfigError(f"config.json has no {key!r}")
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(f"config.json {key!r} must be a non-negative integer, got {value!r}")
    return value


def _layer_types(cfg: Mapping[str, Any], model_type: str, num_layers: int) -> tuple[str, ...]:
    raw = cfg.get("layer_types")
    if isinstance(raw, Sequence) and not isinstance(raw, str):
        types: list[str] = []
        for i, t in enumerate(raw):
            kind = _LAYER_TYPE_ALIASES.get(str(t))
            if kind is None:
                raise ConfigError(f"config.json layer_types[{i}] = {t!r} is not a known layer type")
            types.append(kind)
        if len(types) != num_layers:
            raise ConfigError(
                f"config.json has {len(types)} layer_types for num_hidden_layers={num_layers}"
            )
        return tuple(types)
    if model_type in _GDN_MODEL_TYPES:
        interval = _int(cfg, "full_attention_interval", 4)
        if interval == 0:
            raise ConfigError("config.json full_attention_interval must be positive")
        return tuple(FULL if (i + 1) % interval == 0 else LINEAR for i in range(num_layers))
    return tuple(FULL for _ in range(num_layers))


def _dtype(cfg: Mapping[str, Any], outer: Mapping[str, Any]) -> str:
    for source in (cfg, outer):
        for key in ("dtype", "torch_dtype"):
            value = source.get(key)
            if isinstance(value, str):
                name = value.removeprefix("torch.")
                if name not in DTYPE_BYTES:
                    raise ConfigError(f"config.json {key} = {value!r} is not a known dtype")
                return name
    return "bfloat16"


def model_dims(config: Mapping[str, Any]) -> ModelDims:
    """Read :class:`ModelDims` from a parsed ``config.json``.

    Raises :class:`ConfigError` for missing or malformed keys, and for attention kinds
    whose cache servelab does not size yet (MLA).
    """
    cfg = text_config(config)
    model_type = str(cfg.get("model_type") or config.get("model_type") or "unknown")
    if cfg.get("kv_lora_rank") is not None:
        raise ConfigError(
            f"config.json: {model_type} uses MLA (kv_lora_rank); servelab does not size MLA "
            "caches yet"
        )
    num_layers = _int(cfg, "num_hidden_layers")
    heads = _int(cfg, "num_attention_heads")
    kv_heads = _int(cfg, "num_key_value_heads", heads)
    hidden = _int(cfg, "hidden_size")
    head_dim_raw = cfg.get("head_dim")
    head_dim = _int(cfg, "head_dim") if head_dim_raw is not None else hidden // max(heads, 1)
    layer_types = _layer_types(cfg, model_type, num_layers)
    linear: LinearAttentionDims | None = None
    if LINEAR in layer_types:
        if model_type not in _GDN_MODEL_TYPES and "linear_num_value_heads" not in cfg:
            raise ConfigError(
                f"config.json: linear-attention layers of {model_type} are not a known state kind"
            )
        linear = LinearAttentionDims(
            num_key_heads=_int(cfg, "linear_num_key_heads"),
            num_value_heads=_int(cfg, "linear_num_value_heads"),
            key_head_dim=_int(cfg, "linear_key_head_dim"),
            value_head_dim=_int(cfg, "linear_value_head_dim"),
            conv_kernel=_int(cfg, "linear_conv_kernel_dim", 4),
        )
    ssm = cfg.get("mamba_ssm_dtype")
    archs = config.get("architectures")
    arch = str(archs[0]) if isinstance(archs, Sequence) and archs else None
    mtp = cfg.get("mtp_num_hidden_layers", cfg.get("num_nextn_predict_layers", 0)) or 0
    window = cfg.get("sliding_window")
    attention = tuple(
        AttentionLayer(t, kv_heads, head_dim, head_dim,
                       window=int(window) if t == SLIDING and isinstance(window, int) else None)
        if t in (FULL, SLIDING) else None
        for t in layer_types
    )
    return ModelDims(
        model_type=model_type,
        architecture=arch,
        dtype=_dtype(cfg, config),
        num_layers=num_layers,
        layer_types=layer_types,
        num_attention_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        hidden_size=hidden,
        vocab_size=_int(cfg, "vocab_size", 0),
        max_position_embeddings=cfg.get("max_position_embeddings"),
        linear=linear,
        mamba_ssm_dtype=str(ssm) if isinstance(ssm, str) else None,
        mtp_layers=int(mtp),
        num_experts=int(cfg.get("num_experts", cfg.get("n_routed_experts", 0)) or 0),
        experts_per_token=int(cfg.get("num_experts_per_tok", 0) or 0),
        sliding_window=int(window) if isinstance(window, int) else None,
        attention=attention,
        tie_word_embeddings=bool(
            cfg.get("tie_word_embeddings", config.get("tie_word_embeddings", False))
        ),
    )
