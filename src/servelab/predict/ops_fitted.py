"""A plan's prefill on hardware without operator tables: each operator's roofline on that
hardware divided by the efficiencies fitted to its published end-to-end points
(:mod:`servelab.ops.fitted`, issue 39 item 4), the interval from those points' held-out errors.

Used only where the plan has no prefill prediction otherwise (the top-down fit is the roofline
alone or refused as too wide): a level with less evidence never replaces one with more, and
decode keeps its own prediction. A prompt longer than the engine's step budget is prefilled in
chunks, each over the prefix before it, as the engine runs it.

Under load (:class:`RooflinePrefillSteps`), a step's decoders cost what the plan's decode
prediction says (the batched form, :class:`~servelab.predict.batched.StepModel`) and its prompt
chunks add their marginal time on the fitted rooflines: the operator sum of the whole step
less that of its decoders alone, plus the kernels' launches. A lone prompt's step is exactly
its single-stream prefill prediction.

Pure but for reading the shipped fit (cached).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from servelab.errors import ServelabError
from servelab.families import ModelDims
from servelab.ops.fitted import (
    FittedSteps,
    RooflinePrediction,
    fitted_steps,
    predict_prefill,
    shipped_fits,
)
from servelab.ops.model import step_model
from servelab.ops.step import SeqGroup
from servelab.predict.batched import Chunk, StepModel
from servelab.predict.ops_aic import table_sources
from servelab.predict.ops_load import step_key
from servelab.predict.ops_speed import layout_for
from servelab.predict.speed import PrefillPoint, SpeedPrediction

LEVEL = "roofline x efficiency"


@dataclass(frozen=True)
class FittedPrefill:
    """The plan's speed with its prefill from the fitted rooflines where that applied
    (``steps``), else as it was and why not (``reason``: "" where it did not apply)."""

    speed: SpeedPrediction
    steps: FittedSteps | None
    reason: str


def fitted_prefill(speed: SpeedPrediction, config: Mapping[str, Any], *, scheme: str,
                   profile: Any, engine: str, gpus: int, enabled: bool = True,
                   dims: ModelDims | None = None, budget: int = 8192) -> FittedPrefill:
    """``speed`` with its prefill predicted from ``profile``'s fitted vLLM efficiencies where
    it is a GPU with no operator tables and ``speed`` has no prefill prediction of its own (a
    CPU's vLLM has its own fitted forms)."""
    hw = str(profile.name)
    old = speed.prefill_fit
    if (not enabled or engine != "vllm" or getattr(profile, "platform", "cuda") != "cuda"
            or table_sources(hw) or old is None
            or not (old.is_roofline or old.refused) or not speed.prefill):
        return FittedPrefill(speed, None, "")
    why = None
    fits = shipped_fits()
    if gpus > 1:
        why = "a layout over several GPUs needs communication, which the fit does not time"
    elif engine not in fits or hw not in fits[engine][0].hardware:
        why = f"no published {engine} end-to-end points on {hw} to fit its efficiencies to"
    if why is None:
        try:
            model = step_model(config, layout_for(scheme, config), dims=dims)
            preds = [predict_prefill(model, p.prompt_len, budget, profile, engine)
                     for p in speed.prefill]
        except ServelabError as e:
            why = str(e)
    if why is None:
        iv = preds[-1].interval
        if iv.low_ms is None:
            why = iv.basis
    if why is not None:
        note = f"prefill: {LEVEL} not used on {hw}: {why}"
        return FittedPrefill(replace(speed, notes=(*speed.notes, note)), None, why)
    errs = fits[engine][1]
    steps = fitted_steps(model, profile, engine)
    w = iv.half_width_log
    points = tuple(_point(p, pr) for p, pr in zip(speed.prefill, preds, strict=True))
    units = sorted({e.unit for e in errs if e.hardware == hw and e.kind == "prefill"})
    held = f", each with its {' or '.join(units)} left out of the fit" if units else ""
    new_fit = replace(old, level=LEVEL,
                      source=f"each operator's roofline on {hw} over efficiencies {steps.source}",
                      rel_error=math.tanh(w), error_basis=iv.basis + held, fallback=None,
                      context_term="", missing="",
                      spread=f"-{(1 - math.exp(-w)) * 100:.0f}%/+{(math.exp(w) - 1) * 100:.0f}%")
    stale = old.note("prefill")
    notes = [n for n in speed.notes if n != stale]
    notes.append(f"prefill: {LEVEL} on {hw} (no operator tables for it): each operator's "
                 f"roofline over the efficiencies fitted to its published {engine} points; "
                 "decode keeps its own prediction")
    return FittedPrefill(replace(speed, prefill=points, prefill_fit=new_fit,
                                 notes=tuple(notes)), steps, "")


def _point(p: PrefillPoint, pr: RooflinePrediction) -> PrefillPoint:
    lo_ms, hi_ms = pr.interval.low_ms, pr.interval.high_ms
    assert lo_ms is not None and hi_ms is not None  # fitted_prefill checked the interval

    def tok(ms: float) -> float:
        return min(p.prompt_len / (ms / 1e3), p.roofline_tok_s)

    return replace(p, predicted_tok_s=tok(pr.ms), predicted_low=tok(hi_ms),
                   predicted_high=tok(lo_ms), waits_on=None)


@dataclass(frozen=True)
class RooflinePrefillSteps(StepModel):
    """A :class:`~servelab.predict.batched.StepModel` whose prompt chunks are priced on the
    fitted rooflines (``steps``) beside decoders priced by the decode prediction."""

    steps: FittedSteps | None = None
    _memo: dict[tuple[object, ...], float] = field(default_factory=dict, repr=False,
                                                   compare=False, hash=False)

    def mixed_step(self, contexts: Sequence[int], chunks: Sequence[Chunk]) -> float:
        """Seconds of one step: a decode token for each request at ``contexts`` (the decode
        prediction's batched form) plus ``chunks`` (prompt start, tokens) at their marginal
        time on the fitted rooflines."""
        if not chunks:
            return self.decode_step(contexts)
        if self.steps is None:
            raise ValueError("a roofline prefill step model needs its fitted steps")
        key = step_key(contexts, chunks)
        hit = self._memo.get(key)
        b, ctx, rounded = key
        if hit is None:
            dec = [SeqGroup(b, ctx, 1)] if b else []
            grp = [SeqGroup(1, s, n) for s, n in rounded]
            ms = (self.steps.device_ms(dec + grp) - self.steps.device_ms(dec)
                  + self.steps.launch_ms)
            hit = self._memo[key] = ms / 1e3
        return (self.decode_step(contexts) if b else 0.0) + hit
