"""``servelab run``: one recipe, verified end to end, recorded with its prediction.

inspect the checkpoint → plan and predict (calibrated from the store when it can) → start
the engine → bench the recipe's workload → stop the engine → record the run → summarize.
Any failure after the recipe is read is recorded as a *failed* run with its reason and the
engine's log tail; the store write is one transaction, so nothing is half-written.

The caller (the CLI) renders progress through the ``on_event`` callback; this module never
prints.
"""

from __future__ import annotations

import platform
import socket
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from servelab.bench.result import BenchResult, write_json_atomic
from servelab.bench.run import BenchConfig, run_bench
from servelab.bench.spec import WorkloadSpec
from servelab.bench.workload import ProgressEvent
from servelab.checkpoint.kv_geometry import check_read_source
from servelab.checkpoint.report import CheckpointReport, build_report
from servelab.checkpoint.sources import load_checkpoint
from servelab.engines.facts import EngineFacts, Phase
from servelab.errors import ServelabError
from servelab.hardware.host import host_cpu
from servelab.hardware.profiles import HardwareProfile
from servelab.pipeline.planning import plan_report
from servelab.pipeline.summary import SummaryRow, summarize
from servelab.plan.build import Plan
from servelab.plan.request import PlanRequest
from servelab.redact import redact_args, redact_text
from servelab.serve.launch import (
    LOG_NAME,
    launch,
    new_run_dir,
)
from servelab.serve.process import EngineProcess
from servelab.serve.recipe import CapacitySection, Recipe
from servelab.serve.resolved import ResolvedRecipe, resolve_recipe
from servelab.store.db import Store, recipe_hash
from servelab.store.exchange import fields_from_engine_facts, run_from_bench
from servelab.store.model import STATUS_FAILED, STATUS_OK, RunFilter, RunRecord, utcnow
from servelab.units import format_bytes

StepName = Literal["inspect", "plan", "start", "bench", "stop", "record"]


@dataclass(frozen=True)
class RunEvent:
    """Progress of a run: a step starting/ending, an engine phase, a bench request, or a
    warning (a start-up refusal the plan foresees; the run goes on)."""

    step: StepName
    status: Literal["start", "done", "failed", "progress", "warning"]
    detail: str = ""
    phase: Phase | None = None
    bench: ProgressEvent | None = None


EventFn = Callable[[RunEvent], None]


@dataclass(frozen=True)
class RunOptions:
    """How to run a recipe (everything else comes from the recipe)."""

    port: int | Literal["auto"] | None = "auto"
    runs_parent: Path | None = None
    hardware: str | None = None  # overrides the recipe's profile name
    hardware_files: tuple[Path, ...] = ()
    labels: tuple[str, ...] = ()
    calibrate: bool = True


@dataclass(frozen=True)
class RunOutcome:
    """What ``servelab run`` produced."""

    record: RunRecord
    run_dir: Path
    summary: tuple[SummaryRow, ...]
    plan: Plan | None
    facts: EngineFacts | None

    @property
    def ok(self) -> bool:
        """True when the run completed and was recorded as ok."""
        return self.record.status == STATUS_OK

    @property
    def run_id(self) -> str:
        """The stored run's id."""
        assert self.record.run_id is not None
        return self.record.run_id


def load_prediction(recipe: Recipe, plan: Plan, store: Store | None = None) -> dict[str, Any]:
    """The recipe's closed-loop sweep as predicted under load (:mod:`servelab.plan.load`),
    each point one batch of the requests the bench sends per point, as JSON; with a
    ``store``, the batched form's held-out error from its sweeps widens the intervals."""
    from servelab.evidence.stored import load_evidence, with_sweeps
    from servelab.plan.load import LoadRequest, answer

    work = recipe.bench.workload()
    cap = recipe.capacity
    req = LoadRequest(tuple(dict.fromkeys((*work.prompt_lens, *(cap.prompt_lens if cap else ())))),
                      work.output_len, tuple(work.concurrency),
                      requests=work.requests, slo=cap.slo if cap else None,
                      max_num_batched_tokens=getattr(recipe.engine, "max_num_batched_tokens",
                                                     None))
    runs = (with_sweeps(store, store.list_runs(RunFilter(status=STATUS_OK)))
            if store is not None else [])
    return answer(plan, req, *load_evidence(runs, plan)).to_dict()


