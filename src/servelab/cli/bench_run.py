"""``servelab bench``'s run, from its parsed options (:class:`~servelab.cli.bench_options.
BenchArgs`): check every option before a request is sent, run the benchmark under a progress
bar fed by the runner's callback, write and show the result, record it, and exit with the
status its numbers deserve."""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from servelab.cli.bench_options import BenchArgs
from servelab.cli.errors import INTERRUPTED
from servelab.cli.failures import fail_check
from servelab.cli.output import pick_format, stdout_console
from servelab.cli.progress import LineTicker
from servelab.errors import BenchError, OutputPathError, ServelabError, UsageError
from servelab.outfile import check_output_dir, check_output_file, write_json, write_text
from servelab.units import parse_int_list

if TYPE_CHECKING:
    from servelab.bench.result import BenchResult
    from servelab.bench.run import BenchConfig
    from servelab.bench.slo import Slo, SloResult
    from servelab.bench.spec import WorkloadSpec
    from servelab.bench.workload import ProgressEvent

__all__ = ["record_result", "render_slo", "render_table", "run_bench_command"]


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


def run_bench_command(a: BenchArgs) -> None:
    """Benchmark ``a.url`` as the options say (see ``servelab bench --help``)."""
    spec, cfg, slo_spec = _configure(a)
    err = Console(stderr=True, highlight=False, soft_wrap=True)  # paths stay whole
    writer = _Writer(a, slo_spec, err)
    result, interrupted = _measure(cfg, err, writer.keep if a.out is not None else None)
    if a.export_vllm is not None and not interrupted:
        _export_vllm(result, spec, a.export_vllm, writer.failed)
    _show(a, result, interrupted, slo_spec, writer, err)
    _settle(a, result, interrupted, writer, err)


def _configure(a: BenchArgs) -> tuple[WorkloadSpec, BenchConfig, Slo | None]:
    """The workload and client configuration, every option checked before a request is sent."""
    from servelab.bench.datasets import load_dataset
    from servelab.bench.profiles import PROFILES, load_trace
    from servelab.bench.run import BenchConfig
    from servelab.bench.slo import parse_slo
    from servelab.bench.spec import WorkloadSpec
    from servelab.bench.transport import Timeouts

    if a.endpoint not in ("completions", "chat"):
        raise UsageError(f"--endpoint must be completions or chat, not {a.endpoint!r}")
    pick_format(a.as_json, a.as_csv, a.as_markdown)  # at most one
    kwargs = _template_kwargs(a.chat_template_kwargs)
    slo_spec = parse_slo(a.slo) if a.slo is not None else None
    if a.profile not in PROFILES or a.profile == "trace":
        raise UsageError(f"--profile must be one of constant, poisson, gamma, ramp, not "
                         f"{a.profile!r} (replay a trace with --trace)")
    if a.trace is not None:
        load_trace(a.trace)  # a bad trace is a one-line error before anything runs
    if a.dataset is not None:
        load_dataset(a.dataset)
    if a.dataset_lengths not in ("exact", "natural"):
        raise UsageError(f"--dataset-lengths must be exact or natural, not {a.dataset_lengths!r}")
    if a.dataset_output not in ("fixed", "reference"):
        raise UsageError(f"--dataset-output must be fixed or reference, not {a.dataset_output!r}")
    if a.out is not None:  # before any request is sent
        check_output_file(a.out)
    if a.export_vllm is not None:
        check_output_dir(a.export_vllm)
    rates = _floats(a.request_rate, "--request-rate") if a.request_rate is not None else ()
    spec = WorkloadSpec(
        prompt_lens=_ints(a.prompt_lens, "--prompt-lens"), output_len=a.output_len,
        concurrency=_ints(a.concurrency, "--concurrency"),
        request_rate=rates[0] if rates else None, request_rates=rates,
        requests=a.requests, duration_s=a.duration, warmup_requests=a.warmup,
        ci_target=a.ci_target, max_repeats=a.max_repeats,
        subtract_min_latency=a.subtract_min_latency, seed=a.seed,
        profile=a.profile, burstiness=a.burstiness,  # type: ignore[arg-type]
        ramp_end_rate=a.ramp_end_rate,
        trace=str(a.trace) if a.trace is not None else None, shared_prefix_len=a.shared_prefix,
        prefix_groups=a.prefix_groups, turns=a.turns,
        depths=() if a.depths.strip() == "0" else _ints(a.depths, "--depths"),
        dataset=str(a.dataset) if a.dataset is not None else None,
        dataset_lengths="natural" if a.dataset_lengths == "natural" else "exact",
        dataset_output="reference" if a.dataset_output == "reference" else "fixed",
    )
    cfg = BenchConfig(
        base_url=a.url, workload=spec, model=a.model,
        endpoint="chat" if a.endpoint == "chat" else "completions",
        temperature=a.temperature, ignore_eos=not a.no_ignore_eos,
        continuous_usage=not a.no_continuous_usage, chat_template_kwargs=kwargs,
        timeouts=Timeouts(first_byte_s=a.first_byte_timeout, stall_s=a.stall_timeout,
                          total_s=a.request_timeout),
        tokenizer=a.tokenizer, api_key=a.api_key,
    )
    return spec, cfg, slo_spec


