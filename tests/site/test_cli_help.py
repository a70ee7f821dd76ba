"""Every ``servelab site`` command and option says what it does."""

from __future__ import annotations

from typing import Any

import typer

from servelab.cli.app import app


def test_every_site_command_and_option_has_help() -> None:
    root: Any = typer.main.get_command(app)
    ctx = root.make_context("servelab", ["site"], resilient_parsing=True)
    site = root.get_command(ctx, "site")
    assert site is not None and (site.help or "").strip()
    sub = site.make_context("site", ["build"], parent=ctx, resilient_parsing=True)
    names = site.list_commands(sub)
    assert names == ["build"]
    for name in names:
        cmd = site.get_command(sub, name)
        assert cmd is not None and (cmd.help or "").strip(), name
        assert cmd.params
        for param in cmd.params:
            assert param.param_type_name in ("option", "argument"), param
            assert (getattr(param, "help", None) or "").strip(), f"{name}: {param.name}"
