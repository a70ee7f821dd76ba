"""Step costs for a stored run whose plan predates them, from a checkpoint of the same build.

A concurrency sweep is re-predicted from the step costs its stored plan holds
(:mod:`servelab.evidence.sweeps`); runs stored before plans carried them (the H200's
2026-12-02 sweep) have none, and their checkpoint may have lived on a machine that is gone.
A header replica of the same build (``benchmarks/gpu/gen_checkpoint.py --sparse``) carries
the same tensor names, dtypes and shapes and the same config, so it gives the same step costs,
provided it IS the same build. :func:`replan_stored` checks that before planning:

- the replica's headers hash as the run's checkpoint did, or else every structural figure of
  the inspect report stored with the run (architecture, tensor count, bytes, parameters, dtypes,
  roles, layer kinds, quantization, MTP and vision tensors) equals the replica's, a value the
  store masked standing for any;
- re-planned at the run's own engine flags, the replica's KV pool (blocks, bytes per token
  per layer kind, blocks per request) and weights (resident and routed expert bytes, active
  parameters) equal the ones the run's stored plan recorded.

Any difference refuses the replica with one line naming it; nothing is re-predicted from a
build that is not the run's.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from servelab.checkpoint.report import build_report
from servelab.checkpoint.sources import load_checkpoint
from servelab.errors import UsageError
from servelab.evidence.sweeps import Replanned
from servelab.hardware.topology import topology_for
from servelab.pipeline.planning import plan_report
from servelab.plan.load import plan_step_costs
from servelab.plan.request import PlanRequest, StoreChoice
from servelab.redact import REDACTED
from servelab.sizing.knobs import EngineKnobs
from servelab.store.model import RunRecord

#: The inspect report's figures that fix a build's tensors (everything but where it was read).
REPORT_FIELDS = ("model", "tensor_count", "total_bytes", "params", "dtypes", "roles", "layers",
                 "quant", "mtp", "vision", "tie_word_embeddings")
#: The stored plan's figures a re-plan of the same build at the same flags reproduces.
PLAN_FIELDS = (("kv_pool", ("num_blocks", "blocks_per_request", "kv_bytes_per_token",
                            "state_bytes_per_request", "kv_dtype_bytes")),
               ("weights", ("resident_bytes", "routed_expert_bytes", "active_params", "scheme")))


def replan_stored(run: RunRecord, checkpoint: str) -> Replanned:
    """The step costs of ``run``'s build, planned from ``checkpoint`` (a local directory or
    Hub id, headers only) after checking it is that build (module docs); a mismatch, or a
    run that already stores step costs, is a :class:`UsageError` naming the checkpoint."""
    doc = run.prediction or {}
    rid = run.run_id or "?"
    if isinstance(doc.get("step_costs"), Mapping):
        raise UsageError(f"run {rid}'s plan already stores step costs; a replica is only for "
                         "plans that predate them", path=checkpoint)
    stored = run.checkpoint_report
    if not isinstance(stored, Mapping):
        raise UsageError(f"run {rid} stored no inspect report to check a replica against",
                         path=checkpoint)
    source = load_checkpoint(checkpoint)
    report = build_report(source)
    same_hash = bool(source.header_sha256) and source.header_sha256 == run.checkpoint_header_hash
    if not same_hash:
        got = report.to_json_dict()
        for key in REPORT_FIELDS:
            if key not in stored:
                raise UsageError(f"run {rid}'s stored inspect report lacks {key!r}; cannot "
                                 "check the replica against it", path=checkpoint)
            where = _differs(stored[key], got.get(key), key)
            if where:
                raise UsageError(f"not run {rid}'s build: {where}", path=checkpoint)
    plan = _plan(run, source.config or {}, report, checkpoint)
    mine = plan.to_dict()
    for section, keys in PLAN_FIELDS:
        theirs = doc.get(section)
        if not isinstance(theirs, Mapping):
            raise UsageError(f"run {rid}'s stored plan has no {section}", path=checkpoint)
        for k in keys:
            if k in theirs:
                where = _differs(theirs[k], mine[section].get(k), f"{section}.{k}")
                if where:
                    raise UsageError(f"re-planned at run {rid}'s flags, not its plan: {where}",
                                     path=checkpoint)
    how = (f"step costs re-planned from {checkpoint} (headers sha256 "
           f"{(source.header_sha256 or '?')[:12]}: "
           + ("the run's own" if same_hash else
              f"the run's was {(run.checkpoint_header_hash or '?')[:12]}; every structural "
              "figure of its stored inspect report equal")
           + "; KV pool and weights as its stored plan)")
    return Replanned(plan_step_costs(plan), how)


def _plan(run: RunRecord, config: Mapping[str, Any], report: Any, checkpoint: str) -> Any:
    """The replica planned on the run's hardware at the run's logged engine flags."""
    from servelab.evidence.runs import run_profile

    args = (run.engine_facts or {}).get("non_default_args") or {}
    if run.engine_name not in (None, "vllm"):
        raise UsageError(f"run {run.run_id} served {run.engine_name}: only vLLM plans carry "
                         "step costs", path=checkpoint)
    knobs = EngineKnobs(
        max_model_len=_int(args.get("max_model_len")),
        kv_cache_memory_bytes=_int(args.get("kv_cache_memory_bytes")),
        gpu_memory_utilization=_float(args.get("gpu_memory_utilization")),
        kv_cache_dtype=str(args.get("kv_cache_dtype", "auto")),
    )
    hardware = run_profile(run)
    request = PlanRequest.from_flags(checkpoint, hardware, topology_for(hardware.name),
                                     engine_version=run.engine_version or "", knobs=knobs,
                                     store=StoreChoice(use=False))
    return plan_report(report, config, None, request, [])


def _float(v: Any) -> float | None:
    """A logged float flag, or None when the run left it at the engine's default."""
    return None if v is None else float(v)


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _differs(stored: Any, got: Any, path: str) -> str | None:
    """Where ``got`` differs from ``stored`` ("path: got X, the run recorded Y"), a masked
    stored value matching anything; ``None`` when equal."""
    if stored == REDACTED:
        return None
    if isinstance(stored, Mapping) and isinstance(got, Mapping):
        for k in sorted(set(stored) | set(got)):
            where = _differs(stored.get(k), got.get(k), f"{path}.{k}")
            if where:
                return where
        return None
    if (isinstance(stored, list) and isinstance(got, list | tuple)
            and len(stored) == len(got)):
        for i, (a, b) in enumerate(zip(stored, got, strict=True)):
            where = _differs(a, b, f"{path}[{i}]")
            if where:
                return where
        return None
    if isinstance(stored, float) or isinstance(got, float):
        ok = (isinstance(stored, int | float) and isinstance(got, int | float)
              and abs(stored - got) <= 1e-9 * max(abs(stored), abs(got), 1.0))
    else:
        ok = stored == got
    return None if ok else f"{path} is {_short(got)}, the run recorded {_short(stored)}"


def _short(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 60 else text[:57] + "..."
