"""A build's declared quantization as vLLM's kernel selection sees it: quantization keys.

vLLM hands every kernel oracle a weight key and an activation key (``QuantKey`` objects in
``model_executor/layers/quantization/utils/quant_utils.py``; their names are used here).
Which keys a build gets is decided by its quantization method's MoE or linear method, read in
vLLM 0.26.0 (unchanged in the other read releases for the cases below):

* compressed-tensors MoE (``compressed_tensors_moe.py`` ``get_moe_method``): NVFP4 weights
  (float, 4 bits, ``tensor_group``, group 16, symmetric) with NVFP4 input activations ->
  ``CompressedTensorsW4A4Nvfp4MoEMethod`` (``kNvfp4Static`` x ``kNvfp4Dynamic``); with no
  input activations the same method with ``use_a16`` (``kNvfp4Static`` x none). FP8 weights
  with FP8 input activations -> ``CompressedTensorsW8A8Fp8MoEMethod``: weights by strategy
  (channel ``kFp8StaticChannelSym``, tensor ``kFp8StaticTensorSym``, block
  ``kFp8Static128BlockSym``), activations token ``kFp8DynamicTokenSym``, tensor static
  ``kFp8StaticTensorSym``, tensor dynamic ``kFp8Dynamic128Sym``, block
  ``kFp8Dynamic128Sym``; it allows vLLM's CUTLASS FP8 MoE (``allow_vllm_cutlass=True``).
  Integer weight-only (``pack-quantized``) -> the WNA16 method.
* ``quant_method: fp8`` (``quantization/fp8.py`` ``Fp8MoEMethod``): block ->
  ``kFp8Static128BlockSym`` x ``kFp8Dynamic128Sym``, else ``kFp8StaticTensorSym`` x static or
  dynamic tensor; ``allow_vllm_cutlass=False``.
* ModelOpt (``quantization/modelopt.py``): FP8 -> ``kFp8StaticTensorSym`` x
  ``kFp8StaticTensorSym``; NVFP4 -> ``kNvfp4Static`` x ``kNvfp4Dynamic``.
* ``quant_method: mxfp4`` (gpt-oss) -> ``kMxfp4Static`` x none; GPTQ/AWQ -> int4 keys.

Anything else is "not known" (:class:`UnknownLayout`), said rather than guessed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from servelab.checkpoint.quant import (
    AWQ,
    COMPRESSED_TENSORS,
    FP8,
    GPTQ,
    MODELOPT,
    MXFP4,
    NONE,
    QuantArgs,
    QuantGroup,
    QuantScheme,
)

# vLLM's QuantKey names (quant_utils.py)
FP8_TENSOR = "kFp8StaticTensorSym"
FP8_CHANNEL = "kFp8StaticChannelSym"
FP8_BLOCK = "kFp8Static128BlockSym"
FP8_DYN_TENSOR = "kFp8DynamicTensorSym"
FP8_DYN_TOKEN = "kFp8DynamicTokenSym"
FP8_DYN_GROUP128 = "kFp8Dynamic128Sym"
NVFP4_W = "kNvfp4Static"
NVFP4_A = "kNvfp4Dynamic"
MXFP4_W = "kMxfp4Static"
INT4_SYM = "kInt4Static"
INT4_ASYM = "kInt4StaticAsym"
INT4_SYM32 = "kInt4Static32"

# families: which MoE oracle a layout goes to
UNQUANTIZED = "unquantized"
FAMILY_FP8 = "fp8"
FAMILY_NVFP4 = "nvfp4"
FAMILY_MXFP4 = "mxfp4"
FAMILY_INT4 = "int4"

_CT = "vllm/model_executor/layers/quantization/compressed_tensors/compressed_tensors_moe/"


@dataclass(frozen=True)
class Layout:
    """One layer kind's quantization as vLLM's selection reads it."""

    family: str
    weight_key: str | None
    activation_key: str | None
    method: str  # the build's quantization method (servelab's name)
    allow_vllm_cutlass: bool = False
    source: str = ""

    @property
    def weights_only(self) -> bool:
        """No quantized activations (W4A16, W8A16): the kernel computes in 16 bits."""
        return self.weight_key is not None and self.activation_key is None

    @property
    def tag(self) -> str:
        """``W8A8``, ``W4A4``, ``W4A16``, ``W16A16``."""
        bits = {FAMILY_FP8: 8, FAMILY_NVFP4: 4, FAMILY_MXFP4: 4, FAMILY_INT4: 4}
        if self.family == UNQUANTIZED:
            return "W16A16"
        w = bits[self.family]
        if self.activation_key is None:
            return f"W{w}A16"
        return f"W{w}A{4 if self.activation_key == NVFP4_A else 8}"

    @property
    def label(self) -> str:
        """``NVFP4 W4A4 (kNvfp4Static x kNvfp4Dynamic)``."""
        if self.family == UNQUANTIZED:
            return "unquantized (BF16/FP16)"
        keys = f"{self.weight_key} x {self.activation_key or 'none'}"
        return f"{self.family.upper()} {self.tag} ({keys})"


@dataclass(frozen=True)
class UnknownLayout:
    """A declaration servelab has not read vLLM's handling of."""

    reason: str


