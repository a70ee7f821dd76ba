"""Speed prediction: a roofline bound and a calibrated prediction with an interval.

Everything returned here is a **prediction** (``predicted: True`` in every JSON object).

The costs of one point come from the checkpoint and the model's dimensions:

Decode, one sequence, context ``c``::

    bytes/token = weights read per token (inspect's decode bytes)
                + KV read, per layer: kv_heads x (k_dim + v_dim) x kv bytes x tokens read
                  (c for full attention, min(c, window) sliding, min(c, chunk) chunked;
                  MLA: (kv_lora_rank + qk_rope_head_dim) x kv bytes x c)
                + Gated DeltaNet / Mamba2 state read and written back: 2 x state bytes

Prefill, a prompt of ``P`` tokens::

    FLOPs = 2 x (active params - lm_head) x P + 2 x lm_head (logits of the last token only)
          + 2 x pairs x q_heads x (qk dim + v dim) per attention layer (causal QKᵀ and AV;
            pairs = P²/2, fewer for a sliding window or chunks; MLA: nope + rope, v dims)
          + 4 x P x state values per Gated DeltaNet / Mamba2 layer
    bytes = non-routed weights + routed x (1 - (1 - k/E)^P) + KV written

The **roofline** (an upper bound) is bytes / peak bandwidth for decode and
max(FLOPs / peak compute, bytes / peak bandwidth) for prefill. The **prediction** is the
calibrated linear model of :mod:`servelab.plan.speedmodel` (per-byte, per-FLOP, per-layer
and fixed costs fitted from stored runs or shipped priors), with a ± from leave-one-model-out
residuals and the fit's source on every point; without calibration data there is no
prediction, only the bound.

MTP / speculative decoding with ``k`` drafts and mean acceptance length ``a`` (tokens per
verification step, 1 + accepted): one step verifies ``k + 1`` tokens in one pass, which
touches the expected number of distinct routed experts of ``k + 1`` independent top-``K``
draws (``E x (1 - (1 - K/E)^(k+1))`` instead of ``K``), and runs ``k`` draft passes of the
MTP head, each reading the head's active weights and the lm_head::

    step bytes  = non-routed + routed x (1 - (1 - K/E)^(k+1)) + KV + state
                + k x (MTP head active bytes + lm_head bytes)
    step layers = n_layers + k x MTP layers
    tok/s       = a / t_step(step bytes, step layers)      (the decode form)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from servelab.defaults import PROMPT_LENS
from servelab.errors import UsageError
from servelab.families import DTYPE_BYTES, LINEAR, MAMBA, MLA, ModelDims
from servelab.families.layers import CHUNKED, FULL, SLIDING
from servelab.hardware.profiles import HardwareProfile, KernelPath
from servelab.plan.speedmodel import TERMS, Calibration, Fit, expert_slots, features, interval
from servelab.plan.weights import Weights

SOFTMAX_KINDS = frozenset({FULL, SLIDING, CHUNKED})


@dataclass(frozen=True)
class DecodePoint:
    """Single-stream decode at one context length: bound, prediction and interval."""

    context_len: int
    weight_bytes: int
    kv_bytes: int
    state_bytes: int
    bytes_per_token: int
    layers: int
    roofline_tok_s: float
    predicted_tok_s: float | None
    predicted_low: float | None
    predicted_high: float | None
    predicted: bool = True


@dataclass(frozen=True)
class PrefillPoint:
    """Prefill of one prompt: bound, prediction and interval."""

    prompt_len: int
    flops: float
    bytes_read: int
    layers: int
    compute_s: float
    bandwidth_s: float
    bound: str
    roofline_tok_s: float
    predicted_tok_s: float | None
    predicted_low: float | None
    predicted_high: float | None
    predicted: bool = True
    eager: bool = False  # longer than the engine's largest CUDA graph: launched layer by layer
    expert_flops: float = 0.0  # of ``flops``, the routed experts' (the fused-MoE kernel's)
    #: What the calibrated prediction says the step waits on: "host" (launching kernels
    #: outlasts them) or "device"; None without a calibrated prediction.
    waits_on: str | None = None


@dataclass(frozen=True)
class MtpPoint:
    """Decode with speculative drafts at one mean acceptance length."""

    acceptance_length: float
    draft_tokens: int
    step_bytes: int
    step_layers: int
    roofline_tok_s: float
    predicted_tok_s: float | None
    predicted_low: float | None
    predicted_high: float | None
    speedup: float | None
    predicted: bool = True


@dataclass(frozen=True)
class SpecStep:
    """What one speculative step costs at a context length, whatever the acceptance: the
    decode form's inputs for verifying ``k + 1`` tokens and ``k`` draft passes. Stored with
    every plan that drafts, so a run's measured speed and acceptance calibrate the form
    (``t_step = acceptance / tok/s``) even when no acceptance was known when it was planned."""

    context_len: int
    draft_tokens: int
    step_bytes: int
    step_layers: int
    expert_slots: int


@dataclass(frozen=True)
class SpeedPrediction:
    """Roofline bounds and calibrated predictions (with their fits) for decode and prefill."""

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
    spec_steps: tuple[SpecStep, ...] = ()
    decode_fit: Fit | None = None
    prefill_fit: Fit | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form; every speed carries ``predicted: true``."""
        d = asdict(self)
        d["decode_fit"] = self.decode_fit.to_dict() if self.decode_fit else None
        d["prefill_fit"] = self.prefill_fit.to_dict() if self.prefill_fit else None
        d["predicted"] = True
        return d


