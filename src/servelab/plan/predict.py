"""Roofline speed prediction: decode is bytes over bandwidth, prefill FLOPs over compute.

Everything returned here is a **prediction** (``predicted: True`` in every JSON object).

Decode, one sequence, context ``c``::

    bytes/token = weights read per token (inspect's decode bytes)
                + KV read: full-attention layers x 2 x kv_heads x head_dim x kv bytes x c
                + linear-attention state read and written back: 2 x state bytes
    tok/s       = bandwidth / bytes/token            (pure roofline: peak bandwidth)
                  x efficiency                        (calibrated, when measurements exist)

Prefill, a prompt of ``P`` tokens::

    FLOPs = 2 x (active params - lm_head) x P + 2 x lm_head (logits of the last token only)
          + 2 x P² x q_heads x head_dim per full-attention layer (causal QKᵀ and AV)
          + 4 x P x v_heads x k_dim x v_dim per linear-attention layer
    time  = max(FLOPs / compute rate of the kernel path's precision,
                bytes read / bandwidth)    bytes read = non-routed weights
                                           + routed x (1 - (1 - k/E)^P) + KV written
    tok/s = P / time

MTP / speculative decoding with ``k`` drafts and mean acceptance length ``a`` (tokens per
verification step, 1 + accepted)::

    tok/s = a x bandwidth / (bytes/token + k x draft bytes/token)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from servelab.errors import UsageError
from servelab.hardware.profiles import HardwareProfile, KernelPath
from servelab.plan.kv import attention_bytes_per_token_per_layer, mamba_state_bytes
from servelab.plan.modelcfg import DTYPE_BYTES, ModelDims
from servelab.plan.weights import Weights

DEFAULT_PROMPT_LENS = (512, 2048, 8192)


@dataclass(frozen=True)
class Efficiency:
    """Achieved ÷ peak for one (engine, version, backend path, hardware, kind)."""

    key: str
    n: int
    median: float
    low: float
    high: float
    matched: str = "exact"


@dataclass(frozen=True)
class DecodePoint:
    """Predicted single-stream decode at one context length."""

    context_len: int
    weight_bytes: int
    kv_bytes: int
    state_bytes: int
    bytes_per_token: int
    roofline_tok_s: float
    calibrated_tok_s: float | None
    calibrated_low: float | None
    calibrated_high: float | None
    predicted: bool = True


@dataclass(frozen=True)
class PrefillPoint:
    """Predicted prefill of one prompt."""

    prompt_len: int
    flops: float
    bytes_read: int
    compute_s: float
    bandwidth_s: float
    bound: str
    roofline_tok_s: float
    calibrated_tok_s: float | None
    predicted: bool = True


@dataclass(frozen=True)
class MtpPoint:
    """Predicted decode with speculative drafts at one mean acceptance length."""

    acceptance_length: float
    draft_tokens: int
    roofline_tok_s: float
    speedup: float
    predicted: bool = True


@dataclass(frozen=True)
class SpeedPrediction:
    """Roofline (and calibrated, when fitted) decode and prefill predictions."""

    hardware: str
    bandwidth: float
    bandwidth_source: str
    kernel_path: KernelPath
    compute_precision: str
    compute_rate: float | None
    compute_source: str
    decode: tuple[DecodePoint, ...]
    prefill: tuple[PrefillPoint, ...]
    mtp: tuple[MtpPoint, ...] = ()
    decode_efficiency: Efficiency | None = None
    prefill_efficiency: Efficiency | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form; every speed carries ``predicted: true``."""
        d = asdict(self)
        d["predicted"] = True
        return d


def kv_read_bytes(dims: ModelDims, context_len: int, kv_dtype_bytes: int) -> int:
    """KV bytes one decode step reads at ``context_len`` (all full-attention layers)."""
    per = attention_bytes_per_token_per_layer(dims, kv_dtype_bytes)
    return dims.num_full_attention_layers * per * context_len


def state_traffic_bytes(dims: ModelDims, ssm_dtype: str) -> int:
    """Linear-attention state bytes read and written back per decode step."""
    return 2 * dims.num_linear_layers * mamba_state_bytes(dims, ssm_dtype=ssm_dtype)


def decode_bytes_per_token(
    weights: Weights, dims: ModelDims, context_len: int, *, kv_dtype_bytes: int, ssm_dtype: str
) -> tuple[int, int, int]:
    """(weight, KV, state) bytes read per generated token at ``context_len``."""
    return (
        weights.decode_bytes_per_token,
        kv_read_bytes(dims, context_len, kv_dtype_bytes),
        state_traffic_bytes(dims, ssm_dtype),
    )


def roofline_decode_tok_s(bytes_per_token: float, bandwidth: float) -> float:
    """Decode tokens/s when every step streams ``bytes_per_token`` at ``bandwidth``."""
    if bytes_per_token <= 0 or bandwidth <= 0:
        raise UsageError("bytes per token and bandwidth must be positive")
    return bandwidth / bytes_per_token


def prefill_flops(weights: Weights, dims: ModelDims, prompt_len: int) -> float:
    """FLOPs of prefilling ``prompt_len`` tokens (matmuls + attention + linear attention)."""
    p = prompt_len
    body = weights.active_params - weights.lm_head_params
    flops = 2.0 * body * p + 2.0 * weights.lm_head_params  # vLLM computes last-token logits
    flops += dims.num_full_attention_layers * 2.0 * p * p * dims.num_attention_heads * dims.head_dim
    if dims.linear is not None:
        lin = dims.linear
        flops += (
            dims.num_linear_layers
            * 4.0
            * p
            * lin.num_value_heads
            * lin.key_head_dim
            * lin.value_head_dim
        )
    return flops


