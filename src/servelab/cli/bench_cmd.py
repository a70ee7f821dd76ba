"""``servelab bench``: benchmark any OpenAI-compatible endpoint.

Thin layer: parses options, runs :func:`servelab.bench.run.run_bench` with a Rich
progress bar fed by the runner's progress callback, renders the result.
"""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from servelab.bench.spec import FIELDS
from servelab.cli.errors import INTERRUPTED
from servelab.cli.failures import FIRST_BYTE_S, MAX_FAILED, STALL_S, TOTAL_S, fail_check
from servelab.cli.output import CsvOpt, DbOpt, JsonOpt, MarkdownOpt, pick_format, stdout_console
from servelab.cli.progress import LineTicker
from servelab.cli.workload_options import workload_option
from servelab.errors import BenchError, OutputPathError, ServelabError, UsageError
from servelab.outfile import check_output_dir, check_output_file, write_json, write_text
from servelab.units import parse_int_list

if TYPE_CHECKING:  # loaded only when a command runs (fast --help)
    from servelab.bench.result import BenchResult
    from servelab.bench.slo import Slo, SloResult
    from servelab.bench.workload import ProgressEvent


#: The options of ``bench`` that set the workload, one per schema field.
_W = {name: workload_option(name) for name in FIELDS}
_DEPTHS = workload_option("depths", "0")


def _ints(text: str, what: str) -> tuple[int, ...]:
    try:
        return tuple(parse_int_list(text, what))
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def _floats(text: str, what: str) -> tuple[float, ...]:
    try:
        values = tuple(float(x) for x in text.split(","))
    except ValueError:
        raise UsageError(f"{what} must be comma-separated numbers, got {text!r}") from None
    if any(not v > 0 or v == float("inf") for v in values):
        raise UsageError(f"{what} values must be finite and > 0, got {text!r}")
    return values


def _emit(text: str, out: Path | None) -> None:
    if out is None:
        sys.stdout.write(text)
        return
    write_text(out, text)


_TABLE_KEYS = ("prompt_len", "depth", "output_len", "concurrency", "request_rate", "completed",
               "failed",
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
                    and all(p.point.request_rate is None for p in result.points))
            and not (k == "depth" and not any(p.point.depth for p in result.points))]
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


def render_slo(result: BenchResult, slo: Slo, results: list[SloResult],
               console: Console) -> None:
    """One row per point: each term's percentile with its 95% CI, verdict and goodput."""
    from servelab.bench import report

    table = Table(title=f"SLO {escape(slo.label)}", title_justify="left")
    for title in ("point", *(t.label for t in slo.terms), "verdict", "goodput req/s",
                  "good/measured"):
        table.add_column(escape(title), justify="right")
    for pr, r in zip(result.points, results, strict=True):
        cells = [f"{report.fmt(t.value_ms)} [{report.fmt(t.ci_low_ms)}, "
                 f"{report.fmt(t.ci_high_ms)}]" for t in r.terms]
        table.add_row(escape(pr.point.label), *cells, r.verdict, report.fmt(r.goodput),
                      f"{r.good}/{r.measured}")
    console.print(table)


def record_result(result: BenchResult, db: str | None, err: Console,
                  api_key: str | None = None) -> None:
    """Record ``result`` in the results database (a run id from its content: importing its
    JSON later finds it stored), with the engine name and version the server states."""
    from servelab.bench.diagnose import engine_identity
    from servelab.store import display_url, import_runs, open_store, resolve_url
    from servelab.store.exchange import run_from_bench

    url = resolve_url(db)
    name, version = engine_identity(result.base_url, api_key=api_key)
    rec = run_from_bench(result, source=result.base_url, engine_name=name,
                         engine_version=version)
    with open_store(url) as store:
        done = import_runs(store, [rec])
    rid = (done.added or done.skipped)[0]
    err.print(f"recorded as run {rid} in {escape(display_url(url))} (--no-record to skip)",
              soft_wrap=True)


