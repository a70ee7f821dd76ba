"""``servelab runs list|show|export|import|delete``: the stored runs.

``runs list --json`` prints ``{"schema": "servelab.runs/1", "runs": [run, ...]}`` with the
same run objects as ``runs export`` (without samples); ``runs show ID --json`` prints one run
object (samples included with ``--samples``). ``runs export`` writes the export format of
:mod:`servelab.store.exchange`; ``runs import`` reads it, ``vllm bench serve`` result files, or
published runs (``servelab/published/runs.toml``'s schema, JSON or TOML: labelled ``published``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console

from servelab.cli.output import (
    CsvOpt,
    DbOpt,
    JsonOpt,
    MarkdownOpt,
    Table,
    emit,
    num,
    pick_format,
    stdout_console,
)
from servelab.errors import InputError, UsageError

if TYPE_CHECKING:  # loaded only when a command runs (fast --help)
    from servelab.store import RunFilter, RunRecord

app = typer.Typer(help="List, show, export, import and delete stored runs.", no_args_is_help=True)

RecipeOpt = Annotated[str | None, typer.Option("--recipe", help="Only runs of this recipe name.")]
ModelOpt = Annotated[str | None, typer.Option("--model", help="Only runs of this model id.")]
LabelOpt = Annotated[str | None, typer.Option("--label", help="Only runs carrying this label.")]
StatusOpt = Annotated[str | None, typer.Option("--status", help="Only runs with status ok|failed.")]
SinceOpt = Annotated[
    str | None, typer.Option("--since", help="Only runs started on/after this date (YYYY-MM-DD).")
]
LimitOpt = Annotated[int | None, typer.Option("--limit", min=1, help="At most this many runs.")]


def _date(value: str | None, option: str) -> datetime | None:
    if value is None:
        return None
    try:
        dt = datetime.fromisoformat(value)
    except ValueError as exc:
        raise UsageError(f"{option}: not a date/time: {value!r} (use YYYY-MM-DD)") from exc
    return dt if dt.tzinfo is not None else dt.replace(tzinfo=UTC)


def _filter(
    recipe: str | None,
    model: str | None,
    label: str | None,
    status: str | None,
    since: str | None,
    limit: int | None,
    newest_first: bool = False,
) -> RunFilter:
    from servelab.store import RunFilter

    if status is not None and status not in ("ok", "failed"):
        raise UsageError(f"--status must be ok or failed, not {status!r}")
    return RunFilter(
        recipe_name=recipe,
        model_id=model,
        label=label,
        status=status,
        since=_date(since, "--since"),
        limit=limit,
        newest_first=newest_first,
    )


def _when(dt: datetime | None) -> str:
    return dt.astimezone(UTC).strftime("%Y-%m-%d %H:%M") if dt is not None else ""


def runs_table(runs: list[RunRecord], title: str = "runs") -> Table:
    """The ``runs list`` table."""

    cols = (
        "id",
        "started (UTC)",
        "status",
        "recipe",
        "model",
        "engine",
        "hardware",
        "host",
        "decode tok/s",
        "prefill tok/s",
        "weights GiB",
        "KV tokens",
        "labels",
    )
    rows = [
        (
            r.run_id or "",
            _when(r.started_at),
            r.status if r.status == "ok" else f"failed: {(r.status_reason or '')[:40]}",
            r.recipe_name or "",
            r.model_id or "",
            " ".join(x for x in (r.engine_name, r.engine_version) if x),
            r.hardware or "",
            r.host or "",
            num(r.decode_tok_s),
            num(r.prefill_tok_s, 0),
            num(r.weights_gib),
            num(r.kv_pool_tokens),
            ", ".join(r.labels),
        )
        for r in runs
    ]
    return Table(title, cols, rows, no_wrap=("id",))


@app.command("list")
def list_cmd(
    recipe: RecipeOpt = None,
    model: ModelOpt = None,
    label: LabelOpt = None,
    status: StatusOpt = None,
    since: SinceOpt = None,
    limit: LimitOpt = None,
    db: DbOpt = None,  # read only: a missing database is an error, never created
    as_json: JsonOpt = False,
    as_csv: CsvOpt = False,
    as_markdown: MarkdownOpt = False,
) -> None:
    """List stored runs, newest first."""
    from servelab.store import EXPORT_SCHEMA, open_store, run_to_dict
    from servelab.store.connect import ENV_DB

    fmt = pick_format(as_json, as_csv, as_markdown)
    flt = _filter(recipe, model, label, status, since, limit, True)
    try:
        with open_store(db, create=False) as store:
            runs = store.list_runs(flt)
            stored = bool(runs) or bool(store.list_runs(_filter(None, None, None, None, None,
                                                                1, True)))
    except InputError:
        if db is not None or os.environ.get(ENV_DB):
            raise  # a database named on purpose and not there: a typo, not an empty store
        runs, stored = [], False  # the default database is made by the first run
    doc = {"schema": EXPORT_SCHEMA, "runs": [run_to_dict(r, samples=False) for r in runs]}
    if not runs and fmt == "table":
        stdout_console().print(
            "no stored runs match" if stored else
            "no runs stored yet: `servelab run RECIPE` or `servelab bench URL` records one")
        return
    emit(fmt, doc=doc, tables=[runs_table(runs, f"{len(runs)} runs")])


def _host_cpu(extra: Mapping[str, Any] | None) -> str:
    """The recorded CPU of the run's host ("" for runs recorded before it was)."""
    cpu = (extra or {}).get("host_cpu")
    if not isinstance(cpu, Mapping):
        return ""
    n = cpu.get("logical_cpus")
    count = f" ({n} logical CPUs)" if isinstance(n, int) else ""
    return f"{cpu.get('model') or 'unknown'}{count}"