def measure_capacity(recipe: Recipe, section: CapacitySection, base_url: str, model: str,
                     tokenizer: Path | None, emit: EventFn) -> dict[str, Any]:
    """The recipe's ``[capacity]`` search on the running server (``servelab capacity``'s),
    as ``servelab.capacities/1`` JSON with the SLO it searched under."""
    from servelab.bench.capacity import capacities_json, run_capacities
    from servelab.bench.slo import parse_slo

    work = recipe.bench.workload()
    rate = section.variable == "rate"
    spec = WorkloadSpec(prompt_lens=tuple(section.prompt_lens), output_len=work.output_len,
                        concurrency=(4096,) if rate else (1,), request_rate=1.0 if rate else None,
                        requests=20 if rate else None, warmup_requests=section.warmup_requests,
                        profile="constant" if rate else work.profile)
    cfg = BenchConfig(base_url=base_url, workload=spec, model=model,
                      temperature=recipe.bench.temperature, ignore_eos=recipe.bench.ignore_eos,
                      tokenizer=tokenizer, scrape_metrics=False)
    emit(RunEvent("bench", "start", f"capacity search under {section.slo}"))
    results = run_capacities(cfg, parse_slo(section.slo), section.search(),
                             max_rounds=section.max_rounds)
    found = ", ".join(f"{r.prompt_len}: {r.outcome.capacity}" for r in results)
    emit(RunEvent("bench", "done", f"capacity ({section.variable}) {found}"))
    return {**capacities_json(results), "slo": section.slo, "variable": section.variable,
            "output_len": work.output_len}


def _labels(recipe: Recipe, extra: tuple[str, ...]) -> tuple[str, ...]:
    mine = [f"{k}={v}" for k, v in sorted(recipe.labels.items())]
    return tuple(dict.fromkeys([*mine, *extra]))


def make_run_plan(
    recipe: Recipe,
    report: CheckpointReport,
    config: dict[str, Any],
    hardware: HardwareProfile,
    *,
    engine_version: str,
    store: Store | None,
    header_hash: str | None = None,
    priors: Path | None = None,
) -> Plan:
    """Plan the recipe's serving set-up for the inspected checkpoint (prediction, pre-run):
    :meth:`PlanRequest.from_recipe <servelab.plan.request.PlanRequest.from_recipe>`,
    calibrated from ``store``'s successful runs (each engine its own calibration: samples
    carry their run's engine_name); a recipe that drafts is predicted at the acceptance
    length stored runs of the same checkpoint (``header_hash``), method and ``k`` measured.
    """
    request = PlanRequest.from_recipe(recipe, hardware, engine_version=engine_version,
                                      store_used=store is not None, priors=priors)
    every = store.list_runs(RunFilter(status=STATUS_OK)) if store is not None else []
    return plan_report(report, config, header_hash, request, every)


@dataclass
class _RunState:
    """What a run has gathered so far (mutable while the run is in flight)."""

    started: datetime
    fields: dict[str, Any] = field(default_factory=dict)
    plan: Plan | None = None
    facts: EngineFacts | None = None
    log_tail: str | None = None


def plan_recipe(recipe: Recipe | ResolvedRecipe, store: Store | None,
                priors: Path | None = None) -> Plan:
    """``servelab plan RECIPE``: the plan ``servelab run`` would make (calibrated from
    ``store`` when given, and ``priors`` instead of the shipped table when given), without a
    run; the checkpoint is read, a ``synth`` model built and converted as the engine loads
    it. The engine need not be installed here: its version is then the one the recipe's
    engine pins."""
    resolved = (recipe if isinstance(recipe, ResolvedRecipe)
                else resolve_recipe(recipe, require_engine=False))
    rec = resolved.recipe
    model_arg, model_dir = resolved.model
    source = load_checkpoint(
        model_dir if model_dir is not None else model_arg, revision=rec.model.revision
    )
    report = build_report(source)
    check_read_source(source, report.dims)  # the config's KV-deciding keys against the tensors
    return make_run_plan(rec, report, dict(source.config or {}),
                         resolved.hardware, engine_version=resolved.plan_version_or_default(),
                         store=store, header_hash=source.header_sha256, priors=priors)


