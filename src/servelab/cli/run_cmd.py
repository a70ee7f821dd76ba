"""``servelab run RECIPE``: inspect → plan → serve → bench → stop → record → pages.

``run --json`` prints::

    {"run_id": str, "status": "ok"|"failed", "reason": str|null, "run_dir": str,
     "recipe": str, "engine_version": str|null, "kv_arithmetic": "vLLM"|"llama.cpp"|null,
     "kv_pool_tokens": {"predicted": int|null, "engine": int|null},
     "kv_cache_mib": {"predicted": float|null, "engine": float|null},
     "cuda_graph_max_tokens": {"predicted": int|null, "engine": int|null},
     "mamba_cache_blocks": {"predicted": int|null, "engine": int|null},
     "summary": [SummaryRow.to_dict()...],
     "speculative": SpeculativeSummary.to_dict() | null,
     "warnings": [StartupFinding.to_dict()...], "site": str|null}

``warnings`` are start-up refusals the plan foresaw (printed before the engine starts;
they never stop the run).

``kv_cache_mib`` is llama.cpp's KV cache (K and V of every layer) in MiB as its log
prints it, two decimals; ``null`` for vLLM, whose log states the pool in tokens.

``cuda_graph_max_tokens`` is the largest step (tokens) vLLM captures a CUDA graph for: the
plan's (``startup.graph_capture``) and the engine log's ``max_cudagraph_capture_size``
(0: no graphs; ``null``: not planned, or not in the log). ``mamba_cache_blocks`` pairs a
hybrid plan's blocks with the count the log states (vLLM states it only when it refuses
to start over it).

Predictions are labelled (``predicted_*``); measured values carry their 95 % CI.
The exit status is 1 when the run failed (it is still recorded, with its reason).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    Progress,
    SpinnerColumn,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)

from servelab.cli.output import (
    BriefOpt,
    DbOpt,
    HardwareFileOpt,
    JsonOpt,
    MarkdownOpt,
    Table,
    emit,
    num,
)
from servelab.cli.progress import LineTicker

if TYPE_CHECKING:  # the pipeline loads only when a command runs (fast --help)
    from servelab.evidence.acceptance import SpeculativeSummary
    from servelab.pipeline.run import RunEvent, RunOutcome
    from servelab.pipeline.summary import SummaryRow
    from servelab.store.db import Store

err = Console(stderr=True, highlight=False)

STEP_TITLES = {
    "inspect": "inspect checkpoint",
    "plan": "plan + predict",
    "start": "start engine",
    "bench": "benchmark",
    "stop": "stop engine",
    "record": "record run",
}


class RunProgress:
    """Rich progress for the run's steps; one task per step, bench requests counted."""

    def __init__(self, console: Console) -> None:
        self.progress = Progress(
            SpinnerColumn(),
            TextColumn("[bold]{task.description}"),
            BarColumn(bar_width=24),
            TextColumn("{task.fields[detail]}"),
            TimeElapsedColumn(),
            console=console,
            transient=False,
        )
        self.tasks: dict[str, TaskID] = {}
        self.lines = LineTicker(console)  # into a log: a line per step and every 10 s

    def __enter__(self) -> RunProgress:
        self.progress.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.__exit__(None, None, None)

    def __call__(self, ev: RunEvent) -> None:
        task = self.tasks.get(ev.step)
        if task is None:
            task = self.progress.add_task(STEP_TITLES[ev.step], total=None, detail="")
            self.tasks[ev.step] = task
        if ev.status == "progress" and ev.bench is not None:
            b = ev.bench
            total = f"/{b.total}" if b.total else ""
            detail = (f"point {b.point_index + 1}/{b.points}: {b.point.prompt_len}-token "
                      f"prompts, c={b.point.concurrency}, {b.phase} {b.done}{total}")
            self.progress.update(task, detail=escape(detail))
            self.lines.tick(f"{STEP_TITLES[ev.step]}: {detail}")
            return
        if ev.status in ("start", "done", "failed"):
            self.lines.say(f"{STEP_TITLES[ev.step]}: {ev.status}"
                           + (f" ({ev.detail})" if ev.detail else ""))
        if ev.status == "done":
            self.progress.update(task, total=1, completed=1, detail=escape(ev.detail))
        elif ev.status == "warning":
            self.progress.console.print(f"[bold yellow]warning:[/] {escape(ev.detail)}",
                                        soft_wrap=True)
        elif ev.status == "failed":
            self.progress.update(
                task, total=1, completed=0, detail=f"[red]failed:[/] {escape(ev.detail)}"
            )
        else:
            self.progress.update(task, detail=escape(ev.detail))


