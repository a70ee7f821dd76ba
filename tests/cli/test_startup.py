"""``servelab --help`` and ``--version`` load none of the heavy libraries and none of the
command modules, and a command's own ``--help`` loads only its module (they must start fast;
the time itself is measured in benchmarks/cli_startup.py, not asserted here). The root group
lists commands from the summaries in ``servelab.cli.app.COMMANDS``; these tests check that
the listing is exactly what the loaded commands would print."""

from __future__ import annotations

import inspect
import subprocess
import sys
from typing import Any

import pytest
import typer

from servelab.cli.app import COMMANDS, app
from servelab.cli.lazy import load_module_commands

HEAVY = ("sqlalchemy", "numpy", "matplotlib", "jinja2", "httpx", "orjson",
         "huggingface_hub", "safetensors", "torch", "transformers", "psycopg",
         "servelab.store", "servelab.pipeline", "servelab.site", "servelab.analysis",
         "servelab.bench", "servelab.checkpoint")
# what the root's --help and --version need neither (a subcommand's --help builds its options,
# and typer loads pydantic to coerce them; the engines registry is pydantic models)
ROOT_HEAVY = (*HEAVY, "pydantic", "servelab.engines", "servelab.serve", "servelab.sizing",
              "servelab.hardware")

_CODE = """
import sys
from servelab.cli.app import main
try:
    main({argv!r})
except SystemExit as exc:
    assert exc.code in (0, None), exc.code
print("\\n".join(sorted(sys.modules)))
"""


def _loaded_by(argv: list[str]) -> set[str]:
    out = subprocess.run([sys.executable, "-c", _CODE.format(argv=argv)], capture_output=True,
                         text=True, timeout=120, check=True).stdout
    return set(out.splitlines())


def _found(loaded: set[str], names: tuple[str, ...]) -> list[str]:
    return sorted(m for m in loaded for h in names if m == h or m.startswith(h + "."))


def _command_modules(loaded: set[str]) -> list[str]:
    return sorted(m for m in loaded if m.startswith("servelab.cli.") and m.endswith("_cmd"))


@pytest.mark.parametrize("argv", [["--help"], ["--version"]])
def test_root_help_and_version_import_no_command_module(argv: list[str]) -> None:
    loaded = _loaded_by(argv)
    assert _found(loaded, ROOT_HEAVY) == []
    assert _command_modules(loaded) == []
    assert "servelab.cli.app" in loaded


@pytest.mark.parametrize(("argv", "module"), [
    (["run", "--help"], "servelab.cli.run_cmd"),
    (["plan", "--help"], "servelab.cli.plan_cmd"),
    (["runs", "--help"], "servelab.cli.runs_cmd"),
    (["experiment", "--help"], "servelab.cli.analysis_cmd"),
])
def test_command_help_imports_its_module_and_no_heavy_library(argv: list[str],
                                                              module: str) -> None:
    loaded = _loaded_by(argv)
    assert _found(loaded, HEAVY) == []
    assert module in loaded  # the command itself was built for its help
    # only what its module imports: never every command module
    assert len(_command_modules(loaded)) < len({c.module for c in COMMANDS})


def _summary(cmd: Any) -> str:
    return inspect.cleandoc(cmd.help or "").split("\n\n")[0]


def test_lazy_table_matches_the_commands_each_module_registers() -> None:
    modules = list(dict.fromkeys(c.module for c in COMMANDS))
    built: dict[str, Any] = {}
    for module in modules:
        for name, cmd in load_module_commands(module).items():
            assert name not in built, f"{name} registered twice"
            built[name] = cmd
    plain = [n for n, c in built.items() if not hasattr(c, "commands")]
    groups = [n for n, c in built.items() if hasattr(c, "commands")]
    assert [c.name for c in COMMANDS] == plain + groups  # Typer's order: commands, then groups
    for c in COMMANDS:
        assert c.summary == _summary(built[c.name]), c.name
        assert c.name in load_module_commands(c.module), f"{c.name} is not in {c.module}"


def test_root_help_is_what_the_loaded_commands_print(capsys: pytest.CaptureFixture[str],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "100")

    def root_help(load: bool) -> str:
        root: Any = typer.main.get_command(app)
        if load:
            for name in list(root.commands):
                assert root.commands[name].name == name
        root.main(["--help"], prog_name="servelab", standalone_mode=False)
        return capsys.readouterr().out

    lazy, eager = root_help(load=False), root_help(load=True)
    assert "synth" in lazy and "Commands" in lazy
    assert lazy == eager
