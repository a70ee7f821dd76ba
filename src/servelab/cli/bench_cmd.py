"""``servelab bench``: benchmark any OpenAI-compatible endpoint.

Thin layer: parses options, runs :func:`servelab.bench.run.run_bench` with a Rich
progress bar fed by the runner's progress callback, renders the result.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from servelab.cli.output import CsvOpt, JsonOpt, MarkdownOpt, pick_format
from servelab.defaults import OUTPUT_LEN, prompt_lens_text
from servelab.errors import BenchError, UsageError
from servelab.units import parse_int_list

if TYPE_CHECKING:  # loaded only when a command runs (fast --help)
    from servelab.bench.result import BenchResult
    from servelab.bench.workload import ProgressEvent


def _ints(text: str, what: str) -> tuple[int, ...]:
    try:
        return tuple(parse_int_list(text, what))
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def _emit(text: str, out: Path | None) -> None:
    if out is None:
        sys.stdout.write(text)
        return
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(out)


_TABLE_KEYS = ("prompt_len", "output_len", "concurrency", "request_rate", "completed", "failed",
               "decode_tok_s_median", "decode_tok_s_ci95", "prefill_tok_s_median",
               "ttft_ms_median", "tpot_ms_median", "output_throughput", "converged")
_TABLE_TITLES = {"decode_tok_s_median": "decode tok/s", "prefill_tok_s_median": "prefill tok/s",
                 "ttft_ms_median": "TTFT ms", "tpot_ms_median": "TPOT ms",
                 "output_throughput": "out tok/s", "decode_tok_s_ci95": "±CI95"}


def render_table(result: BenchResult, console: Console) -> None:
    """Print the result as a Rich table plus its notes."""
    from servelab.bench import report

    table = Table(title=f"servelab bench · {escape(result.model)} · {escape(result.base_url)}",
                  title_justify="left")
    titles = dict(report.COLUMNS)
    keys = [k for k in _TABLE_KEYS
            if not (k == "request_rate"
                    and all(p.point.request_rate is None for p in result.points))]
    for key in keys:
        table.add_column(_TABLE_TITLES.get(key, titles[key]), justify="right")
    for row in report.summary_rows(result):
        table.add_row(*(report.fmt(row[k]) for k in keys))
    console.print(table)
    for note in result.notes:
        console.print(f"• {escape(note)}")
    for pr in result.points:
        for note in pr.notes:
            console.print(f"• {escape(pr.point.label)}: {escape(note)}")


def bench(
    url: str = typer.Argument(..., help="Base URL of the server, e.g. http://127.0.0.1:8000"),
    model: str | None = typer.Option(None, "--model", help="Served model name (default: the "
                                     "first one /v1/models lists)."),
    endpoint: str = typer.Option("completions", "--endpoint",
                                 help="API to drive: completions or chat."),
    prompt_lens: str = typer.Option(prompt_lens_text(), "--prompt-lens",
                                    help="Comma-separated prompt lengths in tokens."),
    output_len: int = typer.Option(OUTPUT_LEN, "--output-len",
                                   help="Tokens to generate per request (ignore_eos)."),
    concurrency: str = typer.Option("1", "--concurrency",
                                    help="Comma-separated concurrency levels to sweep."),
    request_rate: float | None = typer.Option(None, "--request-rate", help="Poisson arrivals "
                                              "at this many requests/s (concurrency caps)."),
    requests: int | None = typer.Option(None, "--requests", help="Measured requests per batch "
                                        "(default max(3, 2 × concurrency))."),
    duration: float | None = typer.Option(None, "--duration", help="Time budget per point, "
                                          "seconds."),
    warmup: int | None = typer.Option(None, "--warmup", help="Warm-up requests per point, "
                                      "excluded (default: the concurrency)."),
    ci_target: float = typer.Option(0.02, "--ci-target", help="Repeat batches until the 95% "
                                    "CI of decode tok/s and TTFT is within ± this fraction."),
    max_repeats: int = typer.Option(5, "--max-repeats", help="Most batches per point."),
    subtract_min_latency: bool = typer.Option(
        False, "--subtract-min-latency", help="Measure a minimal request's latency and "
        "subtract it from TTFT before computing prefill tok/s."),
    chat_template_kwargs: str | None = typer.Option(
        None, "--chat-template-kwargs", help='JSON object, e.g. \'{"enable_thinking": false}\'.'),
    tokenizer: Annotated[Path | None, typer.Option(
        "--tokenizer", help="Model tokenizer directory, used when the server has no /tokenize."
    )] = None,
    temperature: float = typer.Option(0.0, "--temperature", help="Sampling temperature."),
    no_ignore_eos: bool = typer.Option(False, "--no-ignore-eos",
                                       help="Do not send ignore_eos (servers that reject it)."),
    no_continuous_usage: bool = typer.Option(
        False, "--no-continuous-usage", help="Do not ask for usage on every chunk (then "
        "per-token ITL is unknown)."),
    first_byte_timeout: float = typer.Option(600.0, "--first-byte-timeout",
                                             help="Seconds to wait for a response to start."),
    stall_timeout: float = typer.Option(120.0, "--stall-timeout",
                                        help="Longest silence mid-stream, seconds."),
    request_timeout: float = typer.Option(3600.0, "--request-timeout",
                                          help="Longest single request, seconds."),
    api_key: str | None = typer.Option(None, "--api-key", envvar="OPENAI_API_KEY",
                                       help="Bearer token (never written to results)."),
    seed: int = typer.Option(0, "--seed", help="Seed for prompt filler and Poisson arrivals."),
    as_json: JsonOpt = False,
    as_csv: CsvOpt = False,
    as_markdown: MarkdownOpt = False,
    out: Annotated[Path | None, typer.Option(
        "--out", help="Write the JSON/CSV/Markdown here instead of stdout (the full JSON when "
        "no format is given).")] = None,
    export_vllm: Annotated[Path | None, typer.Option(
        "--export-vllm", help="Also write each point as a vllm bench serve result JSON into "
        "this directory.")] = None,
) -> None:
    """Benchmark an OpenAI-compatible endpoint: TTFT, TPOT, ITL, decode/prefill tok/s, with CIs."""
    from servelab.bench import report, vllm_compat
    from servelab.bench.result import write_json_atomic
    from servelab.bench.run import BenchConfig, run_bench
    from servelab.bench.transport import Timeouts
    from servelab.bench.workload import WorkloadSpec

    if endpoint not in ("completions", "chat"):
        raise UsageError(f"--endpoint must be completions or chat, not {endpoint!r}")
    pick_format(as_json, as_csv, as_markdown)  # at most one
    kwargs: dict[str, Any] | None = None
    if chat_template_kwargs is not None:
        try:
            kwargs = json.loads(chat_template_kwargs)
        except ValueError as exc:
            raise UsageError(f"--chat-template-kwargs is not JSON: {exc}") from None
        if not isinstance(kwargs, dict):
            raise UsageError("--chat-template-kwargs must be a JSON object")
    spec = WorkloadSpec(
        prompt_lens=_ints(prompt_lens, "--prompt-lens"), output_len=output_len,
        concurrency=_ints(concurrency, "--concurrency"), request_rate=request_rate,
        requests=requests, duration_s=duration, warmup_requests=warmup, ci_target=ci_target,
        max_repeats=max_repeats, subtract_min_latency=subtract_min_latency, seed=seed,
    )
    cfg = BenchConfig(
        base_url=url, workload=spec, model=model,
        endpoint="chat" if endpoint == "chat" else "completions",
        temperature=temperature, ignore_eos=not no_ignore_eos,
        continuous_usage=not no_continuous_usage, chat_template_kwargs=kwargs,
        timeouts=Timeouts(first_byte_s=first_byte_timeout, stall_s=stall_timeout,
                          total_s=request_timeout),
        tokenizer=tokenizer, api_key=api_key,
    )
    err = Console(stderr=True, highlight=False)
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TextColumn("failed {task.fields[failed]}"), TimeElapsedColumn(),
                  console=err, transient=True) as progress:
        tasks: dict[tuple[int, str], Any] = {}
        failed: dict[tuple[int, str], int] = {}

        def on_progress(ev: ProgressEvent) -> None:
            key = (ev.point_index, ev.phase)
            if key not in tasks:
                label = f"[{ev.point_index + 1}/{ev.points}] {ev.point.label} · {ev.phase}"
                tasks[key] = progress.add_task(escape(label), total=ev.total, failed=0)
                failed[key] = 0
            if ev.sample is not None and not ev.sample.ok:
                failed[key] += 1
            progress.update(tasks[key], completed=ev.done, total=ev.total, failed=failed[key])

        result = run_bench(cfg, on_progress=on_progress)
    if export_vllm is not None:
        for pr in result.points:
            name = f"vllm-p{pr.point.prompt_len}-o{pr.point.output_len}-c{pr.point.concurrency}"
            write_json_atomic(export_vllm / f"{name}.json", vllm_compat.to_vllm(
                pr, model=result.model, backend=f"openai-{result.endpoint}", detailed=True))
    if as_csv:
        _emit(report.to_csv(result), out)
    elif as_markdown:
        _emit(report.to_markdown(result), out)
    elif as_json or out is not None:
        _emit(json.dumps(result.to_json(), indent=1) + "\n", out)
    if not (as_json or as_csv or as_markdown):
        render_table(result, Console(highlight=False))
    dead = [pr for pr in result.points if pr.metrics.completed == 0]
    if dead:  # the result is written and shown; the exit status says it is unusable
        pr = dead[0]
        why = "; ".join(pr.notes) or "no samples"
        raise BenchError(f"{result.base_url}: {pr.point.label}: no request completed ({why})")


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
    Console(highlight=False).print(table)
    if mine is not None:
        Console(highlight=False).print(
            f"servelab recomputed from {len(vr.samples)} requests: median TTFT "
            f"{report.fmt(mine.ttft_ms.median if mine.ttft_ms else None)} ms, median TPOT "
            f"{report.fmt(mine.tpot_ms.median if mine.tpot_ms else None)} ms")


def register(app: typer.Typer) -> None:
    """Attach ``bench`` and ``bench-import`` to the root app."""
    app.command("bench")(bench)
    app.command("bench-import")(bench_import)