def _fields_from_engine(state: _RunState, engine: EngineProcess) -> None:
    facts = engine.facts
    state.facts = facts
    state.fields.update(fields_from_engine_facts({**facts.to_dict(), "ready_s": engine.ready_s,
                                                  "auto_env": dict(engine.spec.auto_env)}))
    state.fields["engine_args"] = redact_args(engine.spec.argv)


def _log_file_tail(run_dir: Path, lines: int = 40) -> str | None:
    """The end of the engine log in ``run_dir`` (an engine that failed to start left one)."""
    log = run_dir / LOG_NAME
    if not log.is_file():
        return None
    return "\n".join(log.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:])


def bench_record(
    bench: BenchResult,
    *,
    run_dir: Path,
    started: datetime,
    fields: dict[str, Any],
    log_tail: str | None = None,
) -> RunRecord:
    """The run record of a finished benchmark: its samples and metrics, and *failed* (step
    ``bench``, with the engine's log tail) when the client's and the server's token counts
    disagree — numbers from a miscounting client or server are not a measurement."""
    record = run_from_bench(
        bench, source=str(run_dir), started_at=started, finished_at=utcnow(), **fields
    )
    extra = {
        **(record.extra or {}),
        "run_dir": str(run_dir),
        "platform": platform.platform(),
        "host_cpu": host_cpu(),
    }
    failure = bench.token_check.failure if bench.token_check is not None else None
    if failure is None:
        return replace(record, extra=extra)
    return replace(
        record,
        status=STATUS_FAILED,
        status_reason=f"bench: {redact_text(failure)}",
        log_tail=redact_text(log_tail) if log_tail else None,
        extra={**extra, "failed_step": "bench"},
    )