def summary_tables(rows: tuple[SummaryRow, ...]) -> list[Table]:
    """Measured, then predicted, one row per (metric, prompt length) in each.

    Two narrow tables rather than one wide one, so that both stay whole at 80 columns
    (a nine-column table folded numbers mid-digit there).
    """
    measured, predicted = [], []
    for r in rows:
        ci = (
            f"{num(r.ci_low, 1)}–{num(r.ci_high, 1)}"
            if r.ci_low is not None and r.ci_high is not None
            else ""
        )
        interval = (
            f"{num(r.predicted_low, 1)}–{num(r.predicted_high, 1)}"
            if r.predicted_low is not None and r.predicted_high is not None
            else ""
        )
        err = f"{r.error:+.0%}" if r.error is not None else ""
        inside = {True: "yes", False: "NO", None: ""}[r.inside_interval]
        frac = f"{r.roofline_fraction:.1%}" if r.roofline_fraction is not None else ""
        key = [r.kind, f"{r.prompt_tokens:,}"]
        measured.append([*key, num(r.measured_tok_s, 1), ci, str(r.samples)])
        predicted.append(
            [*key, num(r.predicted_tok_s, 1) or "-", interval, err, inside, frac]
        )
    return [
        Table(
            "measured (single stream)",
            ("metric", "prompt", "tok/s", "95% CI", "n"),
            measured,
            caption="measured by servelab bench",
        ),
        Table(
            "predicted before the run",
            ("metric", "prompt", "tok/s", "interval", "error", "inside", "% roof"),
            predicted,
            caption="predicted by servelab plan (interval from leave-one-model-out errors); "
            "error = measured / predicted − 1; % roof = measured / roofline bound",
        ),
    ]


def speculative_table(s: SpeculativeSummary) -> Table:
    """This run's measured acceptance beside the acceptance and speed predicted before it."""
    rows = []
    if s.measured is not None:
        rates = ", ".join(f"{r:.3f}" for r in s.measured.position_rates)
        rows.append(["acceptance length, this run", num(s.measured.acceptance_length, 3),
                     f"measured ({s.measured.config.label}; per position {rates})" if rates
                     else f"measured ({s.measured.config.label})"])
    if s.source is not None:
        used = ", ".join(f"{a:.3f}" for a in s.source.lengths) or "-"
        rows.append(["acceptance length, prediction", used, s.source.detail])
    if s.predicted is not None:
        p = s.predicted
        interval = (f"{num(p.predicted_low, 1)}–{num(p.predicted_high, 1)}"
                    if p.predicted_low is not None and p.predicted_high is not None else "")
        rows.append(["decode tok/s (predicted)", num(p.predicted_tok_s, 1) or "-", interval])
    return Table("speculative decode", ("", "value", "source"), rows)


def rebuild_site(store: Store, outdir: Path) -> Path:
    """Rebuild the whole static site from the store; returns the index path."""
    from servelab.cli.answers import answered_site
    from servelab.site.build import build_site  # matplotlib: only when a site is built

    return build_site(answered_site(store), outdir).index


