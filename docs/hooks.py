"""MkDocs hooks: the CLI reference is generated from servelab's Typer app at build time, so it
cannot drift from ``servelab COMMAND --help`` (tests/docs/test_docs.py checks every command)."""

from __future__ import annotations

from typing import Any

from mkdocs.structure.files import File, Files


def on_files(files: Files, config: Any) -> Files:
    from servelab.cli.reference import cli_reference

    files.append(File.generated(config, "reference/cli.md", content=cli_reference()))
    return files