def run_recipe(
    recipe: Recipe,
    store: Store,
    options: RunOptions | None = None,
    *,
    on_event: EventFn | None = None,
) -> RunOutcome:
    """Run ``recipe`` end to end and store the run (ok or failed). Never leaves an engine.

    Raises :class:`EngineNotFoundError` (nothing recorded) when the recipe's engine is not
    installed here."""
    opts = options or RunOptions()
    emit = on_event or (lambda _e: None)
    # an engine that is not installed is a setup problem, not a run that failed: nothing
    # is recorded (a failed run blaming the plan step, as before issue 33, misled). The
    # recipe is resolved once: its launcher now, each other part at the step that reads it.
    resolved = resolve_recipe(recipe, hardware_name=opts.hardware,
                              hardware_files=opts.hardware_files)
    recipe_text = recipe.source.read_text(encoding="utf-8") if recipe.source else ""
    run_dir = new_run_dir(recipe, opts.runs_parent)
    state = _RunState(started=utcnow())
    state.fields.update(
        recipe_name=recipe.name,
        recipe_text=recipe_text or None,
        recipe_hash=recipe_hash(recipe_text) if recipe_text else None,
        model_id=recipe.model.repo or recipe.served_model_name(),
        checkpoint_revision=recipe.model.revision,
        host=socket.gethostname(),
        engine_name=recipe.engine.name,
        labels=_labels(recipe, opts.labels),
    )
    step: StepName = "inspect"
    summary: tuple[SummaryRow, ...] = ()
    capacity: dict[str, Any] | None = None
    try:
        emit(RunEvent("inspect", "start", "reading safetensors headers"))
        model_arg, model_dir = resolved.model
        source = load_checkpoint(
            model_dir if model_dir is not None else model_arg, revision=recipe.model.revision
        )
        report = build_report(source)
        state.fields.update(
            checkpoint_path=str(model_dir) if model_dir is not None else None,
            checkpoint_header_hash=source.header_sha256,
            checkpoint_report=report.to_json_dict(),
        )
        emit(
            RunEvent(
                "inspect",
                "done",
                f"{report.tensor_count:,} tensors, {format_bytes(report.total_bytes)}",
            )
        )

        step = "plan"
        emit(RunEvent("plan", "start", "predicting memory, KV pool and speed"))
        hardware = resolved.hardware
        engine_version = resolved.plan_version
        state.fields.update(
            hardware=hardware.name,
            hardware_profile=hardware.to_dict(),
            engine_version=engine_version,
        )
        env = resolved.environment
        state.fields.update(torch=env.torch, cuda=env.cuda, driver=env.driver)
        state.plan = make_run_plan(
            recipe,
            report,
            dict(source.config or {}),
            hardware,
            engine_version=engine_version,
            store=store if opts.calibrate else None,
            header_hash=source.header_sha256,
        )
        state.fields["prediction"] = state.plan.to_dict()
        # the recipe's sweep, predicted too
        if any(c > 1 for c in recipe.bench.workload().concurrency):
            state.fields["prediction"]["load"] = load_prediction(
                recipe, state.plan, store if opts.calibrate else None)
        emit(RunEvent("plan", "done", f"predicted KV pool {state.plan.kv_tokens:,} tokens"))
        for finding in state.plan.findings:  # shown before the engine starts; never blocks
            emit(RunEvent("plan", "warning", finding.line))

        step = "start"
        emit(RunEvent("start", "start", "starting the engine"))

        def on_phase(phase: Phase, elapsed: float) -> None:
            emit(RunEvent("start", "progress", f"{phase.name.lower()} ({elapsed:.0f} s)", phase))

        engine = launch(resolved, run_dir=run_dir, port=opts.port, on_phase=on_phase)
        try:
            _fields_from_engine(state, engine)
            set_env = "".join(f"; {k}={v} (set by servelab)"
                              for k, v in engine.spec.auto_env.items())
            emit(RunEvent("start", "done", f"ready at {engine.base_url}{set_env}"))
            step = "bench"
            emit(RunEvent("bench", "start", "benchmarking the recipe's workload"))
            bench = run_bench(
                BenchConfig(
                    base_url=engine.base_url,
                    workload=recipe.bench.workload(),
                    model=engine.served_model_name,
                    temperature=recipe.bench.temperature,
                    ignore_eos=recipe.bench.ignore_eos,
                    tokenizer=model_dir,
                ),
                on_progress=lambda ev: emit(RunEvent("bench", "progress", bench=ev)),
            )
            write_json_atomic(run_dir / "bench.json", bench.to_json())
            engine.check_alive()
            emit(RunEvent("bench", "done", f"{sum(len(p.samples) for p in bench.points)} requests"))
            if recipe.capacity is not None:
                capacity = measure_capacity(recipe, recipe.capacity, engine.base_url,
                                            engine.served_model_name, model_dir, emit)
                write_json_atomic(run_dir / "capacity.json", capacity)
                engine.check_alive()
        finally:
            emit(RunEvent("stop", "start", "stopping the engine"))
            _fields_from_engine(state, engine)
            state.log_tail = "\n".join(engine.log_tail(40))
            engine.stop()
            emit(RunEvent("stop", "done", "engine stopped"))

        step = "record"
        record = bench_record(bench, run_dir=run_dir, started=state.started,
                              fields=state.fields, log_tail=state.log_tail)
        if record.status == STATUS_FAILED:
            emit(RunEvent("bench", "failed", record.status_reason or ""))
        else:
            summary = summarize(
                record.metrics, state.fields.get("prediction"), recipe.bench.workload().prompt_lens
            )
        record = replace(
            record,
            extra={**(record.extra or {}), "summary": [r.to_dict() for r in summary],
                   **({"capacity": capacity} if capacity is not None else {})},
        )
    except (ServelabError, KeyboardInterrupt) as exc:
        reason = "interrupted" if isinstance(exc, KeyboardInterrupt) else str(exc)
        emit(RunEvent(step, "failed", reason))
        tail = state.log_tail if state.log_tail is not None else _log_file_tail(run_dir)
        record = RunRecord(
            started_at=state.started,
            finished_at=utcnow(),
            status=STATUS_FAILED,
            status_reason=f"{step}: {redact_text(reason)}",
            log_tail=redact_text(tail) if tail else None,
            extra={"run_dir": str(run_dir), "failed_step": step},
            **state.fields,
        )
        run_id = store.add_run(record)
        if isinstance(exc, KeyboardInterrupt):
            raise
        return RunOutcome(replace(record, run_id=run_id), run_dir, (), state.plan, state.facts)
    emit(RunEvent("record", "start", "recording the run"))
    run_id = store.add_run(record)
    emit(RunEvent("record", "done", run_id))
    return RunOutcome(replace(record, run_id=run_id), run_dir, summary, state.plan, state.facts)
