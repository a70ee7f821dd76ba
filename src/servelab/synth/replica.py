"""Full-dimension *header replicas*: real safetensors headers, sparse data.

Given a model config (real dimensions, e.g. Qwen3.6-35B-A3B) and a quantization layout,
:func:`replica_tensors` lists every tensor the real export carries (name, dtype, shape,
in the Hugging Face naming of the architecture) and :func:`write_replica` writes shards,
``model.safetensors.index.json`` and ``config.json`` whose headers are exactly what such
an export would carry. The data region is a sparse file (``truncate``), so a 36 GB
checkpoint costs a few MB of disk. The bytes are zeros: the replica is for header
readers, planners and benchmarks, never for loading weights.

Layouts: ``qwen3``, ``qwen3_moe``, ``qwen3_next``, ``qwen3_5_moe_text`` and
``qwen3_5_moe`` (multimodal: ``text_config`` + ``vision_config``, text under
``model.language_model.``, vision under ``model.visual.``, MTP under ``mtp.``) here; every
other family's own layout (:mod:`servelab.families`), with its presets at published
dimensions (:func:`preset_config`).

Quantization layouts (``QuantLayout.kind``), following the tensor layouts each format
writes:

* ``bf16`` — every weight BF16;
* ``fp8-channel`` — compressed-tensors ``float-quantized``: ``weight`` F8_E4M3 +
  ``weight_scale`` [out, 1] (BF16 by default);
* ``fp8-block`` — fine-grained FP8 (``quant_method: fp8``, ``weight_block_size``):
  ``weight`` F8_E4M3 + ``weight_scale_inv`` [⌈out/128⌉, ⌈in/128⌉] (F32 by default);
* ``nvfp4`` — compressed-tensors ``nvfp4-pack-quantized``: ``weight_packed`` U8
  [out, in/2] + ``weight_scale`` F8_E4M3 [out, in/16] + ``weight_global_scale`` F32 [1]
  (+ ``input_global_scale`` F32 [1] when activations are FP4 too);
* ``modelopt-nvfp4`` — ModelOpt: ``weight`` U8 [out, in/2] + ``weight_scale`` F8_E4M3
  [out, in/16] + ``weight_scale_2`` F32 [] + ``input_scale`` F32 [] and an
  ``hf_quant_config.json``.

Which linear modules are quantized is a list of regexes (:attr:`QuantLayout.quantize`)
matched against module paths; the others stay BF16 and are listed in the ignore list. An
``nvfp4`` layout may also name modules stored FP8 (:attr:`QuantLayout.fp8`: compressed-tensors
``float-quantized``, written as a second config group), the mixed export Unsloth publishes as
NVFP4-Fast (FP8 attention, linear-attention projections and ``lm_head``; NVFP4 experts).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from servelab.errors import ConfigError, UsageError
from servelab.families import ModelDims, ReplicaSink, family_for, filled_config, model_dims
from servelab.synth.safetensors_set import TensorSpec, write_json, write_safetensors_set

LAYOUT_KINDS = ("bf16", "fp8-channel", "fp8-block", "nvfp4", "modelopt-nvfp4")


@dataclass(frozen=True)
class QuantLayout:
    """How a replica's linear layers are stored.

    ``quantize``: regexes (``re.search``) over module paths selecting the quantized
    linear modules; ``scale_dtype``: dtype of FP8 scales; ``block``: FP8 block size;
    ``fp4_activations``: NVFP4 W4A4 (adds the input scales) rather than W4A16; ``fp8``:
    regexes of the modules an ``nvfp4`` layout stores as compressed-tensors FP8 instead
    (per-channel weights, dynamic per-token activations), which may name ``lm_head``.
    """

    kind: str = "bf16"
    quantize: tuple[str, ...] = ()
    scale_dtype: str | None = None
    block: tuple[int, int] = (128, 128)
    fp4_activations: bool = True
    fp8: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.kind not in LAYOUT_KINDS:
            raise UsageError(f"unknown layout {self.kind!r}; choose one of {LAYOUT_KINDS}")
        if self.fp8 and self.kind != "nvfp4":
            raise UsageError("FP8 modules beside FP4 ones are a compressed-tensors nvfp4 layout")

    def quantizes(self, module: str) -> bool:
        """Whether the linear module at ``module`` is stored quantized."""
        return self.kind_of(module) is not None

    def kind_of(self, module: str) -> str | None:
        """The storage of the linear module at ``module`` (None: BF16). Routers, the
        linear-attention ``a``/``b`` projections and the MTP head are never quantized;
        ``lm_head`` only when :attr:`fp8` names it."""
        if self.kind == "bf16":
            return None
        if not _NEVER_ANY.search(module) and any(re.search(p, module) for p in self.fp8):
            return "fp8-channel"
        if not _NEVER.search(module) and any(re.search(p, module) for p in self.quantize):
            return self.kind
        return None


#: Everything quantized in the text model except routers, shared-expert gates, lm_head.
TEXT_LINEARS = (r"\.(self_attn|linear_attn|mlp|block_sparse_moe)\.",)
#: What an FP8 or NVFP4 export of a text model quantizes by default (llm-compressor's
#: ``targets: Linear`` with routers, ``lm_head``, linear attention and vision ignored):
#: attention (fused ``qkv_proj`` too), dense MLPs (fused ``gate_up_proj`` too), routed and
#: shared experts (Mixtral's ``block_sparse_moe`` experts too). On Qwen3.6 it is
#: :data:`EXPERTS_AND_ATTENTION`; on a dense model it also takes the MLP, which holds most of
#: the weights (issue 41: experts-attention left a dense model's MLP in BF16).
LINEARS = (r"\.(self_attn|mlp|block_sparse_moe)\.",)
#: Routed + shared experts + full attention; linear attention, routers, lm_head, vision
#: unquantized (llm-compressor's FP8_DYNAMIC example for Qwen3.5-MoE ignores
#: ``re:.*linear_attn.*``, ``re:.*mlp.gate$``, ``re:.*shared_expert_gate$``, vision).
EXPERTS_AND_ATTENTION = (
    r"\.mlp\.experts\.",
    r"\.mlp\.shared_expert\.",
    r"\.self_attn\.(q|k|v|o)_proj$",
)
#: Routed experts only.
ROUTED_EXPERTS_ONLY = (r"\.mlp\.experts\.",)
#: Unsloth's Qwen3.6-35B-A3B-NVFP4-Fast (revision 11fb65d6, its compressed-tensors metadata
#: as read in a public deployment review): NVFP4 routed and shared experts; FP8 full-attention
#: projections, Gated DeltaNet projections and ``lm_head``; the MTP layer, routers and vision
#: tower unquantized. ``QuantLayout("nvfp4", NVFP4_FAST_FP4, fp8=NVFP4_FAST_FP8)``.
NVFP4_FAST_FP4 = (r"\.mlp\.experts\.", r"\.mlp\.shared_expert\.")
NVFP4_FAST_FP8 = (
    r"\.self_attn\.(q|k|v|o)_proj$",
    r"\.linear_attn\.(in_proj_qkv|in_proj_z|in_proj_qkvz|out_proj)$",
    r"^lm_head$",
)
_NEVER_ANY = re.compile(
    r"(\.mlp\.gate$|\.mlp\.router$|\.block_sparse_moe\.gate$|shared_expert_gate$"
    r"|in_proj_(a|b|ba)$|^mtp\.|(^|\.)(visual|vision_tower|vision_model)\.)"
)
_NEVER = re.compile(rf"({_NEVER_ANY.pattern}|lm_head$)")


@dataclass
class _Builder:
    layout: QuantLayout
    tensors: list[TensorSpec] = field(default_factory=list)
    linear_modules: list[str] = field(default_factory=list)
    quantized_modules: list[str] = field(default_factory=list)
    dtype: str = "BF16"

    def param(self, name: str, *shape: int, dtype: str | None = None) -> None:
        self.tensors.append(TensorSpec(name, dtype or self.dtype, tuple(shape)))

    def linear(
        self, module: str, out: int, inp: int, *, bias: bool = False, quantizable: bool = True
    ) -> None:
        self.linear_modules.append(module)
        lay = self.layout
        kind = lay.kind_of(module) if quantizable else None
        if kind is None:
            self.param(f"{module}.weight", out, inp)
            if bias:
                self.param(f"{module}.bias", out)
            return
        self.quantized_modules.append(module)
        if kind == "fp8-channel":
            self.param(f"{module}.weight", out, inp, dtype="F8_E4M3")
            self.param(f"{module}.weight_scale", out, 1, dtype=lay.scale_dtype or "BF16")
        elif kind == "fp8-block":
            bo, bi = lay.block
            self.param(f"{module}.weight", out, inp, dtype="F8_E4M3")
            self.param(
                f"{module}.weight_scale_inv",
                -(-out // bo),
                -(-inp // bi),
                dtype=lay.scale_dtype or "F32",
            )
        elif kind == "nvfp4":
            self.param(f"{module}.weight_packed", out, inp // 2, dtype="U8")
            self.param(f"{module}.weight_scale", out, inp // 16, dtype="F8_E4M3")
            self.param(f"{module}.weight_global_scale", 1, dtype="F32")
            if lay.fp4_activations:
                self.param(f"{module}.input_global_scale", 1, dtype="F32")
        elif kind == "modelopt-nvfp4":
            self.param(f"{module}.weight", out, inp // 2, dtype="U8")
            self.param(f"{module}.weight_scale", out, inp // 16, dtype="F8_E4M3")
            self.param(f"{module}.weight_scale_2", dtype="F32")
            if lay.fp4_activations:
                self.param(f"{module}.input_scale", dtype="F32")
        if bias:
            self.param(f"{module}.bias", out)


def _i(cfg: Mapping[str, Any], key: str, default: int | None = None) -> int:
    v = cfg.get(key, default)
    if not isinstance(v, int) or isinstance(v, bool):
        raise UsageError(f"replica config needs an integer {key!r}")
    return v


def _attention(b: _Builder, p: str, cfg: Mapping[str, Any], *, qk_norm: bool, gated: bool) -> None:
    h = _i(cfg, "hidden_size")
    nh = _i(cfg, "num_attention_heads")
    nkv = _i(cfg, "num_key_value_heads", nh)
    hd = cfg.get("head_dim") or h // nh
    bias = bool(cfg.get("attention_bias", False))
    b.linear(f"{p}.q_proj", nh * hd * (2 if gated else 1), h, bias=bias)
    b.linear(f"{p}.k_proj", nkv * hd, h, bias=bias)
    b.linear(f"{p}.v_proj", nkv * hd, h, bias=bias)
    b.linear(f"{p}.o_proj", h, nh * hd)
    if qk_norm:
        b.param(f"{p}.q_norm.weight", hd)
        b.param(f"{p}.k_norm.weight", hd)


def _gated_deltanet(b: _Builder, p: str, cfg: Mapping[str, Any], *, split: bool) -> None:
    h = _i(cfg, "hidden_size")
    nk, nv = _i(cfg, "linear_num_key_heads"), _i(cfg, "linear_num_value_heads")
    dk, dv = _i(cfg, "linear_key_head_dim"), _i(cfg, "linear_value_head_dim")
    kern = _i(cfg, "linear_conv_kernel_dim", 4)
    key_dim, value_dim = nk * dk, nv * dv
    conv_dim = 2 * key_dim + value_dim
    if split:  # Qwen3.5: in_proj_qkv / in_proj_z / in_proj_b / in_proj_a
        b.linear(f"{p}.in_proj_qkv", conv_dim, h)
        b.linear(f"{p}.in_proj_z", value_dim, h)
        b.linear(f"{p}.in_proj_b", nv, h)
        b.linear(f"{p}.in_proj_a", nv, h)
    else:  # Qwen3-Next: fused in_proj_qkvz / in_proj_ba
        b.linear(f"{p}.in_proj_qkvz", 2 * key_dim + 2 * value_dim, h)
        b.linear(f"{p}.in_proj_ba", 2 * nv, h)
    b.param(f"{p}.conv1d.weight", conv_dim, 1, kern)
    b.param(f"{p}.dt_bias", nv)
    b.param(f"{p}.A_log", nv)
    b.param(f"{p}.norm.weight", dv)
    b.linear(f"{p}.out_proj", h, value_dim)


def _num_experts(cfg: Mapping[str, Any]) -> int:
    # transformers 5 writes qwen3_moe's count as num_local_experts.
    key = "num_experts" if "num_experts" in cfg else "num_local_experts"
    return _i(cfg, key)


def _is_moe_layer(cfg: Mapping[str, Any], i: int) -> bool:
    """Qwen2/3-MoE rule: MoE unless in ``mlp_only_layers`` or off ``decoder_sparse_step``."""
    only = cfg.get("mlp_only_layers") or []
    step = cfg.get("decoder_sparse_step") or 1
    return i not in only and (i + 1) % int(step) == 0


def _moe(b: _Builder, p: str, cfg: Mapping[str, Any], *, shared: bool, fused: bool) -> None:
    h = _i(cfg, "hidden_size")
    e = _num_experts(cfg)
    inter = _i(cfg, "moe_intermediate_size")
    b.linear(f"{p}.gate", e, h, quantizable=False)
    if fused:
        b.param(f"{p}.experts.gate_up_proj", e, 2 * inter, h)
        b.param(f"{p}.experts.down_proj", e, h, inter)
    else:
        for j in range(e):
            b.linear(f"{p}.experts.{j}.gate_proj", inter, h)
            b.linear(f"{p}.experts.{j}.up_proj", inter, h)
            b.linear(f"{p}.experts.{j}.down_proj", h, inter)
    if shared:
        si = _i(cfg, "shared_expert_intermediate_size")
        b.linear(f"{p}.shared_expert.gate_proj", si, h)
        b.linear(f"{p}.shared_expert.up_proj", si, h)
        b.linear(f"{p}.shared_expert.down_proj", h, si)
        b.linear(f"{p}.shared_expert_gate", 1, h, quantizable=False)


def _dense_mlp(b: _Builder, p: str, cfg: Mapping[str, Any]) -> None:
    h, inter = _i(cfg, "hidden_size"), _i(cfg, "intermediate_size")
    b.linear(f"{p}.gate_proj", inter, h)
    b.linear(f"{p}.up_proj", inter, h)
    b.linear(f"{p}.down_proj", h, inter)


def _decoder_layer(
    b: _Builder,
    p: str,
    cfg: Mapping[str, Any],
    model_type: str,
    layer_type: str,
    *,
    fused_experts: bool,
    index: int = 0,
) -> None:
    h = _i(cfg, "hidden_size")
    hybrid = model_type in ("qwen3_next", "qwen3_5_moe_text")
    b.param(f"{p}.input_layernorm.weight", h)
    if layer_type == "linear_attention":
        _gated_deltanet(b, f"{p}.linear_attn", cfg, split=model_type == "qwen3_5_moe_text")
    else:
        _attention(b, f"{p}.self_attn", cfg, qk_norm=True, gated=hybrid)
    b.param(f"{p}.post_attention_layernorm.weight", h)
    if model_type == "qwen3" or not _is_moe_layer(cfg, index):
        _dense_mlp(b, f"{p}.mlp", cfg)
    else:
        _moe(b, f"{p}.mlp", cfg, shared=hybrid, fused=fused_experts)


def _vision(b: _Builder, p: str, vcfg: Mapping[str, Any]) -> None:
    """Qwen3.5 / Qwen3-VL vision tower (no deepstack mergers)."""
    d = _i(vcfg, "hidden_size")
    inter = _i(vcfg, "intermediate_size")
    ps, tps = _i(vcfg, "patch_size"), _i(vcfg, "temporal_patch_size")
    merge = _i(vcfg, "spatial_merge_size")
    out = _i(vcfg, "out_hidden_size")
    b.param(f"{p}.patch_embed.proj.weight", d, _i(vcfg, "in_channels", 3), tps, ps, ps)
    b.param(f"{p}.patch_embed.proj.bias", d)
    b.param(f"{p}.pos_embed.weight", _i(vcfg, "num_position_embeddings"), d)
    for i in range(_i(vcfg, "depth")):
        q = f"{p}.blocks.{i}"
        b.param(f"{q}.norm1.weight", d)
        b.param(f"{q}.norm1.bias", d)
        b.param(f"{q}.norm2.weight", d)
        b.param(f"{q}.norm2.bias", d)
        b.linear(f"{q}.attn.qkv", 3 * d, d, bias=True, quantizable=False)
        b.linear(f"{q}.attn.proj", d, d, bias=True, quantizable=False)
        b.linear(f"{q}.mlp.linear_fc1", inter, d, bias=True, quantizable=False)
        b.linear(f"{q}.mlp.linear_fc2", d, inter, bias=True, quantizable=False)
    merged = d * merge * merge
    b.param(f"{p}.merger.norm.weight", d)
    b.param(f"{p}.merger.norm.bias", d)
    b.linear(f"{p}.merger.linear_fc1", merged, merged, bias=True, quantizable=False)
    b.linear(f"{p}.merger.linear_fc2", out, merged, bias=True, quantizable=False)


def _mtp(b: _Builder, cfg: Mapping[str, Any], *, fused_experts: bool) -> None:
    """Qwen3.5 MTP head: ``mtp.fc`` over [embedding; hidden], one decoder layer."""
    h = _i(cfg, "hidden_size")
    b.param("mtp.pre_fc_norm_embedding.weight", h)
    b.param("mtp.pre_fc_norm_hidden.weight", h)
    b.linear("mtp.fc", h, 2 * h, quantizable=False)
    for i in range(_i(cfg, "mtp_num_hidden_layers", 1)):
        p = f"mtp.layers.{i}"
        b.param(f"{p}.input_layernorm.weight", h)
        _attention(b, f"{p}.self_attn", cfg, qk_norm=True, gated=True)
        b.param(f"{p}.post_attention_layernorm.weight", h)
        _moe(b, f"{p}.mlp", cfg, shared=True, fused=fused_experts)
    b.param("mtp.norm.weight", h)


@dataclass(frozen=True)
class ReplicaPlan:
    """The tensors of a replica plus the module lists its quantization config needs."""

    tensors: tuple[TensorSpec, ...]
    linear_modules: tuple[str, ...]
    quantized_modules: tuple[str, ...]

    @property
    def ignored_modules(self) -> tuple[str, ...]:
        """Linear modules left unquantized (what an exporter writes as ``ignore``)."""
        q = set(self.quantized_modules)
        return tuple(m for m in self.linear_modules if m not in q)

    @property
    def total_bytes(self) -> int:
        """Sum of all tensors' bytes."""
        return sum(t.nbytes for t in self.tensors)


