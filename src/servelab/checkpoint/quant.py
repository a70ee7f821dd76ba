"""Quantization scheme detection from ``config.json`` / ``hf_quant_config.json``.

Pure: takes the parsed config mappings, returns a frozen :class:`QuantScheme`.
Recognised declarations:

* compressed-tensors (``quant_method: compressed-tensors``): ``config_groups`` with
  ``weights`` / ``input_activations`` args, ``format``, ``ignore`` (``re:`` patterns or
  exact module names);
* NVIDIA ModelOpt (``hf_quant_config.json`` ``{"quantization": {"quant_algo": ...}}`` or
  ``quant_method: modelopt``): FP8, NVFP4, W4A8 ..., ``exclude_modules`` globs;
* fine-grained FP8 (``quant_method: fp8`` with ``weight_block_size``), plain FP8;
* GPTQ / AWQ (``bits``/``w_bit``, ``group_size``/``q_group_size``);
* MXFP4 (gpt-oss, ``quant_method: mxfp4``); bitsandbytes;
* GGUF (llama.cpp): per-tensor GGML types; the loader declares ``quant_method: gguf``
  with the file's ``file_type`` (``Q8_0``, ``Q4_K_M``, ``F16`` ...) as the format;
* nothing declared → ``method == "none"``.

The *effective* bits a scheme costs per weight are not declared anywhere; they are
measured from the tensors (bytes incl. scales ÷ logical weights) in
:mod:`servelab.checkpoint.report`, using :meth:`QuantScheme.packing_factor` to turn
packed ``U8``/``I32`` storage into logical weight counts.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from types import MappingProxyType
from typing import Any

from servelab.errors import ConfigError

NONE = "none"
COMPRESSED_TENSORS = "compressed-tensors"
MODELOPT = "modelopt"
FP8 = "fp8"
GPTQ = "gptq"
AWQ = "awq"
MXFP4 = "mxfp4"
BITSANDBYTES = "bitsandbytes"
OTHER = "other"
GGUF = "gguf"

# How ``ignore`` entries match module names.
IGNORE_EXACT_OR_RE = "compressed-tensors"  # exact name, or "re:<regex>" with re.match
IGNORE_GLOB = "glob"  # fnmatch wildcards (ModelOpt exclude_modules)
IGNORE_SUBSTRING = "substring"  # HF modules_to_not_convert: key in name
# transformers' should_convert_module: re.match(key) (so gpt-oss's "model.layers.*.self_attn"
# is a regex), or the name ends with the key
IGNORE_HF_MATCH = "hf-match"


@dataclass(frozen=True)
class QuantArgs:
    """Arguments of one quantized quantity (weights or input activations)."""

    num_bits: int
    type: str  # "float" | "int"
    strategy: str | None = None  # tensor|channel|group|block|token|tensor_group
    group_size: int | None = None
    block_structure: tuple[int, ...] | None = None
    symmetric: bool | None = None
    dynamic: bool | str | None = None

    def describe(self) -> str:
        """Short text such as ``8-bit float channel`` or ``4-bit float group 16``."""
        parts = [f"{self.num_bits}-bit {self.type}"]
        if self.strategy:
            parts.append(self.strategy)
        if self.group_size:
            parts.append(f"g{self.group_size}")
        if self.block_structure:
            parts.append("x".join(str(b) for b in self.block_structure))
        if self.dynamic is True:
            parts.append("dynamic")
        elif self.dynamic == "local":
            parts.append("dynamic-local")
        return " ".join(parts)


@dataclass(frozen=True)
class QuantGroup:
    """One compressed-tensors config group (or the single group of other schemes)."""

    name: str
    targets: tuple[str, ...]
    weights: QuantArgs | None
    input_activations: QuantArgs | None
    format: str | None = None


@dataclass(frozen=True)
class QuantScheme:
    """A checkpoint's declared quantization.

    ``method`` is one of ``none``, ``compressed-tensors``, ``modelopt``, ``fp8``,
    ``gptq``, ``awq``, ``mxfp4``, ``bitsandbytes``, ``other``. ``format`` is the
    compressed-tensors format, the ModelOpt ``quant_algo``, ``block`` for fine-grained
    FP8 and so on. ``declared_in`` names the file (and key) the declaration came from.
    """

    method: str
    format: str | None = None
    groups: tuple[QuantGroup, ...] = ()
    ignore: tuple[str, ...] = ()
    ignore_style: str = IGNORE_EXACT_OR_RE
    kv_cache_bits: int | None = None
    declared_in: str | None = None
    raw: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))

    @property
    def is_quantized(self) -> bool:
        """True unless the checkpoint declares no quantization."""
        return self.method != NONE

    @property
    def weight_bits(self) -> int | None:
        """Smallest declared weight bit width over all groups (``None`` if unquantized)."""
        bits = [g.weights.num_bits for g in self.groups if g.weights is not None]
        return min(bits) if bits else None

    @property
    def weights(self) -> QuantArgs | None:
        """Weight args of the first group (the common single-group case)."""
        for g in self.groups:
            if g.weights is not None:
                return g.weights
        return None

    @property
    def input_activations(self) -> QuantArgs | None:
        """Activation args of the first group that quantizes activations."""
        for g in self.groups:
            if g.input_activations is not None:
                return g.input_activations
        return None

    @property
    def label(self) -> str:
        """One-line human description, e.g. ``compressed-tensors float-quantized: W 8-bit
        float channel, A 8-bit float token dynamic``."""
        if not self.is_quantized:
            return "unquantized"
        head = self.method if not self.format else f"{self.method} {self.format}"
        descs = []
        for g in self.groups:
            w = f"W {g.weights.describe()}" if g.weights else "W -"
            a = f"A {g.input_activations.describe()}" if g.input_activations else "A16"
            descs.append(f"{w}, {a}")
        uniq = list(dict.fromkeys(descs))
        return f"{head}: {'; '.join(uniq)}" if uniq else head

    def packing_factor(self, dtype: str) -> int:
        """Logical weights per stored element of a *weight* tensor of ``dtype``.

        ``U8`` holding 4-bit values → 2, ``I32`` holding 4-bit values → 8, anything
        else → 1. Applies to weights only, never to scales.
        """
        container = {"U8": 8, "I8": 8, "I32": 32, "U32": 32, "I16": 16, "U16": 16}
        if dtype not in container:
            return 1
        packed_bits = [
            g.weights.num_bits
            for g in self.groups
            if g.weights is not None and g.weights.num_bits < container[dtype]
        ]
        if not packed_bits:
            return 1
        bits = min(packed_bits)
        return container[dtype] // bits if container[dtype] % bits == 0 else 1

    def expected_weight_dtypes(self) -> frozenset[str]:
        """Stored dtypes a quantized weight of this scheme may have."""
        out: set[str] = set()
        for g in self.groups:
            w = g.weights
            if w is None:
                continue
            if w.num_bits == 8 and w.type == "float":
                out.update({"F8_E4M3", "F8_E5M2", "F8_E4M3FNUZ"})
            elif w.num_bits == 8:
                out.update({"I8", "U8"})
            elif w.num_bits < 8:
                out.update({"U8", "I32", "U32", "F4", "I8"})
            else:
                out.update({"I32", "U32"})
        return frozenset(out)

    def ignores(self, module: str) -> bool:
        """True when ``module`` (a module path, no ``.weight``) is listed in ``ignore``."""
        return self._ignore_matcher(module)

    @cached_property
    def _ignore_matcher(self) -> Callable[[str], bool]:
        """One compiled matcher for all ignore entries (60k tensors × 300 entries is
        too slow entry by entry)."""
        return compile_ignore(self.ignore, self.ignore_style)


def compile_ignore(patterns: Sequence[str], style: str) -> Callable[[str], bool]:
    """A predicate equivalent to ``any(ignore_matches(p, m, style) for p in patterns)``."""
    if not patterns:
        return lambda _m: False
    if style == IGNORE_SUBSTRING:
        subs = tuple(patterns)
        return lambda m: any(p in m for p in subs)
    if style == IGNORE_HF_MATCH:
        return lambda m: any(ignore_matches(p, m, style) for p in patterns)
    if style == IGNORE_GLOB:
        rx = re.compile("|".join(f"(?:{fnmatch.translate(p)})" for p in patterns))
        return lambda m: rx.match(m) is not None
    exact = frozenset(p for p in patterns if not p.startswith("re:"))
    regexes = []
    for p in patterns:
        if p.startswith("re:"):
            try:
                regexes.append(re.compile(p[3:]))
            except re.error:
                continue
    if not regexes:
        return lambda m: m in exact
    return lambda m: m in exact or any(r.match(m) is not None for r in regexes)


def ignore_matches(pattern: str, module: str, style: str) -> bool:
    """Whether one ignore entry matches a module path, by the scheme's convention."""
    if style == IGNORE_GLOB:
        return fnmatch.fnmatchcase(module, pattern)
    if style == IGNORE_SUBSTRING:
        return pattern in module
    if style == IGNORE_HF_MATCH:
        try:
            return re.match(pattern, module) is not None or module.endswith(pattern)
        except re.error:
            return module.endswith(pattern)
    if pattern.startswith("re:"):
        try:
            return re.match(pattern[3:], module) is not None
        except re.error:
            return False
    return pattern == module