def prefill_bytes_read(weights: Weights, dims: ModelDims, prompt_len: int, kv_bytes: int) -> int:
    """Weight bytes a prefill of ``prompt_len`` touches (expert coverage grows with P)."""
    fixed = weights.prefill_fixed_bytes
    routed = 0.0
    if weights.moe:
        miss = (1 - weights.experts_per_token / weights.num_experts) ** prompt_len
        routed = weights.routed_expert_bytes * (1 - miss)
    kv_write = kv_read_bytes(dims, prompt_len, kv_bytes)
    return int(fixed + routed + kv_write)


def predict_speed(
    weights: Weights,
    dims: ModelDims,
    hardware: HardwareProfile,
    *,
    prompt_lens: Sequence[int] = DEFAULT_PROMPT_LENS,
    kv_dtype_bytes: int | None = None,
    ssm_dtype: str = "float32",
    decode_efficiency: Efficiency | None = None,
    prefill_efficiency: Efficiency | None = None,
    acceptance_lengths: Sequence[float] = (),
    draft_tokens: int = 0,
    draft_bytes_per_token: int | None = None,
) -> SpeedPrediction:
    """Predict decode and prefill speed on ``hardware`` (see module docs for the model)."""
    if not prompt_lens or any(p <= 0 for p in prompt_lens):
        raise UsageError("prompt lengths must be positive integers")
    if ssm_dtype not in DTYPE_BYTES:
        raise UsageError(f"unknown SSM state dtype {ssm_dtype!r}")
    kvb = kv_dtype_bytes or dims.dtype_bytes
    bw, bw_src = hardware.effective_bandwidth_ceiling()
    path = hardware.kernel_path(weights.scheme, moe=weights.moe)
    rate = hardware.compute_rate(path.compute)
    comp_src = (
        "measured (probe)"
        if path.compute in hardware.measured_compute
        else hardware.sources.get("compute", "published")
    )
    notes: list[str] = []
    if rate is None:
        notes.append(f"{hardware.name} has no {path.compute} compute figure: prefill not predicted")
    decode: list[DecodePoint] = []
    prefill: list[PrefillPoint] = []
    for p in prompt_lens:
        w, kv, st = decode_bytes_per_token(
            weights, dims, p, kv_dtype_bytes=kvb, ssm_dtype=ssm_dtype
        )
        total = w + kv + st
        roof = roofline_decode_tok_s(total, bw)
        eff = decode_efficiency
        decode.append(
            DecodePoint(
                context_len=p,
                weight_bytes=w,
                kv_bytes=kv,
                state_bytes=st,
                bytes_per_token=total,
                roofline_tok_s=roof,
                calibrated_tok_s=roof * eff.median if eff else None,
                calibrated_low=roof * eff.low if eff else None,
                calibrated_high=roof * eff.high if eff else None,
            )
        )
        if rate is not None:
            flops = prefill_flops(weights, dims, p)
            nbytes = prefill_bytes_read(weights, dims, p, kvb)
            t_c = flops / rate
            t_b = nbytes / bw
            t = max(t_c, t_b)
            roof_p = p / t
            pe = prefill_efficiency
            prefill.append(
                PrefillPoint(
                    prompt_len=p,
                    flops=flops,
                    bytes_read=nbytes,
                    compute_s=t_c,
                    bandwidth_s=t_b,
                    bound="compute" if t_c >= t_b else "bandwidth",
                    roofline_tok_s=roof_p,
                    calibrated_tok_s=roof_p * pe.median if pe else None,
                )
            )
    mtp: list[MtpPoint] = []
    if acceptance_lengths:
        if draft_tokens <= 0:
            raise UsageError("speculative prediction needs at least one draft token")
        draft = draft_bytes_per_token
        if draft is None:
            draft = _draft_bytes_estimate(weights)
            notes.append(
                "draft bytes/token estimated as the MTP head's bytes x the model's active "
                "fraction"
            )
        base = decode[0]
        for a in acceptance_lengths:
            if not 1.0 <= a <= draft_tokens + 1:
                raise UsageError(
                    f"acceptance length {a} must lie in [1, draft tokens + 1 = {draft_tokens + 1}]"
                )
            tok_s = a * bw / (base.bytes_per_token + draft_tokens * draft)
            mtp.append(MtpPoint(a, draft_tokens, tok_s, tok_s / base.roofline_tok_s))
    return SpeedPrediction(
        hardware=hardware.name,
        bandwidth=bw,
        bandwidth_source=bw_src,
        kernel_path=path,
        compute_precision=path.compute,
        compute_rate=rate,
        compute_source=comp_src,
        decode=tuple(decode),
        prefill=tuple(prefill),
        mtp=tuple(mtp),
        decode_efficiency=decode_efficiency,
        prefill_efficiency=prefill_efficiency,
        notes=tuple(notes),
    )


def _draft_bytes_estimate(weights: Weights) -> int:
    if weights.mtp_bytes <= 0:
        return 0
    text = max(weights.resident_bytes - weights.vision_bytes - weights.mtp_bytes, 1)
    return int(weights.mtp_bytes * weights.decode_bytes_per_token / text)
