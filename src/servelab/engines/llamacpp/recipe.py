"""llama.cpp's ``[engine]`` table: ``name = "llamacpp"`` and ``llama-server``'s flags.

Layout::

    [engine]
    name = "llamacpp"
    build = "llamacpp"             # the `servelab engine install llamacpp` build
    gguf_type = "Q8_0"             # for model.synth: the GGUF weight type servelab writes
    [engine.flags]                 # ctx_size, parallel, threads, n_gpu_layers, ...
    extra = ["--mlock"]            # any further llama-server arguments
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from servelab.engines.base import EngineSectionBase, check_extra_args, first_flag
from servelab.synth.gguf_types import FileType as GgufType

__all__ = ["MANAGED_FLAGS", "LlamaCppFlags", "LlamaCppSection"]

# Arguments servelab sets from the recipe; repeating them in ``extra`` is an error.
MANAGED_FLAGS = (
    "-m", "--model", "--port", "--host", "-a", "--alias", "--metrics", "-lv", "--log-verbosity",
)  # fmt: skip

# llama-server options that change the KV cache: the plan must see them, so they are
# [engine.flags] keys (or, the last, not modelled at all), never ``extra``.
UNMODELLED_KV_FLAGS = ("--kv-unified-per-slot",)
KV_FLAGS = (
    "-c", "--ctx-size", "-np", "--parallel", "-ctk", "--cache-type-k", "-ctv",
    "--cache-type-v", "-fa", "--flash-attn", "-kvu", "--kv-unified", "-no-kvu",
    "--no-kv-unified", "-ub", "--ubatch-size", "--swa-full", *UNMODELLED_KV_FLAGS,
)  # fmt: skip

CacheType = Literal["f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1"]


class LlamaCppFlags(BaseModel):
    """``llama-server`` flags; ``None`` means "leave llama.cpp's default"."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    ctx_size: int | None = Field(
        default=None, gt=0, description="KV cells in all (-c); each slot gets ctx_size/parallel."
    )
    parallel: int | None = Field(default=None, ge=1, description="Server slots (-np).")
    threads: int | None = Field(default=None, ge=1, description="Generation threads (-t).")
    threads_batch: int | None = Field(default=None, ge=1, description="Prompt threads (-tb).")
    n_gpu_layers: int | None = Field(default=None, ge=0, description="Layers offloaded (-ngl).")
    batch_size: int | None = Field(default=None, ge=1, description="Logical batch (-b).")
    ubatch_size: int | None = Field(default=None, ge=1, description="Physical batch (-ub).")
    cache_type_k: CacheType | None = None
    cache_type_v: CacheType | None = None
    flash_attn: Literal["on", "off", "auto"] | None = None
    cont_batching: bool | None = None
    kv_unified: bool | None = Field(
        default=None, description="One KV stream all slots share (-kvu / -no-kvu)."
    )
    swa_full: bool | None = Field(
        default=None,
        description="Sliding-window layers keep the whole context (--swa-full), not their window.",
    )
    extra: tuple[str, ...] = Field(
        default=(), description="Any further arguments, one per item."
    )

    @field_validator("extra")
    @classmethod
    def _extra(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        check_extra_args(v, MANAGED_FLAGS)
        if (name := first_flag(v, KV_FLAGS)) is not None:
            if name in UNMODELLED_KV_FLAGS:
                raise ValueError(
                    f"{name} changes the KV cache in a way servelab's plan does not model"
                )
            raise ValueError(
                f"{name} belongs in [engine.flags] (ctx_size, parallel, cache_type_k, "
                "cache_type_v, flash_attn, kv_unified) so that plan sees it; remove it from "
                "extra"
            )
        return v


class LlamaCppSection(EngineSectionBase):
    """How to start llama.cpp's ``llama-server``."""

    name: Literal["llamacpp"]
    build: Literal["llamacpp"] = Field(
        default="llamacpp", description="Which `servelab engine install` build to use."
    )
    executable: str | None = Field(
        default=None, description="A `llama-server` executable (instead of the installed one)."
    )
    gguf_type: GgufType = Field(
        default="F16", description="GGUF weight type servelab writes for a model.synth model."
    )
    flags: LlamaCppFlags = Field(default_factory=lambda: LlamaCppFlags())

    @field_validator("python")
    @classmethod
    def _no_python(cls, v: str | None) -> str | None:
        if v is not None:
            raise ValueError("llama.cpp is not a Python engine; give executable instead")
        return v