def _int(v: Any) -> int | None:
    return int(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


def _args(d: Any) -> QuantArgs | None:
    if not isinstance(d, Mapping):
        return None
    bits = _int(d.get("num_bits"))
    if bits is None:
        return None
    block = d.get("block_structure")
    return QuantArgs(
        num_bits=bits,
        type=str(d.get("type", "int")),
        strategy=str(d["strategy"]) if d.get("strategy") is not None else None,
        group_size=_int(d.get("group_size")),
        block_structure=tuple(int(b) for b in block) if isinstance(block, list) else None,
        symmetric=bool(d["symmetric"]) if "symmetric" in d else None,
        dynamic=d.get("dynamic") if isinstance(d.get("dynamic"), bool | str) else None,
    )


def _ct_scheme(q: Mapping[str, Any], where: str) -> QuantScheme:
    groups_raw = q.get("config_groups") or {}
    if not isinstance(groups_raw, Mapping):
        raise ConfigError(f"{where}: config_groups must be an object")
    top_format = q.get("format")
    groups = []
    for name, g in groups_raw.items():
        if not isinstance(g, Mapping):
            raise ConfigError(f"{where}: config group {name!r} must be an object")
        targets = g.get("targets") or []
        groups.append(
            QuantGroup(
                name=str(name),
                targets=tuple(str(t) for t in targets),
                weights=_args(g.get("weights")),
                input_activations=_args(g.get("input_activations")),
                format=str(g.get("format") or top_format)
                if (g.get("format") or top_format)
                else None,
            )
        )
    kv = q.get("kv_cache_scheme")
    kv_bits = _int(kv.get("num_bits")) if isinstance(kv, Mapping) else None
    formats = sorted({g.format for g in groups if g.format})
    fmt = str(top_format) if top_format else ("+".join(formats) if formats else None)
    return QuantScheme(
        method=COMPRESSED_TENSORS,
        format=fmt,
        groups=tuple(groups),
        ignore=_str_tuple(q.get("ignore")),
        ignore_style=IGNORE_EXACT_OR_RE,
        kv_cache_bits=kv_bits,
        declared_in=where,
        raw=MappingProxyType(dict(q)),
    )


def _str_tuple(v: Any) -> tuple[str, ...]:
    if isinstance(v, str):
        return (v,)
    if isinstance(v, Sequence):
        return tuple(str(x) for x in v)
    return ()


_MODELOPT_ALGOS: dict[str, tuple[QuantArgs | None, QuantArgs | None]] = {
    "FP8": (QuantArgs(8, "float", "tensor"), QuantArgs(8, "float", "tensor")),
    "FP8_PER_CHANNEL_PER_TOKEN": (
        QuantArgs(8, "float", "channel"),
        QuantArgs(8, "float", "token", dynamic=True),
    ),
    "FP8_PB_WO": (QuantArgs(8, "float", "block", block_structure=(128, 128)), None),
    "NVFP4": (
        QuantArgs(4, "float", "tensor_group", group_size=16),
        QuantArgs(4, "float", "tensor_group", group_size=16, dynamic="local"),
    ),
    "NVFP4_AWQ": (QuantArgs(4, "float", "tensor_group", group_size=16), None),
    "W4A8_AWQ": (QuantArgs(4, "int", "group", group_size=128), QuantArgs(8, "float", "tensor")),
    "W4A16_AWQ": (QuantArgs(4, "int", "group", group_size=128), None),
    "INT8_SQ": (QuantArgs(8, "int", "channel"), QuantArgs(8, "int", "tensor")),
    "MXFP4": (QuantArgs(4, "float", "group", group_size=32), None),
    "MXFP8": (QuantArgs(8, "float", "group", group_size=32), None),
}


def _modelopt_scheme(q: Mapping[str, Any], where: str) -> QuantScheme:
    algo = str(q.get("quant_algo") or "").upper() or None
    w, a = _MODELOPT_ALGOS.get(algo or "", (None, None))
    group_size = _int(q.get("group_size"))
    if w is not None and group_size and w.group_size:
        w = QuantArgs(w.num_bits, w.type, w.strategy, group_size, w.block_structure)
    kv_algo = str(q.get("kv_cache_quant_algo") or "").upper()
    kv_bits = 8 if kv_algo.startswith(("FP8", "INT8")) else (4 if "FP4" in kv_algo else None)
    excl = q.get("exclude_modules")
    if excl is None:
        excl = q.get("ignore")
    return QuantScheme(
        method=MODELOPT,
        format=algo,
        groups=(QuantGroup("default", ("Linear",), w, a, algo),) if w else (),
        ignore=_str_tuple(excl),
        ignore_style=IGNORE_GLOB,
        kv_cache_bits=kv_bits,
        declared_in=where,
        raw=MappingProxyType(dict(q)),
    )


def _fp8_scheme(q: Mapping[str, Any], where: str) -> QuantScheme:
    block = q.get("weight_block_size")
    dynamic = str(q.get("activation_scheme", "dynamic")) == "dynamic"
    if isinstance(block, list) and block:
        w = QuantArgs(8, "float", "block", block_structure=tuple(int(b) for b in block))
        a = QuantArgs(8, "float", "group", group_size=int(block[-1]), dynamic=dynamic)
        fmt = "block"
    else:
        w = QuantArgs(8, "float", "tensor")
        a = QuantArgs(8, "float", "tensor", dynamic=dynamic)
        fmt = "per-tensor"
    return QuantScheme(
        method=FP8,
        format=fmt,
        groups=(QuantGroup("default", ("Linear",), w, a, fmt),),
        ignore=_str_tuple(q.get("modules_to_not_convert") or q.get("ignored_layers")),
        ignore_style=IGNORE_SUBSTRING,
        declared_in=where,
        raw=MappingProxyType(dict(q)),
    )


def _gptq_awq_scheme(method: str, q: Mapping[str, Any], where: str) -> QuantScheme:
    bits = _int(q.get("bits")) or _int(q.get("w_bit")) or 4
    group = _int(q.get("group_size")) or _int(q.get("q_group_size"))
    sym = q.get("sym")
    w = QuantArgs(
        bits,
        "int",
        "group" if group and group > 0 else "channel",
        group if group and group > 0 else None,
        symmetric=bool(sym) if sym is not None else None,
    )
    fmt = str(q.get("checkpoint_format") or q.get("version") or q.get("backend") or "") or None
    return QuantScheme(
        method=method,
        format=fmt,
        groups=(QuantGroup("default", ("Linear",), w, None, fmt),),
        ignore=_str_tuple(q.get("modules_to_not_convert")),
        ignore_style=IGNORE_SUBSTRING,
        declared_in=where,
        raw=MappingProxyType(dict(q)),
    )


def _mxfp4_scheme(q: Mapping[str, Any], where: str) -> QuantScheme:
    w = QuantArgs(4, "float", "group", 32)
    return QuantScheme(
        method=MXFP4,
        format="mxfp4",
        groups=(QuantGroup("default", ("experts",), w, None, "mxfp4"),),
        ignore=_str_tuple(q.get("modules_to_not_convert")),
        ignore_style=IGNORE_HF_MATCH,
        declared_in=where,
        raw=MappingProxyType(dict(q)),
    )


def _bnb_scheme(q: Mapping[str, Any], where: str) -> QuantScheme:
    bits = 4 if q.get("load_in_4bit") else 8
    qtype = str(q.get("bnb_4bit_quant_type", "int")) if bits == 4 else "int"
    w = QuantArgs(bits, qtype, "group" if bits == 4 else "channel", 64 if bits == 4 else None)
    return QuantScheme(
        method=BITSANDBYTES,
        format=qtype,
        groups=(QuantGroup("default", ("Linear",), w, None, qtype),),
        ignore=_str_tuple(q.get("llm_int8_skip_modules")),
        ignore_style=IGNORE_SUBSTRING,
        declared_in=where,
        raw=MappingProxyType(dict(q)),
    )


def detect_quant(
    config: Mapping[str, Any] | None, hf_quant_config: Mapping[str, Any] | None = None
) -> QuantScheme:
    """Detect the quantization scheme a checkpoint declares.

    ``config`` is ``config.json`` (its ``quantization_config``, or the one nested in
    ``text_config``); ``hf_quant_config`` is ModelOpt's ``hf_quant_config.json`` when
    present (it wins: ModelOpt exports carry both and the separate file is canonical).
    """
    if hf_quant_config:
        hq = hf_quant_config.get("quantization", hf_quant_config)
        if isinstance(hq, Mapping) and (hq.get("quant_algo") or hq.get("quant_method")):
            return _modelopt_scheme(hq, "hf_quant_config.json")
    cfg = config or {}
    where = "config.json:quantization_config"
    q_any = cfg.get("quantization_config")
    if q_any is None and isinstance(cfg.get("text_config"), Mapping):
        q_any = cfg["text_config"].get("quantization_config")
        where = "config.json:text_config.quantization_config"
    if q_any is None:
        return QuantScheme(method=NONE)
    if not isinstance(q_any, Mapping):
        raise ConfigError(f"{where} must be an object, not {type(q_any).__name__}")
    q: Mapping[str, Any] = q_any
    method = str(q.get("quant_method", "")).lower().replace("_", "-")
    if method == COMPRESSED_TENSORS:
        return _ct_scheme(q, where)
    if method == MODELOPT:
        inner = q.get("quantization", q)
        return _modelopt_scheme(inner if isinstance(inner, Mapping) else q, where)
    if method == FP8:
        return _fp8_scheme(q, where)
    if method in (GPTQ, AWQ):
        return _gptq_awq_scheme(method, q, where)
    if method == MXFP4:
        return _mxfp4_scheme(q, where)
    if method == BITSANDBYTES:
        return _bnb_scheme(q, where)
    if method == GGUF:
        fmt = q.get("file_type")
        return QuantScheme(
            method=GGUF,
            format=str(fmt) if fmt else None,
            declared_in="gguf:general.file_type",
            raw=MappingProxyType(dict(q)),
        )
    return QuantScheme(
        method=OTHER,
        format=method or None,
        declared_in=where,
        raw=MappingProxyType(dict(q)),
    )
