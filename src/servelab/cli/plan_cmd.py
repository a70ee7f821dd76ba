"""``servelab plan CHECKPOINT`` and ``servelab explain A B``: memory, KV pool, speed."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from servelab.cli.output import (
    JSON,
    MARKDOWN,
    HardwareFileOpt,
    JsonOpt,
    MarkdownOpt,
    pick_format,
    stdout_console,
)
from servelab.defaults import ENGINE_VERSION, prompt_lens_text
from servelab.errors import UsageError
from servelab.plan.layout import ParallelLayout
from servelab.plan.parallel import LINKS, topology_for
from servelab.units import format_bytes as human_bytes
from servelab.units import parse_float_list, parse_int_list, parse_size

if TYPE_CHECKING:  # loaded only when a command runs (fast --help)
    from servelab.forecast.build import Plan
    from servelab.forecast.load import BatchedError, LoadRequest, MeasuredCapacity
    from servelab.hardware.profiles import HardwareProfile
    from servelab.plan.kvseam import KvArithmetic
    from servelab.predict.levels import Fit

GIB = 1 << 30


def parse_bytes(text: str) -> int:
    """``6GiB`` / ``6G`` / ``6442450944`` -> bytes (the one size parser, as in recipes)."""
    try:
        return parse_size(text)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def parse_list(text: str, kind: type[int] | type[float], what: str) -> list[int] | list[float]:
    """``512,2048,8192`` -> [512, 2048, 8192]."""
    try:
        return parse_int_list(text, what) if kind is int else parse_float_list(text, what)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def _gib(n: float, nd: int = 2) -> str:
    return f"{n / GIB:,.{nd}f} GiB"


def _hardware(name: str, files: Sequence[Path], probe: Path | None) -> HardwareProfile:
    from servelab.hardware.lookup import get_profile
    from servelab.hardware.probe import load_probe
    from servelab.hardware.profiles import with_probe

    hw = get_profile(name, files=files)
    if probe is not None:
        try:
            data = json.loads(probe.read_text(encoding="utf-8"))
        except FileNotFoundError as exc:
            raise UsageError("probe file not found", path=probe) from exc
        except json.JSONDecodeError as exc:
            raise UsageError(f"probe file is not JSON: {exc}", path=probe) from exc
        pr = load_probe(data)
        hw = with_probe(hw, bandwidth=pr.copy_bandwidth.best,
                        compute={k: v.best for k, v in pr.matmul.items()}, cpu_isa=pr.cpu_isa)
    return hw


#: A llama.cpp plan of a safetensors checkpoint counts the safetensors' bytes; llama.cpp serves
#: a GGUF conversion whose types set what it reads (gpt-oss-20b: 3.71 GB per token from its
#: safetensors, 2.58 GB as the MXFP4_MOE GGUF llama-bench ran at 79.7 tok/s on a DGX Spark,
#: above the safetensors' 73.6 tok/s bound; benchmarks/RESULTS.md).
SAFETENSORS_FOR_LLAMACPP = (
    "llama.cpp serves a GGUF conversion, not these safetensors: the bytes, bound and "
    "prediction above are the safetensors' tensor types; a "
    "GGUF of another type reads less or more per token. Plan the GGUF file for its own."
)

def fit_line(kind: str, fit: Fit | None) -> str:
    """One line naming where a prediction comes from, or, without one, what is missing (the
    fit says, naming the priors table the plan used: :meth:`~servelab.predict.priors.
    PriorTable.lacks`)."""
    if fit is None:
        return f"{kind}: not calibrated: roofline bound only"
    if fit.is_roofline:
        return f"{kind}: {fit.missing or 'no stored run or prior'}: roofline bound only"
    if fit.refused:
        return f"{kind}: {fit.refused}; roofline bound only (fit from {fit.source})"
    if fit.rel_error is None:  # a fit, but nothing to tell how far it carries
        return f"{kind}: no prediction ({fit.error_basis}); fitted from {fit.source}"
    return f"{kind} predicted from {fit.label()}"


def render_plan(plan: Plan, console: Console, *, fits_only: bool = False) -> None:
    """Rich tables for a plan; speeds are labelled predicted."""
    mem = plan.memory
    hw = plan.hardware
    console.print(
        f"[bold]{plan.checkpoint}[/] on [bold]{hw.name}[/] ({hw.description}); "
        f"{plan.rules_label}"
    )
    fit = plan.fits
    lay = plan.layout
    per_gpu = "" if lay.is_single else f" per GPU ({lay.label()}, {lay.world_size} GPUs)"
    mt = Table(title="Memory" + per_gpu, title_justify="left")
    for c in ("item", "size", "source"):
        mt.add_column(c, justify="right" if c == "size" else "left")
    mt.add_row(
        "weights (resident)",
        human_bytes(mem.weights_bytes),
        plan.weights.source
        + ("" if lay.is_single else f"; fullest GPU of {human_bytes(plan.weights.resident_bytes)}"),
    )
    mt.add_row("KV cache" if plan.llamacpp_kv else "KV pool", _gib(mem.kv_pool_bytes),
               mem.kv_pool_source)
    mt.add_row("overhead", _gib(mem.overhead_bytes), mem.overhead_source)
    mt.add_row(
        "total",
        _gib(mem.total_bytes),
        f"budget {_gib(mem.budget_bytes)} of "
        f"{_gib(mem.memory_bytes)}{' unified' if mem.unified else ''}",
    )
    console.print(mt)
    sentence = plan.fit_sentence()
    if not lay.is_single:
        sentence = sentence.replace("fits:", "fits per GPU:", 1)
    console.print(escape(sentence), soft_wrap=True, style=None if fit else "bold")
    for finding in plan.findings:
        console.print(f"[bold yellow]warning:[/] {escape(finding.line)}", soft_wrap=True)
    if plan.graph_capture is not None:
        console.print(escape(plan.graph_capture.line), soft_wrap=True)
    if fits_only:
        return
    if not lay.is_single:
        _render_parallel(plan, console)
    console.print(_kv_table(plan))
    _render_speed(plan, console)


def _kv_table(plan: Plan) -> Table:
    """The KV table: vLLM's pool or llama.cpp's cache, labelled by the engine."""
    kt = Table(
        title=f"KV {'cache' if plan.llamacpp_kv else 'pool'} ({plan.kv_arithmetic} arithmetic)",
        title_justify="left", show_header=False,
    )
    kt.add_column(style="bold")
    kt.add_column()
    if plan.llamacpp_kv is not None:
        for label, value in plan.llamacpp_kv.rows():
            kt.add_row(label, value)
        return kt
    kv = plan.kv
    assert kv is not None
    kt.add_row("engine log (predicted)", kv.log_line)
    kt.add_row(
        "block size",
        f"{kv.block_size} tokens"
        + (" (raised to hold a mamba page)" if kv.block_size_was_aligned else ""),
    )
    if kv.mamba_page_bytes:
        pad = f", padded {kv.mamba_padding_pct:.2f}%" if kv.mamba_padding_pct is not None else ""
        kt.add_row(
            "state page",
            f"{kv.mamba_page_bytes:,} bytes{pad}; mode "
            f"{kv.mamba_cache_mode}, SSM dtype {kv.mamba_ssm_dtype}",
        )
    kt.add_row("groups", f"{len(kv.groups)}; {kv.padding_layers} padding layer(s)")
    for kind in kv.group_kinds():
        kt.add_row(f"  {kind.label}", kind.text())
    kt.add_row(
        "pool",
        f"{kv.num_blocks:,} blocks × {kv.bytes_per_block:,} bytes; "
        f"{kv.blocks_per_request} blocks per {kv.max_model_len:,}-token request",
    )
    kt.add_row("rule", kv.rule + ("" if kv.verified_rule else " (unverified for this version)"))
    for note in kv.notes:
        kt.add_row("note", note)
    return kt


def _render_speed(plan: Plan, console: Console) -> None:
    """Decode, prefill and speculative decode tables, then the plan's notes."""
    from servelab.forecast.markdown import interval_text
    from servelab.predict.spec import draft_line

    sp = plan.speed
    # one prediction per quantity: under a parallel layout this table is one GPU's (the
    # calibrated prediction), the layout's replica has its own table, a bound (issue 30)
    one_gpu = "" if plan.layout.is_single else " on one GPU, no parallelism"
    dt = Table(title=f"Decode, single stream{one_gpu} (predicted)", title_justify="left")
    for c in (
        "context",
        "weights",
        "KV read",
        "state r+w",
        "roofline (bound)",
        "predicted tok/s (interval)",
    ):
        dt.add_column(c, justify="right")
    for d in sp.decode:
        cal = interval_text(d.predicted_tok_s, d.predicted_low, d.predicted_high, 1)
        dt.add_row(
            f"{d.context_len:,}",
            human_bytes(d.weight_bytes),
            human_bytes(d.kv_bytes),
            human_bytes(d.state_bytes),
            f"{d.roofline_tok_s:,.1f}",
            cal,
        )
    console.print(dt)
    console.print(f"bandwidth {sp.bandwidth / 1e9:,.0f} GB/s ({sp.bandwidth_source})")
    console.print(escape(fit_line("decode", sp.decode_fit)))
    if sp.prefill:
        pt = Table(
            title=f"Prefill (predicted; {sp.kernel_path.name}, {sp.compute_precision})",
            title_justify="left",
        )
        for c in ("prompt", "bound", "roofline tok/s", "predicted tok/s (interval)", "waits on"):
            pt.add_column(c, justify="right")
        for p in sp.prefill:
            cal = interval_text(p.predicted_tok_s, p.predicted_low, p.predicted_high, 0)
            pt.add_row(
                f"{p.prompt_len:,}", p.bound, f"{p.roofline_tok_s:,.0f}", cal, p.waits_on or "–"
            )
        console.print(pt)
        console.print(escape(fit_line("prefill", sp.prefill_fit)))
    if sp.mtp:
        st = Table(title="Speculative decode (predicted)", title_justify="left")
        for c in ("acceptance length", "drafts", "step bytes", "roofline", "tok/s (interval)",
                  "speed-up"):
            st.add_column(c, justify="right")
        for m in sp.mtp:
            st.add_row(
                f"{m.acceptance_length:.2f}",
                str(m.draft_tokens),
                human_bytes(m.step_bytes),
                f"{m.roofline_tok_s:,.1f}",
                interval_text(m.predicted_tok_s, m.predicted_low, m.predicted_high, 1),
                f"{m.speedup:.2f}x" if m.speedup is not None else "-",
            )
        console.print(st)
        console.print(draft_line(sp.mtp[0]))
    if plan.speculative is not None:
        console.print(plan.speculative.line)
    # a kind's fit line above already says why it is the roofline alone or refused; the
    # calibration's note saying it again (kept for JSON and pages) is not printed twice
    shown = [("decode", sp.decode_fit)] + ([("prefill", sp.prefill_fit)] if sp.prefill else [])
    said = {fit.note(kind) for kind, fit in shown if fit is not None}
    for n in (*plan.notes, *sp.notes):
        if n not in said:
            console.print(f"[yellow]note:[/] {n}")


