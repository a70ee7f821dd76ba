"""Speed prediction: a roofline bound and a calibrated prediction with an interval.

Everything returned here is a **prediction** (``predicted: True`` in every JSON object).
The costs of one point (bytes read, FLOPs) are plan arithmetic (:mod:`servelab.predict.costs`).

The **roofline** (an upper bound) is bytes / peak bandwidth for decode and
max(FLOPs / peak compute, bytes / peak bandwidth) for prefill. The **prediction** is the
calibrated linear model of :mod:`servelab.predict.levels` (per-byte, per-FLOP, per-layer
and fixed costs fitted from stored runs or shipped priors), with a ± from leave-one-model-out
residuals and the fit's source on every point; without calibration data there is no
prediction, only the bound.

"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from servelab.defaults import PROMPT_LENS
from servelab.errors import UsageError
from servelab.families import DTYPE_BYTES, ModelDims
from servelab.hardware.profiles import HardwareProfile, KernelPath
from servelab.predict.costs import (
    decode_bytes_per_token,
    prefill_bytes_read,
    prefill_expert_flops,
    prefill_flops,
)
from servelab.predict.form import CONTEXT_ENGINES, Row, context_layers, expert_slots, features
from servelab.predict.levels import Calibration, Fit, interval
from servelab.predict.roofline import roofline_decode_tok_s
from servelab.predict.spec import MtpPoint, SpecStep, check_method, predict_step, spec_step
from servelab.predict.specstep import HEAD_METHODS, LOOKUP_METHODS, DraftFit
from servelab.sizing.weights import Weights


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


def model_expert_slots(dims: ModelDims) -> int:
    """MoE layers x routed experts of ``dims`` (every decoder layer of a MoE model counts as a
    MoE layer; 0 for a dense model)."""
    return expert_slots(dims.num_layers, dims.num_experts)


def _predicted(
    fit: Fit | None, row: Row, tokens: float, bound: float
) -> tuple[float | None, ...]:
    """(tok/s, low, high) of a fit for one design row (the interval's top capped at the
    roofline ``bound``), or Nones without a usable fit."""
    if fit is None or fit.is_roofline or fit.refused:
        return None, None, None
    seconds = fit.seconds(row)
    if seconds <= 0:
        return None, None, None
    tok_s = tokens / seconds
    band = interval(tok_s, fit.rel_error, bound)
    if band is None:
        return None, None, None
    return tok_s, band[0], band[1]


def _widened(tok: float | None, lo: float | None, hi: float | None,
             ends: Sequence[float | None], *, mroof_hi: float) -> tuple[float | None,
                                                                      float | None]:
    """The interval ``lo``..``hi`` about ``tok`` widened by a second, independent uncertainty:
    the point at the ends of the acceptance range (``ends``). The two relative errors add
    in quadrature on a log scale (the fit's error and the acceptance's are independent);
    the top stays under the roofline at the range's high end."""
    if tok is None or lo is None or hi is None or None in ends or tok <= 0:
        return lo, hi
    at = [float(e) for e in ends if e is not None]
    down = math.hypot(math.log(tok / lo), math.log(tok / min(min(at), tok)))
    up = math.hypot(math.log(hi / tok), math.log(max(max(at), tok) / tok))
    return tok / math.exp(down), min(tok * math.exp(up), mroof_hi)


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
    kernel_path: KernelPath | None = None,
    spec_method: str = "mtp",
    draft: DraftFit | None = None,
    acceptance_range: tuple[float, float] | None = None,
) -> SpeedPrediction:
    """Predict decode and prefill speed on ``hardware`` (see module docs for the model).
    ``graph_tokens``: the largest step the engine captures a CUDA graph for
    (:func:`servelab.sizing.startup.graph_capture`); a longer prompt's prefill is predicted as
    launched layer by layer. ``None``: not known (no eager term). ``kernel_path``: the path
    ``weights`` take on ``hardware``, when the caller has worked it out already.
    ``spec_method`` / ``draft_tokens``: how the server drafts (its steps are stored with the
    plan); ``acceptance_lengths``: where to predict it, with the draft term ``draft``
    (:func:`servelab.predict.spec.draft_fit_for`; None: none measured, the form alone);
    ``acceptance_range``: where the acceptance length itself is uncertain (a published
    prior's range), the interval runs from the low end's low to the high end's high."""
    if not prompt_lens or any(p <= 0 for p in prompt_lens):
        raise UsageError("prompt lengths must be positive integers")
    if ssm_dtype not in DTYPE_BYTES:
        raise UsageError(f"unknown SSM state dtype {ssm_dtype!r}")
    kvb = kv_dtype_bytes or dims.dtype_bytes
    bw, bw_src = hardware.effective_bandwidth_ceiling()
    path = kernel_path or hardware.kernel_path(weights.scheme, moe=weights.moe)
    rate = hardware.compute_rate(path.compute)
    comp_src = (
        hardware.probe_label()
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
    # the decode context term is llama.cpp's (its fits hold the coefficient; others hold 0)
    ctx_term = calibration is not None and calibration.target.engine in CONTEXT_ENGINES
    decode: list[DecodePoint] = []
    prefill: list[PrefillPoint] = []
    for p in prompt_lens:
        w, kv, st = decode_bytes_per_token(
            weights, dims, p, kv_dtype_bytes=kvb, ssm_dtype=ssm_dtype
        )
        total = w + kv + st
        roof = roofline_decode_tok_s(total, bw)
        ctx = context_layers(p, layers, dims.num_linear_layers) if ctx_term else 0.0
        row = features("decode", total, layers, expert_slots=slots, platform=on,
                       context_layers=ctx)
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
    method = spec_method.strip().lower()
    why = check_method(method, weights) if draft_tokens > 0 else None
    if draft_tokens > 0 and why is None and method not in HEAD_METHODS | LOOKUP_METHODS:
        why = f"speculative method {method!r} is not one servelab models (mtp, ngram)"
    steps = tuple(
        spec_step(weights, dims, draft_tokens, d.context_len, kv_bytes=d.kv_bytes,
                  state_bytes=d.state_bytes, kv_dtype_bytes=kvb, method=method)
        for d in decode
        if draft_tokens > 0 and why is None
    )
    if why is not None:
        notes.append(why)
    if acceptance_lengths and steps:
        base = decode[0]
        step = steps[0]
        if draft is None:
            notes.append(
                f"no measured {method} step on {hardware.name} or elsewhere: the speculative "
                "prediction leaves out the draft passes' own cost (an upper bound on speed)"
            )
        for a in acceptance_lengths:
            if not 1.0 <= a <= draft_tokens + 1:
                raise UsageError(
                    f"acceptance length {a} must lie in [1, draft tokens + 1 = {draft_tokens + 1}]"
                )
            mroof = a * bw / step.step_bytes
            tok, lo, hi = predict_step(dfit, draft, step, on, a, mroof)
            if acceptance_range is not None and None not in (tok, lo, hi):
                lo, hi = _widened(tok, lo, hi, [
                    predict_step(dfit, draft, step, on, x, x * bw / step.step_bytes)[0]
                    for x in acceptance_range], mroof_hi=max(acceptance_range) * bw
                    / step.step_bytes)
            mtp.append(
                MtpPoint(
                    acceptance_length=a,
                    draft_tokens=draft_tokens,
                    step_bytes=step.step_bytes,
                    step_layers=step.step_layers,
                    roofline_tok_s=mroof,
                    predicted_tok_s=tok,
                    predicted_low=lo,
                    predicted_high=hi,
                    speedup=(
                        tok / base.predicted_tok_s
                        if tok is not None and base.predicted_tok_s
                        else None
                    ),
                    method=method,
                    draft_pass_s=draft.per_pass if draft is not None else None,
                    draft_source=draft.label if draft is not None else "",
                )
            )
    elif acceptance_lengths and draft_tokens <= 0:
        raise UsageError("speculative prediction needs at least one draft token")
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
