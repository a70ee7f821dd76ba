"""``servelab capacity``: the highest request rate or concurrency that meets an SLO.

Thin layer over :func:`servelab.bench.capacity.run_capacities`: options in; per prompt
length one table of probes and one summary line, then (several lengths) one table of the
capacity at each length. ``--json``: schema ``servelab.capacity/1`` for one prompt length
(:meth:`servelab.bench.capacity.CapacityResult.to_json`), ``servelab.capacities/1`` for
several (:func:`servelab.bench.capacity.capacities_json`).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from servelab.bench.spec import FIELDS, default
from servelab.cli.errors import INTERRUPTED
from servelab.cli.failures import FIRST_BYTE_S, MAX_FAILED, STALL_S, TOTAL_S, fail_check
from servelab.cli.output import JsonOpt, stdout_console
from servelab.cli.workload_options import workload_option
from servelab.errors import OutputPathError, UsageError
from servelab.outfile import check_output_file, write_json

if TYPE_CHECKING:  # loaded only when the command runs (fast --help)
    from servelab.bench.capacity import CapacityResult, Probe, SearchSpec
    from servelab.bench.run import BenchConfig
    from servelab.bench.slo import Slo


def _unit(res: CapacityResult) -> str:
    return "req/s" if res.spec.variable == "rate" else "streams"


def render_capacities(results: tuple[CapacityResult, ...], console: Console) -> None:
    """One row per prompt length: its capacity and the search behind it."""
    from servelab.bench import report

    first = results[0]
    table = Table(title=f"capacity per prompt length · SLO {escape(first.slo.label)}",
                  title_justify="left")
    for title in ("prompt tokens", f"capacity {_unit(first)}", "missed at", "probes",
                  "requests"):
        table.add_column(escape(title), justify="right")
    for r in results:
        o = r.outcome
        cap = "none found" if o.capacity is None else f"{o.capacity:.4g}"
        table.add_row(str(r.prompt_len), cap, report.fmt(o.bracket_high), str(len(r.probes)),
                      str(r.requests))
    console.print(table)


def render(res: CapacityResult, console: Console) -> None:
    """The probes as a table, then the answer."""
    from servelab.bench import report

    var = res.spec.variable
    unit = _unit(res)
    table = Table(title=f"servelab capacity · {escape(res.model)} · {res.prompt_len} prompt "
                  f"tokens · SLO {escape(res.slo.label)}",
                  title_justify="left")
    for title in ("#", var, "purpose", *(t.label for t in res.slo.terms), "verdict",
                  "goodput req/s", "out tok/s", "requests", "send lag p99 ms"):
        table.add_column(escape(title), justify="right")
    for i, p in enumerate(res.probes, 1):
        cells = [f"{report.fmt(t.value_ms)} [{report.fmt(t.ci_low_ms)}, "
                 f"{report.fmt(t.ci_high_ms)}]" for t in p.slo.terms]
        verdict = ("met" if p.met else "missed") + ("" if p.decided_by_ci else " (estimate)")
        lag = p.metrics.dispatch_lag_ms
        table.add_row(str(i), report.fmt(p.value), p.purpose, *cells, verdict,
                      report.fmt(p.slo.goodput), report.fmt(p.metrics.output_throughput),
                      str(p.requests), report.fmt(lag.p99 if lag else None))
    console.print(table)
    o = res.outcome
    if o.capacity is None:
        console.print(f"capacity: none found in [{res.spec.low:g}, {res.spec.high:g}] {unit}")
    else:
        above = (f", missed at {o.bracket_high:g}" if o.bracket_high is not None
                 else f", the top of the range ({res.spec.high:g})")
        console.print(f"capacity: {o.capacity:.4g} {unit} (met and confirmed{above}; "
                      f"{res.requests} requests in {len(res.probes)} probes)")
    for note in res.notes:
        console.print(f"• {escape(note)}")


#: Options that mean what ``servelab bench``'s do: flag, help and default from the one
#: workload schema (:mod:`servelab.bench.spec`); the others name their field's flag.
_W = {name: workload_option(name) for name in ("output_len", "burstiness", "seed")}


UrlArg = Annotated[str, typer.Argument(
    help="Base URL of the server, e.g. http://127.0.0.1:8000")]
SloOpt = Annotated[str, typer.Option(
    "--slo",
    help="SLO terms, e.g. ttft_p99=500,tpot_p50=40 (ms; all must hold; a failed request counts "
    "as too slow).")]
VariableOpt = Annotated[str, typer.Option(
    "--variable",
    help="What to search: rate (open loop, req/s) or concurrency (closed loop).")]
LowOpt = Annotated[float | None, typer.Option(
    "--low",
    help="Lowest value searched (default 0.25 req/s for rate, 1 stream for concurrency).")]
HighOpt = Annotated[float, typer.Option("--high", help="Highest value searched.")]
StartOpt = Annotated[float | None, typer.Option("--start", help="First value probed.")]
ToleranceOpt = Annotated[float, typer.Option(
    "--tolerance", help="Rates: stop when the bracket is within ± this fraction.")]
ConfirmOpt = Annotated[int, typer.Option("--confirm", help="Reruns confirming the answer.")]
MaxRoundsOpt = Annotated[int, typer.Option(
    "--max-rounds", help="Batches per probe while the CI cannot decide the verdict.")]
PromptLensOpt = Annotated[str, typer.Option(
    FIELDS["prompt_lens"].flag, "--prompt-len",
    help="Prompt tokens per request; a comma list searches each length (one capacity per "
    "length).")]
RequestsOpt = Annotated[int | None, typer.Option(
    FIELDS["requests"].flag,
    help="Measured requests per batch (default max(3, 2 × concurrency); rates: 20).")]
WarmupOpt = Annotated[int | None, typer.Option(
    FIELDS["warmup_requests"].flag,
    help="Warm-up requests per probe (default: the concurrency; rates: 4).")]
ProfileOpt = Annotated[str, typer.Option(
    FIELDS["profile"].flag,
    help="Arrivals when searching a rate: constant, poisson, gamma (ramp and trace have no "
    "single rate to search).")]
MaxConcurrencyOpt = Annotated[int, typer.Option(
    "--max-concurrency", help="Rates: cap on requests in flight.")]
ModelOpt = Annotated[str | None, typer.Option("--model", help="Served model name.")]
EndpointOpt = Annotated[str, typer.Option("--endpoint", help="completions or chat.")]
ApiKeyOpt = Annotated[str | None, typer.Option(
    "--api-key", envvar="OPENAI_API_KEY", help="Bearer token (never written to results).")]
MaxFailedOpt = Annotated[float, typer.Option(
    "--max-failed",
    help="Exit non-zero when more than this fraction of all probes' requests failed (a failing "
    "server is not a slow one).")]
OutOpt = Annotated[Path | None, typer.Option("--out", help="Also write the JSON here.")]
PROFILE_DEFAULT = default("profile")


def capacity(
    url: UrlArg,
    slo: SloOpt,
    variable: VariableOpt = "rate",
    low: LowOpt = None,
    high: HighOpt = 256.0,
    start: StartOpt = None,
    tolerance: ToleranceOpt = 0.05,
    confirm: ConfirmOpt = 2,
    max_rounds: MaxRoundsOpt = 3,
    prompt_lens: PromptLensOpt = "512",
    output_len: int = _W["output_len"],
    requests: RequestsOpt = None,
    warmup: WarmupOpt = None,
    profile: ProfileOpt = PROFILE_DEFAULT,
    burstiness: float = _W["burstiness"],
    max_concurrency: MaxConcurrencyOpt = 4096,
    model: ModelOpt = None,
    endpoint: EndpointOpt = "completions",
    api_key: ApiKeyOpt = None,
    seed: int = _W["seed"],
    max_failed: MaxFailedOpt = MAX_FAILED,
    as_json: JsonOpt = False,
    out: OutOpt = None,
) -> None:
    """Find the highest request rate or concurrency that meets an SLO (bisection, CIs, reruns)."""
    from servelab.bench.capacity import SearchSpec, capacities_json, unsearchable
    from servelab.bench.profiles import PROFILES
    from servelab.bench.slo import parse_slo

    if variable not in ("rate", "concurrency"):
        raise UsageError(f"--variable must be rate or concurrency, not {variable!r}")
    if endpoint not in ("completions", "chat"):
        raise UsageError(f"--endpoint must be completions or chat, not {endpoint!r}")
    why = unsearchable(profile, "rate" if variable == "rate" else "concurrency")
    if why is not None:
        raise UsageError(f"--profile {profile}: {why}")
    if profile not in PROFILES:
        raise UsageError(f"--profile must be constant, poisson or gamma, not {profile!r}")
    lens = _lens(prompt_lens)
    slo_spec = parse_slo(slo)
    if out is not None:
        check_output_file(out)  # before any probe runs
    rate = variable == "rate"
    spec = SearchSpec(variable="rate" if rate else "concurrency",
                      low=low if low is not None else 0.25 if rate else 1.0,
                      high=high, start=start, tolerance=tolerance, confirm=confirm)
    cfg = _bench_config(url, lens, output_len, rate, max_concurrency, requests, warmup, seed,
                        profile, burstiness, model, endpoint, api_key)
    results = _search(cfg, slo_spec, spec, max_rounds, lens, out)
    data = results[0].to_json() if len(results) == 1 else capacities_json(results)
    _show(results, data, out, as_json, max_failed)


def _lens(text: str) -> tuple[int, ...]:
    from servelab.units import parse_int_list

    try:
        return tuple(parse_int_list(text, "--prompt-lens"))
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def _bench_config(url: str, lens: tuple[int, ...], output_len: int, rate: bool,
                  max_concurrency: int, requests: int | None, warmup: int | None, seed: int,
                  profile: str, burstiness: float, model: str | None, endpoint: str,
                  api_key: str | None) -> BenchConfig:
    """The client configuration every probe of the search runs with."""
    from servelab.bench.run import BenchConfig
    from servelab.bench.spec import WorkloadSpec
    from servelab.bench.transport import Timeouts

    n_req = requests if requests is not None else (20 if rate else None)
    work = WorkloadSpec(prompt_lens=lens, output_len=output_len,
                        concurrency=(max_concurrency,) if rate else (1,),
                        request_rate=1.0 if rate else None, requests=n_req,
                        warmup_requests=warmup, seed=seed, profile=profile,  # type: ignore[arg-type]
                        burstiness=burstiness)
    return BenchConfig(base_url=url, workload=work, model=model,
                       endpoint="chat" if endpoint == "chat" else "completions",
                       timeouts=Timeouts(first_byte_s=FIRST_BYTE_S, stall_s=STALL_S,
                                         total_s=TOTAL_S),
                       api_key=api_key, scrape_metrics=False)


def _search(cfg: BenchConfig, slo_spec: Slo, spec: SearchSpec, max_rounds: int,
            lens: tuple[int, ...], out: Path | None) -> tuple[CapacityResult, ...]:
    """Run the search, what it found so far kept in ``out`` (marked partial) as it goes; an
    interruption shows the finished searches and exits with the interrupted status."""
    from servelab.bench.capacity import partial_capacity_json, run_capacities

    err = Console(stderr=True, highlight=False, soft_wrap=True)  # paths stay whole
    done: list[CapacityResult] = []
    probes: list[Probe] = []

    def keep(reason: str) -> None:
        """Write what the search found so far to --out (marked partial)."""
        if out is None:
            return
        cur = next((n for n in dict.fromkeys(lens) if n not in {r.prompt_len for r in done}),
                   None)
        try:
            write_json(out, partial_capacity_json(done, probes, cur, reason))
        except OutputPathError as exc:
            err.print(f"[bold yellow]warning:[/] {escape(str(exc))}")

    def on_probe(p: Probe) -> None:
        err.print(f"probe {p.value:g} ({p.purpose}): {'met' if p.met else 'missed'}, "
                  f"{p.requests} requests")
        probes.append(p)
        keep("running")

    def on_result(r: CapacityResult) -> None:
        done.append(r)
        probes.clear()
        keep("running")

    try:
        return run_capacities(cfg, slo_spec, spec, max_rounds=max_rounds, on_probe=on_probe,
                              on_result=on_result)
    except KeyboardInterrupt:  # handled here: Typer would turn it into a bare exit 130
        keep("interrupted (Ctrl-C)")
        console = stdout_console()
        for res in done:
            render(res, console)
        where = f"; written to {out}" if out is not None else ""
        err.print(f"[bold red]interrupted:[/] {len(done)} search(es) finished, "
                  f"{len(probes)} probe(s) of the next kept{escape(where)}")
        raise typer.Exit(INTERRUPTED) from None


def _show(results: tuple[CapacityResult, ...], data: Mapping[str, Any], out: Path | None,
          as_json: bool, max_failed: float) -> None:
    """Write ``--out``, print the JSON or the tables, and exit with the probes' verdict."""
    failure: OutputPathError | None = None
    if out is not None:
        try:
            write_json(out, data)
        except OutputPathError as exc:  # shown after the table, which must not be lost
            failure = exc
    if as_json:  # on stdout even when --out failed
        sys.stdout.write(json.dumps(data, indent=1) + "\n")
        if failure is not None:
            raise failure
        _fail_check(results, max_failed)
        return
    console = stdout_console()
    for res in results:
        render(res, console)
    if len(results) > 1:
        render_capacities(results, console)
    if failure is not None:
        raise failure
    _fail_check(results, max_failed)


def _fail_check(results: tuple[CapacityResult, ...], max_failed: float) -> None:
    for res in results:
        fail_check(f"{res.base_url}: prompt {res.prompt_len}",
                   [p.metrics for p in res.probes], max_failed)


def register(app: typer.Typer) -> None:
    """Attach ``capacity`` to the root app."""
    app.command("capacity")(capacity)