def replica_tensors(
    config: Mapping[str, Any],
    layout: QuantLayout | None = None,
    *,
    fused_experts: bool = False,
    mtp: str = "none",
    dims: ModelDims | None = None,
) -> ReplicaPlan:
    """List the tensors a real export of ``config`` carries under ``layout``.

    ``mtp``: ``"none"`` (ship no MTP tensors whatever the config says),
    ``"per-expert"`` or ``"fused"`` (ship a Qwen3.5 MTP head with that expert layout).
    ``dims``: ``config`` already read (None: read here).
    """
    layout = layout or QuantLayout()
    b = _Builder(layout)
    model_type = str(config.get("model_type", ""))
    family_layout = _family_layout(config)
    if family_layout is not None:
        if mtp != "none":
            raise UsageError("--mtp adds a Qwen3.5 MTP head; this family lays out its own")
        family_layout(b, filled_config(config))
        return ReplicaPlan(tuple(b.tensors), tuple(b.linear_modules), tuple(b.quantized_modules))
    if model_type == "qwen3_5_moe":
        text = config.get("text_config")
        if not isinstance(text, Mapping):
            raise UsageError("a qwen3_5_moe replica config needs a text_config")
        prefix, tcfg, vcfg = "model.language_model", text, config.get("vision_config")
        text_type = "qwen3_5_moe_text"
    elif model_type in ("qwen3", "qwen3_moe", "qwen3_next", "qwen3_5_moe_text"):
        prefix, tcfg, vcfg, text_type = "model", config, None, model_type
    else:
        raise UsageError(f"no replica layout for model_type {model_type!r}")
    h, vocab = _i(tcfg, "hidden_size"), _i(tcfg, "vocab_size")
    b.param(f"{prefix}.embed_tokens.weight", vocab, h)
    # the layer kinds as the family reads them (plan and inspect read the same)
    for i, lt in enumerate((dims or model_dims(config)).layer_types):
        _decoder_layer(
            b, f"{prefix}.layers.{i}", tcfg, text_type, lt, fused_experts=fused_experts, index=i
        )
    b.param(f"{prefix}.norm.weight", h)
    tied = bool(tcfg.get("tie_word_embeddings", config.get("tie_word_embeddings", False)))
    if not tied:  # quantized only where a layout's FP8 group names it
        b.linear("lm_head", vocab, h)
    if isinstance(vcfg, Mapping):
        _vision(b, "model.visual", vcfg)
    if mtp != "none":
        if mtp not in ("per-expert", "fused"):
            raise UsageError("mtp must be 'none', 'per-expert' or 'fused'")
        _mtp(b, tcfg, fused_experts=mtp == "fused")
    return ReplicaPlan(tuple(b.tensors), tuple(b.linear_modules), tuple(b.quantized_modules))


