"""Each operator's roofline on a piece of hardware: the bytes it moves and the FLOPs it
computes, and the time those take at the hardware's published bandwidth and compute.

Where no table measured a GPU's kernels (a DGX Spark, an RTX 4090 or 5090, an Apple chip,
or llama.cpp on any GPU), an operator's time is its roofline divided by an efficiency of its
class (:mod:`servelab.ops.efficiency` fits those to the hardware's published end-to-end
points). This module holds the arithmetic only:

* :class:`Device`: bandwidth and dense compute by precision, from a hardware profile
  (:mod:`servelab.hardware`), the figures its sources cite;
* :func:`weight_bits`: stored bits per weight of each format (servelab's safetensors layouts
  and llama.cpp's GGML types, block scales included);
* one ``*_work`` function per operator of :mod:`servelab.ops.step`: its :class:`Work` (bytes,
  FLOPs, the precision its kernel computes at, its efficiency class).

Which kernel runs, and so its compute precision, is the engine's choice on that hardware:
:func:`kernel_precision` reads it from the hardware profile's ``kernel_paths`` as servelab's
plan does today (issue 40 replaces those with the engine version's own selection code).

Pure: numbers in, frozen dataclasses out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from servelab.errors import UsageError

#: Stored bits per weight, block scales included: servelab's layouts (safetensors) and
#: llama.cpp's GGML types (``gguf:<TYPE>``: ggml's block size and bytes per block).
WEIGHT_BITS: Mapping[str, float] = {
    "bf16": 16.0,
    "fp16": 16.0,
    "fp8-block": 8.0 + 32.0 / (128 * 128),  # one FP32 scale per 128x128 block
    "fp8-channel": 8.0,  # one scale per output row: negligible
    "fp8-tensor": 8.0,
    "w8a16": 8.0 + 16.0 / 128,  # group 128, FP16 scale
    "w4a16": 4.0 + 16.0 / 128,
    "int4": 4.0 + 16.0 / 128,
    "nvfp4": 4.0 + 8.0 / 16,  # FP8 scale per 16 (and one FP32 per tensor)
    "modelopt-nvfp4": 4.0 + 8.0 / 16,
    "nvfp4a16": 4.0 + 8.0 / 16,
    "mxfp4": 4.0 + 8.0 / 32,  # E8M0 scale per 32
    "gguf:F32": 32.0,
    "gguf:F16": 16.0,
    "gguf:BF16": 16.0,
    "gguf:Q8_0": 34 * 8 / 32,  # 32 weights: 32 int8 + FP16 scale
    "gguf:Q6_K": 210 * 8 / 256,
    "gguf:Q5_K": 176 * 8 / 256,
    "gguf:Q5_0": 22 * 8 / 32,
    "gguf:Q4_K": 144 * 8 / 256,
    "gguf:Q4_0": 18 * 8 / 32,
    "gguf:MXFP4": 17 * 8 / 32,
}

#: Operator classes an efficiency is fitted for (a GEMM's class also names its format).
CLASSES = ("gemm", "moe", "attention", "ssm", "small")


def weight_bits(fmt: str) -> float:
    """Stored bits per weight of ``fmt`` (a layout kind or ``gguf:<GGML type>``)."""
    try:
        return WEIGHT_BITS[fmt]
    except KeyError:
        raise UsageError(f"no stored size known for weight format {fmt!r}") from None


@dataclass(frozen=True)
class Device:
    """A device's ceilings: bytes/s and dense FLOP/s by precision, with where they came
    from."""

    name: str
    bandwidth: float
    compute: Mapping[str, float]
    source: str = ""

    def peak(self, precision: str) -> float:
        """Dense FLOP/s at ``precision``; a precision the device has no figure for computes
        at its 16-bit rate (weight-only formats dequantize to it), said by the caller."""
        for p in (precision, "bf16", "fp16", "fp32"):
            if self.compute.get(p):
                return float(self.compute[p])
        raise UsageError(f"{self.name}: no compute figure for {precision}")


def device(profile: object) -> Device:
    """A :class:`Device` from a :class:`servelab.hardware.profiles.HardwareProfile`: its
    bandwidth ceiling (measured when probed, else published) and published compute."""
    from servelab.hardware.profiles import HardwareProfile

    if not isinstance(profile, HardwareProfile):
        raise TypeError("device() takes a HardwareProfile")
    bw, src = profile.effective_bandwidth_ceiling()
    rates = {p: float(v) for p in ("fp32", "bf16", "fp8", "fp4")
             if (v := profile.compute_rate(p))}
    return Device(profile.name, float(bw), rates, f"bandwidth: {src}; compute: "
                  f"{profile.sources.get('compute', 'published')}")


def kernel_precision(profile: object, fmt: str, *, moe: bool) -> tuple[str, str]:
    """(kernel path, compute precision) the engine takes for weights stored as ``fmt`` on
    ``profile``: its ``kernel_paths`` entry (servelab.hardware), or 16-bit compute for BF16
    and the GGML types (llama.cpp dequantizes them into 16-bit math or int8 dot products;
    the class efficiency carries the difference)."""
    from servelab.hardware.profiles import HardwareProfile

    if not isinstance(profile, HardwareProfile):
        raise TypeError("kernel_precision() takes a HardwareProfile")
    if fmt in ("bf16", "fp16") or fmt.startswith("gguf:"):
        return (f"{fmt} {'MoE' if moe else 'dense'}", "bf16")
    scheme = {"fp8-block": "fp8", "fp8-channel": "fp8", "fp8-tensor": "fp8",
              "modelopt-nvfp4": "nvfp4", "w4a16": "int4"}.get(fmt, fmt)
    path = profile.kernel_path(scheme, moe=moe)
    return path.key, path.compute


@dataclass(frozen=True)
class Work:
    """What one operator call moves and computes, and which efficiency applies."""

    op_class: str  # one of CLASSES
    fmt: str  # a GEMM's / MoE's weight format, a small op's name ("" for others)
    bytes: float
    flops: float
    precision: str = "bf16"
    kernels: int = 1
    detail: Mapping[str, float] = field(default_factory=dict)

    @property
    def key(self) -> str:
        """The efficiency class: ``gemm:<fmt>``, ``moe:<fmt>``, ``small:<op>``, or the class
        alone."""
        return f"{self.op_class}:{self.fmt}" if self.fmt else self.op_class

    def times(self, dev: Device) -> tuple[float, float]:
        """(memory ms, compute ms) at ``dev``'s peaks."""
        return (self.bytes / dev.bandwidth * 1e3,
                self.flops / dev.peak(self.precision) * 1e3)