def _render_parallel(plan: Plan, console: Console) -> None:
    """Per-stage weights, KV heads per rank, and decode with its communication term."""
    kv, lay = plan.kv, plan.layout
    assert kv is not None  # a parallel layout is a vLLM plan
    t = Table(title=f"Parallel layout {lay.label()}", title_justify="left", show_header=False)
    t.add_column(style="bold")
    t.add_column()
    replicas = f"{lay.data} replica{'s' if lay.data != 1 else ''}"
    t.add_row("GPUs", f"{lay.world_size} ({lay.gpus_per_replica} per replica, {replicas})")
    for i, ((lo, hi), w) in enumerate(
        zip(kv.stage_layers, plan.gpu_weights.per_stage, strict=True)
    ):
        t.add_row(f"stage {i}", f"layers {lo}-{hi - 1}: {human_bytes(w)} weights per GPU")
    if kv.kv_heads_per_rank:
        t.add_row(
            "KV heads per rank",
            f"{kv.kv_heads_per_rank}"
            + (" (replicated: TP exceeds the KV head count)" if kv.kv_heads_replicated else ""),
        )
    t.add_row("KV tokens, all replicas", f"{kv.tokens_all_replicas:,}")
    topo = plan.topology
    t.add_row(
        "links (estimate)",
        f"{topo.intra_node.description} within a node of {topo.gpus_per_node}, "
        f"{topo.inter_node.description} between nodes",
    )
    console.print(t)
    dt = Table(
        title=f"Decode, one replica of {lay.label()}: a bound, not a prediction (peak "
        "bandwidth per rank + estimated communication)",
        title_justify="left",
    )
    for c in ("context", "memory term", "communication term", "bound tok/s", "per GPU"):
        dt.add_column(c, justify="right")
    for d in plan.parallel_decode:
        comm = d.comm_label()
        dt.add_row(
            f"{d.context_len:,}",
            f"{d.memory_s * 1e3:.3f} ms",
            comm,
            f"{d.tok_s:,.1f}",
            f"{d.tok_s_per_gpu:,.1f}",
        )
    console.print(dt)


