"""``servelab bench``: benchmark any OpenAI-compatible endpoint.

Thin layer: parses options, runs :func:`servelab.bench.run.run_bench` with a Rich
progress bar fed by the runner's progress callback, renders the result.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape
from rich.table import Table

from servelab.bench.spec import FIELDS
from servelab.cli.bench_options import (
    ApiKeyOpt,
    BenchArgs,
    BenchSloOpt,
    ChatTemplateKwargsOpt,
    EndpointOpt,
    ExportVllmOpt,
    FirstByteTimeoutOpt,
    MaxFailedOpt,
    ModelOpt,
    NoContinuousUsageOpt,
    NoIgnoreEosOpt,
    NoRecordOpt,
    OutOpt,
    RequestTimeoutOpt,
    StallTimeoutOpt,
    TemperatureOpt,
    TokenizerOpt,
    UrlArg,
)
from servelab.cli.failures import FIRST_BYTE_S, MAX_FAILED, STALL_S, TOTAL_S
from servelab.cli.output import CsvOpt, DbOpt, JsonOpt, MarkdownOpt, stdout_console
from servelab.cli.workload_options import workload_option

if TYPE_CHECKING:  # loaded only when a command runs (fast --help)
    pass


#: The options of ``bench`` that set the workload, one per schema field.
_W = {name: workload_option(name) for name in FIELDS}
_DEPTHS = workload_option("depths", "0")


def bench(
    ctx: typer.Context,
    url: UrlArg,
    model: ModelOpt = None,
    endpoint: EndpointOpt = "completions",
    prompt_lens: str = _W["prompt_lens"],
    output_len: int = _W["output_len"],
    concurrency: str = _W["concurrency"],
    request_rate: str | None = _W["request_rates"],
    requests: int | None = _W["requests"],
    duration: float | None = _W["duration_s"],
    warmup: int | None = _W["warmup_requests"],
    ci_target: float = _W["ci_target"],
    max_repeats: int = _W["max_repeats"],
    subtract_min_latency: bool = _W["subtract_min_latency"],
    chat_template_kwargs: ChatTemplateKwargsOpt = None,
    tokenizer: TokenizerOpt = None,
    temperature: TemperatureOpt = 0.0,
    no_ignore_eos: NoIgnoreEosOpt = False,
    no_continuous_usage: NoContinuousUsageOpt = False,
    first_byte_timeout: FirstByteTimeoutOpt = FIRST_BYTE_S,
    stall_timeout: StallTimeoutOpt = STALL_S,
    request_timeout: RequestTimeoutOpt = TOTAL_S,
    max_failed: MaxFailedOpt = MAX_FAILED,
    api_key: ApiKeyOpt = None,
    seed: int = _W["seed"],
    profile: str = _W["profile"],
    burstiness: float = _W["burstiness"],
    ramp_end_rate: float | None = _W["ramp_end_rate"],
    trace: Path | None = _W["trace"],
    shared_prefix: int = _W["shared_prefix_len"],
    prefix_groups: int = _W["prefix_groups"],
    depths: str = _DEPTHS,
    turns: int = _W["turns"],
    dataset: Path | None = _W["dataset"],
    dataset_lengths: str = _W["dataset_lengths"],
    dataset_output: str = _W["dataset_output"],
    slo: BenchSloOpt = None,
    as_json: JsonOpt = False,
    as_csv: CsvOpt = False,
    as_markdown: MarkdownOpt = False,
    out: OutOpt = None,
    no_record: NoRecordOpt = False,
    db: DbOpt = None,
    export_vllm: ExportVllmOpt = None,
) -> None:
    """Benchmark an OpenAI-compatible endpoint: TTFT, TPOT, ITL, decode/prefill tok/s, with CIs."""
    from servelab.cli.bench_run import run_bench_command

    run_bench_command(BenchArgs(**ctx.params))


def bench_import(
    path: Annotated[Path, typer.Argument(
        help="A vllm bench serve result JSON (--save-result).")],
    as_json: bool = typer.Option(False, "--json", help="Print as JSON."),
) -> None:
    """Read a vllm bench serve result and show its numbers (and servelab's, if detailed)."""
    from servelab.bench import report, vllm_compat

    vr = vllm_compat.load_vllm(path)
    mine = vr.metrics()
    keys = [k for k in vr.aggregates if k.endswith("_ms") or "throughput" in k
            or k in ("completed", "failed", "duration")]
    if as_json:
        sys.stdout.write(json.dumps({
            "path": vr.path, "vllm": {k: vr.aggregates[k] for k in keys}, "info": vr.info,
            "servelab_metrics": mine.to_json() if mine is not None else None}, indent=1) + "\n")
        return
    table = Table(title=f"vllm bench serve result · {escape(str(path))}", title_justify="left")
    table.add_column("metric")
    table.add_column("vllm", justify="right")
    for k in keys:
        table.add_row(k, report.fmt(vr.aggregates[k]))
    stdout_console().print(table)
    if mine is not None:
        stdout_console().print(
            f"servelab recomputed from {len(vr.samples)} requests: median TTFT "
            f"{report.fmt(mine.ttft_ms.median if mine.ttft_ms else None)} ms, median TPOT "
            f"{report.fmt(mine.tpot_ms.median if mine.tpot_ms else None)} ms")


def bench_translate(
    path: Annotated[Path, typer.Argument(help="A servelab bench result JSON (--out).")],
    as_json: bool = typer.Option(False, "--json", help="Print every tool's full metric set "
                                 "per point as JSON."),
) -> None:
    """Show one result under vllm bench serve's, AIPerf's and GuideLLM's metric names."""
    from servelab.bench import report, translate
    from servelab.bench.result import load

    result = load(path)
    per_point = [translate.translate(pr, model=result.model,
                                     backend=f"openai-{result.endpoint}")
                 for pr in result.points]
    if as_json:
        sys.stdout.write(json.dumps({"points": [
            {"label": pr.point.label, **t} for pr, t in zip(result.points, per_point,
                                                             strict=True)]}, indent=1) + "\n")
        return
    console = stdout_console()
    for pr, t in zip(result.points, per_point, strict=True):
        table = Table(title=f"{escape(pr.point.label)} · same timestamps, three tools' names",
                      title_justify="left")
        for title in ("quantity", "tool", "metric name", "value"):  # names never wrap
            table.add_column(title, justify="right" if title == "value" else "left",
                             no_wrap=title != "quantity")
        for concept, *paths in translate.CONCEPTS:
            for i, (tool, key) in enumerate(zip(translate.TOOLS, paths, strict=True)):
                v = translate.lookup(t[tool], key)
                table.add_row(concept if i == 0 else "", tool, escape(key), report.fmt(v),
                              end_section=i == len(paths) - 1)
        console.print(table)


def register(app: typer.Typer) -> None:
    """Attach ``bench``, ``bench-import`` and ``bench-translate`` to the root app."""
    app.command("bench")(bench)
    app.command("bench-import")(bench_import)
    app.command("bench-translate")(bench_translate)
