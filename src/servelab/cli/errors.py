"""How the ``servelab`` command turns failures into exit statuses and one-line messages.

The library raises typed errors (the :class:`~servelab.errors.ServelabError` tree); this is
the one place that maps them, as in this table:

- ``ServelabError``: ``error: <message>`` (the message names the file and the problem), exit
  status ``exc.exit_code`` (2 for bad input); ``SERVELAB_DEBUG=1`` re-raises for the traceback;
- ``KeyboardInterrupt``: ``interrupted``, status 130;
- click usage errors: click's own usage message, status 2;
- ``typer.Abort``: ``aborted``, status 1; ``typer.Exit``: its status.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import NoReturn

import typer
from rich.console import Console
from rich.markup import escape

from servelab.errors import ServelabError

err_console = Console(stderr=True, highlight=False, soft_wrap=True)

INTERRUPTED = 130


def run_cli(invoke: Callable[[], object]) -> NoReturn:
    """Call ``invoke`` (the Typer app) and exit with the status the table above gives."""
    try:
        rc = invoke()
    except ServelabError as exc:
        err_console.print(f"[bold red]error:[/] {escape(str(exc))}", markup=True, highlight=False)
        if os.environ.get("SERVELAB_DEBUG"):
            raise
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        err_console.print("[bold red]interrupted[/]")
        sys.exit(INTERRUPTED)
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


__all__ = ["INTERRUPTED", "err_console", "run_cli"]
