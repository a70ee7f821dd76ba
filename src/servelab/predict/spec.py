"""Speculative decoding in the speed model: one verification step in the decode form.

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

from dataclasses import dataclass

from servelab.families import ModelDims
from servelab.plan.costs import routed_bytes_touched
from servelab.plan.weights import Weights
from servelab.predict.form import Row, expert_slots, features


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


def step_features(step: SpecStep, platform: str) -> Row:
    """The decode form's design row for one speculative step."""
    return features(
        "decode", step.step_bytes, step.step_layers, expert_slots=step.expert_slots,
        platform=platform,
    )


