"""Plan a checkpoint with the calibration the results store allows: ``servelab plan``,
``choose`` and ``run`` share this (the CLI only parses options and prints).

- :func:`plan_checkpoint`: a checkpoint path or Hub repo id (headers only) planned as a
  :class:`~servelab.plan.request.PlanRequest` says, calibrated from the request's store;
- :func:`plan_source`: the same for a checkpoint already loaded, with the stored runs given;
- :func:`plan_report`: the same from its inspect report (which ``run`` keeps for the record).

Each reads the checkpoint's config once (:func:`~servelab.plan.checkpoint.
planned_checkpoint`), gathers the stored runs' evidence
(:func:`~servelab.evidence.gather.evidence_for`) and builds the plan
(:func:`~servelab.plan.build.build_plan`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from servelab.checkpoint.kv_geometry import check_read_source
from servelab.checkpoint.report import CheckpointReport, build_report
from servelab.checkpoint.sources import CheckpointSource, load_checkpoint
from servelab.evidence.gather import evidence_for
from servelab.evidence.stored import stored_runs
from servelab.plan.build import Plan, build_plan
from servelab.plan.checkpoint import planned_checkpoint
from servelab.plan.request import PlanRequest
from servelab.store.model import RunRecord

__all__ = ["plan_checkpoint", "plan_report", "plan_source"]


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
    all of them may hold this checkpoint's measured acceptance and drafting steps)."""
    report = build_report(source)
    check_read_source(source, report.dims)  # the config's KV-deciding keys against the tensors
    return plan_report(report, source.config, source.header_sha256, request, every)


def plan_report(report: CheckpointReport, config: Mapping[str, Any] | None,
                header_hash: str | None, request: PlanRequest,
                every: Sequence[RunRecord]) -> Plan:
    """Plan the checkpoint ``report`` describes (``config`` its config, ``header_hash`` its
    headers' fingerprint) as ``request`` says, calibrated from the successful runs
    ``every``."""
    checkpoint = planned_checkpoint(report, config, name=request.checkpoint,
                                    header_hash=header_hash, where=request.error_path,
                                    dtype=request.knobs.dtype)
    return build_plan(request, checkpoint, evidence_for(request, header_hash, every,
                                                        model_type=checkpoint.model_type))
