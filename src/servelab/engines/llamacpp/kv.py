"""llama.cpp's KV cache, computed as ``llama-server`` allocates it. Pure.

:class:`LlamaCppKv` hands it to the planner (:mod:`servelab.plan.kvseam`).

The rules are those of the llama.cpp source that servelab's ``llamacpp`` build compiles
(the one vendored by ``llama-cpp-python`` 0.3.36):

* slots (``tools/server/server.cpp``): ``--parallel`` unset means *auto*: 4 slots and a
  unified cache (``kv_unified = true``); a given ``--parallel N`` keeps one stream per
  slot unless ``--kv-unified`` is passed;
* context (``common/fit.cpp``, ``src/llama-context.cpp``): ``-c 0`` / unset is the
  model's training context per stream (``<arch>.context_length``; ``--fit`` shrinks it
  when device memory is short, which servelab does not model); then ``n_ctx`` is
  padded up to a multiple of 256; unified: one slot may use all of it (``n_ctx_seq =
  n_ctx``); otherwise ``n_ctx_seq = pad256(n_ctx / slots)`` and ``n_ctx = n_ctx_seq ×
  slots`` (so ``-c 3000 -np 2`` allocates 2 × 1,536 cells);
* cache (``src/llama-kv-cache.cpp``): for every layer with KV, a K tensor
  ``[n_embd_k_gqa, cells, streams]`` of ``-ctk`` and a V tensor of ``-ctv``, where
  ``cells = n_ctx_seq`` and ``streams`` is 1 (unified) or the slot count; GGML's row size
  of a type is ``n / block × block bytes`` (``q8_0``: 34 bytes per 32 values);
* checks (``llama_init_from_model``): a quantized V cache needs flash attention
  (``-fa auto`` turns it on, ``-fa off`` is refused); with flash attention not off, a
  quantized type's block must divide the head size.

It prints ``llama_kv_cache: size = X MiB (C cells, L layers, S/T seqs), K (t): ... MiB,
V (t): ... MiB`` (:attr:`LlamaCppKvPlan.log_line` reproduces that line byte for byte).

Modelled architectures: those with one plain attention KV cache over every layer, the
ones servelab's GGUF converter writes (``llama``, ``qwen3_moe``). Hybrid and recurrent
models (a separate recurrent state), sliding-window caches (iSWA), MLA and models whose
GGUF holds NextN/MTP layers are refused with a one-line reason instead of a guess.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from servelab.errors import UsageError
from servelab.families import FULL, ModelDims

__all__ = [
    "CTX_PAD",
    "GGML_KV_TYPES",
    "LLAMACPP_KV_ARCHITECTURES",
    "LlamaCppKv",
    "LlamaCppKvPlan",
    "LlamaCppKvSettings",
    "ggml_row_bytes",
    "log_mib",
    "plan_llamacpp_kv",
]

CTX_PAD = 256  # llama_context pads n_ctx (and each slot's share) to this many cells
AUTO_SLOTS = 4  # llama-server's --parallel auto

# The KV cache types llama-server accepts (common/arg.cpp) → (values per block, bytes per
# block), from ggml-common.h's block structs.
GGML_KV_TYPES: dict[str, tuple[int, int]] = {
    "f32": (1, 4),
    "f16": (1, 2),
    "bf16": (1, 2),
    "q8_0": (32, 34),
    "q4_0": (32, 18),
    "q4_1": (32, 20),
    "iq4_nl": (32, 18),
    "q5_0": (32, 22),
    "q5_1": (32, 24),
}

# model_type (Hugging Face names; a GGUF's qwen3moe reads as qwen3_moe) → llama.cpp arch.
LLAMACPP_KV_ARCHITECTURES: dict[str, str] = {"llama": "llama", "qwen3_moe": "qwen3moe"}

FLASH_ATTN = ("on", "off", "auto")


def ggml_row_bytes(type_name: str, n: int) -> int:
    """Bytes of ``n`` values of GGML type ``type_name`` (``ggml_row_size``)."""
    block, size = _type(type_name)
    if n % block:
        raise UsageError(
            f"llama.cpp KV cache type {type_name} packs {block} values per block; a row of "
            f"{n} values does not divide into blocks"
        )
    return n // block * size


def _type(name: str) -> tuple[int, int]:
    try:
        return GGML_KV_TYPES[name]
    except KeyError:
        raise UsageError(
            f"{name!r} is not a llama.cpp KV cache type; choose one of "
            f"{', '.join(GGML_KV_TYPES)}"
        ) from None


def _pad(n: int, to: int = CTX_PAD) -> int:
    return (n + to - 1) // to * to


@dataclass(frozen=True)
class LlamaCppKvSettings:
    """The ``llama-server`` flags that shape its KV cache (``None``: llama.cpp's default)."""

    ctx_size: int | None = None  # -c; None or 0: the training context per stream
    parallel: int | None = None  # -np; None: auto (4 slots, unified)
    kv_unified: bool | None = None  # -kvu / -no-kvu
    cache_type_k: str = "f16"  # -ctk
    cache_type_v: str = "f16"  # -ctv
    flash_attn: str = "auto"  # -fa on|off|auto

    def args(self) -> str:
        """The settings as llama-server arguments (for labels and notes)."""
        out = [f"-c {self.ctx_size}" if self.ctx_size else "-c 0"]
        out.append(f"-np {self.parallel}" if self.parallel else "-np auto")
        if self.kv_unified is not None:
            out.append("-kvu" if self.kv_unified else "-no-kvu")
        out += [f"-ctk {self.cache_type_k}", f"-ctv {self.cache_type_v}",
                f"-fa {self.flash_attn}"]
        return " ".join(out)


def log_mib(n: int) -> float:
    """``(float) n / (1024.0f * 1024.0f)`` as llama.cpp's log computes it."""
    as_f32: float = struct.unpack("f", struct.pack("f", float(n)))[0]
    return as_f32 / 1048576.0


@dataclass(frozen=True)
class LlamaCppKvPlan:
    """The KV cache ``llama-server`` allocates for a model and its flags.

    ``cells`` is one stream's size (``n_ctx_seq``); a unified cache has one stream that
    every slot shares, otherwise each slot has its own. Bytes are exact (GGML row sizes).
    """

    architecture: str
    settings: LlamaCppKvSettings
    n_ctx_train: int | None
    n_ctx: int
    n_ctx_seq: int
    slots: int
    unified: bool
    cells: int
    layers: tuple[int, ...]
    k_row_bytes: int  # one cell of one layer
    v_row_bytes: int
    flash_attn: str  # after llama.cpp's own resolution before the cache is made
    notes: tuple[str, ...] = ()

    @property
    def streams(self) -> int:
        """KV streams: 1 when unified, else one per slot."""
        return 1 if self.unified else self.slots

    @property
    def tokens(self) -> int:
        """Tokens the whole cache holds: cells per stream × streams."""
        return self.cells * self.streams

    @property
    def k_bytes_per_layer(self) -> int:
        """One layer's K tensor."""
        return self.k_row_bytes * self.cells * self.streams

    @property
    def v_bytes_per_layer(self) -> int:
        """One layer's V tensor."""
        return self.v_row_bytes * self.cells * self.streams

    @property
    def k_bytes(self) -> int:
        """All K tensors."""
        return self.k_bytes_per_layer * len(self.layers)

    @property
    def v_bytes(self) -> int:
        """All V tensors."""
        return self.v_bytes_per_layer * len(self.layers)

    @property
    def total_bytes(self) -> int:
        """The KV cache: K and V of every layer with KV."""
        return self.k_bytes + self.v_bytes

    @property
    def bytes_per_token(self) -> int:
        """K and V bytes one cached token takes over all layers."""
        return (self.k_row_bytes + self.v_row_bytes) * len(self.layers)

    @property
    def kv_dtype_bytes(self) -> int:
        """Whole bytes per cached K/V value for the speed model (quantized types, whose
        blocks hold about one byte per value or less, count as 1)."""
        per_value = (size // block for block, size in (
            GGML_KV_TYPES[self.settings.cache_type_k], GGML_KV_TYPES[self.settings.cache_type_v]))
        return max(1, *per_value)

    @property
    def log_line(self) -> str:
        """The line llama.cpp prints for this cache (``llama_kv_cache: size = ...``)."""
        return (
            f"llama_kv_cache: size = {log_mib(self.total_bytes):7.2f} MiB "
            f"({self.cells:6d} cells, {len(self.layers):3d} layers, "
            f"{self.slots:2d}/{self.streams} seqs), "
            f"K ({self.settings.cache_type_k}): {log_mib(self.k_bytes):7.2f} MiB, "
            f"V ({self.settings.cache_type_v}): {log_mib(self.v_bytes):7.2f} MiB"
        )

    @property
    def source(self) -> str:
        """Where the cache's size comes from (the memory table's source column)."""
        return f"llama.cpp KV cache ({self.settings.args()})"

    @property
    def rule(self) -> str:
        """Which rules produced the plan, in a few words."""
        return (
            f"llama.cpp KV cache ({self.architecture}, {self.settings.args()}): "
            f"{'unified, ' if self.unified else ''}{self.streams} stream(s) × "
            f"{self.cells:,} cells × {len(self.layers)} layers"
        )

    def rows(self) -> list[tuple[str, str]]:
        """(label, value) rows describing the cache, for tables (terminal and Markdown)."""
        per_slot = "all slots share" if self.unified else "one stream per slot"
        return [
            ("engine log (predicted)", self.log_line),
            ("context", f"{self.n_ctx:,} cells in all; {self.n_ctx_seq:,} per slot; "
                        f"{self.slots} slot(s), {per_slot}"),
            ("cache", f"{self.tokens:,} tokens = {self.streams} stream(s) × {self.cells:,} "
                      f"cells; KV in all {len(self.layers)} layers"),
            ("K", f"{self.settings.cache_type_k}: {self.k_row_bytes:,} bytes per cell per "
                  f"layer; {self.k_bytes_per_layer:,} per layer; {self.k_bytes:,} in all"),
            ("V", f"{self.settings.cache_type_v}: {self.v_row_bytes:,} bytes per cell per "
                  f"layer; {self.v_bytes_per_layer:,} per layer; {self.v_bytes:,} in all"),
            ("total", f"{self.total_bytes:,} bytes ({self.bytes_per_token:,} per token); "
                      f"flash attention {self.flash_attn}"),
            ("rule", self.rule),
        ]

    def to_dict(self) -> dict[str, Any]:
        """JSON form (the plan's ``kv_pool`` for a llama.cpp plan)."""
        return {
            "engine": "llamacpp",
            "architecture": self.architecture,
            "tokens": self.tokens,
            "cells": self.cells,
            "streams": self.streams,
            "slots": self.slots,
            "unified": self.unified,
            "n_ctx": self.n_ctx,
            "n_ctx_seq": self.n_ctx_seq,
            "n_ctx_train": self.n_ctx_train,
            "max_model_len": self.n_ctx_seq,
            "layers": list(self.layers),
            "type_k": self.settings.cache_type_k,
            "type_v": self.settings.cache_type_v,
            "flash_attn": self.flash_attn,
            "k_row_bytes": self.k_row_bytes,
            "v_row_bytes": self.v_row_bytes,
            "k_bytes_per_layer": self.k_bytes_per_layer,
            "v_bytes_per_layer": self.v_bytes_per_layer,
            "k_bytes": self.k_bytes,
            "v_bytes": self.v_bytes,
            "bytes": self.total_bytes,
            "bytes_per_token": self.bytes_per_token,
            "rule": self.rule,
            "log_lines": [self.log_line],
            "notes": list(self.notes),
            "predicted": True,
        }


