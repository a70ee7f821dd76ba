"""``servelab inspect`` (placeholder registration; the checkpoint package provides the logic)."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Attach the inspect command to the root app."""
    _ = app
