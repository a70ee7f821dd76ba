"""``servelab plan CHECKPOINT`` and ``servelab explain A B``: memory, KV pool, speed.

The options are declared once per group (:mod:`servelab.cli.plan_options`); the command turns
them into one :class:`~servelab.plan.request.PlanRequest` and prints the plan
(:mod:`servelab.cli.plan_view`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table

from servelab.cli.output import (
    JSON,
    MARKDOWN,
    BriefOpt,
    HardwareFileOpt,
    JsonOpt,
    MarkdownOpt,
    WideOpt,
    pick_format,
    stdout_console,
)
from servelab.cli.plan_options import (
    PROMPT_LENS_DEFAULT,
    AttentionBackendOpt,
    CacheTypeKOpt,
    CacheTypeVOpt,
    ConcurrencyOpt,
    CtxSizeOpt,
    DataParallelOpt,
    EnforceEagerOpt,
    EngineVersionOpt,
    ExpertParallelOpt,
    FlashAttnOpt,
    GpuMemoryUtilizationOpt,
    GpusPerNodeOpt,
    HardwareOptions,
    InterconnectOpt,
    KvCacheDtypeOpt,
    KvCacheMemoryBytesOpt,
    KvUnifiedOffOpt,
    KvUnifiedOnOpt,
    LlamaServerOptions,
    LoadOptions,
    MaxModelLenOpt,
    MaxNumBatchedTokensOpt,
    MaxNumSeqsOpt,
    NetworkOpt,
    NoPrefixCachingOpt,
    OutputLenOpt,
    OverheadOpt,
    ParallelOpt,
    PipelineParallelOpt,
    PlanDbOpt,
    PlanDraftTokensOpt,
    PlanEngineOpt,
    PlanHardwareOpt,
    PlanMtpAcceptanceOpt,
    PlanNoStoreOpt,
    PlanSloOpt,
    PriorsOpt,
    ProbeOpt,
    PromptLensOpt,
    RequestRateOpt,
    RequestsOpt,
    SpecMethodOpt,
    SpeculationOptions,
    StoreOptions,
    TensorParallelOpt,
    VllmOptions,
)
from servelab.cli.plan_view import SAFETENSORS_FOR_LLAMACPP, render_plan
from servelab.defaults import ENGINE_VERSION
from servelab.errors import UsageError
from servelab.units import GIB

if TYPE_CHECKING:  # loaded only when a command runs (fast --help)
    from servelab.cli.published_view import Published
    from servelab.plan.build import Plan
    from servelab.plan.load import BatchedError, LoadRequest, MeasuredCapacity
    from servelab.plan.request import PlanRequest

CheckpointArg = Annotated[str, typer.Argument(
    help="Local checkpoint directory, GGUF file, Hub repo id, or a recipe (.toml).")]
FitsOpt = Annotated[bool, typer.Option(
    "--fits",
    help="Only say whether it fits (exit 1 when not, with the reason), the memory left and "
    "the largest context at concurrency 1.")]
RevisionOpt = Annotated[str | None, typer.Option("--revision", help="Hub revision.")]


def plan(
    ctx: typer.Context,
    checkpoint: CheckpointArg,
    hardware: PlanHardwareOpt = None,
    hardware_file: HardwareFileOpt = None,
    probe: ProbeOpt = None,
    revision: RevisionOpt = None,
    max_model_len: MaxModelLenOpt = None,
    kv_cache_memory_bytes: KvCacheMemoryBytesOpt = None,
    gpu_memory_utilization: GpuMemoryUtilizationOpt = None,
    kv_cache_dtype: KvCacheDtypeOpt = "auto",
    engine_version: EngineVersionOpt = ENGINE_VERSION,
    prompt_lens: PromptLensOpt = PROMPT_LENS_DEFAULT,
    fits: FitsOpt = False,
    db: PlanDbOpt = None,
    no_store: PlanNoStoreOpt = False,
    priors: PriorsOpt = None,
    no_prefix_caching: NoPrefixCachingOpt = False,
    mtp_acceptance: PlanMtpAcceptanceOpt = "auto",
    draft_tokens: PlanDraftTokensOpt = 0,
    spec_method: SpecMethodOpt = "mtp",
    overhead: OverheadOpt = None,
    as_json: JsonOpt = False,
    as_markdown: MarkdownOpt = False,
    brief: BriefOpt = False,
    wide: WideOpt = False,
    tensor_parallel: TensorParallelOpt = 1,
    pipeline_parallel: PipelineParallelOpt = 1,
    data_parallel: DataParallelOpt = 1,
    expert_parallel: ExpertParallelOpt = False,
    gpus_per_node: GpusPerNodeOpt = None,
    interconnect: InterconnectOpt = None,
    network: NetworkOpt = None,
    engine: PlanEngineOpt = "auto",
    ctx_size: CtxSizeOpt = None,
    parallel: ParallelOpt = None,
    cache_type_k: CacheTypeKOpt = "f16",
    cache_type_v: CacheTypeVOpt = "f16",
    flash_attn: FlashAttnOpt = "auto",
    kv_unified_on: KvUnifiedOnOpt = False,
    kv_unified_off: KvUnifiedOffOpt = False,
    max_num_seqs: MaxNumSeqsOpt = None,
    enforce_eager: EnforceEagerOpt = False,
    attention_backend: AttentionBackendOpt = None,
    concurrency: ConcurrencyOpt = None,
    request_rate: RequestRateOpt = None,
    output_len: OutputLenOpt = 128,
    requests: RequestsOpt = None,
    max_num_batched_tokens: MaxNumBatchedTokensOpt = None,
    slo: PlanSloOpt = None,
) -> None:
    """Plan memory, the KV pool and predicted speed for CHECKPOINT on a hardware profile.

    The answer comes first (fits or not, the KV pool, decode and prefill, what to do next;
    --brief prints only that), the details after it. The KV pool follows vLLM's
    arithmetic, or llama.cpp's for a GGUF file (--engine llamacpp; -c/-np/-ctk/-ctv/-fa/
    --kv-unified as llama-server's flags). A recipe is
    planned as `servelab run` plans it: its model, its engine and that engine's flags.

    With -tp/-pp/-dp the plan is per GPU of HARDWARE: weights sharded as vLLM shards them,
    each rank's KV pool, and decode with its communication term.

    A start-up refusal the plan foresees (a hybrid model's mamba cache
    blocks below max_num_seqs) is printed as a warning with its fix.
    One line gives the largest step vLLM captures a CUDA graph for
    (longer prefills run without graphs).

    --json prints one document of schema servelab.plan/1; --markdown the plan as Markdown.
    """
    run_plan(ctx.params)


def run_plan(params: Mapping[str, Any]) -> None:
    """``servelab plan`` with its parsed options: a recipe planned as ``run`` plans it, else
    the checkpoint planned as the options say; printed, and ``--fits`` answered in the exit
    status."""
    fmt = pick_format(params["as_json"], False, params["as_markdown"], offered=(JSON, MARKDOWN))
    load_opts = LoadOptions.of(params)
    load = load_opts.request()
    llama, vllm = LlamaServerOptions.of(params), VllmOptions.of(params)
    llama.check()
    vllm.check()
    checkpoint = params["checkpoint"]
    hw_opts, store = HardwareOptions.of(params), StoreOptions.of(params)
    if checkpoint.endswith(".toml"):
        if given := [k for k, v in {**vllm.given(), **llama.given()}.items() if v]:
            raise UsageError(f"{', '.join(given)}: a recipe sets its engine's flags in "
                             "[engine.flags]", path=checkpoint)
        result = _plan_recipe(Path(checkpoint), hw_opts, store)
    else:
        request = plan_request(checkpoint, params["engine"], hw_opts, vllm, llama, load_opts,
                               SpeculationOptions.of(params), store, params["revision"])
        result = _plan_flags(request)
    from servelab.cli.published_view import published_for_plan

    published = published_for_plan(checkpoint, result.hardware.name,
                                   recipe=checkpoint.endswith(".toml"))
    _print_plan(result, fmt, PlanView(params["fits"], params["brief"], params["wide"],
                                      checkpoint if checkpoint.endswith(".toml") else None,
                                      published),
                load, _evidence(result, load, store))
    if params["fits"] and not result.fits and not checkpoint.endswith(".toml"):
        raise typer.Exit(1)  # --fits answers in its exit status too


def plan_request(checkpoint: str, engine: str, hw_opts: HardwareOptions, vllm: VllmOptions,
                 llama: LlamaServerOptions, load: LoadOptions, spec: SpeculationOptions,
                 store: StoreOptions, revision: str | None) -> PlanRequest:
    """The plan request ``servelab plan``'s options make for ``checkpoint``."""
    from servelab.plan.request import PlanRequest

    hw = hw_opts.profile("dgx-spark")  # looked up once
    engine_name = "llamacpp" if _use_llamacpp(engine, checkpoint) else "vllm"
    if engine_name == "llamacpp" and (given := [k for k, v in vllm.given().items() if v]):
        raise UsageError(f"{', '.join(given)}: vLLM's flags; a llama.cpp plan takes -c, -np, "
                         "-ctk, -ctv, -fa and --kv-unified")
    if engine_name == "vllm" and (given := [k for k, v in llama.given().items() if v]):
        raise UsageError(f"{', '.join(given)}: llama.cpp's flags, and this is a vLLM plan (the "
                         "checkpoint is not a GGUF file); vLLM takes --max-model-len, "
                         "--max-num-seqs and --kv-cache-dtype, or give --engine llamacpp",
                         path=checkpoint)
    topology = hw_opts.topology(hw)
    return PlanRequest.from_flags(
        checkpoint, hw, topology, engine=engine_name, engine_version=vllm.engine_version,
        knobs=vllm.knobs(), engine_flags=llama.flags() if engine_name == "llamacpp" else None,
        prompt_lens=load.lens(), revision=revision, speculation=spec.speculation(),
        store=store.choice(),
    )