def _family_layout(
    config: Mapping[str, Any],
) -> Callable[[ReplicaSink, Mapping[str, Any]], None] | None:
    """The replica layout of ``config``'s family (None: the Qwen/Llama layouts of this
    module)."""
    try:
        return family_for(config).replica
    except ConfigError:
        return None


def _targets(patterns: Sequence[str]) -> list[str]:
    """compressed-tensors targets (``re:`` is ``re.match``) for ``re.search`` patterns."""
    return [f"re:{p}" if p.startswith("^") else f"re:.*{p}" for p in patterns]


def _fp8_channel_group(targets: list[str]) -> dict[str, Any]:
    """A compressed-tensors FP8_DYNAMIC config group: per-channel F8_E4M3 weights,
    dynamic per-token FP8 activations."""
    return {
        "targets": targets,
        "format": "float-quantized",
        "weights": {
            "num_bits": 8,
            "type": "float",
            "strategy": "channel",
            "symmetric": True,
            "dynamic": False,
            "group_size": None,
            "observer": "minmax",
        },
        "input_activations": {
            "num_bits": 8,
            "type": "float",
            "strategy": "token",
            "symmetric": True,
            "dynamic": True,
            "group_size": None,
            "observer": None,
        },
        "output_activations": None,
    }


def quantization_config(layout: QuantLayout, plan: ReplicaPlan) -> dict[str, Any] | None:
    """The ``quantization_config`` block an exporter writes for ``layout`` (None: bf16)."""
    ignore = list(plan.ignored_modules)
    if layout.kind == "bf16":
        return None
    if layout.kind == "fp8-channel":
        return {
            "quant_method": "compressed-tensors",
            "format": "float-quantized",
            "quantization_status": "compressed",
            "config_groups": {"group_0": _fp8_channel_group(["Linear"])},
            "ignore": ignore,
            "kv_cache_scheme": None,
        }
    if layout.kind == "fp8-block":
        return {
            "quant_method": "fp8",
            "fmt": "e4m3",
            "activation_scheme": "dynamic",
            "weight_block_size": list(layout.block),
            "modules_to_not_convert": ignore,
        }
    if layout.kind == "nvfp4":
        acts = (
            {
                "num_bits": 4,
                "type": "float",
                "strategy": "tensor_group",
                "group_size": 16,
                "symmetric": True,
                "dynamic": "local",
                "observer": "static_minmax",
            }
            if layout.fp4_activations
            else None
        )
        groups: dict[str, Any] = {
            "group_0": {
                "targets": _targets(layout.quantize) if layout.fp8 else ["Linear"],
                "format": "nvfp4-pack-quantized",
                "weights": {
                    "num_bits": 4,
                    "type": "float",
                    "strategy": "tensor_group",
                    "group_size": 16,
                    "symmetric": True,
                    "dynamic": False,
                    "observer": "static_minmax",
                    "scale_dtype": "torch.float8_e4m3fn",
                },
                "input_activations": acts,
                "output_activations": None,
            }
        }
        if layout.fp8:
            groups["group_1"] = _fp8_channel_group(_targets(layout.fp8))
        return {
            "quant_method": "compressed-tensors",
            "format": "mixed-precision" if layout.fp8 else "nvfp4-pack-quantized",
            "quantization_status": "compressed",
            "config_groups": groups,
            "ignore": ignore,
            "kv_cache_scheme": None,
        }
    # modelopt-nvfp4
    return {
        "quant_method": "modelopt",
        "quant_algo": "NVFP4",
        "kv_cache_quant_algo": None,
        "group_size": 16,
        "exclude_modules": ignore,
    }


