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

from servelab.checkpoint.report import build_report
from servelab.checkpoint.sources import load_checkpoint
from servelab.defaults import ENGINE_VERSION, PROMPT_LENS
from servelab.engines import get_engine
from servelab.errors import ServelabError, UsageError
from servelab.families import family_for
from servelab.hardware.host import host_has_avx512_bf16
from servelab.hardware.profiles import HardwareProfile
from servelab.pipeline.speculative import resolve_acceptance, speculative_hint
from servelab.plan.build import Plan, build_plan
from servelab.plan.kvseam import KvArithmetic
from servelab.plan.specsource import AUTO, DEFAULT_METHOD, AcceptanceOption, AcceptanceSource
from servelab.plan.weights import Weights, weights_from_report
from servelab.predict.priors import load_priors
from servelab.predict.runs import calibration_for
from servelab.store.model import STATUS_OK, RunFilter, RunRecord

__all__ = ["calibrated_plan", "plan_checkpoint", "store_exists", "stored_runs"]


def store_exists(db: str | None) -> bool:
    """Whether there is a results database to read: ``db`` or ``$SERVELAB_DB`` given, or
    the data directory's ``results.db`` exists (planning never creates one)."""
    from servelab.store.db import ENV_DB, data_dir

    return db is not None or bool(os.environ.get(ENV_DB)) or (data_dir() / "results.db").exists()


def stored_runs(db: str | None, hardware: str | None) -> list[RunRecord]:
    """Successful runs on ``hardware`` (on any when None) from the results database (none
    when ``db`` is unset and the default database does not exist: planning never creates
    one)."""
    from servelab.store.db import open_store

    if not store_exists(db):
        return []
    with open_store(db) as store:
        return store.list_runs(RunFilter(hardware=hardware, status=STATUS_OK))


def calibrated_plan(
    config: Mapping[str, Any],
    weights: Weights,
    hardware: HardwareProfile,
    runs: Sequence[RunRecord],
    *,
    priors: Path | None = None,
    where: str | Path | None = None,
    engine: str = "vllm",
    speculative: AcceptanceSource | None = None,
    kv_arithmetic: KvArithmetic | None = None,
    **knobs: Any,
) -> Plan:
    """:func:`~servelab.plan.build.build_plan` calibrated from ``runs`` and the priors.

    ``knobs`` are build_plan's engine and workload options (max_model_len, layout, ...);
    ``where`` names the checkpoint in the error when it has no config; ``engine`` (the
    recipe's engine name) picks that engine's own calibration and labels the plan;
    ``speculative`` gives the acceptance lengths to predict speculative decode at (and
    their source, kept in the plan); ``kv_arithmetic`` is the engine's KV arithmetic for
    its flags (default: ``engine``'s, at its default flags).
    """
    if not config:
        raise UsageError("the checkpoint has no config.json; plan needs its dimensions",
                         path=where)
    calibration = calibration_for(
        runs, hardware, weights, engine=engine, family=_family(config),
        priors=load_priors(priors),
    )
    if speculative is not None:
        knobs["acceptance_lengths"] = speculative.lengths
    arithmetic = kv_arithmetic or get_engine(engine).kv_arithmetic()
    if arithmetic is None:
        raise UsageError(f"servelab does not reproduce {engine}'s KV arithmetic")
    plan = build_plan(
        dict(config), weights, hardware, calibration=calibration, engine_name=engine,
        kv_arithmetic=arithmetic,
        cpu_avx512_bf16=host_has_avx512_bf16() if hardware.name == "host" else True,
        **knobs,
    )
    if speculative is None:
        return plan
    notes = plan.notes
    if speculative.lengths and speculative.method != DEFAULT_METHOD:
        notes = (*notes, f"{speculative.method} is not an MTP head: the speculative step above "
                 "counts k draft passes of the MTP head (else the lm_head), not "
                 f"{speculative.method}'s own draft cost")
    return replace(plan, speculative=speculative, notes=notes)


def plan_checkpoint(
    checkpoint: str,
    *,
    hardware: HardwareProfile,
    revision: str | None = None,
    db: str | None = None,
    use_store: bool = True,
    priors: Path | None = None,
    engine_version: str = ENGINE_VERSION,
    prompt_lens: Sequence[int] = PROMPT_LENS,
    acceptance: AcceptanceOption = AUTO,
    spec_method: str = DEFAULT_METHOD,
    draft_tokens: int = 0,
    **knobs: Any,
) -> Plan:
    """Read a checkpoint's headers and plan it on ``hardware`` (``servelab plan``).

    ``acceptance``: lengths to predict speculative decode at (``draft_tokens`` per step),
    ``auto`` for what stored runs of this checkpoint with ``spec_method`` and
    ``draft_tokens`` measured, or ``none``.
    """
    source = load_checkpoint(checkpoint, revision=revision)
    weights = weights_from_report(build_report(source), name=checkpoint)
    every = stored_runs(db, None) if use_store else []
    # drafting runs calibrate the speculative step, not plain decode (predict.runs)
    runs = [r for r in every if r.hardware == hardware.name]
    spec = resolve_acceptance(acceptance, method=spec_method, draft_tokens=draft_tokens,
                              header_hash=source.header_sha256, runs=every,
                              use_store=use_store)
    plan = calibrated_plan(source.config or {}, weights, hardware, runs, priors=priors,
                           where=checkpoint, engine_version=engine_version,
                           prompt_lens=prompt_lens, speculative=spec,
                           draft_tokens=draft_tokens, **knobs)
    hint = speculative_hint(every, source.header_sha256) if (
        acceptance == AUTO and draft_tokens <= 0) else None
    return replace(plan, notes=(*plan.notes, hint)) if hint else plan


def _family(config: Mapping[str, Any]) -> str:
    """The model family of ``config`` (:mod:`servelab.families`), "" when none reads it."""
    try:
        return family_for(config).name
    except ServelabError:
        return ""
