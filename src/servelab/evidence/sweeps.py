"""Stored concurrency sweeps, predicted again as if their model had never been run.

For each stored run that measured closed-loop points at more than one stream, its sweep is
re-predicted from the plan document stored with it (``step_costs``: what a step of its model
reads and computes; the KV pool's blocks; ``max_num_seqs``), never from its checkpoint, which
a run may not record. The single-stream fits are the ones its build gets with its model left
out (:func:`servelab.evidence.runs.held_out_calibration`); each point simulates the requests
the bench sent (:mod:`servelab.predict.schedule`). Errors as everywhere in servelab: measured
/ predicted - 1 for a rate; for a latency the same on its reciprocal (predicted / measured -
1), so a positive error is faster than predicted. A build whose held-out single-stream fit is
too uncertain to print (the 4x rule) is still simulated: its rows say "no prediction" and
count in no coverage, but their errors are the load form's evidence like any other.

A run whose plan predates stored step costs is re-predicted only from step costs the caller
re-planned for it (:class:`Replanned`: from a checkpoint checked to be the same build,
:mod:`servelab.pipeline.replan`); its rows say so.

The batched form's own error (:func:`batched_error`) is what these held-out points miss by,
per hardware: the 90 % split-conformal quantile of their |errors| where they rest on
:data:`~servelab.predict.levels.MIN_BUILDS` models or more, else the largest miss widened by
``1 + 1/models`` (the single-stream rule); fewer than two models: none.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from servelab.bench.slo import parse_slo
from servelab.errors import InputError, ServelabError
from servelab.evidence.runs import (
    checkpoint_names,
    held_out_calibration,
    run_graph_tokens,
    run_platform,
    run_profile,
    run_startup_options,
    vllm_startup_rules,
)
from servelab.plan.load import BatchedError, LoadPoint, MeasuredCapacity, simulate_points
from servelab.points import PointKey
from servelab.predict.batched import CPU_STEP_FIXED, StepCosts, StepModel
from servelab.predict.levels import MIN_BUILDS, too_wide_text
from servelab.predict.priors import PriorTable
from servelab.predict.schedule import Limits, Load, admitted
from servelab.predict.widths import conformal, error_bound
from servelab.sizing.layout import ParallelLayout
from servelab.store.model import STATUS_OK, RunRecord

#: The figures compared per point: (key, whether it is a rate).
METRICS: tuple[tuple[str, bool], ...] = (
    ("tpot_s", False), ("ttft_s", False), ("stream_tok_s", True), ("output_tok_s_per_gpu", True)
)
#: The figures the batched form's rate/TPOT width is measured on (TTFT has its own).
RATE_METRICS = ("tpot_s", "stream_tok_s", "output_tok_s_per_gpu")


@dataclass(frozen=True)
class Measured:
    """One measured closed-loop point of a stored run (its completed requests)."""

    tpot_s: float
    ttft_s: float
    stream_tok_s: float
    output_tok_s_per_gpu: float
    requests: int


@dataclass(frozen=True)
class Compared:
    """One metric of one point: predicted (with its interval), measured, error, inside."""

    predicted: float
    low: float
    high: float
    measured: float
    error: float
    inside: bool | None  # None: no prediction (an interval over the 4x rule), only simulated


@dataclass(frozen=True)
class SweepRow:
    """One stored closed-loop point against its held-out prediction."""

    run_id: str
    hardware: str
    model: str
    prompt_len: int
    concurrency: int
    requests: int
    rel_error: float  # the printed interval's half-width (TPOT and rates)
    metrics: Mapping[str, Compared]
    no_prediction: str | None = None  # why the figures are simulated, not predicted
    predicted: bool = True
    replanned: str | None = None  # where its step costs came from when not its stored plan

    def to_dict(self) -> dict[str, Any]:
        """JSON form (every predicted figure labelled)."""
        return {
            "run_id": self.run_id, "hardware": self.hardware, "model": self.model,
            "prompt_len": self.prompt_len, "concurrency": self.concurrency,
            "requests": self.requests, "rel_error": self.rel_error, "predicted": True,
            "no_prediction": self.no_prediction, "replanned": self.replanned,
            **{k: vars(v) for k, v in self.metrics.items()},
        }


@dataclass(frozen=True)
class Replanned:
    """Step costs for a stored run whose plan predates them, re-planned from a checkpoint
    checked to be the run's build; ``how`` says from what and how it was checked."""

    costs: StepCosts
    how: str


@dataclass(frozen=True)
class Skipped:
    """A stored sweep that could not be predicted again, and why."""

    run_id: str
    model: str
    reason: str
    hardware: str = ""