def _unsupported(dims: ModelDims, config: Mapping[str, Any]) -> str | None:
    """Why servelab does not model llama.cpp's cache for this model, or ``None``."""
    if dims.model_type not in LLAMACPP_KV_ARCHITECTURES:
        return (
            f"{dims.model_type} is not an architecture servelab models "
            f"({', '.join(LLAMACPP_KV_ARCHITECTURES)}: one attention KV cache over every "
            "layer); hybrid/recurrent state, sliding-window and MLA caches are not modelled"
        )
    if any(t != FULL for t in dims.layer_types):
        return "layers other than full attention (a recurrent state or a sliding window)"
    if dims.sliding_window or config.get("use_sliding_window"):
        return "a sliding-window (iSWA) cache"
    if dims.mtp_layers:
        return f"{dims.mtp_layers} NextN/MTP layer(s) (llama.cpp filters them out of the cache)"
    return None


def plan_llamacpp_kv(
    dims: ModelDims,
    settings: LlamaCppKvSettings,
    *,
    config: Mapping[str, Any] | None = None,
) -> LlamaCppKvPlan:
    """The KV cache ``llama-server`` allocates for ``dims`` under ``settings``.

    Raises :class:`UsageError` for an architecture whose cache servelab does not model
    and for flag combinations llama.cpp itself refuses.
    """
    why = _unsupported(dims, config or {})
    if why is not None:
        raise UsageError(f"llama.cpp KV arithmetic: not modelled for this model: {why}")
    s = settings
    block_k, _ = _type(s.cache_type_k)
    block_v, _ = _type(s.cache_type_v)
    if s.flash_attn not in FLASH_ATTN:
        raise UsageError(f"--flash-attn {s.flash_attn!r}: choose one of {', '.join(FLASH_ATTN)}")
    if s.parallel is not None and s.parallel < 1:
        raise UsageError("--parallel must be at least 1")
    if s.ctx_size is not None and s.ctx_size < 0:
        raise UsageError("--ctx-size must not be negative")
    flash = s.flash_attn
    notes: list[str] = []
    if block_v > 1 and flash != "on":
        if flash == "off":
            raise UsageError(
                f"llama.cpp refuses a quantized V cache ({s.cache_type_v}) without flash "
                "attention (-fa off)"
            )
        flash = "on"  # llama_init_from_model: "enabling flash_attn since it is required"
    if flash != "off":
        for name, block in ((s.cache_type_k, block_k), (s.cache_type_v, block_v)):
            if dims.head_dim % block:
                raise UsageError(
                    f"llama.cpp refuses KV cache type {name} with flash attention: its "
                    f"block of {block} does not divide the head size {dims.head_dim}"
                )
    if s.parallel is None:
        slots, unified = AUTO_SLOTS, True
    else:
        slots, unified = s.parallel, bool(s.kv_unified)
    streams = 1 if unified else slots
    n_train = dims.max_position_embeddings
    if s.ctx_size:
        n_ctx = s.ctx_size
    else:
        if not n_train:
            raise UsageError(
                "llama.cpp KV arithmetic: -c is unset and the model declares no training "
                "context (context_length / max_position_embeddings)"
            )
        n_ctx = n_train * streams  # common_fit_params resolves -c 0 so
        notes.append(
            f"-c unset: {n_train:,} cells (the training context) per stream, as llama-server "
            "sizes it when memory allows; its --fit shrinks the context when device memory "
            "is short (not modelled)"
        )
    n_ctx = _pad(n_ctx)
    if unified:
        n_ctx_seq = n_ctx
    else:
        n_ctx_seq = _pad(n_ctx // slots)
        n_ctx = n_ctx_seq * slots
    embd_k = dims.head_dim * dims.num_kv_heads
    embd_v = dims.head_dim * dims.num_kv_heads
    return LlamaCppKvPlan(
        architecture=LLAMACPP_KV_ARCHITECTURES[dims.model_type],
        settings=s,
        n_ctx_train=n_train,
        n_ctx=n_ctx,
        n_ctx_seq=n_ctx_seq,
        slots=slots,
        unified=unified,
        cells=n_ctx_seq,
        layers=tuple(range(dims.num_layers)),
        k_row_bytes=ggml_row_bytes(s.cache_type_k, embd_k),
        v_row_bytes=ggml_row_bytes(s.cache_type_v, embd_v),
        flash_attn=flash,
        notes=tuple(notes),
    )


@dataclass(frozen=True)
class LlamaCppKv:
    """llama.cpp's KV arithmetic behind the planner's seam
    (:class:`~servelab.plan.kvseam.AllocatedKvArithmetic`), for one set of flags."""

    settings: LlamaCppKvSettings
    label: str = "llama.cpp"

    def cache(self, dims: ModelDims, config: Mapping[str, Any]) -> LlamaCppKvPlan:
        """:func:`plan_llamacpp_kv`."""
        return plan_llamacpp_kv(dims, self.settings, config=config)