ACT_BYTES = 2  # activations are 16-bit between operators


def gemm_work(m: int, n: int, k: int, fmt: str, precision: str = "bf16") -> Work:
    """``[m, k] @ [k, n]`` with the weight stored as ``fmt``: the weight read once, the
    activations in and out, ``2 m n k`` FLOPs."""
    w = n * k * weight_bits(fmt) / 8
    return Work("gemm", fmt, w + ACT_BYTES * m * (n + k), 2.0 * m * n * k, precision)


def expected_touched(experts: int, topk: int, tokens: int) -> float:
    """Distinct experts ``tokens`` tokens touch under uniform routing."""
    if experts <= 0 or tokens <= 0:
        return 0.0
    return experts * (1.0 - (1.0 - min(topk, experts) / experts) ** tokens)


def moe_work(tokens: int, experts: int, topk: int, hidden: int, inter: int, fmt: str,
             precision: str = "bf16", gated: bool = True) -> Work:
    """The routed experts of one layer: the experts the tokens touch read once (uniform
    routing), ``2 * tokens * topk * (3 or 2) * hidden * inter`` FLOPs."""
    mats = 3 if gated else 2
    touched = expected_touched(experts, topk, tokens)
    w = touched * mats * hidden * inter * weight_bits(fmt) / 8
    acts = ACT_BYTES * tokens * topk * (2 * hidden + (mats - 1) * inter)
    return Work("moe", fmt, w + acts, 2.0 * tokens * topk * mats * hidden * inter, precision,
                detail={"experts_touched": touched})