def modelopt_hf_quant_config(layout: QuantLayout, plan: ReplicaPlan) -> dict[str, Any]:
    """ModelOpt's ``hf_quant_config.json`` for a ``modelopt-nvfp4`` replica."""
    return {
        "producer": {"name": "modelopt", "version": "0.0.0-replica"},
        "quantization": {
            "quant_algo": "NVFP4",
            "kv_cache_quant_algo": None,
            "group_size": 16,
            "exclude_modules": list(plan.ignored_modules),
        },
    }


def write_replica(
    out_dir: Path,
    config: Mapping[str, Any],
    layout: QuantLayout | None = None,
    *,
    fused_experts: bool = False,
    mtp: str = "none",
    max_shard_bytes: int | None = 4_000_000_000,
) -> ReplicaPlan:
    """Write a header replica of ``config`` under ``layout`` into ``out_dir``.

    Writes the shards (sparse), the index (when sharded), ``config.json`` with the
    layout's ``quantization_config`` and, for ModelOpt, ``hf_quant_config.json``.
    """
    layout = layout or QuantLayout()
    plan = replica_tensors(config, layout, fused_experts=fused_experts, mtp=mtp)
    write_safetensors_set(out_dir, plan.tensors, max_shard_bytes=max_shard_bytes)
    cfg = json.loads(json.dumps(config))
    qc = quantization_config(layout, plan)
    if qc is not None and "quantization_config" not in cfg:  # a published one stays as is
        cfg["quantization_config"] = qc
    write_json(out_dir / "config.json", cfg)
    if layout.kind == "modelopt-nvfp4":
        write_json(out_dir / "hf_quant_config.json", modelopt_hf_quant_config(layout, plan))
    return plan
