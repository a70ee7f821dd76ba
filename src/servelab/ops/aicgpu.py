"""Operator costs on the GPUs AIConfigurator measured and servelab has not: its per-operator
tables (:mod:`servelab.ops.aic`) composed by servelab's own step (:mod:`servelab.ops.step`).

AIConfigurator 0.12.0 ships vLLM 0.24.0 tables for the H100, H200, B200, GB200, RTX PRO 6000
(server edition) and L40S: GEMMs by dtype and kernel over a generic (n, k) grid, fused MoE
by expert shape, decode and prefill attention by heads, Gated DeltaNet. Read here:

* **kernels**: per architecture, the kernel vLLM picks where AIConfigurator measured several
  (:data:`KERNELS`, each with the reason); a format or shape it did not measure is refused,
  never guessed: no W4A16/W8A16 dense GEMM (GPTQ/AWQ), no NVFP4 on Hopper or Ada, no
  Mamba2, no MLA (servelab's step has no MLA core), no expert shape it did not time
  (``strict``);
* **unusable rows**: an FP8-block GEMM row slower than the BF16 row of the same (m, n, k) on
  the same GPU is its collector's launch floor, not the kernel (FP8 moves half the weight
  bytes at twice the tensor rate; on the H200, where servelab timed the same DeepGEMM
  kernel, AIConfigurator's rows are servelab's plus ~67 us at m <= 256 and agree from
  m ~ 3K). On Hopper such a row is replaced by the FP8 CUTLASS row of the same shape (servelab
  measured the two kernels alike there); elsewhere it is dropped and a read below the first
  kept m refused (:func:`usable`);
* **small ops** (norms, rotary, SiLU-and-mul, KV write, router, embedding, sampler), which
  AIConfigurator does not time: their roofline at the GPU's bandwidth (AIConfigurator's
  system file) with a fixed time and an efficiency per op fitted to servelab's H200 rows of
  the same ops (less the isolation the H200 measured: in-graph times)
  (:func:`small_op_efficiency`); the host's launch times are the H200 machine's (a CPU's).

The composition's corrections (the engine's per-step overhead per kind, the host's floor per
decode step, an isolation adjustment) and the interval come from the same composition on the
H200, scored against every H200 run with the family left out
(``benchmarks/ops/aic_h200.py`` writes them to ``data/aic-transfer.json``; :func:`transfer`).

Pure apart from reading the installed extra's and the shipped files.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

import numpy as np

from servelab.errors import UsageError
from servelab.ops import aic
from servelab.ops.costs import Costs, KernelChoice, Lookup
from servelab.ops.efficiency import Efficiency, RooflineCosts
from servelab.ops.model import StepModel
from servelab.ops.roofline import Device, elementwise_work, sampler_work
from servelab.ops.step import EngineSteps, StepShape, StepTime, measured_isolation, step_time
from servelab.ops.tables import Table, TableSet, shipped

#: servelab's reference set: the H200 tables measured with vLLM 0.26.0 (small ops, host).
H200_SET = "h200-vllm-0.26.0"

_SM90 = KernelChoice(
    gemm={
        "bf16": ("bfloat16", ("torch.nn.functional.linear",)),
        # vLLM's _POSSIBLE_FP8_BLOCK_KERNELS order on CUDA (FlashInfer's DeepGEMM, DeepGEMM,
        # CUTLASS); AIConfigurator names FlashInfer's "FlashInferFp8BlockScaledMMKernel"
        # DeepGEMM: what vLLM 0.26.0 ran in servelab's H200 runs (no FlashInfer installed;
        # with FlashInfer, vLLM's _POSSIBLE_FP8_BLOCK_KERNELS puts its DeepGEMM wrapper
        # first, which AIConfigurator timed at m <= 17 only)
        "fp8-block": ("fp8_block", ("DeepGemmFp8BlockScaledMMKernel",
                                    "FlashInferFp8BlockScaledMMKernel",
                                    "CutlassFp8BlockScaledMMKernel")),
        # FP8 per-tensor / per-channel: CUTLASS (AIConfigurator's only FP8 scaled-mm kernel;
        # its activations are static per-tensor, a checkpoint's may be dynamic per token)
        "fp8-channel": ("fp8", ("CutlassFP8ScaledMMLinearKernel",)),
        "fp8-tensor": ("fp8", ("CutlassFP8ScaledMMLinearKernel",)),
    },
    moe={
        "bf16": ("bfloat16", ("vllm_unquantizedfusedmoe_triton_tritonexperts",)),
        # Triton first: the kernel servelab's own H200 runs and tables use
        "fp8-block": ("fp8_block", ("vllm_fp8moe_triton_tritonexperts",
                                    "vllm_fp8moe_flashinfer_cutlass_flashinferexperts")),
        # gpt-oss on Hopper: OpenAI's Triton MXFP4 kernels (vLLM's gpt-oss MXFP4 method)
        "mxfp4": ("w4a16_mxfp4", ("vllm_gptossmxfp4moe_triton_oaitritonmxfp4expertsmonolithic",)),
    },
    attention=("vllm_flash_attn_fa3",),
    strict=True,
    moe_balanced=True,
    source="vLLM 0.24.0 on Hopper (sm_90) as AIConfigurator 0.12.0 timed it",
)
_SM100 = KernelChoice(
    gemm={
        "bf16": ("bfloat16", ("torch.nn.functional.linear",)),
        "fp8-block": ("fp8_block", ("DeepGemmFp8BlockScaledMMKernel",
                                    "CutlassFp8BlockScaledMMKernel")),
        "fp8-channel": ("fp8", ("CutlassFP8ScaledMMLinearKernel",)),
        "fp8-tensor": ("fp8", ("CutlassFP8ScaledMMLinearKernel",)),
        "nvfp4": ("nvfp4", ("FlashInferCuteDslNvFp4LinearKernel",)),
        "modelopt-nvfp4": ("nvfp4", ("FlashInferCuteDslNvFp4LinearKernel",)),
    },
    moe={
        # FlashInfer TRT-LLM kernels on Blackwell datacenter parts (AIConfigurator timed the
        # CUTLASS ones for two shapes only)
        "bf16": ("bfloat16", ("vllm_unquantizedfusedmoe_flashinfer_trtllm_trtllmbf16experts",
                              "vllm_unquantizedfusedmoe_flashinfer_cutlass_flashinferexperts")),
        "fp8-block": ("fp8_block", (
            "vllm_fp8moe_flashinfer_trtllm_trtllmfp8expertsmonolithic",
            "vllm_fp8moe_flashinfer_trtllm_trtllmfp8expertsmodular")),
        "nvfp4": ("nvfp4", (
            "vllm_compressedtensorsw4a4nvfp4moe_flashinfer_trtllm_trtllmnvfp4expertsmonolithic",
            "vllm_compressedtensorsw4a4nvfp4moe_flashinfer_cutlass_flashinferexperts")),
        "modelopt-nvfp4": ("nvfp4", (
            "vllm_compressedtensorsw4a4nvfp4moe_flashinfer_trtllm_trtllmnvfp4expertsmonolithic",
            "vllm_compressedtensorsw4a4nvfp4moe_flashinfer_cutlass_flashinferexperts")),
        # gpt-oss on SM100: FlashInfer TRT-LLM MXFP4 x BF16 (AIConfigurator's gpt-oss shapes)
        "mxfp4": ("w4a16_mxfp4", (
            "vllm_gptossmxfp4moe_flashinfer_trtllm_mxfp4_bf16_trtllmmxfp4expertsmonolithic",)),
    },
    # the prefill kernel where the table has it (context), else the decode one
    attention=("vllm_flashinfer_trtllmprefill", "vllm_flashinfer_trtllmdecode"),
    strict=True,
    moe_balanced=True,
    source="vLLM 0.24.0 on Blackwell (sm_100) as AIConfigurator 0.12.0 timed it",
)
_SM120 = KernelChoice(
    gemm={
        "bf16": ("bfloat16", ("torch.nn.functional.linear",)),
        "fp8-block": ("fp8_block", ("CutlassFp8BlockScaledMMKernel",)),
        "fp8-channel": ("fp8", ("CutlassFP8ScaledMMLinearKernel",)),
        "fp8-tensor": ("fp8", ("CutlassFP8ScaledMMLinearKernel",)),
        "nvfp4": ("nvfp4", ("FlashInferCutlassNvFp4LinearKernel",)),
        "modelopt-nvfp4": ("nvfp4", ("FlashInferCutlassNvFp4LinearKernel",)),
    },
    moe={
        "bf16": ("bfloat16", (
            "vllm_unquantizedfusedmoe_flashinfer_cutlass_flashinferexperts",)),
        "nvfp4": ("nvfp4", (
            "vllm_compressedtensorsw4a4nvfp4moe_flashinfer_cutlass_flashinferexperts",)),
        "modelopt-nvfp4": ("nvfp4", (
            "vllm_compressedtensorsw4a4nvfp4moe_flashinfer_cutlass_flashinferexperts",)),
        "mxfp4": ("w4a16_mxfp4", ("vllm_gptossmxfp4moe_marlin_marlinexperts",)),
    },
    attention=("vllm_flash_attn_fa2",),
    # FlashAttention 2 has no sinks: vLLM runs gpt-oss's attention with Triton there
    attention_sinks=("vllm_triton_attn",),
    strict=True,
    moe_balanced=True,
    source="vLLM 0.24.0 on Blackwell workstation/server (sm_120) as AIConfigurator 0.12.0 timed it",
)
_SM89 = KernelChoice(
    gemm={
        "bf16": ("bfloat16", ("torch.nn.functional.linear",)),
        "fp8-block": ("fp8_block", ("TritonFp8BlockScaledMMKernel",)),
        "fp8-channel": ("fp8", ("CutlassFP8ScaledMMLinearKernel",)),
        "fp8-tensor": ("fp8", ("CutlassFP8ScaledMMLinearKernel",)),
    },
    moe={
        "bf16": ("bfloat16", ("vllm_unquantizedfusedmoe_triton_tritonexperts",)),
        "fp8-block": ("fp8_block", ("vllm_fp8moe_triton_tritonexperts",)),
        "mxfp4": ("w4a16_mxfp4", ("vllm_gptossmxfp4moe_marlin_marlinexperts",)),
    },
    attention=("vllm_flash_attn_fa2",),
    attention_sinks=("vllm_triton_attn",),
    strict=True,
    moe_balanced=True,
    source="vLLM 0.24.0 on Ada (sm_89) as AIConfigurator 0.12.0 timed it",
)
#: servelab hardware name -> the kernels read from AIConfigurator's tables.
KERNELS: Mapping[str, KernelChoice] = {
    "h100": _SM90, "h200": _SM90, "b200": _SM100, "gb200": _SM100,
    "rtx-pro-6000": _SM120, "l40s": _SM89,
}
#: GPUs with AIConfigurator vLLM tables this module reads (the H200 as servelab's check).
GPUS = tuple(KERNELS)


#: Architectures where an FP8-block GEMM row at AIConfigurator's collector floor is replaced
#: by its FP8 CUTLASS scaled-mm row of the same (m, n, k): the same FP8 weight bytes, and on
#: sm_90 servelab timed both kernels on the H200 (DeepGEMM 128x128 block against CUTLASS
#: per-channel, both with their activation quantization): median ratio 0.83-1.11 by token
#: count, 29 shapes (benchmarks/ops/aic_h200.py prints it). Elsewhere the row is refused.
SUBSTITUTE_FP8_BLOCK = frozenset({"h100", "h200"})


def usable(ts: TableSet, hardware: str = "") -> tuple[TableSet, dict[str, int]]:
    """``ts`` with its FP8-block GEMM rows slower than the BF16 row of the same (m, n, k)
    (AIConfigurator's collector floor, not the kernel's time) dropped, or, on
    :data:`SUBSTITUTE_FP8_BLOCK` architectures, replaced by the same shape's FP8 CUTLASS
    row under the block kernel's name. Returns the set and the counts."""
    gemm = ts.table("gemm")
    bf16 = {(r["m"], r["n"], r["k"]): float(r["latency"]) for r in gemm.rows
            if r.get("gemm_dtype") == "bfloat16" and r.get("latency") is not None}
    fp8 = {(r["m"], r["n"], r["k"]): float(r["latency"]) for r in gemm.rows
           if r.get("gemm_dtype") == "fp8" and r.get("latency") is not None}
    keep: list[Mapping[str, Any]] = []
    counts = {"fp8_block_rows_at_floor": 0, "fp8_block_rows_substituted": 0}
    have: set[tuple[Any, ...]] = set()
    shapes: dict[str, Mapping[str, Any]] = {}
    for r in gemm.rows:
        if r.get("gemm_dtype") == "fp8_block":
            key = (r["m"], r["n"], r["k"])
            shapes.setdefault(str(r["kernel_source"]), r)
            ref = bf16.get(key)
            if ref is None or float(r["latency"]) > ref:
                counts["fp8_block_rows_at_floor"] += 1
                continue
            have.add((r["kernel_source"], *key))
        keep.append(r)
    if hardware in SUBSTITUTE_FP8_BLOCK:
        # every (n, k) a block kernel was timed at, at every m the FP8 CUTLASS rows have
        # and the block kernel lacks a usable row for
        grid: dict[str, set[tuple[Any, Any]]] = defaultdict(set)
        for r in gemm.rows:
            if r.get("gemm_dtype") == "fp8_block":
                grid[str(r["kernel_source"])].add((r["n"], r["k"]))
        for kern, nks in grid.items():
            proto = shapes[kern]
            for (m, n, k), lat in fp8.items():
                if (n, k) in nks and (kern, m, n, k) not in have:
                    keep.append({**proto, "m": m, "n": n, "k": k, "latency": lat})
                    counts["fp8_block_rows_substituted"] += 1
    tables = dict(ts.tables)
    tables["gemm"] = Table("gemm", tuple(keep))
    return TableSet(ts.key, ts.provenance, tables), counts