def outcome_doc(outcome: RunOutcome, site: Path | None) -> dict[str, object]:
    """The ``--json`` document (schema in the module docstring)."""
    from servelab.evidence.acceptance import speculative_summary
    from servelab.sizing.check import KV_CACHE_SIZE, KV_TOKENS, kv_pool_checks
    from servelab.sizing.document import read_plan
    from servelab.sizing.kvpool import has_mamba_layers

    rec, plan, facts = outcome.record, outcome.plan, outcome.facts
    # the checks the recipe page shows, from the plan as the record stores it
    checks = {c.label: c for c in kv_pool_checks(read_plan(rec.prediction), facts)}
    tokens = next((checks[k] for k in KV_TOKENS.values() if k in checks), None)
    size = checks.get(KV_CACHE_SIZE)
    spec = speculative_summary(rec, plan)
    return {
        "run_id": outcome.run_id,
        "status": rec.status,
        "reason": rec.status_reason,
        "run_dir": str(outcome.run_dir),
        "recipe": rec.recipe_name,
        "engine_version": rec.engine_version,
        "kv_arithmetic": plan.kv_arithmetic if plan else None,
        "kv_pool_tokens": {
            "predicted": _int(tokens.predicted) if tokens else None,
            "engine": _int(tokens.observed) if tokens else None,
        },
        "kv_cache_mib": {
            "predicted": size.predicted if size else None,
            "engine": size.observed if size else None,
        },
        "cuda_graph_max_tokens": {
            "predicted": plan.graph_capture.max_tokens if plan and plan.graph_capture else None,
            "engine": facts.cudagraph_capture_max if facts else None,
        },
        "mamba_cache_blocks": {
            "predicted": plan.pool.num_blocks
            if plan and plan.pool is not None and has_mamba_layers(plan.pool) else None,
            "engine": facts.mamba_cache_blocks if facts else None,
        },
        "summary": [r.to_dict() for r in outcome.summary],
        "speculative": spec.to_dict() if spec is not None else None,
        "warnings": [f.to_dict() for f in plan.findings] if plan else [],
        "site": str(site) if site else None,
    }


def _int(value: object) -> int | None:
    return int(value) if isinstance(value, int | float) else None


def _kv_table(doc: dict[str, object]) -> Table:
    """Predicted KV pool (by the engine's own arithmetic) against the engine's log."""
    kv, mib, rules = doc["kv_pool_tokens"], doc["kv_cache_mib"], doc["kv_arithmetic"]
    assert isinstance(kv, dict) and isinstance(mib, dict)
    label = f"predicted (servelab plan, {rules} arithmetic)" if rules else "predicted"
    if rules != "llama.cpp":
        return Table("KV pool", ("", "tokens"),
                     [[label, num(kv["predicted"], 0)], ["engine log", num(kv["engine"], 0)]])
    return Table(
        "KV cache",
        ("", "tokens", "MiB"),
        [[label, num(kv["predicted"], 0), num(mib["predicted"], 2)],
         ["engine log", num(kv["engine"], 0), num(mib["engine"], 2)]],
    )


def _graph_cell(value: int | None, *, logged: bool) -> str:
    """A capture size or block count for a table: 0 (no graphs) and a silent log say so."""
    if value is None:
        return "not in the log" if logged else "-"
    return "0 (no graphs)" if value == 0 else num(value, 0)


def graphs_table(doc: dict[str, object]) -> Table | None:
    """Planned largest CUDA graph capture size (and a hybrid's mamba blocks, when the log
    states them) against the engine's log, in the KV pool table's layout; ``None`` for a
    plan without graphs to compare (llama.cpp)."""
    graphs, mamba = doc["cuda_graph_max_tokens"], doc["mamba_cache_blocks"]
    assert isinstance(graphs, dict) and isinstance(mamba, dict)
    if graphs["predicted"] is None:
        return None
    blocks = mamba["engine"] is not None
    rows = [
        [label, _graph_cell(graphs[key], logged=key == "engine"),
         *([_graph_cell(mamba[key], logged=key == "engine")] if blocks else [])]
        for label, key in (("predicted (servelab plan)", "predicted"), ("engine log", "engine"))
    ]
    return Table("CUDA graphs", ("", "largest graph, tokens", *(("mamba blocks",) if blocks
                                                               else ())), rows,
                 caption="longer prefills run without graphs")


RecipeArg = Annotated[Path, typer.Argument(help="Recipe file (TOML).", show_default=False)]
SiteOpt = Annotated[Path | None, typer.Option(
    "--site", help="Rebuild the static site into this directory after recording.")]
PortOpt = Annotated[str, typer.Option(
    "--port",
    help="Engine port: 'auto' picks a free one, 'recipe' keeps the recipe's, or a number.")]
RunsDirOpt = Annotated[Path | None, typer.Option(
    "--runs-dir", help="Parent of the run directory (engine log, facts).")]