@app.command("show")
def show_cmd(
    run_id: Annotated[str, typer.Argument(help="Run id (or a unique prefix of it).")],
    samples: Annotated[
        bool, typer.Option("--samples", help="Also list every per-request sample.")
    ] = False,
    db: DbOpt = None,  # read only: the run is read with its samples
    as_json: JsonOpt = False,
    as_csv: CsvOpt = False,
    as_markdown: MarkdownOpt = False,
) -> None:
    """Show one run: its conditions, metrics (with CIs) and optionally its samples."""
    from servelab.store import run_to_dict

    fmt = pick_format(as_json, as_csv, as_markdown)
    run = _stored_run(db, run_id)
    tables = [Table(f"run {run.run_id}", ("field", "value"),
                    [(k, v) for k, v in _run_facts(run) if v])]
    if run.metrics:
        tables.append(_metrics_table(run))
    if samples:
        tables.append(_samples_table(run))
    notes = []
    if run.log_tail and run.status != "ok":
        notes.append("engine log tail:\n" + run.log_tail)
    emit(fmt, doc=run_to_dict(run, samples=samples), tables=tables, notes=notes)


def _stored_run(db: str | None, run_id: str) -> RunRecord:
    """The run ``run_id`` (or a unique prefix) with its samples; the database is only read."""
    from servelab.store import open_store

    with open_store(db, create=False) as store:
        return store.get_run(run_id, samples=True)


def _run_facts(run: RunRecord) -> list[tuple[str, str]]:
    """The run's conditions, one (field, value) each."""
    return [
        ("id", run.run_id or ""),
        ("started (UTC)", _when(run.started_at)),
        ("finished (UTC)", _when(run.finished_at)),
        ("status", run.status + (f" ({run.status_reason})" if run.status_reason else "")),
        ("recipe", run.recipe_name or ""),
        ("recipe sha256", run.recipe_hash or ""),
        ("model", run.model_id or ""),
        (
            "checkpoint",
            " ".join(
                x
                for x in (run.checkpoint_revision, run.checkpoint_path, run.checkpoint_header_hash)
                if x
            ),
        ),
        ("hardware / host", " / ".join(x for x in (run.hardware, run.host) if x)),
        ("host CPU", _host_cpu(run.extra)),
        ("driver / CUDA / torch", " / ".join(x or "?" for x in (run.driver, run.cuda, run.torch))),
        ("engine", " ".join(x for x in (run.engine_name, run.engine_version) if x)),
        ("engine args", " ".join(run.engine_args)),
        ("decode tok/s", num(run.decode_tok_s)),
        ("prefill tok/s", num(run.prefill_tok_s, 0)),
        ("weights GiB", num(run.weights_gib)),
        ("KV pool tokens", num(run.kv_pool_tokens)),
        ("power W", num(run.power_w, 1)),
        ("labels", ", ".join(run.labels)),
        (
            "requests",
            f"{sum(s.ok for s in run.samples)} ok, {sum(not s.ok for s in run.samples)} failed",
        ),
    ]