def layer_token_bytes(dims: ModelDims, i: int, kv_dtype_bytes: int) -> int:
    """Bytes one cached token holds in layer ``i`` (0 for state and cache-less layers)."""
    kind = dims.layer_types[i]
    if kind == MLA:
        return dims.mla.latent_dim * kv_dtype_bytes if dims.mla is not None else 0
    if kind not in SOFTMAX_KINDS:
        return 0
    layer = dims.attention_layer(i)
    if layer is None:
        return 2 * dims.num_kv_heads * dims.head_dim * kv_dtype_bytes
    return layer.kv_elements_per_token() * kv_dtype_bytes


def _tokens_read(dims: ModelDims, i: int, context_len: int) -> int:
    """Cached tokens layer ``i`` reads at ``context_len``: a sliding layer at most its
    window, a chunked layer at most its chunk, the others the whole context."""
    layer = dims.attention_layer(i)
    return layer.tokens_read(context_len) if layer is not None else context_len


def kv_read_bytes(dims: ModelDims, context_len: int, kv_dtype_bytes: int) -> int:
    """KV bytes one decode step reads at ``context_len``: every full-attention layer its
    whole context, a sliding layer at most its window, a chunked layer at most its chunk,
    an MLA layer the latent (``kv_lora_rank + qk_rope_head_dim``) of every token."""
    return sum(
        layer_token_bytes(dims, i, kv_dtype_bytes) * _tokens_read(dims, i, context_len)
        for i in range(dims.num_layers)
    )


def kv_write_bytes(dims: ModelDims, tokens: int, kv_dtype_bytes: int) -> int:
    """KV bytes writing ``tokens`` new tokens takes (every attention layer caches each)."""
    return tokens * sum(
        layer_token_bytes(dims, i, kv_dtype_bytes) for i in range(dims.num_layers)
    )


def state_bytes_per_layer(dims: ModelDims, kind: str, ssm_dtype: str) -> int:
    """One request's state in one Gated DeltaNet or Mamba2 layer: the conv state in the
    model dtype, the recurrent state in ``ssm_dtype``."""
    state = dims.linear if kind == LINEAR else dims.mamba if kind == MAMBA else None
    if state is None:
        return 0
    return (
        state.conv_state_elements * dims.dtype_bytes
        + state.recurrent_state_elements * DTYPE_BYTES[ssm_dtype]
    )


def state_traffic_bytes(dims: ModelDims, ssm_dtype: str) -> int:
    """State bytes read and written back per decode step (Gated DeltaNet and Mamba2)."""
    return 2 * sum(state_bytes_per_layer(dims, t, ssm_dtype) for t in dims.layer_types)


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


def attended_pairs(prompt_len: int, *, window: int | None = None, chunk: int | None = None
                   ) -> float:
    """(query, key) pairs causal attention over ``prompt_len`` tokens scores: ``P²/2`` in
    all, ``P·w - w²/2`` with a window ``w < P``, ``c²/2`` per chunk of ``c`` tokens."""
    p = float(prompt_len)
    if window is not None and window < prompt_len:
        return p * window - window * window / 2
    if chunk is not None and chunk < prompt_len:
        whole, rest = divmod(prompt_len, chunk)
        return whole * chunk * chunk / 2 + rest * rest / 2
    return p * p / 2