def _use_llamacpp(engine: str, checkpoint: str) -> bool:
    """Whether ``plan`` follows llama.cpp's KV arithmetic (``auto``: for a GGUF file)."""
    from servelab.checkpoint.sources import gguf_file

    if engine not in ("auto", "vllm", "llamacpp"):
        raise UsageError(f"--engine {engine!r}: choose auto, vllm or llamacpp")
    if engine == "auto":  # a GGUF file, or a folder holding one and no safetensors
        return gguf_file(Path(checkpoint)) is not None
    return engine == "llamacpp"


def layout_options(tp: int, pp: int, dp: int, ep: bool) -> ParallelLayout:
    """The CLI's parallel options as the one layout value plan and recipes share."""
    return ParallelLayout(tensor=tp, pipeline=pp, data=dp, expert=ep)


def plan(
    checkpoint: str = typer.Argument(
        ..., help="Local checkpoint directory, GGUF file, Hub repo id, or a recipe (.toml)."
    ),
    hardware: str | None = typer.Option(
        None, "--hardware", "-H",
        help="Hardware profile name (servelab hardware list; default: a recipe's, else "
        "dgx-spark).",
    ),
    hardware_file: HardwareFileOpt = None,
    probe: Annotated[
        Path | None,
        typer.Option(
            "--probe",
            help="Probe JSON (servelab hardware probe --json) whose "
            "measured ceilings replace the published ones.",
        ),
    ] = None,
    revision: str | None = typer.Option(None, "--revision", help="Hub revision."),
    max_model_len: int | None = typer.Option(
        None,
        "--max-model-len",
        help="vLLM --max-model-len (default: the model's max_position_embeddings).",
    ),
    kv_cache_memory_bytes: str | None = typer.Option(
        None,
        "--kv-cache-memory-bytes",
        help="vLLM --kv-cache-memory-bytes: a fixed pool, e.g. 6GiB or 6442450944.",
    ),
    gpu_memory_utilization: float = typer.Option(
        0.9,
        "--gpu-memory-utilization",
        help="vLLM --gpu-memory-utilization (ignored by vLLM when --kv-cache-memory-bytes is set).",
    ),
    kv_cache_dtype: str = typer.Option(
        "auto", "--kv-cache-dtype", help="vLLM --kv-cache-dtype (auto, fp8, bfloat16, …)."
    ),
    engine_version: str = typer.Option(
        ENGINE_VERSION, "--engine-version", help="vLLM version whose arithmetic to follow."
    ),
    prompt_lens: str = typer.Option(
        prompt_lens_text(),
        "--prompt-lens",
        help="Comma-separated context/prompt lengths to predict.",
    ),
    fits: bool = typer.Option(
        False,
        "--fits",
        help="Only say whether it fits (exit 1 when not, with the reason), the memory left "
        "and the largest context at concurrency 1.",
    ),
    db: Annotated[
        str | None,
        typer.Option(
            "--db",
            help="Results database whose runs calibrate the prediction (default: $SERVELAB_DB, "
            "else the data directory's results.db when it exists).",
        ),
    ] = None,
    no_store: bool = typer.Option(
        False, "--no-store", help="Ignore stored runs: predict from the shipped priors alone."
    ),
    priors: Annotated[
        Path | None,
        typer.Option("--priors", help="A priors table (TOML) to use instead of the shipped one."),
    ] = None,
    no_prefix_caching: bool = typer.Option(
        False, "--no-enable-prefix-caching", help="As vLLM's flag (changes hybrid state blocks)."
    ),
    mtp_acceptance: str = typer.Option(
        "auto",
        "--mtp-acceptance",
        help="Mean acceptance lengths to predict speculative decode at (needs --draft-tokens): "
        "auto = measured by stored runs of this checkpoint with the same --spec-method and "
        "--draft-tokens (none found: no prediction), none, or lengths, e.g. 1.5,2,2.5.",
    ),
    draft_tokens: int = typer.Option(
        0, "--draft-tokens", help="Speculative tokens per step (num_speculative_tokens)."
    ),
    spec_method: str = typer.Option(
        "mtp", "--spec-method",
        help="vLLM speculative method whose measured acceptance auto looks up (mtp, ngram, "
        "eagle, ...).",
    ),
    overhead: str | None = typer.Option(
        None, "--overhead", help="Runtime overhead to budget (default 2GiB estimate)."
    ),
    as_json: JsonOpt = False,
    as_markdown: MarkdownOpt = False,
    tensor_parallel: int = typer.Option(
        1, "--tensor-parallel-size", "-tp", help="vLLM --tensor-parallel-size (GPUs per stage)."
    ),
    pipeline_parallel: int = typer.Option(
        1, "--pipeline-parallel-size", "-pp", help="vLLM --pipeline-parallel-size (stages)."
    ),
    data_parallel: int = typer.Option(
        1, "--data-parallel-size", "-dp", help="vLLM --data-parallel-size (replicas)."
    ),
    expert_parallel: bool = typer.Option(
        False, "--enable-expert-parallel", help="vLLM's EP: routed experts split over TP x DP."
    ),
    gpus_per_node: int | None = typer.Option(
        None, "--gpus-per-node", help="GPUs joined by the fast link (default by hardware)."
    ),
    interconnect: str | None = typer.Option(
        None, "--interconnect", help=f"Link within a node: {', '.join(LINKS)}."
    ),
    network: str | None = typer.Option(
        None, "--network", help=f"Link between nodes: {', '.join(LINKS)}."
    ),
    engine: str = typer.Option(
        "auto", "--engine",
        help="Whose KV arithmetic: vllm, llamacpp, or auto (llamacpp for a .gguf file).",
    ),
    ctx_size: int | None = typer.Option(
        None, "--ctx-size", "-c",
        help="llama.cpp -c: KV cells in all (default: the training context per stream).",
    ),
    parallel: int | None = typer.Option(
        None, "--parallel", "-np", help="llama.cpp -np: server slots (default: auto, 4 unified)."
    ),
    cache_type_k: str = typer.Option(
        "f16", "--cache-type-k", "-ctk", help="llama.cpp -ctk: K cache type (f16, q8_0, ...)."
    ),
    cache_type_v: str = typer.Option(
        "f16", "--cache-type-v", "-ctv", help="llama.cpp -ctv: V cache type (f16, q8_0, ...)."
    ),
    flash_attn: str = typer.Option(
        "auto", "--flash-attn", "-fa", help="llama.cpp -fa: on, off or auto."
    ),
    # Two plain flags, not "--kv-unified/--no-kv-unified": the pair would widen the help's
    # short-name column until option names are cut at 80 columns.
    kv_unified_on: bool = typer.Option(
        False, "--kv-unified", help="llama.cpp -kvu: one KV stream shared by all slots."
    ),
    kv_unified_off: bool = typer.Option(
        False, "--no-kv-unified", help="llama.cpp --no-kv-unified: one KV stream per slot."
    ),
    max_num_seqs: int | None = typer.Option(
        None, "--max-num-seqs",
        help="vLLM --max-num-seqs (default: vLLM's for the hardware: 1024 on a GPU with "
        ">= 70 GiB, else 256; on CPU 128 per rank); checked against a hybrid's mamba blocks.",
    ),
    enforce_eager: bool = typer.Option(
        False, "--enforce-eager", help="vLLM --enforce-eager: no CUDA graphs."
    ),
    attention_backend: str | None = typer.Option(
        None, "--attention-backend",
        help="vLLM --attention-backend (default: the one vLLM picks; on a CPU by its "
        "features, e.g. AMX_MLA where it has AMX tiles, else CPU_MLA).",
    ),
    concurrency: str | None = typer.Option(
        None, "--concurrency",
        help="Predict serving under load at these closed-loop concurrencies, e.g. 1,4,16,64: "
        "TPOT, TTFT, tok/s per stream and per GPU (at each --prompt-lens).",
    ),
    request_rate: str | None = typer.Option(
        None, "--request-rate", help="Predict under load at these constant request rates (req/s)."
    ),
    output_len: int = typer.Option(
        128, "--output-len", help="Output tokens per request under load."
    ),
    requests: int | None = typer.Option(
        None, "--requests",
        help="Requests per load point (default: as servelab bench, max(3, 2 x concurrency)).",
    ),
    max_num_batched_tokens: int | None = typer.Option(
        None, "--max-num-batched-tokens",
        help="vLLM --max-num-batched-tokens, the step's token budget (default: vLLM's).",
    ),
    slo: str | None = typer.Option(
        None, "--slo",
        help="Predict the highest load meeting this SLO, capacity's syntax "
        "(ttft_p99=500,tpot_p50=40), per prompt length.",
    ),
) -> None:
    """Plan memory, the KV pool and predicted speed for CHECKPOINT on a hardware profile.

    The KV pool follows vLLM's arithmetic, or llama.cpp's for a GGUF file (--engine
    llamacpp; -c/-np/-ctk/-ctv/-fa/--kv-unified as llama-server's flags). A recipe is
    planned as `servelab run` plans it: its model, its engine and that engine's flags.

    With -tp/-pp/-dp the plan is per GPU of HARDWARE: weights sharded as vLLM shards them,
    each rank's KV pool, and decode with its communication term.

    A start-up refusal the plan foresees (a hybrid model's mamba cache
    blocks below max_num_seqs) is printed as a warning with its fix.
    One line gives the largest step vLLM captures a CUDA graph for
    (longer prefills run without graphs).

    --json prints one document of schema servelab.plan/1; --markdown the plan as Markdown.
    """
    from servelab.cli.load_view import parse_request
    from servelab.pipeline.planning import plan_checkpoint
    from servelab.plan.request import EngineKnobs, PlanRequest, Speculation, StoreChoice
    from servelab.plan.specsource import parse_acceptance_option
    from servelab.plan.startup import StartupOptions

    fmt = pick_format(as_json, False, as_markdown, offered=(JSON, MARKDOWN))
    lens = [int(x) for x in parse_list(prompt_lens, int, "--prompt-lens")]
    load = parse_request(
        lens, output_len,
        [int(x) for x in parse_list(concurrency, int, "--concurrency")] if concurrency else [],
        [float(x) for x in parse_list(request_rate, float, "--request-rate")]
        if request_rate else [],
        requests, max_num_batched_tokens, slo,
    )
    if kv_unified_on and kv_unified_off:
        raise UsageError("--kv-unified and --no-kv-unified exclude each other")
    # checked here, not with min=1: Typer would print "<int range> [x>=1]" as the metavar and
    # widen the help's metavar column until option names are cut at 80 columns
    if max_num_seqs is not None and max_num_seqs < 1:
        raise UsageError(f"--max-num-seqs must be at least 1, got {max_num_seqs}")
    layout = layout_options(tensor_parallel, pipeline_parallel, data_parallel, expert_parallel)
    vllm_only = {
        "--max-model-len": max_model_len is not None,
        "--kv-cache-memory-bytes": kv_cache_memory_bytes is not None,
        "--kv-cache-dtype": kv_cache_dtype != "auto",
        "-tp/-pp/-dp/--enable-expert-parallel": not layout.is_single or expert_parallel,
        "--max-num-seqs": max_num_seqs is not None,
        "--enforce-eager": enforce_eager,
        "--attention-backend": attention_backend is not None,
    }
    llamacpp = LlamaCppFlags(ctx_size, parallel, cache_type_k, cache_type_v, flash_attn,
                             True if kv_unified_on else False if kv_unified_off else None)
    if checkpoint.endswith(".toml"):
        if given := [k for k, v in {**vllm_only, **llamacpp.given()}.items() if v]:
            raise UsageError(f"{', '.join(given)}: a recipe sets its engine's flags in "
                             "[engine.flags]", path=checkpoint)
        planned = _plan_recipe(Path(checkpoint), hardware, hardware_file or [], probe, db,
                               no_store, priors)
        _print_plan(planned, fmt, fits, load, _evidence(planned, load, db, not no_store,
                                                        priors))
        return
    hw = _hardware(hardware or "dgx-spark", hardware_file or [], probe)  # looked up once
    engine_name = "llamacpp" if _use_llamacpp(engine, checkpoint) else "vllm"
    if engine_name == "llamacpp" and (given := [k for k, v in vllm_only.items() if v]):
        raise UsageError(f"{', '.join(given)}: vLLM's flags; a llama.cpp plan takes -c, -np, "
                         "-ctk, -ctv, -fa and --kv-unified")
    if engine_name == "vllm" and (given := [k for k, v in llamacpp.given().items() if v]):
        raise UsageError(f"{', '.join(given)}: llama.cpp's flags, and this is a vLLM plan (the "
                         "checkpoint is not a GGUF file); vLLM takes --max-model-len, "
                         "--max-num-seqs and --kv-cache-dtype, or give --engine llamacpp",
                         path=checkpoint)
    arithmetic, version = llamacpp.arithmetic(engine_name, engine_version)
    request = PlanRequest(
        checkpoint=checkpoint,
        hardware=hw,
        topology=topology_for(hw.name, intra_node=interconnect, inter_node=network,
                              gpus_per_node=gpus_per_node),
        kv_arithmetic=arithmetic,
        engine=engine_name,
        engine_version=version,
        layout=layout,
        knobs=EngineKnobs(
            max_model_len=max_model_len,
            kv_cache_memory_bytes=parse_bytes(kv_cache_memory_bytes)
            if kv_cache_memory_bytes else None,
            gpu_memory_utilization=gpu_memory_utilization,
            kv_cache_dtype=kv_cache_dtype,
            enable_prefix_caching=not no_prefix_caching,
            overhead_bytes=parse_bytes(overhead) if overhead else None,
            startup=StartupOptions(max_num_seqs=max_num_seqs, enforce_eager=enforce_eager,
                                   max_num_batched_tokens=max_num_batched_tokens),
            attention_backend=attention_backend,
        ),
        prompt_lens=tuple(lens),
        revision=revision,
        speculation=Speculation(parse_acceptance_option(mtp_acceptance), spec_method,
                                draft_tokens),
        store=StoreChoice(db, not no_store, priors),
    )
    result = plan_checkpoint(request)
    if engine_name == "llamacpp" and not result.weights.scheme.startswith("gguf-"):
        result = replace(result, notes=(*result.notes, SAFETENSORS_FOR_LLAMACPP))
    _print_plan(result, fmt, fits, load, _evidence(result, load, db, not no_store, priors))
    if fits and not result.fits:
        raise typer.Exit(1)  # --fits answers in its exit status too