def _metrics_table(run: RunRecord) -> Table:
    """The run's metrics with their 95 % intervals."""
    return Table(
        "metrics",
        ("metric", "point", "value", "95% CI", "n", "unit"),
        [
            (
                m.name,
                m.point,
                num(m.value, 3),
                f"{num(m.ci_low, 3)} – {num(m.ci_high, 3)}" if m.ci_low is not None else "",
                str(m.n),
                m.unit,
            )
            for m in run.metrics
        ],
    )


def _samples_table(run: RunRecord) -> Table:
    """Every per-request sample of the run."""
    return Table(
        "samples",
        ("point", "#", "TTFT s", "TPOT ms", "decode tok/s", "E2E s", "prompt", "completion",
         "error"),
        [
            (
                s.point,
                str(s.index),
                num(s.ttft_s, 4),
                num(s.tpot_s * 1000 if s.tpot_s is not None else None, 3),
                num(s.decode_tok_s),
                num(s.e2e_s, 3),
                num(s.prompt_tokens),
                num(s.completion_tokens),
                s.error or "",
            )
            for s in run.samples
        ],
    )


@app.command("export")
def export_cmd(
    run_ids: Annotated[
        list[str] | None, typer.Argument(help="Runs to export (default: all matching).")
    ] = None,
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="Write here (default: stdout).")
    ] = None,
    recipe: RecipeOpt = None,
    model: ModelOpt = None,
    label: LabelOpt = None,
    since: SinceOpt = None,
    db: DbOpt = None,
) -> None:
    """Export runs with every sample as JSON (schema servelab.runs/1)."""
    from servelab.store import export_doc, open_store
    from servelab.store.exchange import write_json_atomic

    with open_store(db, create=False) as store:
        if run_ids:
            runs = [store.get_run(r) for r in run_ids]
        else:
            runs = store.list_runs(_filter(recipe, model, label, None, since, None), samples=True)
    doc = export_doc(runs)
    if output is None:
        typer.echo(json.dumps(doc, indent=1))
    else:
        write_json_atomic(output, doc)
        Console(stderr=True, highlight=False).print(f"exported {len(runs)} runs to {output}")


@app.command("import")
def import_cmd(
    files: Annotated[
        list[Path],
        typer.Argument(help="servelab export files, `vllm bench serve` result JSON files, or "
                       "published runs (schema servelab.published/1, JSON or TOML)."),
    ],
    label: Annotated[
        list[str] | None,
        typer.Option("--label", help="Add this label to every imported run (repeatable)."),
    ] = None,
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Import runs (duplicates by id are skipped, so importing twice is harmless)."""
    from servelab.store import import_runs, open_store, read_import_file

    records = []
    for f in files:  # read and validate everything before writing anything
        records.extend(read_import_file(f))
    if label:
        records = [replace(r, labels=tuple(dict.fromkeys([*r.labels, *label]))) for r in records]
    with open_store(db) as store:
        result = import_runs(store, records)
    if as_json:
        typer.echo(json.dumps({"added": list(result.added), "skipped": list(result.skipped)}))
        return
    con = stdout_console()
    con.print(f"imported {len(result.added)} runs, skipped {len(result.skipped)} already stored")
    for rid in result.added:
        con.print(f"  + {rid}")


@app.command("delete")
def delete_cmd(
    run_ids: Annotated[list[str], typer.Argument(help="Run ids (or unique prefixes).")],
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
    db: DbOpt = None,
) -> None:
    """Delete runs with their samples and metrics."""
    from servelab.store import open_store

    with open_store(db, create=False) as store:
        full = [store.resolve_id(r) for r in run_ids]
        if not yes and not typer.confirm(f"delete {len(full)} run(s): {', '.join(full)}?"):
            raise typer.Abort()
        for rid in full:
            store.delete_run(rid)
    stdout_console().print(f"deleted {len(full)} run(s)")


def register(root: typer.Typer) -> None:
    """Attach the ``runs`` group to the root app."""
    root.add_typer(app, name="runs")