def attention_flops(dims: ModelDims, prompt_len: int) -> float:
    """FLOPs of causal attention (QKᵀ and AV) over ``prompt_len`` tokens, every layer:
    2 x pairs x q_heads x (qk dim + v dim); MLA with its nope + rope query/key dims."""
    q = dims.num_attention_heads
    flops = 0.0
    for i, kind in enumerate(dims.layer_types):
        if kind == MLA and dims.mla is not None:
            m = dims.mla
            dims_sum = m.qk_nope_head_dim + m.qk_rope_head_dim + m.v_head_dim
            flops += 2.0 * attended_pairs(prompt_len) * q * dims_sum
        elif kind in SOFTMAX_KINDS:
            layer = dims.attention_layer(i)
            window = layer.window if layer is not None and kind == SLIDING else None
            chunk = layer.chunk if layer is not None and kind == CHUNKED else None
            d = (layer.head_dim + layer.v_head_dim) if layer is not None else 2 * dims.head_dim
            flops += 2.0 * attended_pairs(prompt_len, window=window, chunk=chunk) * q * d
    return flops


def prefill_flops(weights: Weights, dims: ModelDims, prompt_len: int) -> float:
    """FLOPs of prefilling ``prompt_len`` tokens (matmuls + attention + state updates)."""
    p = prompt_len
    body = weights.active_params - weights.lm_head_params
    flops = 2.0 * body * p + 2.0 * weights.lm_head_params  # vLLM computes last-token logits
    flops += attention_flops(dims, p)
    if dims.linear is not None:
        flops += dims.num_gdn_layers * 4.0 * p * dims.linear.recurrent_state_elements
    if dims.mamba is not None:
        flops += dims.num_mamba_layers * 4.0 * p * dims.mamba.recurrent_state_elements
    return flops


def prefill_expert_flops(weights: Weights, prompt_len: int) -> float:
    """Of :func:`prefill_flops`, the routed experts' matmuls (every token through its top-k)."""
    return 2.0 * weights.active_routed_params * prompt_len


def distinct_expert_fraction(num_experts: int, top_k: int, tokens: int) -> float:
    """Expected fraction of ``num_experts`` that ``tokens`` independent top-``k`` draws touch."""
    if num_experts <= 0 or top_k <= 0:
        return 0.0
    return 1.0 - (1.0 - top_k / num_experts) ** tokens


def routed_bytes_touched(weights: Weights, tokens: int) -> float:
    """Routed-expert bytes a forward pass over ``tokens`` tokens reads (expected)."""
    if not weights.moe:
        return 0.0
    frac = distinct_expert_fraction(weights.num_experts, weights.experts_per_token, tokens)
    return weights.routed_expert_bytes * frac


def prefill_bytes_read(weights: Weights, dims: ModelDims, prompt_len: int, kv_bytes: int) -> int:
    """Weight bytes a prefill of ``prompt_len`` touches (expert coverage grows with P)."""
    routed = routed_bytes_touched(weights, prompt_len)
    kv_write = kv_write_bytes(dims, prompt_len, kv_bytes)
    return int(weights.prefill_fixed_bytes + routed + kv_write)


def draft_bytes_per_step(weights: Weights) -> int:
    """Bytes one MTP draft pass reads: the head's active weights plus the full lm_head."""
    head = 0
    if weights.mtp_bytes > 0:
        text = max(weights.resident_bytes - weights.vision_bytes - weights.mtp_bytes, 1)
        head = int(weights.mtp_bytes * weights.decode_bytes_per_token / text)
    return head + weights.lm_head_bytes


def mtp_step_cost(
    weights: Weights, dims: ModelDims, draft_tokens: int, *, kv_state_bytes: int
) -> tuple[int, int]:
    """(bytes, layers) of one speculative step: verify ``k + 1`` tokens, ``k`` draft passes."""
    k = draft_tokens
    verify = weights.prefill_fixed_bytes + routed_bytes_touched(weights, k + 1) + kv_state_bytes
    step_bytes = int(verify + k * draft_bytes_per_step(weights))
    step_layers = dims.num_layers + k * max(dims.mtp_layers, 1)
    return step_bytes, step_layers


def spec_step(
    weights: Weights, dims: ModelDims, draft_tokens: int, context_len: int, kv_state_bytes: int
) -> SpecStep:
    """:class:`SpecStep` at ``context_len`` (``kv_state_bytes``: the KV and state one decode
    step reads there)."""
    step_bytes, step_layers = mtp_step_cost(
        weights, dims, draft_tokens, kv_state_bytes=kv_state_bytes
    )
    slots = expert_slots(step_layers, dims.num_experts)
    return SpecStep(context_len, draft_tokens, step_bytes, step_layers, slots)


