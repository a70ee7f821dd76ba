"""llama.cpp's KV cache, computed as ``llama-server`` allocates it. Pure.

:class:`LlamaCppKv` hands it to the planner (:mod:`servelab.sizing.kvseam`).

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

* sliding-window models (``src/llama-kv-cache-iswa.cpp``): two caches, the non-SWA one of
  ``n_ctx_seq`` cells over the global layers and the SWA one over the sliding layers of
  ``pad256(min(n_ctx_seq, n_swa x (slots if unified else 1) + n_ubatch))`` cells
  (``--swa-full``: as many as the non-SWA one); each prints its own ``llama_kv_cache``
  line after ``creating [non-]SWA KV cache, size = N cells``;
Modelled architectures: :data:`LLAMACPP_KV_ARCHITECTURES` (each checked against a real
``llama-server`` log in the tests). Hybrid and recurrent models (a separate recurrent
state) and models whose GGUF holds NextN/MTP layers are refused with a one-line reason
instead of a guess.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from servelab.engines.llamacpp.recipe import LlamaCppFlags
from servelab.errors import UsageError
from servelab.families import FULL, SLIDING, ModelDims
from servelab.units import f32_mib

__all__ = [
    "CTX_PAD",
    "GGML_KV_TYPES",
    "LLAMACPP_KV_ARCHITECTURES",
    "LlamaCppCache",
    "LlamaCppKv",
    "LlamaCppKvPlan",
    "ggml_row_bytes",
    "kv_args",
    "log_mib",
    "plan_llamacpp_kv",
]

CTX_PAD = 256  # llama_context pads n_ctx (and each slot's share) to this many cells
SWA_PAD = 256  # llama_kv_cache_iswa pads the SWA cache to this many cells
AUTO_SLOTS = 4  # llama-server's --parallel auto
DEFAULT_UBATCH = 512  # llama-server's -ub
DEFAULT_TYPE = "f16"  # llama-server's -ctk / -ctv
DEFAULT_FLASH_ATTN = "auto"  # llama-server's -fa

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
# Each is checked against a real llama-server log (tests/engine/llamacpp/test_kv*.py).
LLAMACPP_KV_ARCHITECTURES: dict[str, str] = {
    "llama": "llama",
    "qwen3_moe": "qwen3moe",
    "qwen2": "qwen2",
    "gemma3_text": "gemma3",
    "gpt_oss": "gpt-oss",
}
# Architectures whose sliding-window layers llama.cpp keeps in their own (iSWA) cache.
_ISWA_ARCHITECTURES = frozenset({"gemma3_text", "gpt_oss"})

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


def kv_args(flags: LlamaCppFlags) -> str:
    """``flags``' KV-shaping ones as llama-server arguments, llama.cpp's defaults filled in
    (for labels and notes): ``-c 16384 -np 4 -ctk f16 -ctv f16 -fa auto``."""
    out = [f"-c {flags.ctx_size}" if flags.ctx_size else "-c 0"]
    out.append(f"-np {flags.parallel}" if flags.parallel else "-np auto")
    if flags.kv_unified is not None:
        out.append("-kvu" if flags.kv_unified else "-no-kvu")
    out += [f"-ctk {flags.cache_type_k or DEFAULT_TYPE}",
            f"-ctv {flags.cache_type_v or DEFAULT_TYPE}",
            f"-fa {flags.flash_attn or DEFAULT_FLASH_ATTN}"]
    if flags.ubatch_size:
        out.append(f"-ub {flags.ubatch_size}")
    if flags.swa_full:
        out.append("--swa-full")
    return " ".join(out)


#: MiB as llama.cpp's log computes them (``(float) n / (1024.0f * 1024.0f)``).
log_mib = f32_mib


@dataclass(frozen=True)
class LlamaCppCache:
    """One ``llama_kv_cache`` llama.cpp allocates: K and V tensors of ``cells`` cells per
    stream for each of its ``layers``.

    ``role`` is ``"kv"`` for a model's only cache, ``"non-SWA"`` / ``"SWA"`` for the two
    caches of a sliding-window model.
    """

    role: str
    cells: int
    layers: tuple[int, ...]
    k_row_bytes: int
    v_row_bytes: int
    slots: int
    streams: int
    type_k: str
    type_v: str

    @property
    def tokens(self) -> int:
        """Cells in all streams."""
        return self.cells * self.streams

    @property
    def k_bytes(self) -> int:
        """All K tensors of this cache."""
        return self.k_row_bytes * self.cells * self.streams * len(self.layers)

    @property
    def v_bytes(self) -> int:
        """All V tensors of this cache."""
        return self.v_row_bytes * self.cells * self.streams * len(self.layers)

    @property
    def total_bytes(self) -> int:
        """K and V."""
        return self.k_bytes + self.v_bytes

    @property
    def log_lines(self) -> tuple[str, ...]:
        """What llama.cpp prints for this cache (the iSWA header line first, if any)."""
        size = (
            f"llama_kv_cache: size = {log_mib(self.total_bytes):7.2f} MiB "
            f"({self.cells:6d} cells, {len(self.layers):3d} layers, "
            f"{self.slots:2d}/{self.streams} seqs), "
            f"K ({self.type_k}): {log_mib(self.k_bytes):7.2f} MiB, "
            f"V ({self.type_v}): {log_mib(self.v_bytes):7.2f} MiB"
        )
        if self.role == "kv":
            return (size,)
        head = "non-SWA" if self.role == "non-SWA" else "    SWA"
        return (
            f"llama_kv_cache_iswa: creating {head} KV cache, size = {self.cells} cells",
            size,
        )


@dataclass(frozen=True)
class LlamaCppKvPlan:
    """The KV cache ``llama-server`` allocates for a model and its flags.

    ``caches`` holds each ``llama_kv_cache`` in the order llama.cpp makes them (a
    sliding-window model's non-SWA cache, then its SWA cache). ``cells``, ``layers``,
    ``k_row_bytes`` and ``v_row_bytes`` are the first cache's: the one whose cells bound
    the context (``n_ctx_seq``). Bytes are exact (GGML row sizes).
    """

    architecture: str
    flags: LlamaCppFlags
    type_k: str  # -ctk, llama.cpp's default filled in
    type_v: str  # -ctv
    n_ctx_train: int | None
    n_ctx: int
    n_ctx_seq: int
    slots: int
    unified: bool
    caches: tuple[LlamaCppCache, ...]
    flash_attn: str  # after llama.cpp's own resolution before the cache is made
    notes: tuple[str, ...] = ()

    @property
    def main(self) -> LlamaCppCache:
        """The cache over the global-attention layers (the context's cells)."""
        return self.caches[0]

    @property
    def swa(self) -> LlamaCppCache | None:
        """The sliding-window layers' cache, for an iSWA model."""
        return next((c for c in self.caches if c.role == "SWA"), None)

    @property
    def cells(self) -> int:
        """One stream's cells in the main cache (``n_ctx_seq``)."""
        return self.main.cells

    @property
    def layers(self) -> tuple[int, ...]:
        """The main cache's layers."""
        return self.main.layers

    @property
    def k_row_bytes(self) -> int:
        """One cell of one main-cache layer's K."""
        return self.main.k_row_bytes

    @property
    def v_row_bytes(self) -> int:
        """One cell of one main-cache layer's V."""
        return self.main.v_row_bytes

    @property
    def streams(self) -> int:
        """KV streams: 1 when unified, else one per slot."""
        return 1 if self.unified else self.slots

    @property
    def tokens(self) -> int:
        """Tokens the context holds: the main cache's cells × streams."""
        return self.main.tokens

    @property
    def k_bytes_per_layer(self) -> int:
        """One main-cache layer's K tensor."""
        return self.main.k_row_bytes * self.main.cells * self.main.streams

    @property
    def v_bytes_per_layer(self) -> int:
        """One main-cache layer's V tensor."""
        return self.main.v_row_bytes * self.main.cells * self.main.streams

    @property
    def k_bytes(self) -> int:
        """All K tensors of the main cache (as its log line prints them)."""
        return self.main.k_bytes

    @property
    def v_bytes(self) -> int:
        """All V tensors of the main cache."""
        return self.main.v_bytes

    @property
    def total_bytes(self) -> int:
        """Every cache: K and V of every layer with KV."""
        return sum(c.total_bytes for c in self.caches)

    @property
    def bytes_per_token(self) -> int:
        """K and V bytes one more cached token takes at long context: the main cache's
        layers (a sliding layer keeps only its window)."""
        return (self.main.k_row_bytes + self.main.v_row_bytes) * len(self.main.layers)

    @property
    def kv_dtype_bytes(self) -> int:
        """Whole bytes per cached K/V value for the speed model (quantized types, whose
        blocks hold about one byte per value or less, count as 1)."""
        per_value = (size // block for block, size in (
            GGML_KV_TYPES[self.type_k], GGML_KV_TYPES[self.type_v]))
        return max(1, *per_value)

    @property
    def log_line(self) -> str:
        """The main cache's ``llama_kv_cache: size = ...`` line."""
        return self.main.log_lines[-1]

    @property
    def log_lines(self) -> tuple[str, ...]:
        """Every cache line llama.cpp prints for this model, in its order."""
        return tuple(line for c in self.caches for line in c.log_lines)

    @property
    def source(self) -> str:
        """Where the cache's size comes from (the memory table's source column)."""
        return f"llama.cpp KV cache ({kv_args(self.flags)})"

    @property
    def rule(self) -> str:
        """Which rules produced the plan, in a few words."""
        caches = " + ".join(
            f"{c.role} {c.cells:,} cells × {len(c.layers)} layers" for c in self.caches
        )
        return (
            f"llama.cpp KV cache ({self.architecture}, {kv_args(self.flags)}): "
            f"{'unified, ' if self.unified else ''}{self.streams} stream(s); {caches}"
        )

    def rows(self) -> list[tuple[str, str]]:
        """(label, value) rows describing the cache, for tables (terminal and Markdown)."""
        per_slot = "all slots share" if self.unified else "one stream per slot"
        rows = [("engine log (predicted)", line) for line in self.log_lines]
        rows.append(("context", f"{self.n_ctx:,} cells in all; {self.n_ctx_seq:,} per slot; "
                                f"{self.slots} slot(s), {per_slot}"))
        for c in self.caches:
            label = "cache" if c.role == "kv" else f"{c.role} cache"
            v = f"V {c.type_v}: {c.v_row_bytes:,} bytes per cell per layer"
            rows.append((label, f"{c.tokens:,} tokens = {c.streams} stream(s) × {c.cells:,} "
                                f"cells × {len(c.layers)} layers; K {c.type_k}: "
                                f"{c.k_row_bytes:,} bytes per cell per layer; {v}; "
                                f"{c.total_bytes:,} bytes"))
        rows.append(("total", f"{self.total_bytes:,} bytes ({self.bytes_per_token:,} per token "
                              f"of context); flash attention {self.flash_attn}"))
        rows.append(("rule", self.rule))
        return rows

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
            "type_k": self.type_k,
            "type_v": self.type_v,
            "flash_attn": self.flash_attn,
            "k_row_bytes": self.k_row_bytes,
            "v_row_bytes": self.v_row_bytes,
            "k_bytes_per_layer": self.k_bytes_per_layer,
            "v_bytes_per_layer": self.v_bytes_per_layer,
            "k_bytes": self.k_bytes,
            "v_bytes": self.v_bytes,
            "bytes": self.total_bytes,
            "bytes_per_token": self.bytes_per_token,
            "caches": [
                {
                    "role": c.role,
                    "cells": c.cells,
                    "streams": c.streams,
                    "layers": list(c.layers),
                    "k_row_bytes": c.k_row_bytes,
                    "v_row_bytes": c.v_row_bytes,
                    "bytes": c.total_bytes,
                }
                for c in self.caches
            ],
            "rule": self.rule,
            "log_lines": list(self.log_lines),
            "notes": list(self.notes),
            "predicted": True,
        }


