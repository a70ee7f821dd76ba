"""Plan a checkpoint with the calibration the results store allows: ``servelab plan`` and
``servelab run`` share this (the CLI only parses options and prints).

- :func:`calibrated_plan`: config + weights + hardware + stored runs → :class:`Plan`
  (calibrated from the runs and the shipped priors; the host's CPU features when it is
  the host);
- :func:`plan_checkpoint`: the same from a checkpoint path or Hub repo id (headers only);
- :func:`stored_runs`: the successful runs on a hardware profile, without ever creating
  a database.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from servelab.checkpoint.report import build_report
from servelab.checkpoint.sources import load_checkpoint
from servelab.defaults import ENGINE_VERSION, PROMPT_LENS
from servelab.errors import UsageError
from servelab.hardware.host import host_has_avx512_bf16
from servelab.hardware.profiles import HardwareProfile
from servelab.pipeline.calibration import calibration_for
from servelab.plan.build import Plan, build_plan
from servelab.plan.priors import load_priors
from servelab.plan.weights import Weights, weights_from_report
from servelab.store.model import STATUS_OK, RunFilter, RunRecord

__all__ = ["calibrated_plan", "plan_checkpoint", "stored_runs"]


def stored_runs(db: str | None, hardware: str) -> list[RunRecord]:
    """Successful runs on ``hardware`` from the results database (none when ``db`` is unset
    and the default database does not exist: planning never creates one)."""
    from servelab.store.db import ENV_DB, data_dir, open_store

    if db is None and not os.environ.get(ENV_DB) and not (data_dir() / "results.db").exists():
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
    **knobs: Any,
) -> Plan:
    """:func:`~servelab.plan.build.build_plan` calibrated from ``runs`` and the priors.

    ``knobs`` are build_plan's engine and workload options (max_model_len, layout, ...);
    ``where`` names the checkpoint in the error when it has no config; ``engine`` (the
    recipe's engine name) picks that engine's own calibration and labels the plan.
    """
    if not config:
        raise UsageError("the checkpoint has no config.json; plan needs its dimensions",
                         path=where)
    calibration = calibration_for(
        runs, hardware, weights, engine=engine, priors=load_priors(priors)
    )
    return build_plan(
        dict(config), weights, hardware, calibration=calibration, engine_name=engine,
        cpu_avx512_bf16=host_has_avx512_bf16() if hardware.name == "host" else True,
        **knobs,
    )


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
    **knobs: Any,
) -> Plan:
    """Read a checkpoint's headers and plan it on ``hardware`` (``servelab plan``)."""
    source = load_checkpoint(checkpoint, revision=revision)
    weights = weights_from_report(build_report(source), name=checkpoint)
    runs = stored_runs(db, hardware.name) if use_store else []
    return calibrated_plan(source.config or {}, weights, hardware, runs, priors=priors,
                           where=checkpoint, engine_version=engine_version,
                           prompt_lens=prompt_lens, **knobs)