def step_features(step: SpecStep, platform: str) -> tuple[float, ...]:
    """The decode form's design row for one speculative step."""
    return features(
        "decode", step.step_bytes, step.step_layers, expert_slots=step.expert_slots,
        platform=platform,
    )


def model_expert_slots(dims: ModelDims) -> int:
    """MoE layers x routed experts of ``dims`` (every decoder layer of a MoE model counts as a
    MoE layer; 0 for a dense model)."""
    return expert_slots(dims.num_layers, dims.num_experts)


def _predicted(
    fit: Fit | None, row: Sequence[float], tokens: float, bound: float
) -> tuple[float | None, ...]:
    """(tok/s, low, high) of a fit for one design row (the interval's top capped at the
    roofline ``bound``), or Nones without a usable fit."""
    if fit is None or fit.is_roofline:
        return None, None, None
    seconds = fit.seconds(row)
    if seconds <= 0:
        return None, None, None
    tok_s = tokens / seconds
    band = interval(tok_s, fit.rel_error, bound)
    if band is None:
        return None, None, None
    return tok_s, band[0], band[1]


def predict_speed(
    weights: Weights,
    dims: ModelDims,
    hardware: HardwareProfile,
    *,
    prompt_lens: Sequence[int] = PROMPT_LENS,
    kv_dtype_bytes: int | None = None,
    ssm_dtype: str = "float32",
    calibration: Calibration | None = None,
    acceptance_lengths: Sequence[float] = (),
    draft_tokens: int = 0,
    graph_tokens: int | None = None,
) -> SpeedPrediction:
    """Predict decode and prefill speed on ``hardware`` (see module docs for the model).
    ``graph_tokens``: the largest step the engine captures a CUDA graph for
    (:func:`servelab.plan.startup.graph_capture`); a longer prompt's prefill is predicted as
    launched layer by layer. ``None``: not known (no eager term)."""
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
    dfit = calibration.decode if calibration else None
    pfit = calibration.prefill if calibration else None
    notes: list[str] = list(calibration.notes) if calibration else []
    if rate is None:
        notes.append(f"{hardware.name} has no {path.compute} compute figure: prefill not predicted")
    layers = dims.num_layers
    slots = model_expert_slots(dims)
    on = hardware.platform
    decode: list[DecodePoint] = []
    prefill: list[PrefillPoint] = []
    for p in prompt_lens:
        w, kv, st = decode_bytes_per_token(
            weights, dims, p, kv_dtype_bytes=kvb, ssm_dtype=ssm_dtype
        )
        total = w + kv + st
        roof = roofline_decode_tok_s(total, bw)
        row = features("decode", total, layers, expert_slots=slots, platform=on)
        tok, lo, hi = _predicted(dfit, row, 1.0, roof)
        decode.append(
            DecodePoint(
                context_len=p,
                weight_bytes=w,
                kv_bytes=kv,
                state_bytes=st,
                bytes_per_token=total,
                layers=layers,
                roofline_tok_s=roof,
                predicted_tok_s=tok,
                predicted_low=lo,
                predicted_high=hi,
            )
        )
        if rate is not None:
            flops = prefill_flops(weights, dims, p)
            nbytes = prefill_bytes_read(weights, dims, p, kvb)
            t_c = flops / rate
            t_b = nbytes / bw
            proof = p / max(t_c, t_b)
            # On a CPU the compute figure is a quick probe, not a ceiling (see lower_bounds).
            cap = p / t_b if hardware.platform == "cpu" else proof
            eager = graph_tokens is not None and p > graph_tokens
            xflops = prefill_expert_flops(weights, p)
            row = features(
                "prefill", nbytes, layers, flops, expert_flops=xflops, expert_slots=slots,
                platform=on, eager=eager, linear_layers=dims.num_linear_layers, prompt_tokens=p,
            )
            ptok, plo, phi = _predicted(pfit, row, p, cap)
            waits = None
            if ptok is not None and pfit is not None:
                waits = "host" if pfit.waits_on_host(row) else "device"
            prefill.append(
                PrefillPoint(
                    prompt_len=p,
                    flops=flops,
                    bytes_read=nbytes,
                    layers=layers,
                    compute_s=t_c,
                    bandwidth_s=t_b,
                    bound="compute" if t_c >= t_b else "bandwidth",
                    roofline_tok_s=proof,
                    predicted_tok_s=ptok,
                    predicted_low=plo,
                    predicted_high=phi,
                    eager=eager,
                    expert_flops=xflops,
                    waits_on=waits,
                )
            )
    mtp: list[MtpPoint] = []
    steps = tuple(
        spec_step(weights, dims, draft_tokens, d.context_len, d.kv_bytes + d.state_bytes)
        for d in decode
        if draft_tokens > 0
    )
    if acceptance_lengths:
        if draft_tokens <= 0:
            raise UsageError("speculative prediction needs at least one draft token")
        if weights.mtp_bytes <= 0:
            notes.append("the checkpoint ships no MTP head: draft cost is the lm_head alone")
        base = decode[0]
        step_bytes, step_layers = steps[0].step_bytes, steps[0].step_layers
        for a in acceptance_lengths:
            if not 1.0 <= a <= draft_tokens + 1:
                raise UsageError(
                    f"acceptance length {a} must lie in [1, draft tokens + 1 = {draft_tokens + 1}]"
                )
            mroof = a * bw / step_bytes
            row = step_features(steps[0], on)
            tok, lo, hi = _predicted(dfit, row, a, mroof)
            mtp.append(
                MtpPoint(
                    acceptance_length=a,
                    draft_tokens=draft_tokens,
                    step_bytes=step_bytes,
                    step_layers=step_layers,
                    roofline_tok_s=mroof,
                    predicted_tok_s=tok,
                    predicted_low=lo,
                    predicted_high=hi,
                    speedup=(
                        tok / base.predicted_tok_s
                        if tok is not None and base.predicted_tok_s
                        else None
                    ),
                )
            )
    waiting = [f"{p.prompt_len:,}" for p in prefill if p.waits_on == "host"]
    if waiting:
        notes.append(
            f"prefill of {', '.join(waiting)} tokens waits on the host (in the fit, launching "
            "the kernels outlasts them): such a step follows the host's CPU, which varies "
            "between machines with the same GPU"
        )
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
        spec_steps=steps,
        decode_fit=dfit,
        prefill_fit=pfit,
        notes=tuple(notes),
    )