def _unsupported(dims: ModelDims, config: Mapping[str, Any]) -> str | None:
    """Why servelab does not model llama.cpp's cache for this model, or ``None``."""
    if dims.model_type not in LLAMACPP_KV_ARCHITECTURES:
        return (
            f"{dims.model_type} is not an architecture servelab models for llama.cpp "
            f"({', '.join(LLAMACPP_KV_ARCHITECTURES)}, each checked against a llama-server "
            "log); hybrid/recurrent state caches are not modelled"
        )
    kinds = set(dims.layer_types)
    allowed = {FULL, SLIDING} if dims.model_type in _ISWA_ARCHITECTURES else {FULL}
    if dims.model_type in _ISWA_ARCHITECTURES and SLIDING in kinds and not dims.sliding_window:
        return "sliding-window layers without a window size"
    if kinds - allowed:
        other = ", ".join(sorted(kinds - allowed))
        return (f"layers llama.cpp keeps in another kind of cache ({other}: a recurrent state "
                "or a sliding window it does not keep apart)")
    if dims.model_type not in _ISWA_ARCHITECTURES and (
        dims.sliding_window or config.get("use_sliding_window")
    ):
        return "a sliding-window (iSWA) cache"
    if dims.mtp_layers:
        return f"{dims.mtp_layers} NextN/MTP layer(s) (llama.cpp filters them out of the cache)"
    return None