#: Module names vLLM asks a compressed-tensors config about for a MoE layer (the unfused
#: expert projections, ``get_moe_method``) and for an attention projection.
MOE_MODULES = (
    "model.layers.0.mlp.experts.0.gate_proj",
    "model.language_model.layers.0.mlp.experts.0.gate_proj",
    "model.layers.0.block_sparse_moe.experts.0.w1",
)
LINEAR_MODULES = (
    "model.layers.3.self_attn.q_proj",
    "model.language_model.layers.3.self_attn.q_proj",
)


def _target_matches(target: str, module: str) -> bool:
    if target == "Linear":
        return True
    if target.startswith("re:"):
        try:
            return re.match(target[3:], module) is not None
        except re.error:
            return False
    return target == module


def _group_for(scheme: QuantScheme, modules: tuple[str, ...]) -> QuantGroup | None:
    """The config group the first of ``modules`` that is not ignored falls in; None when every
    candidate is ignored or no group targets it (vLLM runs that layer unquantized)."""
    live = [m for m in modules if not scheme.ignores(m)]
    if not live:
        return None
    for m in live:
        for g in scheme.groups:
            if any(_target_matches(t, m) for t in g.targets):
                return g
    return None


def _is_nvfp4(a: QuantArgs | None) -> bool:
    return (a is not None and a.type == "float" and a.num_bits == 4
            and a.strategy == "tensor_group" and a.group_size == 16)


def _is_fp8(a: QuantArgs | None) -> bool:
    return a is not None and a.type == "float" and a.num_bits == 8


def _ct_layout(scheme: QuantScheme, g: QuantGroup, moe: bool) -> Layout | UnknownLayout:
    w, a = g.weights, g.input_activations
    where = (f"{_CT}compressed_tensors_moe.py get_moe_method" if moe
             else "vllm/model_executor/layers/quantization/compressed_tensors/"
                  "compressed_tensors.py get_scheme")
    if _is_nvfp4(w):
        if a is None:
            return Layout(FAMILY_NVFP4, NVFP4_W, None, scheme.method, source=where)
        if _is_nvfp4(a):
            return Layout(FAMILY_NVFP4, NVFP4_W, NVFP4_A, scheme.method, source=where)
        return UnknownLayout(f"NVFP4 weights with {a.describe()} activations")
    if _is_fp8(w) and w is not None:
        if a is None:
            return UnknownLayout("FP8 weight-only (W8A16) compressed-tensors: not read")
        if not _is_fp8(a):
            return UnknownLayout(f"FP8 weights with {a.describe()} activations")
        wkey = {"channel": FP8_CHANNEL, "tensor": FP8_TENSOR, "block": FP8_BLOCK}.get(
            w.strategy or "")
        if wkey is None or (wkey == FP8_BLOCK and w.block_structure not in (None, (128, 128))):
            return UnknownLayout(f"FP8 weights, strategy {w.strategy} {w.block_structure or ''}")
        if wkey == FP8_BLOCK:
            akey = FP8_DYN_GROUP128
        elif a.strategy == "token":
            akey = FP8_DYN_TOKEN
        elif a.strategy == "tensor":
            akey = FP8_DYN_GROUP128 if (moe and a.dynamic) else (
                FP8_DYN_TENSOR if a.dynamic else FP8_TENSOR)
        else:
            return UnknownLayout(f"FP8 activations, strategy {a.strategy}")
        return Layout(FAMILY_FP8, wkey, akey, scheme.method, allow_vllm_cutlass=True,
                      source=where)
    if w is not None and w.type == "int" and a is None and w.num_bits == 4:
        return Layout(FAMILY_INT4, _int4_key(w, asym=w.symmetric is False), None,
                      scheme.method, source=where)
    return UnknownLayout(f"compressed-tensors group {g.name}: "
                         f"W {w.describe() if w else '-'}, A {a.describe() if a else '-'}")