def _plan_flags(request: PlanRequest) -> Plan:
    """A checkpoint planned; a safetensors checkpoint planned for llama.cpp says what it
    stands for."""
    from servelab.pipeline.planning import plan_checkpoint

    result = plan_checkpoint(request)
    if request.engine == "llamacpp" and not result.weights.scheme.startswith("gguf-"):
        result = replace(result, notes=(*result.notes, SAFETENSORS_FOR_LLAMACPP))
    if request.engine == "vllm" and not result.fits:
        from servelab.pipeline.wayin import way_in

        result = replace(result, notes=(*way_in(request, result, plan_checkpoint),
                                        *result.notes))
    return result


def _use_llamacpp(engine: str, checkpoint: str) -> bool:
    """Whether ``plan`` follows llama.cpp's KV arithmetic (``auto``: for a GGUF file)."""
    from servelab.checkpoint.sources import gguf_file

    if engine not in ("auto", "vllm", "llamacpp"):
        raise UsageError(f"--engine {engine!r}: choose auto, vllm or llamacpp")
    if engine == "auto":  # a GGUF file, or a folder holding one and no safetensors
        return gguf_file(Path(checkpoint)) is not None
    return engine == "llamacpp"


def _plan_recipe(path: Path, hw_opts: HardwareOptions, store: StoreOptions) -> Plan:
    """A recipe planned as ``servelab run`` plans it: its model, engine and flags."""
    from servelab.evidence.stored import store_exists
    from servelab.pipeline.run import plan_recipe
    from servelab.serve.recipe import load_recipe
    from servelab.serve.resolved import DEFAULT_HARDWARE, resolve_recipe
    from servelab.store.db import open_store

    rec = load_recipe(path)
    hw = hw_opts.profile(rec.hardware or DEFAULT_HARDWARE)
    resolved = resolve_recipe(rec, require_engine=False, hardware=hw)
    if store.no_store or not store_exists(store.db):
        return plan_recipe(resolved, None, store.priors)
    with open_store(store.db) as db:
        return plan_recipe(resolved, db, store.priors)