def coefficients(bandwidth: float, rate: float | None) -> dict[str, tuple[float, ...]]:
    """The roofline as speed-model coefficients: ``1 / bandwidth`` per byte, ``1 / rate`` per
    FLOP, dense or routed-expert (0 without a rate), no overheads."""
    per_flop = 1.0 / rate if rate else 0.0
    return {
        "decode": (1.0 / bandwidth, 0.0, 0.0, 0.0),
        "prefill": (per_flop, per_flop, 1.0 / bandwidth) + (0.0,) * (len(TERMS["prefill"]) - 3),
    }


def bounds(coef: dict[str, tuple[float, ...]], *, cpu: bool) -> dict[str, tuple[float, ...]]:
    """What no fit may go below: ``coef`` itself, except the per-FLOP cost on a CPU, whose
    ``host`` compute figure is a quick numpy probe that vLLM's oneDNN kernels beat (prefill
    measured above it on the reference box): bounded by zero only."""
    if not cpu:
        return coef
    return {**coef, "prefill": (0.0, 0.0, *coef["prefill"][2:])}


def roofline_coefficients(hardware: HardwareProfile, compute: str) -> dict[str, tuple[float, ...]]:
    """:func:`coefficients` of ``hardware``'s ceiling bandwidth and ``compute``'s peak rate
    (the prior of last resort and the lower bound)."""
    bw, _ = hardware.effective_bandwidth_ceiling()
    return coefficients(bw, hardware.compute_rate(compute) or hardware.compute_rate("bf16"))


def lower_bounds(hardware: HardwareProfile, compute: str) -> dict[str, tuple[float, ...]]:
    """:func:`bounds` of :func:`roofline_coefficients` on ``hardware``."""
    return bounds(roofline_coefficients(hardware, compute), cpu=hardware.platform == "cpu")


def physical_prior(hardware: HardwareProfile, weights: Weights) -> dict[str, tuple[float, ...]]:
    """:func:`roofline_coefficients` for the kernel path ``weights`` take on ``hardware``."""
    path = hardware.kernel_path(weights.scheme, moe=weights.moe)
    return roofline_coefficients(hardware, path.compute)
