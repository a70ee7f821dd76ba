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
from servelab.checkpoint.kv_geometry import check_source
from servelab.checkpoint.report import CheckpointReport, build_report
from servelab.checkpoint.sources import load_checkpoint
from servelab.engines import get_engine
from servelab.engines.facts import EngineFacts, Phase
from servelab.errors import ServelabError, UsageError
from servelab.families import DTYPE_BYTES, model_dims
from servelab.forecast.build import Plan
from servelab.hardware.host import host_cpu
from servelab.hardware.lookup import get_profile
from servelab.hardware.profiles import HardwareProfile
from servelab.pipeline.environment import engine_environment
from servelab.pipeline.planning import calibrated_plan
from servelab.pipeline.speculative import resolve_acceptance
from servelab.pipeline.summary import SummaryRow, summarize
from servelab.plan.parallel import topology_for
from servelab.plan.request import EngineKnobs
from servelab.plan.specsource import AUTO
from servelab.plan.weights import Weights, weights_from_report
from servelab.redact import redact_args, redact_text
from servelab.serve.launch import (
    LOG_NAME,
    check_engine_version,
    launch,
    new_run_dir,
    resolve_launcher,
    resolve_model,
)
from servelab.serve.process import EngineProcess
from servelab.serve.recipe import CapacitySection, Recipe
from servelab.store.db import Store, recipe_hash
from servelab.store.exchange import fields_from_engine_facts, run_from_bench
from servelab.store.model import STATUS_FAILED, STATUS_OK, RunFilter, RunRecord, utcnow
from servelab.units import format_bytes

GIB = 1024**3
DEFAULT_HARDWARE = "host"

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
    """The recipe's closed-loop sweep as predicted under load (:mod:`servelab.forecast.load`),
    each point one batch of the requests the bench sends per point, as JSON; with a
    ``store``, the batched form's held-out error from its sweeps widens the intervals."""
    from servelab.forecast.load import LoadRequest, answer
    from servelab.pipeline.planning import load_evidence, with_sweeps

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


def resolve_hardware(recipe: Recipe, options: RunOptions) -> HardwareProfile:
    """The hardware profile named by the options, the recipe, or ``host``."""
    name = options.hardware or recipe.hardware or DEFAULT_HARDWARE
    return get_profile(name, files=options.hardware_files)


def _labels(recipe: Recipe, extra: tuple[str, ...]) -> tuple[str, ...]:
    mine = [f"{k}={v}" for k, v in sorted(recipe.labels.items())]
    return tuple(dict.fromkeys([*mine, *extra]))


