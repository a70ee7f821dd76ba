"""The ``servelab`` command: registers each command group; :mod:`servelab.cli.errors` maps
errors to one-line messages and exit statuses.

Each command group lives in its own module under ``servelab.cli`` and exposes either a
``register(app)`` function (plain commands) or a ``app`` Typer instance (a group).
"""

from __future__ import annotations

from typing import NoReturn

import typer

from servelab import __version__
from servelab.cli.errors import run_cli

app = typer.Typer(
    name="servelab",
    help="Inspect checkpoints, plan memory, serve, benchmark and publish LLM serving recipes.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)

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
        capacity_cmd,
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
    capacity_cmd.register(app)
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
    """Entry point: run the app; errors become one-line messages (see :mod:`.errors`)."""
    run_cli(lambda: app(args=argv, standalone_mode=False))