def bench(
    url: str = typer.Argument(..., help="Base URL of the server, e.g. http://127.0.0.1:8000"),
    model: str | None = typer.Option(None, "--model", help="Served model name (default: the "
                                     "first one /v1/models lists)."),
    endpoint: str = typer.Option("completions", "--endpoint",
                                 help="API to drive: completions or chat."),
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
    first_byte_timeout: float = typer.Option(
        FIRST_BYTE_S, "--first-byte-timeout", help="Seconds to wait for a response to start "
        "(raise it for very long prompts on slow hardware)."),
    stall_timeout: float = typer.Option(STALL_S, "--stall-timeout",
                                        help="Longest silence mid-stream, seconds."),
    request_timeout: float = typer.Option(TOTAL_S, "--request-timeout",
                                          help="Longest single request, seconds."),
    max_failed: float = typer.Option(
        MAX_FAILED, "--max-failed", help="Exit non-zero when more than this fraction of the "
        "measured requests failed (the result is still written and shown)."),
    api_key: str | None = typer.Option(None, "--api-key", envvar="OPENAI_API_KEY",
                                       help="Bearer token (never written to results)."),
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
    slo: str | None = typer.Option(None, "--slo", help="Evaluate an SLO per point, e.g. "
                                   "ttft_p99=500,tpot_p50=40 (ms): verdict and goodput."),
    as_json: JsonOpt = False,
    as_csv: CsvOpt = False,
    as_markdown: MarkdownOpt = False,
    out: Annotated[Path | None, typer.Option(
        "--out", help="Write the JSON/CSV/Markdown here instead of stdout (the full JSON when "
        "no format is given).")] = None,
    no_record: bool = typer.Option(False, "--no-record", help="Do not record the run in the "
                                   "results database (recorded by default; a partial run "
                                   "never is)."),
    db: DbOpt = None,
    export_vllm: Annotated[Path | None, typer.Option(
        "--export-vllm", help="Also write each point as a vllm bench serve result JSON into "
        "this directory.")] = None,
) -> None:
    """Benchmark an OpenAI-compatible endpoint: TTFT, TPOT, ITL, decode/prefill tok/s, with CIs."""
    from servelab.bench import report, vllm_compat
    from servelab.bench.datasets import load_dataset
    from servelab.bench.profiles import PROFILES, load_trace
    from servelab.bench.run import BenchConfig, BenchInterrupted, run_bench
    from servelab.bench.slo import evaluate, parse_slo
    from servelab.bench.spec import WorkloadSpec
    from servelab.bench.transport import Timeouts
    from servelab.bench.workload import point_key

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
    slo_spec = parse_slo(slo) if slo is not None else None
    if profile not in PROFILES or profile == "trace":
        raise UsageError(f"--profile must be one of constant, poisson, gamma, ramp, not "
                         f"{profile!r} (replay a trace with --trace)")
    if trace is not None:
        load_trace(trace)  # a bad trace is a one-line error before anything runs
    if dataset is not None:
        load_dataset(dataset)
    if dataset_lengths not in ("exact", "natural"):
        raise UsageError(f"--dataset-lengths must be exact or natural, not {dataset_lengths!r}")
    if dataset_output not in ("fixed", "reference"):
        raise UsageError(f"--dataset-output must be fixed or reference, not {dataset_output!r}")
    if out is not None:  # before any request is sent
        check_output_file(out)
    if export_vllm is not None:
        check_output_dir(export_vllm)
    rates = _floats(request_rate, "--request-rate") if request_rate is not None else ()
    spec = WorkloadSpec(
        prompt_lens=_ints(prompt_lens, "--prompt-lens"), output_len=output_len,
        concurrency=_ints(concurrency, "--concurrency"),
        request_rate=rates[0] if rates else None, request_rates=rates,
        requests=requests, duration_s=duration, warmup_requests=warmup, ci_target=ci_target,
        max_repeats=max_repeats, subtract_min_latency=subtract_min_latency, seed=seed,
        profile=profile, burstiness=burstiness, ramp_end_rate=ramp_end_rate,  # type: ignore[arg-type]
        trace=str(trace) if trace is not None else None, shared_prefix_len=shared_prefix,
        prefix_groups=prefix_groups, turns=turns,
        depths=() if depths.strip() == "0" else _ints(depths, "--depths"),
        dataset=str(dataset) if dataset is not None else None,
        dataset_lengths="natural" if dataset_lengths == "natural" else "exact",
        dataset_output="reference" if dataset_output == "reference" else "fixed",
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
    err = Console(stderr=True, highlight=False, soft_wrap=True)  # paths stay whole

    def render_out(res: BenchResult) -> str:
        """The --out file's text for ``res`` in the chosen format."""
        if as_csv:
            return report.to_csv(res)
        if as_markdown:
            return report.to_markdown(res)
        data = res.to_json()
        if slo_spec is not None and res.partial is None:
            data["slo"] = {"terms": slo_spec.to_json(), "label": slo_spec.label,
                           "points": [evaluate(slo_spec, pr.samples).to_json()
                                      for pr in res.points]}
        return json.dumps(data, indent=1) + "\n"

    write_failed: list[OutputPathError] = []

    def keep(res: BenchResult) -> None:
        """Write a snapshot to --out; a failure (full disk) is said once and the run goes on,
        the last snapshot that was written stays whole."""
        if out is None or (write_failed and res.partial == "running"):
            return
        try:
            write_text(out, render_out(res))
        except OutputPathError as exc:
            if not write_failed and res.partial == "running":
                err.print(f"[bold yellow]warning:[/] {escape(str(exc))}; the run goes on "
                          "and its table will be printed")
            write_failed.append(exc)

    interrupted = False
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TextColumn("failed {task.fields[failed]}"), TimeElapsedColumn(),
                  console=err, transient=True) as progress:
        tasks: dict[tuple[int, str], Any] = {}
        failed: dict[tuple[int, str], int] = {}
        lines = LineTicker(err)  # into a log: a line per phase and every 10 s

        def on_progress(ev: ProgressEvent) -> None:
            key = (ev.point_index, ev.phase)
            line = (f"[{ev.point_index + 1}/{ev.points}] {ev.point.label} · {ev.phase} "
                    f"{ev.done}{f'/{ev.total}' if ev.total else ''}")
            if key not in tasks or ev.done == ev.total:
                lines.say(line)
            else:
                lines.tick(line)
            if key not in tasks:
                label = f"[{ev.point_index + 1}/{ev.points}] {ev.point.label} · {ev.phase}"
                tasks[key] = progress.add_task(escape(label), total=ev.total, failed=0)
                failed[key] = 0
            if ev.sample is not None and not ev.sample.ok:
                failed[key] += 1
            progress.update(tasks[key], completed=ev.done, total=ev.total, failed=failed[key])

        try:
            result = run_bench(cfg, on_progress=on_progress,
                               on_partial=keep if out is not None else None)
        except BenchInterrupted as intr:  # Typer would turn it into a bare exit 130
            result, interrupted = intr.result, True
    if export_vllm is not None and not interrupted:
        date = datetime.fromisoformat(result.started_at.replace("Z", "+00:00"))
        for pr in result.points:  # vllm-p2048-o128-c1, ...-c8-r2 (PointKey embedded)
            name = f"vllm-p{pr.point.prompt_len}-o{pr.point.output_len}-c{pr.point.concurrency}"
            name += f"-d{pr.point.depth}" if pr.point.depth else ""
            name += point_key(pr.point, spec).load_suffix
            try:
                write_json(export_vllm / f"{name}.json", vllm_compat.to_vllm(
                    pr, model=result.model, backend=f"openai-{result.endpoint}", detailed=True,
                    burstiness=spec.burstiness if spec.profile == "gamma" else None,
                    date=date.astimezone(UTC).strftime("%Y%m%d-%H%M%S")))
            except OutputPathError as exc:
                write_failed.append(exc)
                break
    slo_results = ([evaluate(slo_spec, pr.samples) for pr in result.points]
                   if slo_spec is not None else None)
    if out is not None:
        write_failed.clear()  # the final write decides
        keep(result)
    elif as_json or as_csv or as_markdown:
        sys.stdout.write(render_out(result))
    formatted = as_json or as_csv or as_markdown
    if not formatted or interrupted or write_failed:
        # with a format asked for, the table of an interrupted run or of a result that could
        # not be written goes to stderr: it shows what would otherwise be lost
        console = err if formatted else stdout_console()
        render_table(result, console)
        if slo_spec is not None and slo_results is not None:
            render_slo(result, slo_spec, slo_results, console)
    record_error: ServelabError | None = None
    if not no_record and not interrupted:
        try:
            record_result(result, db, err, api_key)
        except ServelabError as exc:  # said after the table, like a failed --out write
            record_error = exc
    if write_failed:
        if record_error is not None:
            err.print(f"[bold yellow]warning:[/] not recorded either: {escape(str(record_error))}")
        raise write_failed[0]
    if record_error is not None:
        raise record_error
    if interrupted:
        n = sum(1 for pr in result.points for s in pr.samples if not s.warmup)
        where = f"; written to {out}" if out is not None else ""
        if out is None:  # no --out: the data directory keeps it, never the void
            from servelab.store import data_dir

            stamp = result.started_at.replace(":", "").replace("-", "")
            kept = data_dir() / "partial" / f"bench-{stamp}.json"
            try:
                write_json(kept, result.to_json())
                where = f"; written to {kept}"
            except OutputPathError as exc:
                where = f"; not written: {exc}"
        err.print(f"[bold red]interrupted:[/] partial result kept ({n} measured request(s) "
                  f"in {len(result.points)} point(s){escape(where)})")
        raise typer.Exit(INTERRUPTED)
    tc = result.token_check
    if tc is not None and tc.failure:  # written and shown; the exit status says it is wrong
        raise BenchError(f"{result.base_url}: {tc.failure}")
    dead = [pr for pr in result.points if pr.metrics.completed == 0]
    if dead:  # the result is written and shown; the exit status says it is unusable
        pr = dead[0]
        why = "; ".join(pr.notes) or "no samples"
        raise BenchError(f"{result.base_url}: {pr.point.label}: no request completed ({why})")
    fail_check(result.base_url, [pr.metrics for pr in result.points], max_failed)


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