@dataclass(frozen=True)
class LlamaCppFlags:
    """llama-server's KV flags as ``plan`` takes them (``-c -np -ctk -ctv -fa -kvu``)."""

    ctx_size: int | None
    parallel: int | None
    cache_type_k: str
    cache_type_v: str
    flash_attn: str
    kv_unified: bool | None

    def given(self) -> dict[str, bool]:
        """Which flags differ from llama-server's defaults, by their short names."""
        return {
            "-c": self.ctx_size is not None, "-np": self.parallel is not None,
            "-ctk": self.cache_type_k != "f16", "-ctv": self.cache_type_v != "f16",
            "-fa": self.flash_attn != "auto", "--kv-unified": self.kv_unified is not None,
        }

    def arithmetic(self, engine: str, version: str) -> tuple[KvArithmetic, str]:
        """The KV arithmetic ``engine`` follows for these flags, and the version whose rules
        apply (llama.cpp: the pinned build, unless a version was given)."""
        from servelab.engines import get_engine
        from servelab.engines.llamacpp.build import BUILD_VERSION
        from servelab.engines.llamacpp.kv import LlamaCppKv, LlamaCppKvSettings

        if engine != "llamacpp":
            vllm = get_engine("vllm").kv_arithmetic()
            assert vllm is not None
            return vllm, version
        settings = LlamaCppKvSettings(
            ctx_size=self.ctx_size, parallel=self.parallel, kv_unified=self.kv_unified,
            cache_type_k=self.cache_type_k, cache_type_v=self.cache_type_v,
            flash_attn=self.flash_attn,
        )
        return LlamaCppKv(settings), BUILD_VERSION if version == ENGINE_VERSION else version