def _evidence(plan: Plan, load: LoadRequest | None, store: StoreOptions
              ) -> tuple[BatchedError | None, list[MeasuredCapacity], str | None]:
    """What the store says about ``plan`` under load (the batched form's held-out error,
    measured SLO capacities of its checkpoint), when a load prediction was asked for."""
    from servelab.evidence.stored import load_evidence, stored_runs

    if load is None or not load.wanted or store.no_store:
        return None, [], None
    return load_evidence(stored_runs(store.db, None, sweeps=True), plan, store.priors)


@dataclass(frozen=True)
class PlanView:
    """How ``plan`` prints in a terminal: ``--fits``, ``--brief``, ``--wide``, and the recipe
    it was given (the next step names it)."""

    fits: bool = False
    brief: bool = False
    wide: bool = False
    recipe: str | None = None
    published: Published | None = None
    """What was published for the very build on this hardware (shown beside the plan)."""


def _print_plan(result: Plan, fmt: str, view: PlanView, load: LoadRequest | None = None,
                evidence: tuple[BatchedError | None, list[MeasuredCapacity], str | None] = (
                    None, [], None)
                ) -> None:
    from servelab.cli.published_view import markdown_lines
    from servelab.cli.screen import Screen
    from servelab.plan.load import answer
    from servelab.plan.markdown import plan_markdown

    ans = answer(result, load, *evidence) if load is not None and load.wanted else None
    pub = view.published.lines() if view.published else []
    if fmt == JSON:
        doc = result.to_dict()
        if ans is not None:
            doc["load"] = ans.to_dict()
        if pub and view.published:  # present only where a published row matched
            doc["published"] = view.published.to_dict()
        typer.echo(json.dumps(doc, indent=2))
    elif fmt == MARKDOWN:
        typer.echo(plan_markdown(result), nl=False)
        if view.published:
            typer.echo("\n".join(markdown_lines(view.published)), nl=False)
    else:
        render_plan(result, Screen(wide=view.wide), fits_only=view.fits, brief=view.brief,
                    wide=view.wide, load=ans, recipe=view.recipe, published=pub)