@dataclass(frozen=True)
class SmallOpFit:
    """Per small op: a fixed time and a bandwidth efficiency, fitted to measured rows."""

    efficiency: Efficiency
    rows: int
    rms_log_error: float


def small_op_efficiency(ts: TableSet, dev: Device, isolation: tuple[float, float]
                        ) -> SmallOpFit:
    """Fit ``t = fixed + bytes / (bandwidth * eta)`` per small op (and the sampler) to the
    rows ``ts`` measured on ``dev``, each row's isolated time less ``min(frac * t, cap)``
    (``isolation``: the in-graph time). Least squares in time, relative weights."""
    frac, cap = isolation
    pts: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for r in ts.table("elementwise").rows:
        if r.get("latency") is None:
            continue
        w = elementwise_work(str(r["op_name"]), int(r["num_tokens"]), width=r.get("width"),
                             heads=r.get("heads"), head_dim=r.get("head_dim"),
                             experts=r.get("num_experts"))
        t = float(r["latency"])
        pts[w.key].append((w.bytes / dev.bandwidth * 1e3, t - min(frac * t, cap)))
    for r in ts.table("sampler").rows:
        if r.get("latency") is None or r.get("mode") != "greedy":
            continue
        w = sampler_work(int(r["batch_size"]), int(r["vocab"]))
        t = float(r["latency"])
        pts[w.key].append((w.bytes / dev.bandwidth * 1e3, t - min(frac * t, cap)))
    if not pts:
        raise UsageError(f"{ts.key}: no small-op rows to fit")
    fixed: dict[str, float] = {}
    mem: dict[str, float] = {}
    errs: list[float] = []
    n = 0
    for key, xy in pts.items():
        x = np.array([p[0] for p in xy])
        y = np.array([p[1] for p in xy])
        a = np.stack([np.ones_like(x), x], axis=1) / y[:, None]  # relative error weights
        (f, s), *_ = np.linalg.lstsq(a, np.ones_like(y), rcond=None)
        f, s = max(float(f), 0.0), max(float(s), 1e-3)
        fixed[key] = f * 1e3  # µs
        mem[key] = 1.0 / s
        errs.extend(math.log((f + s * xi) / yi) ** 2 for xi, yi in zip(x, y, strict=True))
        n += len(xy)
    eff = Efficiency(dev.name, "vllm", 1.0, 1.0, 0.0, mem, {}, fixed,
                     source=f"small ops fitted to {n} rows of {ts.key}")
    return SmallOpFit(eff, n, math.sqrt(sum(errs) / len(errs)))


