"""Typer options of the workload fields, from the one workload schema (:mod:`servelab.bench.spec`):
``servelab bench`` and ``servelab capacity`` declare theirs through :func:`workload_option`,
so a flag, its help and its default are those of the :class:`WorkloadSpec` field."""

from __future__ import annotations

from typing import Any

import typer

from servelab.bench.spec import FIELDS, option_default

__all__ = ["workload_option"]


def workload_option(name: str, default: Any = None) -> Any:
    """The option of workload field ``name``: its flag, help and default from the one
    workload schema; ``default`` replaces the field's where the option spells it otherwise
    (``--depths 0``: no depth grid)."""
    field = FIELDS[name]
    return typer.Option(option_default(name) if default is None else default, field.flag,
                        help=field.help)
