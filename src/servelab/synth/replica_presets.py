"""Header-replica presets: published models' configs at their real dimensions (the
families' presets, and Qwen3.6-35B-A3B, the seed page's model) and the quant layout a
preset's published build uses.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from servelab.errors import UsageError
from servelab.families import presets
from servelab.synth.replica import LINEARS, QuantLayout

__all__ = ["QWEN3_6_35B_A3B", "preset_config", "preset_layout", "preset_names"]


def _qwen3_6_35b_a3b_config() -> dict[str, Any]:
    layer_types = ["full_attention" if (i + 1) % 4 == 0 else "linear_attention" for i in range(40)]
    return {
        "architectures": ["Qwen3_5MoeForConditionalGeneration"],
        "model_type": "qwen3_5_moe",
        "image_token_id": 248056,
        "video_token_id": 248057,
        "vision_start_token_id": 248053,
        "vision_end_token_id": 248054,
        "tie_word_embeddings": False,
        "text_config": {
            "model_type": "qwen3_5_moe_text",
            "vocab_size": 248320,
            "hidden_size": 2048,
            "num_hidden_layers": 40,
            "layer_types": layer_types,
            "full_attention_interval": 4,
            "num_attention_heads": 16,
            "num_key_value_heads": 2,
            "head_dim": 256,
            "attn_output_gate": True,
            "linear_num_key_heads": 16,
            "linear_num_value_heads": 32,
            "linear_key_head_dim": 128,
            "linear_value_head_dim": 128,
            "linear_conv_kernel_dim": 4,
            "num_experts": 256,
            "num_experts_per_tok": 8,
            "moe_intermediate_size": 512,
            "shared_expert_intermediate_size": 512,
            "mtp_num_hidden_layers": 1,
            "mtp_use_dedicated_embeddings": False,
            "mamba_ssm_dtype": "float32",
            "max_position_embeddings": 262144,
            "partial_rotary_factor": 0.25,
            "rms_norm_eps": 1e-06,
            "tie_word_embeddings": False,
            "dtype": "bfloat16",
        },
        "vision_config": {
            "model_type": "qwen3_5_moe",
            "depth": 27,
            "hidden_size": 1152,
            "intermediate_size": 4304,
            "num_heads": 16,
            "in_channels": 3,
            "patch_size": 16,
            "temporal_patch_size": 2,
            "spatial_merge_size": 2,
            "out_hidden_size": 2048,
            "num_position_embeddings": 2304,
            "deepstack_visual_indexes": [],
            "hidden_act": "gelu_pytorch_tanh",
        },
    }


#: Qwen3.6-35B-A3B's published dimensions (see shared/facts.md; the text dims equal
#: transformers' Qwen3_5MoeConfig defaults, the vision tower projects to hidden 2048).
QWEN3_6_35B_A3B: Mapping[str, Any] = _qwen3_6_35b_a3b_config()


def preset_config(name: str) -> Mapping[str, Any]:
    """The published config of replica preset ``name`` (``qwen3.6-35b-a3b`` or a family's)."""
    if name == "qwen3.6-35b-a3b":
        return QWEN3_6_35B_A3B
    found = presets().get(name)
    if found is None:
        raise UsageError(
            f"unknown model preset {name!r}; choose one of {', '.join(preset_names())}"
        )
    return found[1].config()


def preset_names() -> tuple[str, ...]:
    """Every replica preset."""
    return ("qwen3.6-35b-a3b", *presets())


def preset_layout(name: str, layout: str | None, targets: tuple[str, ...] | None,
                  scale_dtype: str | None = None, *, fp8: tuple[str, ...] = ()) -> QuantLayout:
    """The layout a preset is written in: its native storage unless ``layout`` is given
    (a natively quantized preset takes no other layout); ``targets``: the modules a
    quantized layout quantizes (None: :data:`LINEARS`, what an export quantizes; ``()``:
    none); ``fp8``: modules an ``nvfp4`` layout stores FP8 (:attr:`QuantLayout.fp8`). A
    layout or targets the replica would not honour are refused, never written as something
    else."""
    if name == "qwen3.6-35b-a3b":  # any layout; FP8 per channel unless one is given
        kind = layout or "fp8-channel"
        if kind == "bf16" and (targets or fp8):
            raise UsageError("--targets: a bf16 layout quantizes nothing (give --layout "
                             "fp8-channel, fp8-block, nvfp4 or modelopt-nvfp4)")
        return QuantLayout(kind, targets if targets is not None else LINEARS,
                           scale_dtype=scale_dtype, fp8=fp8)
    preset = presets()[name][1]
    preset_storage, quantize = preset.layout, preset.quantize
    if preset_storage == "native":  # e.g. gpt-oss: MXFP4 experts, as the family writes them
        if layout is not None:
            raise UsageError(
                f"--layout {layout}: {name}'s replica is written in its published storage "
                "(native) only: its family writes that format itself (gpt-oss: MXFP4 experts)"
            )
        if targets:
            raise UsageError(f"--targets: {name}'s replica is written in its published "
                             "storage only; nothing else is quantized")
        return QuantLayout("bf16", (), scale_dtype=scale_dtype)
    if preset_storage != "bf16" and layout not in (None, preset_storage):
        raise UsageError(
            f"--layout {layout}: {name}'s replica is written in its published storage "
            f"({preset_storage}) only"
        )
    kind = layout or preset_storage
    if kind == "bf16" and (targets or fp8):
        raise UsageError("--targets: a bf16 layout quantizes nothing (give --layout fp8-channel, "
                         "fp8-block, nvfp4 or modelopt-nvfp4)")
    if layout is None and preset_storage != "bf16":
        if targets:
            raise UsageError(f"--targets: {name}'s replica is written in its published "
                             f"storage ({preset_storage}), quantized as it ships")
        return QuantLayout(kind, quantize, scale_dtype=scale_dtype)
    return QuantLayout(kind, targets if targets is not None else LINEARS,
                       scale_dtype=scale_dtype, fp8=fp8)