class SmallOps:
    """The ops AIConfigurator does not time, for :class:`~servelab.ops.costs.Costs`:
    elementwise ops and the sampler from their roofline on ``dev`` with servelab's H200-fitted
    efficiency; the host's launches from servelab's H200 host rows."""

    def __init__(self, dev: Device, fit: SmallOpFit, host: Costs) -> None:
        self.roof = RooflineCosts(None, fit.efficiency, dev)
        self._host = host
        self.fit = fit

    @property
    def label(self) -> str:
        return (f"roofline on {self.roof.device.name} x efficiency fitted to servelab's H200 "
                f"rows ({self.fit.rows} rows, rms log error {self.fit.rms_log_error:.2f}); "
                f"host launches: {H200_SET}")

    def elementwise(self, op: str, tokens: int, *, width: int | None = None,
                    heads: int | None = None, head_dim: int | None = None,
                    experts: int | None = None, topk: int | None = None) -> Lookup:
        return self.roof.elementwise(op, tokens, width=width, heads=heads,
                                     head_dim=head_dim, experts=experts, topk=topk)

    def sampler(self, batch: int, vocab: int, mode: str = "greedy") -> Lookup:
        if mode != "greedy":
            raise UsageError(f"the small-op fit has greedy sampling only, not {mode}")
        return self.roof.sampler(batch, vocab, mode)

    def host(self, kernels: int, mode: str) -> Lookup:
        return self._host.host(kernels, mode)