RunHardwareOpt = Annotated[str | None, typer.Option(
    "--hardware", help="Hardware profile for the prediction (default: the recipe's).")]
LabelOpt = Annotated[list[str] | None, typer.Option(
    "--label", help="Free-form label stored with the run (repeatable).")]
NoCalibrateOpt = Annotated[bool, typer.Option(
    "--no-calibrate",
    help="Ignore stored runs: predict from the shipped priors (or the roofline bound).")]


def run(
    recipe: RecipeArg,
    db: DbOpt = None,
    site: SiteOpt = None,
    port: PortOpt = "auto",
    runs_dir: RunsDirOpt = None,
    hardware: RunHardwareOpt = None,
    hardware_file: HardwareFileOpt = None,
    label: LabelOpt = None,
    no_calibrate: NoCalibrateOpt = False,
    as_json: JsonOpt = False,
    as_markdown: MarkdownOpt = False,
    brief: BriefOpt = False,
) -> None:
    """Verify a recipe end to end and record the run with its prediction.

    The answer comes first (ok or failed and why, the KV pool the engine logged against the
    plan's, decode and prefill measured beside their prediction, the users found at the
    recipe's SLO, what to do next; --brief prints only that), the tables after it.
    """
    from servelab.pipeline.run import RunOptions, run_recipe
    from servelab.serve.recipe import load_recipe
    from servelab.store import open_store

    rec = load_recipe(recipe)
    options = RunOptions(
        port=_port(port),  # type: ignore[arg-type]
        runs_parent=runs_dir,
        hardware=hardware,
        hardware_files=tuple(hardware_file or ()),
        labels=tuple(label or ()),
        calibrate=not no_calibrate,
    )
    with open_store(db) as store:
        with RunProgress(err) as progress:
            outcome = run_recipe(rec, store, options, on_event=progress)
        index = None
        if site is not None:
            with err.status("rebuilding the site…", spinner="dots"):
                index = rebuild_site(store, site)
    _show(outcome, index, as_json, as_markdown, brief, recipe)
    if not outcome.ok:
        raise typer.Exit(1)


def _port(port: str) -> int | str | None:
    """``--port``: ``auto``, ``recipe`` (the recipe's: None) or a number."""
    if port == "auto":
        return "auto"
    if port == "recipe":
        return None
    try:
        return int(port)
    except ValueError:
        raise typer.BadParameter("--port takes 'auto', 'recipe' or a number") from None


def _show(outcome: RunOutcome, index: Path | None, as_json: bool, as_markdown: bool,
          brief: bool = False, recipe: Path | None = None) -> None:
    """The run's document as JSON; in a terminal the answer block, then (unless ``brief``)
    the tables that hold something; as Markdown those tables and, on stderr, one line
    saying how it went."""
    from servelab.evidence.acceptance import speculative_summary

    doc = outcome_doc(outcome, index)
    if as_json:
        typer.echo(json.dumps(doc, indent=1))
        return
    head = f"run {outcome.run_id}: {outcome.record.status}" + (
        f" — {outcome.record.status_reason}" if outcome.record.status_reason else ""
    )
    kv = doc["kv_pool_tokens"]
    graphs = graphs_table(doc)
    spec = speculative_summary(outcome.record, outcome.plan)
    tables = [*(summary_tables(outcome.summary) if outcome.summary else []),
              *([_kv_table(doc)] if isinstance(kv, dict) and any(kv.values()) else []),
              *([graphs] if graphs is not None else []),
              *([speculative_table(spec)] if spec is not None else [])]
    if not as_markdown:
        from servelab.cli.run_block import RunFacts, run_block
        from servelab.cli.screen import Screen

        screen = Screen()
        screen.show(run_block(RunFacts(outcome, doc, index, recipe)).renderable())
        if brief or not tables:
            return
        screen.heading("Details")
    emit("markdown" if as_markdown else "table", doc=doc, tables=tables)
    if as_markdown:
        err.print(escape(head), soft_wrap=True)
        if index is not None:
            err.print(f"site: {escape(str(index))}")


def register(app: typer.Typer) -> None:
    """Attach ``run`` to the root app."""
    app.command("run")(run)