def explain(
    a: str = typer.Argument(..., help="First build: checkpoint directory or Hub repo id."),
    b: str = typer.Argument(..., help="Second build: checkpoint directory or Hub repo id."),
    hardware: str = typer.Option("dgx-spark", "--hardware", "-H", help="Hardware profile name."),
    hardware_file: HardwareFileOpt = None,
    probe: Annotated[
        Path | None, typer.Option("--probe", help="Probe JSON with measured ceilings.")
    ] = None,
    context_len: int = typer.Option(2048, "--context-len", help="Context length to compare at."),
    engine_version: str = typer.Option(ENGINE_VERSION, "--engine-version", help="vLLM version."),
    db: Annotated[
        str | None,
        typer.Option("--db", help="Results database whose runs calibrate the prediction."),
    ] = None,
    no_store: bool = typer.Option(False, "--no-store", help="Predict from the shipped priors."),
    as_json: JsonOpt = False,
    as_markdown: MarkdownOpt = False,
) -> None:
    """Explain why two builds decode at different (predicted) speeds: bytes vs kernels.

    --json prints the explanation as one document, marked "predicted": true; --markdown as Markdown.
    """
    from servelab.hardware.topology import topology_for
    from servelab.pipeline.planning import plan_checkpoint
    from servelab.plan.explain import explain as explain_builds
    from servelab.plan.markdown import explain_markdown
    from servelab.plan.request import PlanRequest, StoreChoice
    from servelab.sizing.knobs import EngineKnobs

    fmt = pick_format(as_json, False, as_markdown, offered=(JSON, MARKDOWN))
    hw = HardwareOptions(hardware, hardware_file, probe).profile(hardware)
    plans = [
        plan_checkpoint(PlanRequest.from_flags(
            x, hw, topology_for(hw.name), engine_version=engine_version,
            knobs=EngineKnobs(max_model_len=max(context_len, 1)), prompt_lens=(context_len,),
            store=StoreChoice(db, not no_store),
        ))
        for x in (a, b)
    ]
    e = explain_builds(plans[0], plans[1])
    if fmt == JSON:
        typer.echo(json.dumps(e.to_dict(), indent=2))
    elif fmt == MARKDOWN:
        typer.echo(explain_markdown(e), nl=False)
    else:
        console = stdout_console()
        t = Table(
            title=f"A vs B on {e.hardware} at {e.context_len:,} tokens (predicted)",
            title_justify="left",
        )
        for c in ("", "A", "B"):
            t.add_column(c)
        t.add_row("build", e.a.name, e.b.name)
        t.add_row("scheme", e.a.scheme, e.b.scheme)
        t.add_row("kernel path", e.a.kernel_path, e.b.kernel_path)
        t.add_row("bytes/token", _gib(e.a.bytes_per_token), _gib(e.b.bytes_per_token))
        t.add_row(
            "decode tok/s (predicted)", f"{e.a.predicted_tok_s:,.1f}", f"{e.b.predicted_tok_s:,.1f}"
        )
        console.print(t)
        for line in e.lines:
            console.print(line)


def _gib(n: float) -> str:
    return f"{n / GIB:,.3f} GiB"


def register(app: typer.Typer) -> None:
    """Attach ``plan`` and ``explain`` to the root app."""
    app.command("plan")(plan)
    app.command("explain")(explain)