def costs_for(hardware: str) -> Costs:
    """servelab's composition over AIConfigurator's tables for ``hardware`` (a servelab
    profile name in :data:`GPUS`); the FP8-block rows found at the collector's floor (and
    those substituted) are counted in the table set's provenance (:func:`usable`)."""
    if hardware not in KERNELS:
        raise UsageError(f"no AIConfigurator-table composition for {hardware!r}; "
                         f"it has: {', '.join(GPUS)}")
    ref = shipped().get(H200_SET)
    if ref is None:
        raise UsageError(f"servelab's {H200_SET} tables are not shipped")
    ts, counts = usable(aic.load(hardware, "vllm"), hardware)
    prov = dataclasses.replace(ts.provenance, details={**ts.provenance.details, **counts})
    ts = TableSet(ts.key, prov, ts.tables)
    href = Costs([ref])
    iso = measured_isolation(href)
    if iso is None:
        raise UsageError(f"{H200_SET} carries no measured isolation")
    small = SmallOps(aic.system_device(hardware),
                     small_op_efficiency(ref, aic.system_device("h200"), iso[:2]), href)
    return Costs([ts], KERNELS[hardware], small)


# --- the H200-calibrated corrections and interval ----------------------------------------


@dataclass(frozen=True)
class Transfer:
    """What the composition over AIConfigurator's tables needs besides the operators,
    fitted on the H200 (every family) and carried to another GPU as is."""

    isolation_frac: float
    isolation_cap_ms: float
    overhead_ms: Mapping[str, float]  # per kind: the engine's per-step time outside operators
    host_floor_ms: float  # a decode step is never shorter (the host's own work per step)
    half_width_log: Mapping[str, float]  # per kind: the H200 held-out |log error| bound
    source: str
    details: Mapping[str, Any] = field(default_factory=dict)


