"""Tensor name → role: what part of the network a tensor belongs to.

A role answers "which bytes does decode touch, and how often": routed-expert bytes are
read top-k/E of the time, vision bytes never for text, the embedding one row per token.

Classification is by name (plus the layer count from the config, to spot DeepSeek-style
MTP layers appended after the last decoder layer, and the model family's hint where names
alone cannot tell: Nemotron-H's ``mixer.*`` is Mamba, attention or MLP by its layer's
kind). Quantization scales and metadata get the role ``quant_scale`` *and* remember the
role of the weight they scale (:attr:`TensorRole.base`), so a report can show scales on
their own and also fold them into "routed experts incl. scales".
"""

from __future__ import annotations

import re
from collections.abc import Callable
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
    is_scale: bool = False
    """True for quantization scales and metadata tensors (``role`` is ``quant_scale``)."""


def is_scale_name(name: str) -> bool:
    """True when the tensor name is a quantization scale / zero point / metadata."""
    leaf = name.rsplit(".", 1)[-1]
    if leaf in _SCALE_LEAVES or leaf.startswith("bitsandbytes__"):
        return True
    # gpt-oss MXFP4: mlp.experts.gate_up_proj_scales (U8 E8M0 exponents).
    return leaf.endswith(_MXFP4_SCALE_SUFFIX) and leaf != _MXFP4_SCALE_SUFFIX


_HAS_LAYER_RE = re.compile(r"(?:^|\.)(?:layers|h|blocks|layer|decoder_layers)\.#(?:\.|$)")

# llama.cpp's GGUF names (gguf.constants.TENSOR_NAMES): ``blk.N.<part>`` per layer, and a
# few top-level tensors. Fused expert planes end in ``_exps``, shared experts in ``_shexp``.
_GGUF_TOP = {
    "token_embd": Role.EMBEDDING,
    "token_embd_norm": Role.NORM,
    "output": Role.LM_HEAD,
    "output_norm": Role.NORM,
    "rope_freqs": Role.NORM,
}


def _gguf_part_role(part: str) -> Role:
    if part.startswith("nextn"):
        return Role.MTP
    if part.startswith(("ffn_gate_inp", "exp_probs")):
        return Role.ROUTER
    if part in ("attn_q_norm", "attn_k_norm"):  # HF: self_attn.q_norm, inside attention
        return Role.ATTENTION
    if "norm" in part:
        return Role.NORM
    if part.endswith("_exps"):
        return Role.ROUTED_EXPERT
    if part.endswith("_shexp"):
        return Role.SHARED_EXPERT
    if part.startswith("ssm_"):
        return Role.LINEAR_ATTENTION
    if part.startswith("attn_"):
        return Role.ATTENTION
    if part.startswith("ffn_"):
        return Role.MLP
    return Role.UNKNOWN


def _gguf_role(template: str) -> Role | None:
    """Role of a llama.cpp (GGUF) tensor name, or ``None`` for other names."""
    parts = template.split(".")
    if len(parts) >= 3 and parts[0] == "blk" and parts[1] == "#":
        return _gguf_part_role(parts[2])
    if len(parts) <= 2 and parts[0] in _GGUF_TOP:
        return _GGUF_TOP[parts[0]]
    return None


def _template_role(template: str) -> Role:
    """Role of the module a tensor lives in; ``template`` has every index replaced by #."""
    gguf_role = _gguf_role(template)
    if gguf_role is not None:
        return gguf_role
    if _VISION_RE.search(template):
        return Role.VISION
    if _MTP_RE.search(template):
        return Role.MTP
    in_layer = _HAS_LAYER_RE.search(template) is not None
    if _LM_HEAD_RE.search(template) and not in_layer:
        return Role.LM_HEAD
    if _EMBED_RE.search(template) and not in_layer:
        return Role.EMBEDDING
    if _SHARED_RE.search(template):
        # shared_expert_gate is the shared expert's router, not the expert itself.
        if ".shared_expert_gate" in template:
            return Role.ROUTER
        return Role.SHARED_EXPERT
    if _ROUTER_RE.search(template):
        return Role.ROUTER
    if _ROUTED_RE.search(template):
        return Role.ROUTED_EXPERT
    if _LINEAR_ATTN_RE.search(template):
        return Role.LINEAR_ATTENTION
    if _ATTN_RE.search(template):
        return Role.ATTENTION
    if _MLP_RE.search(template):
        return Role.MLP
    parts = template.rsplit(".", 2)
    module = parts[-2] if len(parts) >= 2 else template
    if _NORM_RE.search(module) or _NORM_RE.search(parts[-1]):
        return Role.NORM
    return Role.UNKNOWN


