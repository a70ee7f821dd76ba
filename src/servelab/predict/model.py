"""The speed model's one door for a plan: a build, its hardware and the evidence in, the
decode / prefill / speculative predictions with their intervals out
(:class:`~servelab.predict.speed.SpeedPrediction`). Fits are made here, once per plan, from
the evidence (:mod:`servelab.predict.calibration`); the prediction itself is
:func:`~servelab.predict.speed.predict_speed`'s.
"""

from __future__ import annotations

from collections.abc import Sequence

from servelab.families import ModelDims
from servelab.hardware.profiles import HardwareProfile, KernelPath
from servelab.predict.calibration import calibration_for, draft_for
from servelab.predict.evidence import Evidence
from servelab.predict.priors import load_priors
from servelab.predict.speed import SpeedPrediction, predict_speed
from servelab.sizing.specsource import DEFAULT_METHOD
from servelab.sizing.weights import Weights

__all__ = ["speed_for"]


def speed_for(
    weights: Weights,
    dims: ModelDims,
    hardware: HardwareProfile,
    evidence: Evidence,
    *,
    engine: str,
    family: str,
    prompt_lens: Sequence[int],
    kv_dtype_bytes: int,
    ssm_dtype: str,
    draft_tokens: int,
    graph_tokens: int | None,
    kernel_path: KernelPath | None = None,
) -> SpeedPrediction:
    """Predict ``weights`` on ``hardware`` for ``engine``: fitted from ``evidence`` (the
    stored samples on that hardware over its priors; ``engine`` picks that engine's own
    calibration, ``family`` says whether the calibration set has seen the model's family),
    speculative decode at the evidence's acceptance lengths with the draft term its steps
    give."""
    # worked out once: the plan's (the engine's selection), else the profile's table
    path = kernel_path or hardware.kernel_path(weights.scheme, moe=weights.moe)
    table = evidence.priors or load_priors()
    calibration = evidence.calibration
    if calibration is None and evidence.calibrate:
        calibration = calibration_for(
            evidence.samples, hardware, weights, engine=engine, model=evidence.leave_out,
            family=family, priors=table, path=path,
        )
    spec = evidence.acceptance
    draft = None
    if spec is not None and spec.lengths:
        draft = draft_for(evidence.draft_samples, hardware, weights, spec.method, engine=engine,
                          model=evidence.leave_out, priors=table, path=path)
    return predict_speed(
        weights,
        dims,
        hardware,
        prompt_lens=prompt_lens,
        kv_dtype_bytes=kv_dtype_bytes,
        ssm_dtype=ssm_dtype,
        calibration=calibration,
        acceptance_lengths=spec.lengths if spec is not None else (),
        draft_tokens=draft_tokens,
        graph_tokens=graph_tokens,
        kernel_path=path,
        spec_method=spec.method if spec is not None else DEFAULT_METHOD,
        # a published prior's range widens the speculative interval (a measured or given
        # length is the length)
        acceptance_range=spec.spread if spec is not None and spec.kind == "published"
        else None,
        draft=draft,
    )
