"""``servelab site build OUTDIR`` — the static recipe site from the results database.

``site build --json`` prints::

    {"outdir": str, "index": str, "files": int, "bytes": int, "recipes": [str],
     "models": [str], "experiments": [str], "runs": int}
"""

from __future__ import annotations

import json
import webbrowser
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape

from servelab.cli.output import stdout_console
from servelab.errors import UsageError

__all__ = ["app", "register"]

app = typer.Typer(help="Build the static recipe site (HTML + Markdown + SVG plots).",
                  no_args_is_help=True)
out = stdout_console()
err = Console(stderr=True, highlight=False)


@app.command("build")
def build(
    outdir: Annotated[Path, typer.Argument(
        help="Directory to write the site to; replaced atomically if servelab built it before.",
        show_default=False)],
    db: Annotated[str | None, typer.Option(
        "--db", help="Results database: SQLite path or SQLAlchemy URL "
                     "(default: $SERVELAB_DB, else the data directory's results.db).")] = None,
    title: Annotated[str, typer.Option(
        "--title", help="Site title shown on every page.")] = "servelab recipes",
    open_browser: Annotated[bool, typer.Option(
        "--open", help="Open the built index.html in the default web browser.")] = False,
    as_json: Annotated[bool, typer.Option(
        "--json", help="Print what was built as JSON (schema in the module docstring).")] = False,
) -> None:
    """Build recipe pages, model indexes, experiment and run pages from every recorded run."""
    # Imported here: matplotlib and the store cost ~1.5 s, which every other command would pay.
    from servelab.cli.answers import answered_site
    from servelab.cli.progress import status as progress_status
    from servelab.site.build import build_site, check_outdir
    from servelab.store import display_url, open_store, resolve_url

    check_outdir(outdir)  # before reading the database and rendering
    url = resolve_url(db)
    if url.startswith("sqlite:///"):
        path = Path(url[len("sqlite:///"):])
        if not path.exists():
            raise UsageError("no results database here; record a run first (servelab run)",
                             path=path)
    with progress_status(err, f"reading {escape(display_url(url))}…"), \
            open_store(url) as store:
        site = answered_site(store, title=title)
    with progress_status(err, f"rendering {len(site.recipes)} recipe page(s)…"):
        built = build_site(site, outdir)
    if as_json:
        typer.echo(json.dumps({
            "outdir": str(built.outdir), "index": str(built.index), "files": len(built.files),
            "bytes": built.total_bytes, "recipes": [r.slug for r in site.recipes],
            "models": [m.slug for m in site.models],
            "experiments": [e.slug for e in site.experiments], "runs": len(site.runs),
        }, indent=1))
    else:
        out.print(
            f"[bold green]built[/] {len(site.recipes)} recipe page(s), {len(site.models)} model "
            f"index(es), {len(site.experiments)} experiment(s), {len(site.runs)} run page(s) "
            f"→ {escape(str(built.index))}"
        )
    if open_browser:
        webbrowser.open(built.index.as_uri())


def register(root: typer.Typer) -> None:
    """Attach ``site`` to the root app."""
    root.add_typer(app, name="site")