def _template_kwargs(text: str | None) -> dict[str, Any] | None:
    """``--chat-template-kwargs`` as a JSON object."""
    if text is None:
        return None
    try:
        kwargs = json.loads(text)
    except ValueError as exc:
        raise UsageError(f"--chat-template-kwargs is not JSON: {exc}") from None
    if not isinstance(kwargs, dict):
        raise UsageError("--chat-template-kwargs must be a JSON object")
    return kwargs


class _Writer:
    """The ``--out`` file (or stdout's formatted text): a snapshot written as the run goes, a
    failed write (a full disk) said once while the run goes on."""

    def __init__(self, a: BenchArgs, slo_spec: Slo | None, err: Console) -> None:
        self.a, self.slo_spec, self.err = a, slo_spec, err
        self.failed: list[OutputPathError] = []

    def render(self, res: BenchResult) -> str:
        """The --out file's text for ``res`` in the chosen format."""
        from servelab.bench import report
        from servelab.bench.slo import evaluate

        if self.a.as_csv:
            return report.to_csv(res)
        if self.a.as_markdown:
            return report.to_markdown(res)
        data = res.to_json()
        if self.slo_spec is not None and res.partial is None:
            data["slo"] = {"terms": self.slo_spec.to_json(), "label": self.slo_spec.label,
                           "points": [evaluate(self.slo_spec, pr.samples).to_json()
                                      for pr in res.points]}
        return json.dumps(data, indent=1) + "\n"

    def keep(self, res: BenchResult) -> None:
        """Write a snapshot to --out; a failure (full disk) is said once and the run goes on,
        the last snapshot that was written stays whole."""
        out = self.a.out
        if out is None or (self.failed and res.partial == "running"):
            return
        try:
            write_text(out, self.render(res))
        except OutputPathError as exc:
            if not self.failed and res.partial == "running":
                self.err.print(f"[bold yellow]warning:[/] {escape(str(exc))}; the run goes on "
                               "and its table will be printed")
            self.failed.append(exc)


def _measure(cfg: BenchConfig, err: Console, keep: Any) -> tuple[BenchResult, bool]:
    """Run the benchmark under a progress bar (into a log: a line per phase and every 10 s);
    ``(result, interrupted)``."""
    from servelab.bench.run import BenchInterrupted, run_bench

    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TextColumn("failed {task.fields[failed]}"), TimeElapsedColumn(),
                  console=err, transient=True) as progress:
        tasks: dict[tuple[int, str], Any] = {}
        failed: dict[tuple[int, str], int] = {}
        lines = LineTicker(err)

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
            return run_bench(cfg, on_progress=on_progress, on_partial=keep), False
        except BenchInterrupted as intr:  # Typer would turn it into a bare exit 130
            return intr.result, True


