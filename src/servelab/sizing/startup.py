"""Start-up limits a plan reads and the refusals it foresees: the vocabulary between the
planner and an engine's own start-up rules. Data only.

An engine hands the planner its rules (``Engine.startup_rules``, :mod:`servelab.engines.base`):
an object satisfying :class:`StartupRules` that turns the engine flags the plan follows
(:class:`StartupOptions`) into the ``max_num_seqs`` and step token budget the engine will run
with, the largest step it captures a CUDA graph for, and the start-up refusals it can foresee
(vLLM's: :mod:`servelab.engines.vllm.startup`). The planner, the load model and the pages
only read these values.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from servelab.checkpoint.quant import QuantScheme
from servelab.families import ModelDims
from servelab.hardware.profiles import HardwareProfile
from servelab.sizing.kernels import KernelAssumption
from servelab.sizing.kvpool import KvPoolPlan
from servelab.sizing.layout import ParallelLayout
from servelab.sizing.startup_memory import StartupMemory
from servelab.sizing.weights import Weights

__all__ = ["BatchedTokens", "GraphCapture", "MaxNumSeqs", "StartupFinding", "StartupOptions",
           "StartupRules"]


@dataclass(frozen=True)
class StartupOptions:
    """The engine flags the start-up checks read (``None``: the engine's default)."""

    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    enforce_eager: bool = False
    cudagraph_mode: str | None = None  # vLLM's CUDAGraphMode name, as the user gave it
    optimization_level: int | None = None  # -O
    performance_mode: str | None = None  # --performance-mode ("throughput" doubles defaults)



@dataclass(frozen=True)
class MaxNumSeqs:
    """The ``max_num_seqs`` the engine will run with, and where it comes from."""

    value: int
    source: str

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {"value": self.value, "source": self.source}


@dataclass(frozen=True)
class BatchedTokens:
    """The token budget of one engine step (vLLM's ``max_num_batched_tokens``): what a step's
    decodes and prefill chunks share, and where the figure comes from."""

    value: int
    source: str


@dataclass(frozen=True)
class GraphCapture:
    """The largest step (tokens) vLLM captures a CUDA graph for, and where that comes from.

    A prefill of more tokens than ``max_tokens`` runs without a graph: every kernel of every
    layer is launched from the host, which costs milliseconds per prompt on a small or hybrid
    model (measured on the H200: Llama-3.2-3B's 512-token prefill took 18 ms with graphs up to
    512 tokens and 38 ms with graphs up to 128; benchmarks/RESULTS.md). 0: no graphs at all.
    """

    max_tokens: int
    source: str

    def graphed(self, tokens: int) -> bool:
        """Whether a step of ``tokens`` tokens replays a captured graph."""
        return 0 < tokens <= self.max_tokens

    @property
    def line(self) -> str:
        """One line for a terminal or a page."""
        if self.max_tokens == 0:
            return f"no graphs captured ({self.source}): every step is launched eagerly"
        return (f"CUDA graphs up to {self.max_tokens:,} tokens per step ({self.source}); "
                "prefills longer than that run without graphs")

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {"max_tokens": self.max_tokens, "source": self.source}


@dataclass(frozen=True)
class StartupFinding:
    """A start-up refusal the plan foresees: what, how sure, and the fix."""

    check: str
    conditional: bool  # it depends on the graph mode, which servelab cannot know here
    message: str
    fix: str
    max_num_seqs: int = 0
    max_num_seqs_source: str = ""
    mamba_blocks: int = 0

    @property
    def line(self) -> str:
        """One line for a terminal: the message and the fix."""
        return f"{self.message}; fix: {self.fix}"

    def to_dict(self) -> dict[str, Any]:
        """JSON form (``predicted``: a plan's finding, not an engine's log)."""
        return {
            "check": self.check,
            "predicted": True,
            "conditional": self.conditional,
            "message": self.message,
            "fix": self.fix,
            "max_num_seqs": self.max_num_seqs,
            "max_num_seqs_source": self.max_num_seqs_source,
            "mamba_blocks": self.mamba_blocks,
        }


class StartupRules(Protocol):
    """An engine's start-up rules, as the planner asks them (vLLM's:
    :mod:`servelab.engines.vllm.startup`): the platform whose rules apply, its defaults,
    graph capture, the refusals it foresees and what it says of a plan."""

    def platform(self, hardware: HardwareProfile) -> tuple[str, str | None]:
        """The engine's platform whose rules apply on ``hardware``, and a note when it
        stands in for one the engine lacks."""
        ...

    def max_num_seqs(self, hardware: HardwareProfile, platform: str, layout: ParallelLayout,
                     opts: StartupOptions) -> MaxNumSeqs:
        """The ``max_num_seqs`` the engine runs with (given, or its default here)."""
        ...

    def max_num_batched_tokens(self, hardware: HardwareProfile, platform: str,
                               layout: ParallelLayout, opts: StartupOptions) -> BatchedTokens:
        """The token budget of one engine step (given, or its default here)."""
        ...

    def graph_capture(self, seqs: MaxNumSeqs, platform: str, opts: StartupOptions, *,
                      spec_tokens: int = 0) -> GraphCapture:
        """The largest step the engine captures a CUDA graph for under these flags."""
        ...

    def findings(self, kv: KvPoolPlan, seqs: MaxNumSeqs, opts: StartupOptions,
                 hardware: HardwareProfile) -> tuple[StartupFinding, ...]:
        """The start-up refusals a plan of this pool foresees (none when it will start)."""
        ...

    def plan_notes(self, dims: ModelDims, weights: Weights, layout: ParallelLayout,
                   kv: KvPoolPlan, platform: str) -> tuple[str, ...]:
        """What the engine's rules say of a plan of this pool: flags without effect, start-ups
        it refused, costs the speed model does not carry (none when nothing applies)."""
        ...

    def memory_check(self, hardware: HardwareProfile, version: str, *, weights_bytes: int,
                     overhead_bytes: int, overhead_source: str,
                     gpu_memory_utilization: float | None,
                     kv_cache_memory_bytes: int | None) -> StartupMemory | None:
        """The engine's start-up memory check on ``hardware`` as it sees its memory (None
        where the profile states no free memory at start to check against)."""
        ...

    def kernels(self, quant: QuantScheme, weights: Weights, hardware: HardwareProfile,
                version: str, *, model_type: str | None = None) -> KernelAssumption:
        """The kernel path the engine ``version`` takes for a build declaring ``quant`` on
        ``hardware`` (its routed experts' for a MoE model, its linear layers' otherwise), with
        the reason; the profile's table where the engine's selection is not known, said so."""
        ...

    def memory_finding(self, check: StartupMemory) -> StartupFinding | None:
        """The refusal a start-up memory check foresees (None when it starts at every stated
        free-memory figure, or cannot tell)."""
        ...
