"""How the ``servelab`` command turns failures into exit statuses and one-line messages.

The library raises typed errors (the :class:`~servelab.errors.ServelabError` tree); this is
the one place that maps them, as in this table:

- ``ServelabError``: ``error: <message>`` (the message names the file and the problem), exit
  status ``exc.exit_code`` (2 for bad input); ``SERVELAB_DEBUG=1`` re-raises for the traceback;
- ``KeyboardInterrupt``: ``interrupted``, status 130;
- click usage errors (a missing argument, an unknown option, a bad value): the same one line,
  ``error: <click's message> (see servelab CMD --help)``, status 2, not click's
  three-line usage block;
- ``typer.Abort``: ``aborted``, status 1; ``typer.Exit``: its status.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from functools import cache
from typing import TYPE_CHECKING, NoReturn

import typer

from servelab.errors import ServelabError

if TYPE_CHECKING:
    from rich.console import Console

INTERRUPTED = 130

# Typer >= 0.2x vendors click, so its usage errors are not ``click.ClickException``; this is
# the base class of whichever click Typer raises from.
_CLICK_EXCEPTION: type[Exception] = next(
    c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException"
)


@cache
def err_console() -> Console:
    """The stderr console for error lines (rich is imported only when one is printed)."""
    from rich.console import Console

    return Console(stderr=True, highlight=False, soft_wrap=True)


def run_cli(invoke: Callable[[], object]) -> NoReturn:
    """Call ``invoke`` (the Typer app) and exit with the status the table above gives."""
    try:
        rc = invoke()
    except ServelabError as exc:
        from rich.markup import escape

        err_console().print(f"[bold red]error:[/] {escape(str(exc))}", markup=True,
                            highlight=False)
        if os.environ.get("SERVELAB_DEBUG"):
            raise
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        err_console().print("[bold red]interrupted[/]")
        sys.exit(INTERRUPTED)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except typer.Abort:
        err_console().print("aborted")
        sys.exit(1)
    except _CLICK_EXCEPTION as exc:  # click usage errors arrive here in non-standalone mode
        from rich.markup import escape

        if not exc.format_message():  # type: ignore[attr-defined]
            exc.show()  # type: ignore[attr-defined]  # a group without its command: its help
            sys.exit(exc.exit_code)  # type: ignore[attr-defined]
        err_console().print(f"[bold red]error:[/] {escape(usage_line(exc))}", highlight=False)
        sys.exit(exc.exit_code)  # type: ignore[attr-defined]
    sys.exit(rc if isinstance(rc, int) else 0)


def usage_line(exc: Exception) -> str:
    """A click error as one line: its message, and where the command's help is."""
    message = " ".join(exc.format_message().split()).rstrip(".")  # type: ignore[attr-defined]
    if message[:2].istitle():  # "Missing argument" -> "missing argument", as servelab's lines
        message = message[0].lower() + message[1:]
    ctx = getattr(exc, "ctx", None)
    if ctx is None:
        return message
    names = []
    while ctx.parent is not None:  # the root's own name is the program's (python -m ...)
        names.append(ctx.info_name)
        ctx = ctx.parent
    return f"{message} (see {' '.join(['servelab', *reversed(names)])} --help)"


__all__ = ["INTERRUPTED", "err_console", "run_cli", "usage_line"]