def _plan_recipe(path: Path, hardware: str | None, files: Sequence[Path], probe: Path | None,
                 db: str | None, no_store: bool, priors: Path | None) -> Plan:
    """A recipe planned as ``servelab run`` plans it: its model, engine and flags."""
    from servelab.pipeline.planning import store_exists
    from servelab.pipeline.run import plan_recipe
    from servelab.serve.recipe import load_recipe
    from servelab.store.db import open_store

    rec = load_recipe(path)
    hw = _hardware(hardware or rec.hardware or "host", files, probe)
    if no_store or not store_exists(db):
        return plan_recipe(rec, hw, None, priors)
    with open_store(db) as store:
        return plan_recipe(rec, hw, store, priors)


def _evidence(plan: Plan, load: LoadRequest | None, db: str | None, use_store: bool,
              priors: Path | None
              ) -> tuple[BatchedError | None, list[MeasuredCapacity], str | None]:
    """What the store says about ``plan`` under load (the batched form's held-out error,
    measured SLO capacities of its checkpoint), when a load prediction was asked for."""
    from servelab.pipeline.planning import load_evidence, stored_runs

    if load is None or not load.wanted or not use_store:
        return None, [], None
    return load_evidence(stored_runs(db, None, sweeps=True), plan, priors)


def _print_plan(result: Plan, fmt: str, fits: bool, load: LoadRequest | None = None,
                evidence: tuple[BatchedError | None, list[MeasuredCapacity], str | None] = (
                    None, [], None)
                ) -> None:
    from servelab.cli import load_view
    from servelab.forecast.load import answer
    from servelab.forecast.markdown import plan_markdown

    ans = answer(result, load, *evidence) if load is not None and load.wanted else None
    if fmt == JSON:
        doc = result.to_dict()
        if ans is not None:
            doc["load"] = ans.to_dict()
        typer.echo(json.dumps(doc, indent=2))
    elif fmt == MARKDOWN:
        typer.echo(plan_markdown(result), nl=False)
    else:
        console = stdout_console()
        render_plan(result, console, fits_only=fits)
        if ans is not None:
            load_view.render(ans, console)


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
    from servelab.forecast.explain import explain as explain_builds
    from servelab.forecast.markdown import explain_markdown
    from servelab.pipeline.planning import plan_checkpoint

    fmt = pick_format(as_json, False, as_markdown, offered=(JSON, MARKDOWN))
    hw = _hardware(hardware, hardware_file or [], probe)
    from servelab.engines import get_engine
    from servelab.plan.request import EngineKnobs, PlanRequest, StoreChoice

    arithmetic = get_engine("vllm").kv_arithmetic()
    assert arithmetic is not None
    plans = [
        plan_checkpoint(PlanRequest(
            checkpoint=x, hardware=hw, topology=topology_for(hw.name),
            kv_arithmetic=arithmetic, engine_version=engine_version,
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
        t.add_row("bytes/token", _gib(e.a.bytes_per_token, 3), _gib(e.b.bytes_per_token, 3))
        t.add_row(
            "decode tok/s (predicted)", f"{e.a.predicted_tok_s:,.1f}", f"{e.b.predicted_tok_s:,.1f}"
        )
        console.print(t)
        for line in e.lines:
            console.print(line)


def register(app: typer.Typer) -> None:
    """Attach ``plan`` and ``explain`` to the root app."""
    app.command("plan")(plan)
    app.command("explain")(explain)