def transfer(doc: Mapping[str, Any] | None = None) -> Transfer:
    """The shipped ``data/aic-transfer.json`` (or ``doc``)."""
    if doc is None:
        f = resources.files("servelab.ops") / "data" / "aic-transfer.json"
        if not f.is_file():
            raise UsageError("no aic-transfer.json shipped (benchmarks/ops/aic_h200.py "
                             "writes it)")
        doc = json.loads(f.read_text(encoding="utf-8"))
    try:
        return Transfer(float(doc["isolation_frac"]), float(doc["isolation_cap_ms"]),
                        {k: float(v) for k, v in doc["overhead_ms"].items()},
                        float(doc["host_floor_ms"]),
                        {k: float(v) for k, v in doc["half_width_log"].items()},
                        str(doc["source"]), dict(doc.get("details", {})))
    except (KeyError, TypeError, ValueError) as e:
        raise UsageError(f"aic-transfer.json: {e}") from e


@dataclass(frozen=True)
class StepPrediction:
    """One step on a GPU with AIConfigurator's tables: the time, its interval, the parts."""

    hardware: str
    kind: str
    ms: float
    low_ms: float
    high_ms: float
    step: StepTime
    source: str
    notes: tuple[str, ...]


def predict(model: StepModel, hardware: str, shape: StepShape, costs: Costs | None = None,
            tr: Transfer | None = None, *, cuda_graph_max: int = 512,
            overhead: str | None = None) -> StepPrediction:
    """``model``'s step at ``shape`` on ``hardware``: the operators from AIConfigurator's
    tables, plus the H200-calibrated engine overhead (and the host floor for a decode
    step), with the H200 held-out interval. ``overhead``: whose overhead to add (``decode``,
    the per-step one, or ``prefill``, what a single request's prefill step costs besides its
    operators: tokenizing, scheduling, returning); by default the step's own kind. Raises
    :class:`UsageError` where the tables lack an operator the model needs."""
    costs = costs or costs_for(hardware)
    tr = tr or transfer()
    kind = overhead or ("decode" if shape.decode_only else "prefill")
    eng = EngineSteps(cuda_graph_max=cuda_graph_max, isolation_frac=tr.isolation_frac,
                      isolation_cap_ms=tr.isolation_cap_ms)
    try:
        st = step_time(model, costs, shape, eng)
    except UsageError as e:
        raise UsageError(f"{model.name} on {hardware}: {e.message}") from e
    ms = st.total_ms + tr.overhead_ms[kind]
    if shape.decode_only:
        ms = max(ms, tr.host_floor_ms)
    w = tr.half_width_log[kind]
    notes = (*st.notes, f"engine overhead {tr.overhead_ms[kind]:+.2f} ms per {kind} step"
             + (f", host floor {tr.host_floor_ms:.2f} ms" if shape.decode_only else "")
             + f" ({tr.source})")
    return StepPrediction(hardware, kind, ms, ms * math.exp(-w), ms * math.exp(w), st,
                          f"servelab operator composition over {costs.label}", notes)


def lookup_kernels(costs: Costs, model: StepModel) -> dict[str, str]:
    """Which kernel each distinct operator of a decode step read (for a report)."""
    st = step_time(model, costs, StepShape.decode(1, 1024))
    out: dict[str, str] = {}
    for it in st.items:
        lk: Lookup = it.lookup
        out.setdefault(it.op, f"{lk.kernel} ({lk.table}, {lk.how})")
    return out
