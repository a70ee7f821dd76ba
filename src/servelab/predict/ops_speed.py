"""A plan's single-stream decode and prefill from the operator model, where the hardware has
operator tables (issue 39 item 2).

For a vLLM plan on hardware with shipped tables (:data:`~servelab.predict.ops_source.
TABLES`), each decode point is one step at its context and each prefill point its prompt in
steps of the engine's token budget, summed from the tables (:mod:`servelab.ops.step`) and
corrected as the shipped calibration says (:mod:`servelab.ops.calibrate`: the corrections
fitted on the stored runs, kept per kind only where they lower the held-out error); the
interval is ``x exp(±q)``, ``q`` the 90th percentile of the stored points' |log error| with
each family left out. On a GPU with AIConfigurator's tables instead
(:mod:`servelab.predict.ops_aic`), the same sum over those tables, with the corrections and
interval the same composition had on the H200. A build the tables cannot express (a kernel
they did not measure, a layout over several GPUs, a storage format without a mapping, the
optional extra not installed) keeps the fitted prediction and the plan says why
(:attr:`OperatorSpeed.reason`).

Pure but for reading the shipped tables and calibration (cached).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from servelab.errors import ServelabError
from servelab.families import ModelDims
from servelab.ops.calibrate import Choice, corrected_ms, operator_ms, prefill_steps
from servelab.ops.costs import Costs
from servelab.ops.model import StepModel, step_model
from servelab.ops.step import EngineSteps, StepShape, step_time
from servelab.predict.levels import Fit
from servelab.predict.ops_aic import table_sources
from servelab.predict.ops_source import OpsTables
from servelab.predict.speed import DecodePoint, PrefillPoint, SpeedPrediction
from servelab.synth.replica import TEXT_LINEARS, QuantLayout

LEVEL = "operator model"
#: vLLM's default step token budget on the H200 (chunked prefill); a plan passes the budget
#: its engine's start-up rules give on its hardware (16,384 on a B200, say).
BUDGET = 8192


@dataclass(frozen=True)
class OperatorSpeed:
    """The speed a plan prints and, where the operator model predicted it, the fits it
    replaced (the load simulator's batched form still prices steps with those)."""

    speed: SpeedPrediction
    used: bool
    reason: str  # why the operator model was not used ("" when it was)
    fitted_decode: Fit | None = None
    fitted_prefill: Fit | None = None
    model: StepModel | None = None  # the build's operators
    tables: OpsTables | None = None  # where its steps were read and how corrected


def layout_for(scheme: str, config: Mapping[str, Any]) -> QuantLayout | None:
    """The storage layout the tables price ``scheme`` as (None: BF16), or a
    :class:`ServelabError` naming what they lack."""
    if scheme in ("bf16", "mxfp4"):  # MXFP4: experts only, from the config (gpt-oss)
        return None
    if scheme == "fp8":
        qc = config.get("quantization_config") or {}
        if qc.get("weight_block_size"):
            return QuantLayout("fp8-block", TEXT_LINEARS)
        return QuantLayout("fp8-channel", TEXT_LINEARS)
    raise ServelabError(f"no {scheme} weight layout in the operator model")


def _fit(old: Fit, tables: OpsTables, kind: str) -> Fit:
    ch = tables.choice(kind)
    return replace(old, level=LEVEL, source=tables.source[kind],
                   rel_error=math.tanh(ch.log_width), error_basis=tables.basis[kind],
                   fallback=None, context_term="", missing="",
                   spread=f"-{(1 - ch.low_factor) * 100:.0f}%/+{(ch.high_factor - 1) * 100:.0f}%")


def _ms(model: StepModel, tables: OpsTables, kind: str, length: int,
        budget: int = BUDGET) -> float:
    ch, corr = tables.choice(kind), tables.corrections
    iso = (0.0, 0.0) if ch.stage == "operators" else (corr.isolation_frac,
                                                        corr.isolation_cap_ms)
    if kind == "decode":
        t = operator_ms(model, tables.costs, "decode", length, isolation=iso, context=length)
    else:
        t = operator_ms(model, tables.costs, "prefill", length, isolation=iso, budget=budget)
    if ch.stage != "corrected":
        return t
    steps = prefill_steps(length, budget) if tables.prefill_per_step else 1
    return corrected_ms(t, kind, corr, steps=steps)


def _more_evidence(fit: Fit, tables: OpsTables) -> str | None:
    """Why a fitted decode prediction is kept over tables whose interval was carried from
    other hardware: it was fitted on runs or published points of this hardware and its own
    interval is no wider (a level with less evidence never replaces one with more)."""
    if not tables.carried or fit.refused or fit.level == "roofline" or fit.rel_error is None:
        return None
    if fit.rel_error > math.tanh(tables.decode.log_width):
        return None
    return (f"the fitted prediction ({fit.level}, could be {fit.rel_error * 100:.0f} % off) "
            f"rests on runs of this hardware and is no less sure than the tables' interval "
            f"carried from the H200 ({math.tanh(tables.decode.log_width) * 100:.0f} %)")


def _band(tok_s: float, ch: Choice, bound: float) -> tuple[float, float]:
    return min(tok_s * ch.low_factor, bound), min(tok_s * ch.high_factor, bound)


def operator_speed(speed: SpeedPrediction, config: Mapping[str, Any], *, scheme: str,
                   hardware: str, engine: str, gpus: int, enabled: bool = True,
                   dims: ModelDims | None = None, budget: int = BUDGET) -> OperatorSpeed:
    """``speed`` with its decode and prefill predicted by the operator model where
    ``hardware`` has tables and ``engine`` is vLLM; otherwise ``speed`` and why not.
    ``enabled`` False (fits given by the caller, or a held-out check): ``speed`` as it is.
    ``budget``: the engine's step token budget (a longer prompt is prefilled in chunks)."""
    sources = table_sources(hardware)
    if not sources or engine != "vllm" or not enabled:
        return OperatorSpeed(speed, False, "")
    label = sources[0][0]
    why = None
    if gpus > 1:
        why = "a layout over several GPUs needs communication, which the tables do not time"
    elif speed.decode_fit is None or speed.prefill_fit is None:
        why = "no fit to carry its interval"
    passed: list[str] = []  # "label: why" of each source that could not price the build
    model: StepModel | None = None  # the build's operators, read once for every source
    if why is None:
        assert speed.decode_fit is not None
        for label, load in sources:
            try:
                if model is None:
                    model = step_model(config, layout_for(scheme, config), dims=dims)
                tables = load()
                why = _more_evidence(speed.decode_fit, tables)
                if why is None:
                    dec = [_ms(model, tables, "decode", d.context_len) for d in speed.decode]
                    pre = [_ms(model, tables, "prefill", p.prompt_len, budget)
                           for p in speed.prefill]
                    break
            except ServelabError as e:
                why = str(e)
            passed.append(f"{label}: {why}")
    if why is not None:
        note = (f"operator model not used ({'; '.join(passed)}); the fitted prediction is "
                "shown" if len(passed) > 1 else
                f"operator model not used ({label}): {why}; the fitted prediction is shown")
        return OperatorSpeed(replace(speed, notes=(*speed.notes, note)), False, why)
    assert speed.decode_fit is not None and speed.prefill_fit is not None and model is not None
    decode = tuple(_decode_point(d, ms, tables.decode) for d, ms in zip(speed.decode, dec,
                                                                        strict=True))
    prefill = tuple(_prefill_point(p, ms, tables.prefill) for p, ms in zip(speed.prefill, pre,
                                                                           strict=True))
    # the fitted path's notes on why its fits were the roofline or refused no longer apply
    stale = {f.note(k) for k, f in (("decode", speed.decode_fit),
                                    ("prefill", speed.prefill_fit))}
    notes = [n for n in speed.notes if n not in stale]
    notes += [f"operator model over {label}, since {p}" for p in passed]
    off = _off_grid(model, tables.costs, max((d.context_len for d in speed.decode), default=1),
                    max((p.prompt_len for p in speed.prefill), default=1), budget)
    if off:
        notes.append(f"operator model: {off}; the held-out interval was measured on shapes "
                     "the tables cover and may not hold here")
    if model.layers and any(la.moe is not None for la in model.layers):
        notes.append("operator model: MoE experts priced under uniform routing (the expected "
                     "number of distinct experts the step's tokens touch)")
    new = replace(speed, decode=decode, prefill=prefill,
                  decode_fit=_fit(speed.decode_fit, tables, "decode"),
                  prefill_fit=_fit(speed.prefill_fit, tables, "prefill"),
                  notes=tuple(notes))
    return OperatorSpeed(new, True, "", speed.decode_fit, speed.prefill_fit, model, tables)


def _decode_point(d: DecodePoint, ms: float, ch: Choice) -> DecodePoint:
    tok = 1e3 / ms
    lo, hi = _band(tok, ch, d.roofline_tok_s)
    return replace(d, predicted_tok_s=tok, predicted_low=lo, predicted_high=hi)


def _prefill_point(p: PrefillPoint, ms: float, ch: Choice) -> PrefillPoint:
    tok = p.prompt_len / (ms / 1e3)
    lo, hi = _band(tok, ch, p.roofline_tok_s)
    return replace(p, predicted_tok_s=tok, predicted_low=lo, predicted_high=hi, waits_on=None)



def _off_grid(model: StepModel, costs: Costs, context: int, prompt: int,
              budget: int = BUDGET) -> str:
    """What of ``model``'s longest decode and prefill steps the tables do not cover: the
    operators read beyond the measured range or scaled from a neighbouring shape ("" when
    every lookup is measured or interpolated)."""
    extra: set[str] = set()
    scaled: set[str] = set()
    for shape, eng in ((StepShape.decode(1, context), EngineSteps()),
                       (StepShape.prefill(min(prompt, budget)), EngineSteps(cuda_graph_max=0))):
        for i in step_time(model, costs, shape, eng).items:
            if i.lookup.extrapolated:
                extra.add(i.op)
            elif i.lookup.how == "scaled":
                scaled.add(i.op)
    parts = []
    if extra:
        parts.append("extrapolated beyond the measured range: " + ", ".join(sorted(extra)))
    if scaled:
        parts.append("scaled from a neighbouring measured shape: " + ", ".join(sorted(scaled)))
    return "; ".join(parts)
