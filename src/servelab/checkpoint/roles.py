"""Tensor name → role: what part of the network a tensor belongs to.

A role answers "which bytes does decode touch, and how often": routed-expert bytes are
read top-k/E of the time, vision bytes never for text, the embedding one row per token.

Classification is by name only (plus the layer count from the config, to spot
DeepSeek-style MTP layers appended after the last decoder layer). Quantization
scales and metadata get the role ``quant_scale`` *and* remember the role of the
weight they scale (:attr:`TensorRole.base`), so a report can show scales on their own
and also fold them into "routed experts incl. scales".
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum
from functools import lru_cache


class Role(StrEnum):
    """The part of a model a tensor belongs to."""

    ROUTED_EXPERT = "routed_expert"
    SHARED_EXPERT = "shared_expert"
    ROUTER = "router"
    ATTENTION = "attention"
    LINEAR_ATTENTION = "linear_attention"
    MLP = "mlp"  # dense feed-forward (Llama-style mlp.gate_proj/up_proj/down_proj)
    NORM = "norm"
    EMBEDDING = "embedding"
    LM_HEAD = "lm_head"
    MTP = "mtp"
    VISION = "vision"
    QUANT_SCALE = "quant_scale"
    UNKNOWN = "unknown"


# Order used in tables and JSON: the big, interesting roles first.
ROLE_ORDER: tuple[Role, ...] = tuple(Role)

# Parameter names (last dotted component) that are quantization scales / metadata, not
# weights. ``scales``/``qzeros``/``g_idx`` are GPTQ/AWQ; ``*_scales`` suffixes are MXFP4
# (gpt-oss ``gate_up_proj_scales``); ``weight_shape`` is compressed-tensors metadata.
_SCALE_LEAVES = frozenset(
    {
        "weight_scale",
        "weight_scale_inv",
        "weight_global_scale",
        "weight_scale_2",
        "weight_zero_point",
        "weight_g_idx",
        "weight_shape",
        "input_scale",
        "input_global_scale",
        "input_zero_point",
        "output_scale",
        "k_scale",
        "v_scale",
        "q_scale",
        "prob_scale",
        "qzeros",
        "scales",
        "g_idx",
        "zeros",
        "SCB",
        "absmax",
        "quant_map",
        "nested_absmax",
        "nested_quant_map",
    }
)
_MXFP4_SCALE_SUFFIX = "_scales"

_LAYER_RE = re.compile(r"(?:^|\.)(?:layers|h|blocks|layer|decoder_layers)\.(\d+)(?:\.|$)")
_EXPERT_RE = re.compile(r"(?:^|\.)experts\.(\d+)(?:\.|$)")

_VISION_RE = re.compile(
    r"(?:^|\.)(?:visual|vision_tower|vision_model|vision_encoder|vision|vit|image_encoder|"
    r"multi_modal_projector|mm_projector|vision_projection|audio_tower|audio_model)(?:\.|$)"
)
_MTP_RE = re.compile(r"(?:^|\.)(?:mtp|mtp_layers|nextn|mtp_block)(?:\.|$)")
_EMBED_RE = re.compile(
    r"(?:^|\.)(?:embed_tokens|wte|word_embeddings|tok_embeddings|embedding|embeddings)(?:\.|$)"
)
_LM_HEAD_RE = re.compile(r"(?:^|\.)(?:lm_head|embed_out|output)(?:\.|$)")
_SHARED_RE = re.compile(r"(?:^|\.)(?:shared_experts?|shared_mlp)(?:\.|$)")
_ROUTER_RE = re.compile(
    r"(?:^|\.)(?:shared_expert_gate|router|gate|e_score_correction_bias)(?:\.|$)"
)
_ROUTED_RE = re.compile(r"(?:^|\.)experts(?:\.|$)")
_LINEAR_ATTN_RE = re.compile(
    r"(?:^|\.)(?:linear_attn|mamba|mixer|ssm|conv1d|in_proj_qkvz|in_proj_ba|A_log|dt_bias)"
    r"(?:\.|$)"
)
_ATTN_RE = re.compile(r"(?:^|\.)(?:self_attn|attn|attention|cross_attn)(?:\.|$)")
_MLP_RE = re.compile(r"(?:^|\.)(?:mlp|feed_forward|ffn|block_sparse_moe)(?:\.|$)")
_NORM_RE = re.compile(r"(norm|ln_f|ln_\d|layernorm)", re.IGNORECASE)


@dataclass(frozen=True)
class TensorRole:
    """The role of one tensor.

    ``role`` is the primary role (``quant_scale`` for scales). ``base`` is the role of
    the weight the tensor belongs to: for a weight it equals ``role``; for a scale it
    is the scaled weight's role. ``layer`` and ``expert`` are indices parsed from the
    name when present.
    """

    role: Role
    base: Role
    layer: int | None = None
    expert: int | None = None

    @property
    def is_scale(self) -> bool:
        """True for quantization scales and metadata tensors."""
        return self.role is Role.QUANT_SCALE


def is_scale_name(name: str) -> bool:
    """True when the tensor name is a quantization scale / zero point / metadata."""
    leaf = name.rsplit(".", 1)[-1]
    if leaf in _SCALE_LEAVES or leaf.startswith("bitsandbytes__"):
        return True
    # gpt-oss MXFP4: mlp.experts.gate_up_proj_scales (U8 E8M0 exponents).
    return leaf.endswith(_MXFP4_SCALE_SUFFIX) and leaf != _MXFP4_SCALE_SUFFIX


def _layer_of(name: str) -> int | None:
    m = _LAYER_RE.search(name)
    return int(m.group(1)) if m else None


def _expert_of(name: str) -> int | None:
    m = _EXPERT_RE.search(name)
    return int(m.group(1)) if m else None


def _base_role(name: str, num_hidden_layers: int | None) -> Role:
    """Role of the module a tensor lives in (scales already stripped of meaning)."""
    if _VISION_RE.search(name):
        return Role.VISION
    if _MTP_RE.search(name):
        return Role.MTP
    layer = _layer_of(name)
    if (
        num_hidden_layers is not None
        and layer is not None
        and layer >= num_hidden_layers
        and not name.startswith(("vision", "visual"))
    ):
        # DeepSeek-V3 / GLM-style: the MTP layer is appended as model.layers.<L>.
        return Role.MTP
    if _LM_HEAD_RE.search(name) and layer is None:
        return Role.LM_HEAD
    if _EMBED_RE.search(name) and layer is None:
        return Role.EMBEDDING
    if _SHARED_RE.search(name):
        # shared_expert_gate is the shared expert's router, not the expert itself.
        if ".shared_expert_gate" in name:
            return Role.ROUTER
        return Role.SHARED_EXPERT
    if _ROUTER_RE.search(name):
        return Role.ROUTER
    if _ROUTED_RE.search(name):
        return Role.ROUTED_EXPERT
    if _LINEAR_ATTN_RE.search(name):
        return Role.LINEAR_ATTENTION
    if _ATTN_RE.search(name):
        return Role.ATTENTION
    if _MLP_RE.search(name):
        return Role.MLP
    leaf_module = name.rsplit(".", 2)[-2] if name.count(".") >= 1 else name
    if _NORM_RE.search(leaf_module) or _NORM_RE.search(name.rsplit(".", 1)[-1]):
        return Role.NORM
    return Role.UNKNOWN


@lru_cache(maxsize=1 << 17)
def _classify_cached(name: str, num_hidden_layers: int | None) -> TensorRole:
    base = _base_role(name, num_hidden_layers)
    role = Role.QUANT_SCALE if is_scale_name(name) else base
    expert = _expert_of(name) if base in (Role.ROUTED_EXPERT, Role.MTP) else None
    return TensorRole(role=role, base=base, layer=_layer_of(name), expert=expert)


def classify_tensor(name: str, *, num_hidden_layers: int | None = None) -> TensorRole:
    """Classify one tensor by its name.

    ``num_hidden_layers`` (from the text config) lets layers numbered past the last
    decoder layer be recognised as MTP layers; pass ``None`` when unknown.
    """
    return _classify_cached(name, num_hidden_layers)


def is_fused_expert_name(name: str) -> bool:
    """True for fused 3D expert tensors (``mlp.experts.gate_up_proj`` [E, 2I, H], ...)."""
    return bool(_ROUTED_RE.search(name)) and _EXPERT_RE.search(name) is None
