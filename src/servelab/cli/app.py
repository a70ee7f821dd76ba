"""The ``servelab`` command: registers each command group and maps errors to messages.

Each command group lives in its own module under ``servelab.cli`` and exposes either a
``register(app)`` function (plain commands) or a ``app`` Typer instance (a group).
"""

from __future__ import annotations

import os
import sys
from typing import NoReturn

import typer
from rich.console import Console
from rich.markup import escape

from servelab import __version__
from servelab.errors import ServelabError

app = typer.Typer(
    name="servelab",
    help="Inspect checkpoints, plan memory, serve, benchmark and publish LLM serving recipes.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)

err_console = Console(stderr=True, highlight=False, soft_wrap=True)


def _version_callback(value: bool) -> None:
    if value:
        typer.echo(f"servelab {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version_callback, is_eager=True, help="Print the version."
    ),
) -> None:
    """servelab: from checkpoint headers to a published, measured recipe page."""


def _register_commands() -> None:
    # One line per command group; keep alphabetical.
    from servelab.cli import (
        analysis_cmd,
        bench_cmd,
        calibration_cmd,
        demo_cmd,
        engine_cmd,
        hardware_cmd,
        inspect_cmd,
        plan_cmd,
        recipe_cmd,
        run_cmd,
        runs_cmd,
        serve_cmd,
        site_cmd,
        synth_cmd,
    )

    analysis_cmd.register(app)
    bench_cmd.register(app)
    app.add_typer(calibration_cmd.app)
    demo_cmd.register(app)
    engine_cmd.register(app)
    hardware_cmd.register(app)
    inspect_cmd.register(app)
    plan_cmd.register(app)
    recipe_cmd.register(app)
    run_cmd.register(app)
    runs_cmd.register(app)
    serve_cmd.register(app)
    site_cmd.register(app)
    synth_cmd.register(app)


_register_commands()


def main(argv: list[str] | None = None) -> NoReturn:
    """Entry point: run the app and turn ServelabError into a one-line message."""
    try:
        rc = app(args=argv, standalone_mode=False)
    except ServelabError as exc:
        err_console.print(f"[bold red]error:[/] {escape(str(exc))}", markup=True, highlight=False)
        if os.environ.get("SERVELAB_DEBUG"):
            raise
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        err_console.print("[bold red]interrupted[/]")
        sys.exit(130)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except typer.Abort:
        err_console.print("aborted")
        sys.exit(1)
    except Exception as exc:  # click usage errors arrive here in non-standalone mode
        import click

        if isinstance(exc, click.ClickException):
            exc.show()
            sys.exit(exc.exit_code)
        raise
    sys.exit(rc if isinstance(rc, int) else 0)
