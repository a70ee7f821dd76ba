"""Nemotron-H / Nemotron-Nano-v2 (``nemotron_h``): a hybrid of Mamba2, attention, MLP
and MoE blocks, one per layer, per ``hybrid_override_pattern`` (``M`` Mamba2, ``*``
attention, ``-`` MLP, ``E`` MoE; transformers 5 keeps it as ``layer_types``
``linear_attention`` / ``full_attention`` / ``mlp`` / ``moe``).

Only ``M`` layers keep a (Mamba2) state and only ``*`` layers a KV cache; ``-`` and ``E``
layers keep nothing (kind NONE). Every block's tensors live under
``backbone.layers.N.mixer.*``, so a mixer tensor's role is its layer's kind (see
:func:`role_hint`). The SSM state dtype is ``mamba_ssm_cache_dtype`` (float32 by the
config class's default). GGUF architecture ``nemotron_h``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from servelab.errors import ConfigError
from servelab.families.base import (
    Family,
    GgufNames,
    Preset,
    ReplicaSink,
    RoleHint,
    dims,
    experts,
    get_int,
    map_layer_types,
    opt_int,
    read_config,
    softmax_layers,
)
from servelab.families.dims import ModelDims
from servelab.families.layers import FULL, MAMBA, NONE, Mamba2Dims
from servelab.families.layout import attention, cfg_int

_ALIASES = {"linear_attention": MAMBA, "mamba": MAMBA, "full_attention": FULL,
            "attention": FULL, "mlp": NONE, "moe": NONE}


def read(raw: Mapping[str, Any], source: str) -> ModelDims:
    """Nemotron-H: Mamba2 / attention / cache-less layers per the pattern."""
    r = read_config(raw, source)
    t = r.text
    block_types = list(getattr(t, "layers_block_type", None) or ())
    c = replace(r.common, num_layers=len(block_types))  # the pattern is the layer count
    kinds = map_layer_types(block_types, _ALIASES, source, c.num_layers)
    heads = get_int(t, "mamba_num_heads", source)
    head_dim = get_int(t, "mamba_head_dim", source)
    mamba = Mamba2Dims(
        num_heads=heads,
        head_dim=head_dim,
        n_groups=get_int(t, "n_groups", source),
        state_size=get_int(t, "ssm_state_size", source),
        conv_kernel=get_int(t, "conv_kernel", source),
        intermediate_size=heads * head_dim,
    )
    n_exp, top_k = experts(t, source, "n_routed_experts") if "moe" in block_types else (0, 0)
    ssm = getattr(t, "mamba_ssm_cache_dtype", None)
    return dims(
        "nemotron_h", raw, r.outer, t, c, source,
        layer_types=kinds,
        attention=softmax_layers(kinds, c.kv_heads, c.head_dim),
        num_experts=n_exp,
        experts_per_token=top_k,
        mtp_layers=opt_int(t, "num_nextn_predict_layers", source) or 0,
        mamba=mamba if MAMBA in kinds else None,
        mamba_ssm_dtype=str(ssm) if isinstance(ssm, str) else None,
        notes=r.notes,
    )


_MOE_PARTS = (".mixer.experts.", ".mixer.gate.", ".mixer.shared_experts.")


def role_hint(d: ModelDims) -> RoleHint:
    """A ``mixer.*`` tensor's role is its layer's: Mamba2 state (linear attention) in M
    layers, attention in * layers; in MLP/MoE layers the generic rules place the router
    and experts, the rest is MLP."""
    kinds = d.layer_types

    def hint(template: str, layer: int | None) -> str | None:
        if ".mixer." not in template or layer is None or layer >= len(kinds):
            return None
        kind = kinds[layer]
        if kind == MAMBA:
            return "linear_attention"
        if kind == FULL:
            return "attention"
        if any(s in template for s in _MOE_PARTS):
            return None
        return "mlp"

    return hint


def replica(b: ReplicaSink, cfg: Mapping[str, Any]) -> None:
    """Nemotron-H's tensors: ``backbone.embeddings``, per layer ``norm`` + ``mixer.*``."""
    h, vocab = cfg_int(cfg, "hidden_size"), cfg_int(cfg, "vocab_size")
    nh, hd = cfg_int(cfg, "mamba_num_heads"), cfg_int(cfg, "mamba_head_dim")
    groups, state = cfg_int(cfg, "n_groups"), cfg_int(cfg, "ssm_state_size")
    kern, inter = cfg_int(cfg, "conv_kernel"), cfg_int(cfg, "intermediate_size")
    mi = nh * hd
    conv = mi + 2 * groups * state
    b.param("backbone.embeddings.weight", vocab, h)
    for i, kind in enumerate(str(cfg["hybrid_override_pattern"])):
        p = f"backbone.layers.{i}"
        b.param(f"{p}.norm.weight", h)
        m = f"{p}.mixer"
        if kind == "M":
            b.linear(f"{m}.in_proj", 2 * mi + 2 * groups * state + nh, h)
            b.param(f"{m}.conv1d.weight", conv, 1, kern)
            b.param(f"{m}.conv1d.bias", conv)
            b.param(f"{m}.dt_bias", nh)
            b.param(f"{m}.A_log", nh)
            b.param(f"{m}.D", nh)
            b.param(f"{m}.norm.weight", mi)
            b.linear(f"{m}.out_proj", h, mi)
        elif kind == "*":
            attention(b, m, cfg)
        elif kind == "-":
            b.linear(f"{m}.up_proj", inter, h)
            b.linear(f"{m}.down_proj", h, inter)
        else:
            raise ConfigError(f"replica layout has no {kind!r} (MoE) block for nemotron_h")
    b.param("backbone.norm_f.weight", h)
    b.linear("lm_head", vocab, h, quantizable=False)


def nemotron_nano_9b_v2() -> dict[str, Any]:
    """nvidia/NVIDIA-Nemotron-Nano-9B-v2 config.json (huggingface.co/nvidia/
    NVIDIA-Nemotron-Nano-9B-v2/blob/main/config.json): 56 layers, 27 Mamba2 + 4 attention
    + 25 MLP."""
    return {
        "architectures": ["NemotronHForCausalLM"],
        "model_type": "nemotron_h",
        "hidden_size": 4480,
        "intermediate_size": 15680,
        "num_hidden_layers": 56,
        "hybrid_override_pattern": "M-M-M-MM-M-M-M*-M-M-M*-M-M-M-M*-M-M-M-M*-M-MM-M-M-M-M-M-",
        "num_attention_heads": 40,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "mamba_num_heads": 128,
        "mamba_head_dim": 80,
        "n_groups": 8,
        "ssm_state_size": 128,
        "conv_kernel": 4,
        "expand": 2,
        "chunk_size": 128,
        "mamba_hidden_act": "silu",
        "mlp_hidden_act": "relu2",
        "use_conv_bias": True,
        "use_bias": False,
        "mlp_bias": False,
        "attention_bias": False,
        "vocab_size": 131072,
        "max_position_embeddings": 131072,
        "rms_norm_eps": 1e-05,
        "residual_in_fp32": False,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
    }


FAMILY = Family(
    name="nemotron_h",
    model_types=("nemotron_h",),
    read=read,
    gguf=GgufNames("nemotron_h"),
    role_hint=role_hint,
    replica=replica,
    presets=(
        Preset("nemotron-nano-9b-v2", "huggingface.co/nvidia/NVIDIA-Nemotron-Nano-9B-v2",
               nemotron_nano_9b_v2),
    ),
)