@lru_cache(maxsize=4096)
def _classify_template(template: str) -> tuple[Role, bool]:
    return _template_role(template), is_scale_name(template)


_LAYER_WORDS = frozenset(("layers", "h", "blocks", "layer", "decoder_layers", "blk"))


def _split_module(module: str) -> tuple[str, int | None, int | None]:
    """(template with indices → ``#``, layer index, expert index) of a module path."""
    parts = module.split(".")
    layer = expert = None
    prev = ""
    for i, part in enumerate(parts):
        if part.isdigit():
            layer, expert = _indices(part, prev, layer, expert)
            parts[i] = "#"
        prev = part
    return ".".join(parts), layer, expert


def _indices(number: str, prev: str, layer: int | None,
             expert: int | None) -> tuple[int | None, int | None]:
    """(layer, expert) once path component ``number`` (after ``prev``) is read: the first
    number after ``experts`` is the expert, the first after a layer word the layer."""
    if prev == "experts":
        if expert is None:
            expert = int(number)
    elif prev in _LAYER_WORDS and layer is None:
        layer = int(number)
    return layer, expert


class RoleClassifier:
    """Classifies many tensor names, sharing work between tensors of one module.

    A quantized linear ships 2-4 tensors (``weight``, ``weight_scale``, ...) under one
    module path; the module's template and indices are computed once. Make one per
    checkpoint (the per-module cache lives as long as the classifier).
    """

    def __init__(
        self,
        num_hidden_layers: int | None = None,
        hint: Callable[[str, int | None], str | None] | None = None,
    ) -> None:
        self.num_hidden_layers = num_hidden_layers
        # the model family's own rule (servelab.families), asked before the generic ones
        self.hint = hint
        # module path -> (template, layer, expert, last path component)
        self._modules: dict[str, tuple[str, int | None, int | None, str]] = {}

    def _module(self, module: str) -> tuple[str, int | None, int | None, str]:
        """Template and indices of a module path, built from its (cached) parent path so
        that each new module costs one path component, not a scan of the whole name."""
        got = self._modules.get(module)
        if got is not None:
            return got
        parent, _, part = module.rpartition(".")
        if parent:
            p_template, layer, expert, prev = self._module(parent)
        else:
            p_template, layer, expert, prev = "", None, None, ""
        if part.isdigit():
            layer, expert = _indices(part, prev, layer, expert)
            comp = "#"
        else:
            comp = part
        got = (f"{p_template}.{comp}" if parent else comp, layer, expert, part)
        self._modules[module] = got
        return got

    def __call__(self, name: str) -> TensorRole:
        """The role of tensor ``name``."""
        module, _, leaf = name.rpartition(".")
        if not module:
            return self._make(leaf, None, None)
        template, layer, expert, _ = self._module(module)
        return self._make(f"{template}.{leaf}", layer, expert)

    def _make(self, template: str, layer: int | None, expert: int | None) -> TensorRole:
        base, scale = _classify_template(template)
        if self.hint is not None:
            hinted = self.hint(template, layer)
            if hinted is not None:
                base = Role(hinted)
        n = self.num_hidden_layers
        if n is not None and layer is not None and layer >= n and base not in _NOT_TEXT:
            base = Role.MTP
        if base not in (Role.ROUTED_EXPERT, Role.MTP):
            expert = None
        return TensorRole(
            role=Role.QUANT_SCALE if scale else base,
            base=base,
            layer=layer,
            expert=expert,
            is_scale=scale,
        )


_NOT_TEXT = (Role.VISION, Role.MTP)


def classify_tensor(name: str, *, num_hidden_layers: int | None = None) -> TensorRole:
    """Classify one tensor by its name.

    ``num_hidden_layers`` (from the text config) lets layers numbered past the last
    decoder layer be recognised as MTP layers (DeepSeek-V3 / GLM append the MTP layer
    as ``model.layers.<L>``); pass ``None`` when unknown. For many names use one
    :class:`RoleClassifier`, which shares work between tensors of a module.
    """
    return RoleClassifier(num_hidden_layers)(name)


def is_fused_expert_name(name: str) -> bool:
    """True for fused 3D expert tensors (``mlp.experts.gate_up_proj`` [E, 2I, H], ...)."""
    return bool(_ROUTED_RE.search(name)) and _split_module(name)[2] is None