def _export_vllm(result: BenchResult, spec: WorkloadSpec, where: Path,
                 failed: list[OutputPathError]) -> None:
    """Each point as a ``vllm bench serve`` result JSON in ``where``."""
    from servelab.bench import vllm_compat
    from servelab.bench.workload import point_key

    date = datetime.fromisoformat(result.started_at.replace("Z", "+00:00"))
    for pr in result.points:  # vllm-p2048-o128-c1, ...-c8-r2 (PointKey embedded)
        name = f"vllm-p{pr.point.prompt_len}-o{pr.point.output_len}-c{pr.point.concurrency}"
        name += f"-d{pr.point.depth}" if pr.point.depth else ""
        name += point_key(pr.point, spec).load_suffix
        try:
            write_json(where / f"{name}.json", vllm_compat.to_vllm(
                pr, model=result.model, backend=f"openai-{result.endpoint}", detailed=True,
                burstiness=spec.burstiness if spec.profile == "gamma" else None,
                date=date.astimezone(UTC).strftime("%Y%m%d-%H%M%S")))
        except OutputPathError as exc:
            failed.append(exc)
            break


def _show(a: BenchArgs, result: BenchResult, interrupted: bool, slo_spec: Slo | None,
          writer: _Writer, err: Console) -> None:
    """Write the result (``--out`` or stdout in the format asked for) and print its table."""
    from servelab.bench.slo import evaluate
    slo_results = ([evaluate(slo_spec, pr.samples) for pr in result.points]
                   if slo_spec is not None else None)
    if a.out is not None:
        writer.failed.clear()  # the final write decides
        writer.keep(result)
    elif a.formatted:
        sys.stdout.write(writer.render(result))
    if not a.formatted or interrupted or writer.failed:
        # with a format asked for, the table of an interrupted run or of a result that could
        # not be written goes to stderr: it shows what would otherwise be lost
        console = err if a.formatted else stdout_console()
        render_table(result, console)
        if slo_spec is not None and slo_results is not None:
            render_slo(result, slo_spec, slo_results, console)


def _settle(a: BenchArgs, result: BenchResult, interrupted: bool, writer: _Writer,
            err: Console) -> None:
    """Record the run, then exit with the status its numbers deserve."""
    record_error: ServelabError | None = None
    if not a.no_record and not interrupted:
        try:
            record_result(result, a.db, err, a.api_key)
        except ServelabError as exc:  # said after the table, like a failed --out write
            record_error = exc
    if writer.failed:
        if record_error is not None:
            err.print(f"[bold yellow]warning:[/] not recorded either: {escape(str(record_error))}")
        raise writer.failed[0]
    if record_error is not None:
        raise record_error
    if interrupted:
        _interrupted(a, result, err)
    tc = result.token_check
    if tc is not None and tc.failure:  # written and shown; the exit status says it is wrong
        raise BenchError(f"{result.base_url}: {tc.failure}")
    dead = [pr for pr in result.points if pr.metrics.completed == 0]
    if dead:  # the result is written and shown; the exit status says it is unusable
        pr = dead[0]
        why = "; ".join(pr.notes) or "no samples"
        raise BenchError(f"{result.base_url}: {pr.point.label}: no request completed ({why})")
    fail_check(result.base_url, [pr.metrics for pr in result.points], a.max_failed)


def _interrupted(a: BenchArgs, result: BenchResult, err: Console) -> None:
    """Keep an interrupted run's partial result (``--out``, else the data directory) and exit
    with the interrupted status."""
    n = sum(1 for pr in result.points for s in pr.samples if not s.warmup)
    where = f"; written to {a.out}" if a.out is not None else ""
    if a.out is None:  # no --out: the data directory keeps it, never the void
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