def _int4_key(w: QuantArgs, *, asym: bool) -> str:
    """``kInt4Static`` (symmetric, any group), ``kInt4StaticAsym``, ``kInt4Static32``."""
    if asym:
        return INT4_ASYM
    return INT4_SYM32 if w.group_size == 32 else INT4_SYM


def vllm_layout(scheme: QuantScheme, *, moe: bool) -> Layout | UnknownLayout:
    """The keys vLLM's MoE (``moe=True``: the routed experts) or linear (an attention
    projection) method hands its kernel selection, for a build declaring ``scheme``."""
    if scheme.method == NONE:
        return Layout(UNQUANTIZED, None, None, NONE,
                      source="vllm/model_executor/layers/fused_moe/unquantized_fused_moe_method.py"
                      if moe else "vllm/model_executor/layers/linear.py UnquantizedLinearMethod")
    if scheme.method == COMPRESSED_TENSORS:
        g = _group_for(scheme, MOE_MODULES if moe else LINEAR_MODULES)
        if g is None:  # ignored or not targeted: vLLM runs it unquantized
            return Layout(UNQUANTIZED, None, None, scheme.method,
                          source=f"{_CT}compressed_tensors_moe.py get_moe_method (ignored layer)"
                          if moe else "compressed_tensors.py (ignored layer)")
        return _ct_layout(scheme, g, moe)
    if scheme.method == FP8:
        block = scheme.format == "block"
        if block and scheme.weights is not None and scheme.weights.block_structure != (128, 128):
            return UnknownLayout(f"FP8 block {scheme.weights.block_structure}: not read")
        static = str(scheme.raw.get("activation_scheme", "dynamic")) == "static"
        akey = FP8_DYN_GROUP128 if block else (FP8_TENSOR if static else FP8_DYN_TENSOR)
        return Layout(FAMILY_FP8, FP8_BLOCK if block else FP8_TENSOR, akey, scheme.method,
                      source="vllm/model_executor/layers/quantization/fp8.py Fp8MoEMethod"
                      if moe else "vllm/model_executor/layers/quantization/fp8.py "
                                  "Fp8LinearMethod")
    if scheme.method == MODELOPT:
        algo = (scheme.format or "").upper()
        where = "vllm/model_executor/layers/quantization/modelopt.py"
        if algo == "FP8":
            return Layout(FAMILY_FP8, FP8_TENSOR, FP8_TENSOR, scheme.method, source=where)
        if algo == "NVFP4":
            return Layout(FAMILY_NVFP4, NVFP4_W, NVFP4_A, scheme.method, source=where)
        return UnknownLayout(f"ModelOpt {algo or 'without quant_algo'}: not read")
    if scheme.method == MXFP4:
        if not moe:
            return UnknownLayout("MXFP4 linear layers (gpt-oss keeps attention in BF16)")
        return Layout(FAMILY_MXFP4, MXFP4_W, None, scheme.method,
                      source="vllm/model_executor/layers/quantization/mxfp4.py Mxfp4MoEMethod")
    if scheme.method in (GPTQ, AWQ):
        w = scheme.weights
        if w is None or w.num_bits != 4:
            return UnknownLayout(f"{scheme.method} {w.num_bits if w else '?'}-bit: not read")
        asym = scheme.method == AWQ or w.symmetric is False
        return Layout(FAMILY_INT4, _int4_key(w, asym=asym), None, scheme.method,
                      source=f"vllm/model_executor/layers/quantization/auto_{scheme.method}.py")
    return UnknownLayout(f"quantization method {scheme.method}"
                         f"{' ' + scheme.format if scheme.format else ''}: not read")