def apply_dtype_flag(
    config: dict[str, Any], weights: Weights, dtype: str | None
) -> tuple[dict[str, Any], Weights]:
    """What ``--dtype`` does to an unquantized checkpoint: the engine casts the weights, and
    the KV cache ("auto") follows the model dtype. Quantized weights keep their bytes."""
    if dtype is None or dtype == "auto":
        return config, weights
    if dtype not in DTYPE_BYTES:
        raise UsageError(f"engine.flags.dtype {dtype!r} is not a dtype servelab knows")
    old = model_dims(config).dtype_bytes
    config = {**config, "dtype": dtype}
    inner = config.get("text_config")
    if isinstance(inner, dict):
        config["text_config"] = {**inner, "dtype": dtype}
    new = DTYPE_BYTES[dtype]
    if weights.scheme != "bf16" or new == old:
        return config, weights

    def scale(n: int) -> int:
        return n * new // old

    return config, replace(
        weights,
        resident_bytes=scale(weights.resident_bytes),
        decode_bytes_per_token=scale(weights.decode_bytes_per_token),
        routed_expert_bytes=scale(weights.routed_expert_bytes),
        mtp_bytes=scale(weights.mtp_bytes),
        vision_bytes=scale(weights.vision_bytes),
        source=f"{weights.source}; cast to {dtype} by the engine's --dtype",
    )


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
    """Plan the recipe's serving set-up for the inspected checkpoint (prediction, pre-run).

    A recipe that drafts (vLLM's ``speculative_config``) is also predicted with
    speculative decode at the acceptance length stored runs of the same checkpoint
    (``header_hash``), method and ``k`` measured; without one the plan says why.
    """
    serving = get_engine(recipe.engine.name)
    flags = serving.plan_knobs(recipe.engine)
    # The engine's own KV arithmetic; one servelab does not reproduce is planned with
    # vLLM's, and the plan says so.
    arithmetic = serving.kv_arithmetic(recipe.engine) or get_engine("vllm").kv_arithmetic()
    assert arithmetic is not None
    weights = weights_from_report(report, name=recipe.model.repo or recipe.name)
    if config:
        config, weights = apply_dtype_flag(config, weights, flags.dtype)
    every = store.list_runs(RunFilter(status=STATUS_OK)) if store is not None else []
    # drafting runs calibrate the draft term, not plain decode (predict.spec)
    runs = [r for r in every if r.hardware == hardware.name]
    spec = flags.speculative
    speculative = resolve_acceptance(
        AUTO, method=spec.method, draft_tokens=spec.draft_tokens, header_hash=header_hash,
        runs=every, use_store=store is not None,
    ) if spec is not None else None
    # Each engine its own calibration: samples carry their run's engine_name.
    plan = calibrated_plan(
        config,
        weights,
        hardware,
        runs,
        engine=serving.name,
        knobs=EngineKnobs(
            max_model_len=flags.max_model_len,
            kv_cache_memory_bytes=flags.kv_cache_memory_bytes,
            gpu_memory_utilization=flags.gpu_memory_utilization or 0.9,
            kv_cache_dtype=flags.kv_cache_dtype or "auto",
            enable_prefix_caching=flags.enable_prefix_caching is not False,
            startup=flags.startup,
            attention_backend=flags.attention_backend,
        ),
        engine_version=engine_version,
        prompt_lens=tuple(recipe.bench.workload().prompt_lens),
        layout=flags.layout,
        topology=topology_for(hardware.name),
        kv_arithmetic=arithmetic,
        speculative=speculative,
        draft_tokens=spec.draft_tokens if spec is not None else 0,
        draft_runs=every,
        priors=priors,
    )
    plan = replace(plan, checkpoint_hash=header_hash)
    if serving.kv_arithmetic(recipe.engine) is not None:
        return plan
    note = (
        f"servelab does not model {serving.name}'s own KV pool: the pool above follows "
        f"vLLM {plan.engine_version}'s arithmetic"
    )
    return replace(plan, notes=(*plan.notes, note))


@dataclass
class _RunState:
    """What a run has gathered so far (mutable while the run is in flight)."""

    started: datetime
    fields: dict[str, Any] = field(default_factory=dict)
    plan: Plan | None = None
    facts: EngineFacts | None = None
    log_tail: str | None = None


def plan_recipe(recipe: Recipe, hardware: HardwareProfile, store: Store | None,
                priors: Path | None = None) -> Plan:
    """``servelab plan RECIPE``: the plan ``servelab run`` would make (calibrated from
    ``store`` when given, and ``priors`` instead of the shipped table when given), without a
    run; the checkpoint is read, a ``synth`` model built and converted as the engine loads
    it."""
    model_arg, model_dir = resolve_model(recipe)
    source = load_checkpoint(
        model_dir if model_dir is not None else model_arg, revision=recipe.model.revision
    )
    check_source(source)  # the config's KV-deciding keys against the tensor shapes
    try:
        version = _engine_version_for_plan(recipe)
    except ServelabError:  # not installed here: the version the recipe's engine pins
        version = get_engine(recipe.engine.name).default_version
    return make_run_plan(recipe, build_report(source), dict(source.config or {}), hardware,
                         engine_version=version, store=store,
                         header_hash=source.header_sha256, priors=priors)


def _engine_version_for_plan(recipe: Recipe) -> str:
    launcher, install = resolve_launcher(recipe)
    version = check_engine_version(recipe, install, launcher)
    if version:
        return version.split("+")[0]
    want = recipe.engine.version or ""
    if want.startswith("=="):
        return want[2:]
    raise UsageError(
        "cannot tell the engine's version (no install manifest, no '==' requirement in the "
        "recipe); plan needs it to follow the right KV arithmetic"
    )


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
    # is recorded (a failed run blaming the plan step, as before issue 33, misled)
    resolve_launcher(recipe)
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
        model_arg, model_dir = resolve_model(recipe)
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
        hardware = resolve_hardware(recipe, opts)
        engine_version = _engine_version_for_plan(recipe)
        state.fields.update(
            hardware=hardware.name,
            hardware_profile=hardware.to_dict(),
            engine_version=engine_version,
        )
        env = engine_environment(recipe)
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

        engine = launch(recipe, run_dir=run_dir, port=opts.port, on_phase=on_phase)
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
