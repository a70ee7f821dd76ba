"""The shape issue 42 left the code in, held: small modules, short command functions.

* no module of ``src/servelab`` passes :data:`MAX_MODULE_LINES` lines;
* no command function (one ``servelab`` runs: decorated with ``X.command(...)`` /
  ``X.callback(...)`` or registered as ``X.command(...)(f)``) passes
  :data:`MAX_COMMAND_LINES` lines, decorators and docstring included: a command parses its
  options (declared once per group) and hands them on.

Read from the source's syntax tree, so a helper that only looks like a command is not counted
and a command however registered is.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "servelab"
MAX_MODULE_LINES = 600
MAX_COMMAND_LINES = 80


def _is_command_decorator(node: ast.expr) -> bool:
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("command", "callback"))


def command_functions(path: Path) -> dict[str, int]:
    """Command function name -> its length in lines, for one module."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    registered = {
        arg.id
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and _is_command_decorator(node.func)
        for arg in node.args if isinstance(arg, ast.Name)
    }
    out = {}
    for node in ast.walk(tree):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        if node.name in registered or any(_is_command_decorator(d) for d in node.decorator_list):
            start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            out[node.name] = (node.end_lineno or node.lineno) - start + 1
    return out


def test_no_module_is_over_the_limit() -> None:
    long = {str(p.relative_to(SRC)): n for p in sorted(SRC.rglob("*.py"))
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES}
    assert long == {}


def test_no_command_function_is_over_the_limit() -> None:
    found = {f"{p.relative_to(SRC)}:{name}": n for p in sorted((SRC / "cli").glob("*.py"))
             for name, n in command_functions(p).items()}
    assert len(found) >= 30  # every servelab command is seen (plan, choose, bench, run, ...)
    assert {k: n for k, n in found.items() if n > MAX_COMMAND_LINES} == {}


def test_the_checker_finds_commands_however_registered(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text(
        "import typer\napp = typer.Typer()\n\n"
        "@app.command('a')\ndef a() -> None:\n    pass\n\n"
        "def b() -> None:\n    x = 1\n    y = 2\n\n"
        "def helper() -> None:\n    pass\n\n"
        "def register(root: typer.Typer) -> None:\n    root.command('b')(b)\n"
    )
    assert command_functions(module) == {"a": 3, "b": 3}
