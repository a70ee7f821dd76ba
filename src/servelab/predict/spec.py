"""Speculative decoding in the speed model: one step of ``k`` drafts, its time and its speed.

A step's parts (what verifying ``k + 1`` tokens and drafting ``k`` reads, how vLLM runs
them, and the draft term) are :mod:`servelab.predict.specstep`; this module takes them from
a checkpoint (:func:`model_bytes`, :func:`spec_step`), calibrates the draft term from
measured steps (:func:`draft_fit_for`: stored drafting runs and shipped step rows, each
step's plain decode part predicted by the decode fit of its own hardware and kernel path)
and predicts a step::

    t_step = max(device(step bytes, layers, expert slots) + passes x s_per_draft_pass, s_fixed)
    tok/s  = a / t_step              (a: mean acceptance length, given or measured)

with an interval that adds the decode fit's error and the draft term's
(:func:`servelab.predict.specstep.step_interval`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from servelab.families import MLA, ModelDims
from servelab.predict.form import HOST_BOUND, Row, Sample, features, row_seconds
from servelab.predict.ledger import StepPredictor
from servelab.predict.levels import (
    Fit,
    Target,
    fit_levels,
    levels_for,
    too_wide,
    too_wide_text,
)
from servelab.predict.specstep import (
    HEAD_METHODS,
    DraftFit,
    ModelBytes,
    StepSample,
    choose_draft_fit,
    step_interval,
    step_parts,
    step_seconds,
)
from servelab.sizing.weights import Weights


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
    method: str = "mtp"
    #: The draft term used (seconds per draft pass) and where it came from; None: no
    #: measured step to fit it from (the prediction is then the form without it: a bound).
    draft_pass_s: float | None = None
    draft_source: str = ""


@dataclass(frozen=True)
class SpecStep:
    """What one speculative step costs at a context length, whatever the acceptance: the
    decode form's inputs for verifying ``k + 1`` tokens and the draft passes. Stored with
    every plan that drafts, so a run's measured speed and acceptance calibrate the draft term
    (``t_step = acceptance / tok/s``) even when no acceptance was known when it was planned."""

    context_len: int
    draft_tokens: int
    step_bytes: int
    step_layers: int
    expert_slots: int
    method: str = "mtp"
    verify_bytes: int = 0
    draft_bytes: int = 0
    draft_passes: int = 0


def head_kv_per_token(dims: ModelDims, kv_dtype_bytes: int) -> int:
    """KV bytes per cached token of one draft-head attention layer (a full-attention layer of
    the model's own shape; MLA models cache the latent)."""
    if MLA in dims.layer_types and dims.mla is not None:
        return dims.mla.latent_dim * kv_dtype_bytes
    return 2 * dims.num_kv_heads * dims.head_dim * kv_dtype_bytes


def model_bytes(weights: Weights, dims: ModelDims) -> ModelBytes:
    """The byte figures of ``weights`` a step is made of. The MTP head's routed experts are
    taken as one MoE layer's worth of the body's routed parameters per head layer at the
    model's dtype (heads ship unquantized: the Unsloth NVFP4-Fast head is 1.573 GiB of BF16,
    the seed page), capped at the head's bytes; the rest of the head (its attention, the
    ``fc`` over [embedding; hidden], norms, shared expert) is read by every pass."""
    head_layers = max(dims.mtp_layers, 1) if weights.mtp_bytes > 0 else 0
    head_routed = 0
    if weights.mtp_bytes > 0 and weights.moe and dims.num_layers > 0:
        per_layer = weights.routed_expert_params // dims.num_layers
        head_routed = min(weights.mtp_bytes, per_layer * head_layers * dims.dtype_bytes)
    return ModelBytes(
        non_routed=weights.prefill_fixed_bytes,
        routed=weights.routed_expert_bytes if weights.moe else 0,
        num_experts=weights.num_experts if weights.moe else 0,
        top_k=weights.experts_per_token if weights.moe else 0,
        lm_head=weights.lm_head_bytes or weights.embedding_bytes,  # tied: the embedding
        head_non_routed=weights.mtp_bytes - head_routed,
        head_routed=head_routed,
        head_layers=head_layers,
    )


def spec_step(
    weights: Weights,
    dims: ModelDims,
    draft_tokens: int,
    context_len: int,
    *,
    kv_bytes: int,
    state_bytes: int,
    kv_dtype_bytes: int,
    method: str = "mtp",
) -> SpecStep:
    """:class:`SpecStep` at ``context_len`` (``kv_bytes``: the KV one decode step reads there;
    ``state_bytes``: the linear-attention / Mamba state one decode step reads and writes)."""
    moe_layers = dims.num_layers if weights.moe else 0
    parts = step_parts(
        method, draft_tokens, model_bytes(weights, dims), context_len=context_len,
        layers=dims.num_layers, moe_layers=moe_layers, kv_read=kv_bytes,
        state_bytes=state_bytes // 2, head_kv_per_token=head_kv_per_token(dims, kv_dtype_bytes),
    )
    return SpecStep(
        context_len, draft_tokens, parts.step_bytes, parts.step_layers, parts.expert_slots,
        parts.method, parts.verify_bytes, parts.draft_bytes, parts.draft_passes,
    )


def step_features(step: SpecStep, platform: str) -> Row:
    """The decode form's row for one speculative step (without the draft term)."""
    return features(
        "decode", step.step_bytes, step.step_layers, expert_slots=step.expert_slots,
        platform=platform,
    )


def _device_seconds(theta: Sequence[float], row: Row) -> float:
    """A decode row's device part alone (its fixed, host term switched off)."""
    fixed = row.form.index("s_fixed")
    amounts = tuple(0.0 if i == fixed else a for i, a in enumerate(row.amounts))
    return row_seconds(theta, replace(row, amounts=amounts))


def step_time(
    fit: Fit, draft: DraftFit | None, row: Row, passes: int, platform: str
) -> tuple[float, float]:
    """(step seconds, of which the draft term) for a step's decode ``row`` under ``fit``."""
    form = fit.seconds(row)
    per_pass = draft.per_pass if draft is not None else 0.0
    total = step_seconds(form, _device_seconds(fit.theta, row), passes, per_pass,
                         host_bound=platform in HOST_BOUND)
    return total, total - form


def predict_step(
    fit: Fit | None,
    draft: DraftFit | None,
    step: SpecStep,
    platform: str,
    acceptance: float,
    bound: float,
) -> tuple[float | None, float | None, float | None]:
    """(tok/s, low, high) of a step at ``acceptance`` under the decode ``fit`` and the draft
    term (interval: the two parts' errors added, top capped at the roofline ``bound``), or
    Nones without a usable fit."""
    if fit is None or fit.is_roofline or fit.refused:
        return None, None, None
    row = step_features(step, platform)
    seconds, extra = step_time(fit, draft, row, step.draft_passes, platform)
    if seconds <= 0:
        return None, None, None
    tok = acceptance / seconds
    band = step_interval(acceptance, seconds - extra, fit.rel_error, extra,
                         draft.rel_error if draft is not None else None, bound)
    if band is not None and too_wide(*band):
        return None, None, None  # the decode part's and the draft term's errors together
    return (tok, *band) if band is not None else (tok, None, None)



def draft_samples(
    samples: Sequence[Sample], fit_of: Callable[[Sample], Fit | None]
) -> list[StepSample]:
    """The measured steps among ``samples``, each with its plain decode part predicted by
    ``fit_of(sample)`` (the decode fit of its own hardware and kernel path); steps whose
    hardware has no decode fit give none."""
    out = []
    for s in samples:
        if not s.is_step:
            continue
        fit = fit_of(s)
        if fit is None or fit.is_roofline:
            continue
        form = fit.seconds(s.features)
        if form > 0:
            out.append(StepSample(s.build.model, s.hardware, s.spec_method, s.draft_passes,
                                  s.seconds, form, s.source))
    return out


def draft_fit_for(
    target: Target,
    method: str,
    stored: Sequence[Sample],
    priors: Sequence[Sample],
    physical: Callable[[Sample], Sequence[float]],
    lower: Callable[[Sample], Sequence[float]] | None = None,
) -> DraftFit | None:
    """The draft term of ``method`` for ``target``'s engine and hardware: from the measured
    steps of ``stored`` and ``priors`` (same engine; same hardware first, else a labelled
    fallback), leaving out ``target.model``'s build. Each step's plain part is predicted by
    the decode fit of its own (engine, kernel path, hardware) from the same stored runs and
    priors, the step's build left out of it too (``physical`` / ``lower``: that fit's
    roofline coefficients and bounds, decode kind)."""
    steps = [s for s in (*stored, *priors) if s.is_step and s.engine == target.engine
             and s.spec_method == method]
    if not steps:
        return None
    cache: dict[tuple[str, str, str], Fit] = {}

    def fit_of(s: Sample) -> Fit:
        key = (s.kernel_path, s.hardware, s.build.model)
        if key not in cache:
            t = Target(s.engine, s.kernel_path, s.hardware, s.build.model)
            cache[key] = fit_levels(
                levels_for(t, stored, priors), "decode", t, physical(s),
                lower(s) if lower else None,
            )
        return cache[key]

    return choose_draft_fit(draft_samples(steps, fit_of), hardware=target.hardware,
                            method=method, leave_out=target.model)


def check_method(method: str, weights: Weights) -> str | None:
    """Why ``method`` cannot be predicted for ``weights`` (None: it can): a head method
    needs the head's weights in the checkpoint."""
    if method == "mtp" and weights.mtp_bytes <= 0:
        return "the checkpoint ships no MTP head: no MTP draft to predict"
    if method in HEAD_METHODS and method != "mtp":
        return (f"{method} drafts with a separate head checkpoint, which servelab does not "
                "read yet: no speculative prediction")
    return None



def draft_line(point: MtpPoint) -> str:
    """One line saying what a speculative prediction's step counts and where its draft term
    came from."""
    form = (f"{point.method} k={point.draft_tokens}: verify {point.draft_tokens + 1} tokens "
            "in one pass + the drafts (decode form)")
    if point.draft_pass_s is None:
        return (f"{form}; no measured {point.method} step to fit the draft passes' own cost "
                "from: left out (the speed is then an upper bound)")
    return f"{form} + {point.draft_source}"


def step_predictor(
    stored: Sequence[Sample],
    priors: Sequence[Sample],
    physical: Callable[[str, Sample], Sequence[float]],
    lower: Callable[[str, Sample], Sequence[float]] | None = None,
) -> StepPredictor:
    """The ledger's predictor of a left-out speculative step: the decode ``fit`` of its
    target plus the draft term fitted from the other builds' steps (:func:`draft_fit_for`),
    in steps per second, with the interval of :func:`predict_step`."""

    def predict(
        target: Target, fit: Fit, s: Sample, bound: float | None
    ) -> tuple[float | None, float | None, float | None, str]:
        draft = draft_fit_for(
            target, s.spec_method, stored, priors, lambda x: physical("decode", x),
            (lambda x: lower("decode", x)) if lower else None,
        )
        seconds, extra = step_time(fit, draft, s.features, s.draft_passes, s.platform)
        if seconds <= 0:
            return None, None, None, fit.label()
        band = step_interval(1.0, seconds - extra, fit.rel_error, extra,
                             draft.rel_error if draft is not None else None, bound)
        lo, hi = band if band is not None else (None, None)
        what = draft.label if draft is not None else "no other measured step: no draft term"
        if too_wide(lo, hi):
            return None, None, None, too_wide_text(f"{fit.label()}; {what}")
        return 1.0 / seconds, lo, hi, f"{fit.label()}; {what}"

    return predict