def measured_points(run: RunRecord) -> dict[tuple[int, int], Measured]:
    """Per (prompt, concurrency): the run's closed-loop points (completed requests), TPOT and
    TTFT their means, tok/s per stream the mean of 1 / TPOT, per GPU Little's law (streams x
    output tokens / mean end-to-end), as the prediction reports them."""
    output = (run.workload or {}).get("output_len")
    if not isinstance(output, int) or output < 2:
        return {}
    groups: dict[tuple[int, int], list[Any]] = {}
    for s in run.samples:
        key = PointKey.parse(s.point)
        if (key is None or key.open_loop or key.depth or key.concurrency is None
                or not s.ok or not s.tpot_s or s.ttft_s is None or not s.e2e_s):
            continue
        groups.setdefault((key.prompt_tokens, key.concurrency), []).append(s)
    out = {}
    for (p, c), ss in groups.items():
        out[(p, c)] = Measured(
            tpot_s=statistics.fmean(s.tpot_s for s in ss),
            ttft_s=statistics.fmean(s.ttft_s for s in ss),
            stream_tok_s=statistics.fmean(1.0 / s.tpot_s for s in ss),
            output_tok_s_per_gpu=c * output / statistics.fmean(s.e2e_s for s in ss),
            requests=len(ss),
        )
    return out


def sweeps_in(run: RunRecord) -> bool:
    """Whether the run's workload swept a concurrency above one (its samples are needed;
    a store lists runs without them)."""
    conc = (run.workload or {}).get("concurrency")
    return run.status == STATUS_OK and isinstance(conc, list) and any(
        isinstance(c, int) and c > 1 for c in conc)


def has_sweep(run: RunRecord) -> bool:
    """A successful run that measured a closed-loop point at more than one stream."""
    return run.status == STATUS_OK and any(c > 1 for _, c in measured_points(run))


@dataclass(frozen=True)
class _Stored:
    """What re-predicting a sweep reads of a stored plan."""

    costs: StepCosts
    tokens: int  # the step's token budget
    seqs: int  # max_num_seqs
    blocks: int  # the KV pool's blocks
    groups: tuple[tuple[str, int, int], ...]  # (kind, block size, blocks per request)


def _stored(run: RunRecord, replanned: Replanned | None = None) -> _Stored:
    """The step costs, limits and KV pool of the run's stored plan (the step costs
    ``replanned`` when its plan predates them)."""
    doc = run.prediction or {}
    raw = doc.get("step_costs")
    if isinstance(raw, Mapping):
        costs = StepCosts.from_dict(raw)
    elif replanned is not None:
        costs = replanned.costs
    else:
        raise InputError("its plan predates stored step costs (re-run it, or re-plan it from "
                         "a header replica of its build: --replica RUN_ID=DIR)")
    pool = doc.get("kv_pool")
    if not isinstance(pool, Mapping) or not isinstance(pool.get("groups"), list):
        raise InputError("its plan holds no vLLM KV pool")
    try:
        groups = [(str(g["kind"]), int(g["block_size"]), int(g["blocks_per_request"]))
                  for g in pool["groups"]]
        blocks = int(pool["num_blocks"])
    except (KeyError, TypeError, ValueError) as exc:
        raise InputError(f"its plan's KV pool is unreadable: {exc!r}") from None
    hw = run_profile(run)
    opts = run_startup_options(run)
    platform = run_platform(run)
    rules = vllm_startup_rules()  # a stored sweep with a pool is a vLLM run's
    tokens = rules.max_num_batched_tokens(hw, platform, ParallelLayout(), opts).value
    seqs_doc = ((doc.get("startup") or {}).get("max_num_seqs") or {}).get("value")
    seqs = (seqs_doc if isinstance(seqs_doc, int)
            else rules.max_num_seqs(hw, platform, ParallelLayout(), opts).value)
    return _Stored(costs, tokens, seqs, blocks, tuple(groups))


def predict_sweep(run: RunRecord, runs: Sequence[RunRecord], priors: PriorTable | None = None,
                  cpu_step_fixed: str = CPU_STEP_FIXED, replanned: Replanned | None = None
                  ) -> list[SweepRow]:
    """The run's closed-loop points predicted with its model left out (see module docs);
    raises :class:`InputError` saying why a run cannot be. ``cpu_step_fixed``: which fit's
    fixed cost a CPU step with prompt chunks pays (:class:`~servelab.predict.batched.
    StepModel`); ``replanned``: its step costs when its plan predates them."""
    meas = measured_points(run)
    cal = held_out_calibration(run, runs, priors)
    if cal is None:
        raise InputError("its plan has no roofline or decode point to calibrate from")
    refused = []
    for kind, fit in (("decode", cal.decode), ("prefill", cal.prefill)):
        if fit.is_roofline:
            raise InputError(f"no calibrated {kind} fit with its model left out")
        if fit.refused:  # still simulated: its miss is the batched form's evidence too
            refused.append(f"{kind}: {fit.refused}")
    st = _stored(run, replanned)
    model = StepModel(costs=st.costs, decode=cal.decode, prefill=cal.prefill,
                      platform=run_platform(run), graph_tokens=run_graph_tokens(run),
                      cpu_step_fixed=cpu_step_fixed)
    output = int((run.workload or {})["output_len"])
    keys = sorted(meas)

    def limits(load: Load) -> Limits:
        return Limits(st.tokens, st.seqs, admitted(st.blocks, st.groups, load.prompt_len + output))

    loads = [Load(p, output, meas[(p, c)].requests, concurrency=c) for p, c in keys]
    points = simulate_points(model, loads, limits, gpus=1)
    name = checkpoint_names(runs)[next(i for i, r in enumerate(runs) if r is run)]
    why = "; ".join(refused) or None
    how = replanned.how if replanned is not None and st.costs is replanned.costs else None
    return [_row(run, name, pt, meas[k], why, how) for k, pt in zip(keys, points, strict=True)]


