"""What to plan, resolved once: :class:`PlanRequest` and the engine flags it carries.

The CLI (``servelab plan``) and the run pipeline (a recipe's engine section) each turn
what the user wrote into these values once — the hardware profile looked up (and a probe
applied), the topology between its GPUs, the parallel layout, the engine's KV arithmetic
for its flags and the engine flags the plan reads — and pass them down; nothing below
looks a hardware profile or a topology up by name again. Pure values, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from servelab.defaults import ENGINE_VERSION, PROMPT_LENS
from servelab.hardware.profiles import HardwareProfile
from servelab.plan.kvseam import KvArithmetic
from servelab.plan.layout import ParallelLayout
from servelab.plan.parallel import Topology
from servelab.plan.specsource import AUTO, DEFAULT_METHOD, AcceptanceOption
from servelab.plan.startup import StartupOptions

__all__ = ["EngineKnobs", "PlanRequest", "Speculation", "StoreChoice"]


@dataclass(frozen=True)
class EngineKnobs:
    """The serving engine's flags a plan follows (vLLM's names; llama.cpp's own flags are
    in its KV arithmetic). ``None``: the engine's default."""

    max_model_len: int | None = None
    kv_cache_memory_bytes: int | None = None
    gpu_memory_utilization: float = 0.9
    kv_cache_dtype: str = "auto"
    enable_prefix_caching: bool = True
    overhead_bytes: int | None = None
    startup: StartupOptions = field(default_factory=StartupOptions)
    attention_backend: str | None = None  # --attention-backend (None: the engine picks)

    def build_args(self) -> dict[str, Any]:
        """As :func:`servelab.forecast.build.build_plan`'s keywords of the same names."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True)
class Speculation:
    """Speculative decode to predict: ``draft_tokens`` per step at ``acceptance`` lengths
    (``auto``: what stored runs of the checkpoint with ``method`` and ``draft_tokens``
    measured; ``none``)."""

    acceptance: AcceptanceOption = AUTO
    method: str = DEFAULT_METHOD
    draft_tokens: int = 0


@dataclass(frozen=True)
class StoreChoice:
    """Where the calibration comes from: the results database ``db`` (unless ``use``
    is false) over the priors table ``priors`` (``None``: the shipped one)."""

    db: str | None = None
    use: bool = True
    priors: Path | None = None


@dataclass(frozen=True)
class PlanRequest:
    """One ``servelab plan`` of a checkpoint, every choice resolved."""

    checkpoint: str
    hardware: HardwareProfile
    topology: Topology
    kv_arithmetic: KvArithmetic
    engine: str = "vllm"
    engine_version: str = ENGINE_VERSION
    layout: ParallelLayout = field(default_factory=ParallelLayout)
    knobs: EngineKnobs = field(default_factory=EngineKnobs)
    prompt_lens: tuple[int, ...] = PROMPT_LENS
    revision: str | None = None
    speculation: Speculation = field(default_factory=Speculation)
    store: StoreChoice = field(default_factory=StoreChoice)