def plan_llamacpp_kv(
    dims: ModelDims,
    flags: LlamaCppFlags,
    *,
    config: Mapping[str, Any] | None = None,
) -> LlamaCppKvPlan:
    """The KV cache ``llama-server`` allocates for ``dims`` under ``flags`` (those a recipe
    or ``servelab plan`` gave; llama.cpp's defaults for the others).

    Raises :class:`UsageError` for an architecture whose cache servelab does not model
    and for flag combinations llama.cpp itself refuses.
    """
    why = _unsupported(dims, config or {})
    if why is not None:
        raise UsageError(f"llama.cpp KV arithmetic: not modelled for this model: {why}")
    s = flags
    type_k, type_v = s.cache_type_k or DEFAULT_TYPE, s.cache_type_v or DEFAULT_TYPE
    block_k, _ = _type(type_k)
    block_v, _ = _type(type_v)
    flash = s.flash_attn or DEFAULT_FLASH_ATTN
    if flash not in FLASH_ATTN:
        raise UsageError(f"--flash-attn {flash!r}: choose one of {', '.join(FLASH_ATTN)}")
    if s.parallel is not None and s.parallel < 1:
        raise UsageError("--parallel must be at least 1")
    if s.ctx_size is not None and s.ctx_size < 0:
        raise UsageError("--ctx-size must not be negative")
    if s.ubatch_size is not None and s.ubatch_size < 1:
        raise UsageError("--ubatch-size must be at least 1")
    notes: list[str] = []
    if block_v > 1 and flash != "on":
        if flash == "off":
            raise UsageError(
                f"llama.cpp refuses a quantized V cache ({type_v}) without flash "
                "attention (-fa off)"
            )
        flash = "on"  # llama_init_from_model: "enabling flash_attn since it is required"
    if flash != "off":
        for name, block in ((type_k, block_k), (type_v, block_v)):
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
    embd = dims.head_dim * dims.num_kv_heads  # K and V rows alike: no MLA here
    k_row = ggml_row_bytes(type_k, embd)
    v_row = ggml_row_bytes(type_v, embd)

    def cache(role: str, cells: int, layers: tuple[int, ...]) -> LlamaCppCache:
        return LlamaCppCache(role, cells, layers, k_row, v_row, slots, streams, type_k, type_v)

    caches: tuple[LlamaCppCache, ...]
    sliding = tuple(i for i, t in enumerate(dims.layer_types) if t == SLIDING)
    if dims.model_type in _ISWA_ARCHITECTURES and sliding and dims.sliding_window:
        full = tuple(i for i, t in enumerate(dims.layer_types) if t != SLIDING)
        ubatch = s.ubatch_size or DEFAULT_UBATCH
        swa_cells = _pad(min(n_ctx_seq, dims.sliding_window * (slots if unified else 1)
                             + ubatch), SWA_PAD)
        if s.swa_full:
            swa_cells = n_ctx_seq
        caches = (cache("non-SWA", n_ctx_seq, full), cache("SWA", swa_cells, sliding))
        notes.append(
            f"{len(sliding)} sliding-window layers (window {dims.sliding_window:,}) in their "
            f"own cache of {swa_cells:,} cells per stream"
            + (" (--swa-full)" if s.swa_full else f" (window x {slots if unified else 1} "
               f"slot(s) + ubatch {ubatch}, padded to {SWA_PAD})")
        )
    else:
        caches = (cache("kv", n_ctx_seq, tuple(range(dims.num_layers))),)
    return LlamaCppKvPlan(
        architecture=LLAMACPP_KV_ARCHITECTURES[dims.model_type],
        flags=s,
        type_k=type_k,
        type_v=type_v,
        n_ctx_train=n_train,
        n_ctx=n_ctx,
        n_ctx_seq=n_ctx_seq,
        slots=slots,
        unified=unified,
        caches=caches,
        flash_attn=flash,
        notes=tuple(notes),
    )


@dataclass(frozen=True)
class LlamaCppKv:
    """llama.cpp's KV arithmetic behind the planner's seam
    (:class:`~servelab.sizing.kvseam.AllocatedKvArithmetic`), for one set of flags."""

    flags: LlamaCppFlags
    label: str = "llama.cpp"

    def cache(self, dims: ModelDims, config: Mapping[str, Any]) -> LlamaCppKvPlan:
        """:func:`plan_llamacpp_kv`."""
        return plan_llamacpp_kv(dims, self.flags, config=config)
