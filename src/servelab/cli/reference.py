"""The CLI reference page, generated from the Typer app itself (the docs' ``reference/cli.md``,
written by ``docs/hooks.py`` when MkDocs builds the site).

Typer's own Markdown generator (``typer.cli.get_docs_for_click``, what ``typer MODULE utils
docs`` prints) walks every command, loading each lazily registered module, so the page holds
what ``servelab COMMAND --help`` prints: usage, arguments and options with their types,
defaults and help. ``python -m servelab.cli.reference`` prints it.
"""

from __future__ import annotations

PREAMBLE = """\
Generated from servelab's command-line app when these docs are built: each section is what
`servelab COMMAND --help` prints, so it cannot fall behind the code (the test suite checks
every command against its `--help`). Every command maps a failure to one line,
`error: ...`, and exit status 2 for bad input; `SERVELAB_DEBUG=1` shows the traceback.
"""


def cli_reference() -> str:
    """The reference page's Markdown."""
    import typer
    from typer.cli import get_docs_for_click

    from servelab.cli.app import app

    command = typer.main.get_command(app)
    ctx = typer.Context(command)
    body = get_docs_for_click(obj=command, ctx=ctx, name="servelab", title="CLI reference")
    head, _, rest = body.partition("\n\n")
    return f"{head}\n\n{PREAMBLE}\n{rest}"


if __name__ == "__main__":
    print(cli_reference(), end="")
