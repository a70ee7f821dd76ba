"""Every command's ``--help`` at 80 columns shows every option name whole: Rich shrinks the
options table's name column (``--no-enable-prefix-cachi…``) when the other columns (a wide
metavar, a long word in a help text) leave it too little room."""

from __future__ import annotations

import re
from collections.abc import Iterator
from functools import cache
from typing import Any

import click
import pytest
import typer
from typer.testing import CliRunner

from servelab.cli.app import app

runner = CliRunner()


def _commands(cmd: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    """(argv path, command) for every leaf command and group under ``cmd``."""
    if path:
        yield path, cmd
    sub = getattr(cmd, "commands", None)
    if sub is not None:
        ctx = click.Context(cmd)
        for name in cmd.list_commands(ctx):
            yield from _commands(cmd.get_command(ctx, name), (*path, name))


@cache
def _all_commands() -> dict[tuple[str, ...], Any]:
    return dict(_commands(typer.main.get_command(app)))


def _long_names(cmd: Any) -> list[str]:
    return [o for p in cmd.params if isinstance(p, click.Option)
            for o in (*p.opts, *p.secondary_opts) if o.startswith("--")]


def test_the_walk_covers_plan_and_nested_groups() -> None:
    names = {" ".join(path) for path in _all_commands()}
    assert {"plan", "run", "site build", "hardware list", "runs show"} <= names
    assert len(names) > 30


@pytest.mark.parametrize("path", list(_all_commands()), ids=" ".join)
def test_help_at_80_columns_shows_every_option_name_whole(path: tuple[str, ...]) -> None:
    cmd = _all_commands()[path]
    res = runner.invoke(app, [*path, "--help"], env={"COLUMNS": "80"})
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert max(map(len, lines)) <= 80
    # the option column: the first token of each row of the options panel
    shown = {m.group(1) for line in lines
             if (m := re.match(r"│ (?:\*\s+)?(--\S+)", line))}
    cut = sorted(n for n in shown if n.endswith("…"))
    assert cut == [], f"servelab {' '.join(path)} --help cuts {cut}"
    assert set(_long_names(cmd)) - {"--help"} <= _shown_names(lines)


def _shown_names(lines: list[str]) -> set[str]:
    """Every ``--name`` token on an options-panel row (primary and secondary columns)."""
    return {tok for line in lines if line.startswith("│ ")
            for tok in line.strip("│ ").split() if tok.startswith("--")}


@pytest.mark.parametrize("path", list(_all_commands()), ids=" ".join)
def test_help_shows_a_flag_as_a_flag(path: tuple[str, ...]) -> None:
    # Typer's help gave every option a type column: "--fits <bool>" read as taking a value
    res = runner.invoke(app, [*path, "--help"], env={"COLUMNS": "80"})
    assert res.exit_code == 0, res.output
    assert "<bool>" not in res.output, res.output


def test_plan_help_shows_fits_as_a_flag() -> None:
    res = runner.invoke(app, ["plan", "--help"], env={"COLUMNS": "80"})
    [row] = [line for line in res.output.splitlines() if "--fits" in line]
    assert re.match(r"│ --fits\s+Only say whether it fits", row), row
    root = runner.invoke(app, ["--help"], env={"COLUMNS": "80"})
    assert "<bool>" not in root.output and "--version" in root.output
