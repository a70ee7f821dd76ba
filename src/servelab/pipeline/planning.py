"""Plan a checkpoint with the calibration the results store allows: ``servelab plan`` and
``servelab run`` share this (the CLI only parses options and prints).

- :func:`calibrated_plan`: config + weights + hardware + stored runs → :class:`Plan`
  (calibrated from the runs and the shipped priors; the host's CPU features when it is
  the host);
- :func:`plan_checkpoint`: the same from a checkpoint path or Hub repo id (headers only);
- :func:`stored_runs`: the successful runs (on a hardware profile), without ever creating
  a database.

Speculative decode is predicted at the acceptance length the caller gives, else the one
stored runs of the same checkpoint measured (:mod:`servelab.pipeline.speculative`); runs
that drafted are not calibration samples of plain decode.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from servelab.checkpoint.kv_geometry import check_source
from servelab.checkpoint.report import build_report
from servelab.checkpoint.sources import CheckpointSource, load_checkpoint
from servelab.defaults import ENGINE_VERSION, PROMPT_LENS
from servelab.errors import ServelabError, UsageError
from servelab.families import family_for
from servelab.forecast.build import Plan, build_plan
from servelab.forecast.load import BatchedError, MeasuredCapacity
from servelab.hardware.profiles import HardwareProfile
from servelab.pipeline.speculative import resolve_acceptance, speculative_hint
from servelab.plan.kvseam import KvArithmetic
from servelab.plan.layout import ParallelLayout
from servelab.plan.parallel import Topology
from servelab.plan.request import EngineKnobs, PlanRequest
from servelab.plan.specsource import AUTO, DEFAULT_METHOD, AcceptanceSource
from servelab.plan.weights import Weights, weights_from_report
from servelab.predict.priors import load_priors
from servelab.predict.runs import calibration_for, draft_for
from servelab.store.db import Store
from servelab.store.model import STATUS_OK, RunFilter, RunRecord

__all__ = ["calibrated_plan", "load_evidence", "plan_checkpoint", "plan_source", "store_exists",
           "stored_runs"]


def store_exists(db: str | None) -> bool:
    """Whether there is a results database to read: ``db`` or ``$SERVELAB_DB`` given, or
    the data directory's ``results.db`` exists (planning never creates one)."""
    from servelab.store.db import ENV_DB, data_dir

    return db is not None or bool(os.environ.get(ENV_DB)) or (data_dir() / "results.db").exists()


def stored_runs(db: str | None, hardware: str | None, *, sweeps: bool = False
                ) -> list[RunRecord]:
    """Successful runs on ``hardware`` (on any when None) from the results database (none
    when ``db`` is unset and the default database does not exist: planning never creates
    one); ``sweeps``: runs that swept concurrency come with their samples."""
    from servelab.store.db import open_store

    if not store_exists(db):
        return []
    with open_store(db) as store:
        runs = store.list_runs(RunFilter(hardware=hardware, status=STATUS_OK))
        if sweeps:
            runs = with_sweeps(store, runs)
        return runs


def with_sweeps(store: Store, runs: Sequence[RunRecord]) -> list[RunRecord]:
    """``runs`` with the samples of those that swept concurrency (their measurement)."""
    from servelab.forecast.sweeps import sweeps_in

    return [store.get_run(r.run_id) if r.run_id and sweeps_in(r) else r for r in runs]


def calibrated_plan(
    config: Mapping[str, Any],
    weights: Weights,
    hardware: HardwareProfile,
    runs: Sequence[RunRecord],
    *,
    kv_arithmetic: KvArithmetic,
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
    """:func:`~servelab.forecast.build.build_plan` calibrated from ``runs`` and the priors.

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
        runs, hardware, weights, engine=engine, family=_family(config),
        priors=load_priors(priors), path=path,
    )
    draft = None
    if speculative is not None and speculative.lengths:
        draft = draft_for(
            list(runs if draft_runs is None else draft_runs), hardware, weights,
            speculative.method, engine=engine, priors=load_priors(priors),
        )
    plan = build_plan(
        dict(config), weights, hardware, calibration=calibration, engine_name=engine,
        kv_arithmetic=kv_arithmetic,
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
    check_source(source)  # the config's KV-deciding keys against the tensor shapes
    weights = weights_from_report(build_report(source), name=r.checkpoint)
    # drafting runs calibrate the speculative step, not plain decode (predict.runs)
    runs = [run for run in every if run.hardware == r.hardware.name]
    acceptance = resolve_acceptance(spec.acceptance, method=spec.method,
                                    draft_tokens=spec.draft_tokens,
                                    header_hash=source.header_sha256, runs=every,
                                    use_store=store.use)
    plan = calibrated_plan(source.config or {}, weights, r.hardware, runs,
                           kv_arithmetic=r.kv_arithmetic, knobs=r.knobs, engine=r.engine,
                           engine_version=r.engine_version, prompt_lens=r.prompt_lens,
                           layout=r.layout, topology=r.topology, priors=store.priors,
                           where=r.checkpoint, speculative=acceptance,
                           draft_tokens=spec.draft_tokens, draft_runs=every)
    hint = speculative_hint(every, source.header_sha256) if (
        spec.acceptance == AUTO and spec.draft_tokens <= 0) else None
    plan = replace(plan, checkpoint_hash=source.header_sha256)
    return replace(plan, notes=(*plan.notes, hint)) if hint else plan


def load_evidence(runs: Sequence[RunRecord], plan: Plan, priors: Path | None = None
                  ) -> tuple[BatchedError | None, list[MeasuredCapacity], str | None]:
    """What stored ``runs`` say about ``plan`` under load: the batched form's held-out error
    on its hardware (:func:`servelab.forecast.sweeps.batched_error`, from every stored sweep
    predicted with its model left out), the SLO capacities measured with its checkpoint
    there, and a note naming the sweeps there that could not be predicted again (not in that
    error; ``calibration report --replica`` can score them)."""
    from servelab.forecast.sweeps import (
        batched_error,
        held_out_sweeps,
        left_out_note,
        stored_capacities,
    )

    if not runs:
        return None, [], None
    rows, skipped = held_out_sweeps(runs, load_priors(priors))
    hw = plan.hardware.name
    return (batched_error(rows, hw), stored_capacities(runs, plan.checkpoint_hash, hw),
            left_out_note(skipped, hw))


def _family(config: Mapping[str, Any]) -> str:
    """The model family of ``config`` (:mod:`servelab.families`), "" when none reads it."""
    try:
        return family_for(config).name
    except ServelabError:
        return ""