def attn_decode_work(batch: int, context: int, hq: int, hkv: int, d: int, window: int = 0,
                     kv_bytes: int = 2) -> Work:
    """One decode attention call: each sequence reads its cached K and V (the window's
    worth on a sliding layer) and computes ``4 hq d L`` FLOPs."""
    ctx = min(context, window) if window else context
    kv = batch * ctx * 2 * hkv * d * kv_bytes
    return Work("attention", "", kv + ACT_BYTES * batch * 2 * hq * d, 4.0 * batch * hq * d * ctx)


def attn_prefill_work(new: int, prefix: int, hq: int, hkv: int, d: int, window: int = 0,
                      kv_bytes: int = 2) -> Work:
    """Causal prefill attention of ``new`` tokens over ``prefix`` cached: ``4 hq d`` FLOPs
    per (query, key) pair attended (half the square of the new tokens, the whole prefix;
    a window caps the keys per query); Q, K, V in and O out."""
    if window and prefix + new > window:
        # queries before the window fills attend prefix + i + 1 keys, the rest the window
        j = min(new, max(0, window - prefix))
        pairs = j * prefix + j * (j + 1) / 2 + (new - j) * window
    else:
        pairs = new * prefix + new * (new + 1) / 2
    io = ACT_BYTES * new * 2 * hq * d + (prefix + new) * 2 * hkv * d * kv_bytes
    return Work("attention", "", io, 4.0 * hq * d * pairs)


def gdn_work(phase: str, x: int, hk: int, dk: int, hv: int, dv: int, state_bytes: int) -> Work:
    """Gated DeltaNet core: decode reads and writes each sequence's ``hv x dk x dv`` state
    (``x`` sequences); prefill over ``x`` tokens computes ~``6 hv dk dv`` FLOPs per token
    (the chunked delta rule's state updates and outputs) and moves q, k, v, output."""
    state = hv * dk * dv * state_bytes
    if phase == "generation":
        return Work("ssm", "", 2.0 * x * state, 4.0 * x * hv * dk * dv)
    io = ACT_BYTES * x * (2 * hk * dk + 2 * hv * dv)
    return Work("ssm", "", io + 2.0 * state, 6.0 * x * hv * dk * dv)


def mamba_work(phase: str, x: int, heads: int, hd: int, groups: int, state: int) -> Work:
    """Mamba2 mixer core (FP32 state ``heads x hd x state``): decode reads and writes it per
    sequence; prefill computes ~``6 heads hd state`` FLOPs per token (the chunked scan)."""
    st = heads * hd * state * 4
    if phase == "generation":
        return Work("ssm", "", 2.0 * x * st, 4.0 * x * heads * hd * state)
    io = ACT_BYTES * x * (2 * heads * hd + 2 * groups * state)
    return Work("ssm", "", io + 2.0 * st, 6.0 * x * heads * hd * state)


#: Bytes an elementwise op moves per row element (16-bit): fused add + RMSNorm reads the
#: input and residual and writes both; the others read and write once (SiLU-and-mul reads two
#: halves); the KV write writes K and V; the router reads logits; the embedding gathers a row.
_ELEMENT_RW = {"rms_norm": 4, "qk_norm": 2, "rope": 2, "silu_mul": 3, "kv_write": 2,
               "router": 2, "embed": 2}


def elementwise_work(op: str, tokens: int, *, width: int | None = None,
                     heads: int | None = None, head_dim: int | None = None,
                     experts: int | None = None) -> Work:
    """A memory-bound small op over ``tokens`` rows."""
    if op in ("rope", "kv_write", "qk_norm"):
        row = (heads or 1) * (head_dim or 1)
    elif op == "router":
        row = experts or 1
    else:
        row = width or 1
    rw = _ELEMENT_RW.get(op, 2)
    return Work("small", op, float(ACT_BYTES * rw * tokens * row), float(4 * tokens * row))


def sampler_work(batch: int, vocab: int) -> Work:
    """Sampling: the FP32 logits read (twice: softmax / top-k and the pick)."""
    return Work("small", "sampler", float(2 * 4 * batch * vocab), float(5 * batch * vocab))
