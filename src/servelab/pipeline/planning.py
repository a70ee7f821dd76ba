"""Plan a checkpoint with the calibration the results store allows: ``servelab plan`` and
``servelab run`` share this (the CLI only parses options and prints).

- :func:`calibrated_plan`: config + weights + hardware + stored runs → :class:`Plan`
  (calibrated from the runs and the shipped priors; the host's CPU features when it is
  the host);
- :func:`plan_checkpoint`: the same from a checkpoint path or Hub repo id (headers only);

Speculative decode is predicted at the acceptance length the caller gives, else the one
stored runs of the same checkpoint measured (:mod:`servelab.evidence.acceptance`); runs
that drafted are not calibration samples of plain decode.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from servelab.checkpoint.report import build_report
from servelab.checkpoint.sources import CheckpointSource, load_checkpoint
from servelab.defaults import ENGINE_VERSION, PROMPT_LENS
from servelab.errors import ServelabError, UsageError
from servelab.evidence.acceptance import resolve_acceptance, speculative_hint
from servelab.evidence.runs import samples_from_runs
from servelab.evidence.stored import stored_runs
from servelab.families import family_for
from servelab.hardware.host import host_has_avx512_bf16
from servelab.hardware.profiles import HardwareProfile
from servelab.hardware.topology import Topology
from servelab.plan.build import Plan, build_plan
from servelab.plan.request import PlanRequest
from servelab.predict.calibration import calibration_for, draft_for
from servelab.predict.priors import load_priors
from servelab.sizing.knobs import EngineKnobs
from servelab.sizing.kvseam import KvArithmetic
from servelab.sizing.layout import ParallelLayout
from servelab.sizing.specsource import AUTO, DEFAULT_METHOD, AcceptanceSource
from servelab.sizing.startup import StartupRules
from servelab.sizing.weights import Weights, weights_from_report
from servelab.store.model import RunRecord

__all__ = ["calibrated_plan", "plan_checkpoint", "plan_source"]


def calibrated_plan(
    config: Mapping[str, Any],
    weights: Weights,
    hardware: HardwareProfile,
    runs: Sequence[RunRecord],
    *,
    kv_arithmetic: KvArithmetic,
    startup_rules: StartupRules | None = None,
    knobs: EngineKnobs,
    engine: str = "vllm",
    engine_version: str = ENGINE_VERSION,
    prompt_lens: Sequence[int] = PROMPT_LENS,
    layout: ParallelLayout | None = None,
    topology: Topology | None = None,
    priors: Path | None = None,
    where: str | Path | None = None,
    speculative: AcceptanceSource | None = None,
    draft_tokens: int = 0,
    draft_runs: Sequence[RunRecord] | None = None,
) -> Plan:
    """:func:`~servelab.plan.build.build_plan` calibrated from ``runs`` and the priors.

    ``knobs`` are the engine's flags, ``kv_arithmetic`` its KV arithmetic for them;
    ``where`` names the checkpoint in the error when it has no config; ``engine`` (the
    recipe's engine name) picks that engine's own calibration and labels the plan;
    ``speculative`` gives the acceptance lengths to predict speculative decode at (and
    their source, kept in the plan) with ``draft_tokens`` per step; ``draft_runs``: the
    stored runs whose measured speculative steps calibrate the draft term (any hardware;
    default ``runs``).
    """
    if not config:
        raise UsageError("the checkpoint has no config.json; plan needs its dimensions",
                         path=where)
    path = hardware.kernel_path(weights.scheme, moe=weights.moe)  # worked out once, here
    calibration = calibration_for(
        samples_from_runs(runs), hardware, weights, engine=engine, family=_family(config),
        priors=load_priors(priors), path=path,
    )
    draft = None
    if speculative is not None and speculative.lengths:
        draft = draft_for(
            samples_from_runs(runs if draft_runs is None else draft_runs), hardware, weights,
            speculative.method, engine=engine, priors=load_priors(priors),
        )
    plan = build_plan(
        dict(config), weights, hardware, calibration=calibration, engine_name=engine,
        kv_arithmetic=kv_arithmetic, startup_rules=startup_rules,
        cpu_avx512_bf16=host_has_avx512_bf16() if hardware.name == "host" else True,
        engine_version=engine_version, prompt_lens=prompt_lens, layout=layout,
        topology=topology, draft_tokens=draft_tokens,
        acceptance_lengths=speculative.lengths if speculative is not None else (),
        spec_method=speculative.method if speculative is not None else DEFAULT_METHOD,
        draft=draft, kernel_path=path, **knobs.build_args(),
    )
    if speculative is None:
        return plan
    return replace(plan, speculative=speculative)


def plan_checkpoint(request: PlanRequest) -> Plan:
    """Read a checkpoint's headers and plan it as ``request`` says (``servelab plan``):
    :func:`plan_source` with the successful runs of the request's store (none unless it is
    used)."""
    source = load_checkpoint(request.checkpoint, revision=request.revision)
    every = stored_runs(request.store.db, None) if request.store.use else []
    return plan_source(source, request, every)


def plan_source(source: CheckpointSource, request: PlanRequest,
                every: Sequence[RunRecord]) -> Plan:
    """Plan a checkpoint already loaded (headers read) as ``request`` says, calibrated from
    the successful runs ``every`` (those on the request's hardware calibrate plain decode;
    all of them may hold this checkpoint's measured acceptance and drafting steps).

    Speculative decode is predicted at the request's acceptance lengths, or ``auto``: what
    stored runs of this checkpoint with the same method and draft tokens measured.
    """
    r, spec, store = request, request.speculation, request.store
    weights = weights_from_report(build_report(source), name=r.checkpoint)
    # drafting runs calibrate the speculative step, not plain decode (predict.runs)
    runs = [run for run in every if run.hardware == r.hardware.name]
    acceptance = resolve_acceptance(spec.acceptance, method=spec.method,
                                    draft_tokens=spec.draft_tokens,
                                    header_hash=source.header_sha256, runs=every,
                                    use_store=store.use)
    plan = calibrated_plan(source.config or {}, weights, r.hardware, runs,
                           kv_arithmetic=r.kv_arithmetic, startup_rules=r.startup_rules,
                           knobs=r.knobs, engine=r.engine,
                           engine_version=r.engine_version, prompt_lens=r.prompt_lens,
                           layout=r.layout, topology=r.topology, priors=store.priors,
                           where=r.checkpoint, speculative=acceptance,
                           draft_tokens=spec.draft_tokens, draft_runs=every)
    hint = speculative_hint(every, source.header_sha256) if (
        spec.acceptance == AUTO and spec.draft_tokens <= 0) else None
    plan = replace(plan, checkpoint_hash=source.header_sha256)
    return replace(plan, notes=(*plan.notes, hint)) if hint else plan


def _family(config: Mapping[str, Any]) -> str:
    """The model family of ``config`` (:mod:`servelab.families`), "" when none reads it."""
    try:
        return family_for(config).name
    except ServelabError:
        return ""