def _row(run: RunRecord, name: str, pt: LoadPoint, m: Measured, refused: str | None,
         replanned: str | None) -> SweepRow:
    why = refused or (too_wide_text(f"±{pt.rel_error * 100:.0f}%") if pt.no_prediction
                      else None)
    metrics = {}
    for key, rate in METRICS:
        band = getattr(pt, key)
        v = getattr(m, key)
        err = v / band.value - 1.0 if rate else band.value / v - 1.0
        metrics[key] = Compared(band.value, band.low, band.high, v, err,
                                None if why else band.low <= v <= band.high)
    return SweepRow(run.run_id or "", run.hardware or "", name, pt.prompt_len,
                    pt.concurrency or 0, m.requests, pt.rel_error, metrics, why,
                    replanned=replanned)


def held_out_sweeps(runs: Sequence[RunRecord], priors: PriorTable | None = None,
                    cpu_step_fixed: str = CPU_STEP_FIXED,
                    replanned: Mapping[str, Replanned] | None = None
                    ) -> tuple[list[SweepRow], list[Skipped]]:
    """Every stored sweep among ``runs`` predicted with its model left out (the other runs
    and the priors are the calibration), and the sweeps that could not be, with why;
    ``replanned``: by run id, step costs for runs whose plans predate them."""
    runs = list(runs)
    names = checkpoint_names(runs)
    rows: list[SweepRow] = []
    skipped: list[Skipped] = []
    for run, name in zip(runs, names, strict=True):
        if not has_sweep(run):
            continue
        try:
            rows.extend(predict_sweep(run, runs, priors, cpu_step_fixed,
                                      (replanned or {}).get(run.run_id or "")))
        except ServelabError as exc:
            skipped.append(Skipped(run.run_id or "", name, str(exc), run.hardware or ""))
    return rows, skipped


def batched_error(rows: Sequence[SweepRow], hardware: str) -> BatchedError | None:
    """The batched form's held-out error on ``hardware`` (module docs), from its points at
    more than one stream; ``None`` without sweeps of two models there."""
    mine = [r for r in rows if r.hardware == hardware and r.concurrency > 1]
    models = len({r.model for r in mine})
    if models < 2:
        return None

    def width(keys: Sequence[str]) -> float:
        errs = [r.metrics[k].error for r in mine for k in keys]
        q = conformal(errs) if models >= MIN_BUILDS else None
        return q if q is not None else error_bound(errs, models)

    how = ("90 % of the held-out errors" if models >= MIN_BUILDS
           else f"largest held-out miss x (1 + 1/{models})")
    return BatchedError(
        hardware=hardware, rel_error=width(RATE_METRICS), ttft_rel_error=width(("ttft_s",)),
        models=models, points=len(mine),
        basis=f"batched form, leave-one-model-out over {len(mine)} stored points at 2+ "
              f"streams of {models} models on {hardware} ({how})",
    )


def left_out_note(skipped: Sequence[Skipped], hardware: str) -> str | None:
    """What a load prediction on ``hardware`` says of its stored sweeps that could not be
    predicted again (:func:`held_out_sweeps`' ``skipped``): they are not in the batched
    form's width, which they might widen. ``None`` when there are none."""
    mine = [s for s in skipped if s.hardware == hardware]
    if not mine:
        return None
    listed = "; ".join(f"{s.run_id} ({s.model}): {s.reason}" for s in mine)
    some = f"{len(mine)} stored sweep{'s' if len(mine) > 1 else ''} on {hardware}"
    where = (" (--replica is an option of `servelab calibration report`, which then scores "
             "it)" if "--replica" in listed else "")
    return f"{some} not in the batched form's measured error, and might widen it: {listed}{where}"


def stored_capacities(runs: Sequence[RunRecord], header_hash: str | None, hardware: str
                      ) -> list[MeasuredCapacity]:
    """The SLO capacities ``servelab run`` measured (a recipe's ``[capacity]``, stored as
    ``extra.capacity``) with the checkpoint of ``header_hash`` on ``hardware``."""
    if not header_hash:
        return []
    out = []
    for run in runs:
        if (run.status != STATUS_OK or run.hardware != hardware
                or run.checkpoint_header_hash != header_hash):
            continue
        cap = (run.extra or {}).get("capacity")
        if not isinstance(cap, Mapping) or cap.get("schema") != "servelab.capacities/1":
            continue
        try:
            slo = parse_slo(str(cap["slo"])).label
            for row in cap["capacities"]:
                value = row["capacity"]
                out.append(MeasuredCapacity(
                    slo, str(cap["variable"]), int(row["prompt_len"]), int(cap["output_len"]),
                    None if value is None else float(value), run.run_id or ""))
        except (KeyError, TypeError, ValueError, ServelabError):
            continue  # an unreadable stored search is not a measurement
    return out
