"""Source-level security rules, checked on every file of the package (issue 8).

No code path may unpickle (pickle, torch.load, numpy allow_pickle, yaml.load, marshal) and
no process may be started through a shell or from a command string.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "servelab"
FILES = sorted(SRC.rglob("*.py"))

FORBIDDEN_CALLS = {
    ("pickle", "load"), ("pickle", "loads"), ("pickle", "Unpickler"),
    ("torch", "load"), ("marshal", "loads"), ("marshal", "load"),
    ("yaml", "load"), ("yaml", "unsafe_load"), ("os", "system"), ("os", "popen"),
    ("dill", "load"), ("dill", "loads"), ("joblib", "load"), ("shelve", "open"),
}
FORBIDDEN_MODULES = {"pickle", "cPickle", "dill", "joblib", "shelve", "marshal"}
PROCESS_CALLS = {"run", "Popen", "call", "check_call", "check_output"}


def _dotted(node: ast.AST) -> tuple[str, ...]:
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    return tuple(reversed(parts))


def _problems(path: Path, root: Path = SRC.parent) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    out: list[str] = []
    for node in ast.walk(tree):
        where = f"{path.relative_to(root)}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.Import | ast.ImportFrom):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [
                node.module or ""]
            out += [f"{where}: imports {n}" for n in names if n.split(".")[0] in FORBIDDEN_MODULES]
        if not isinstance(node, ast.Call):
            continue
        name = _dotted(node.func)
        if name[-2:] in FORBIDDEN_CALLS:
            out.append(f"{where}: calls {'.'.join(name)}")
        for kw in node.keywords:
            if kw.arg == "shell" and not (isinstance(kw.value, ast.Constant)
                                          and kw.value.value is False):
                out.append(f"{where}: shell= in {'.'.join(name)}")
            if kw.arg == "allow_pickle" and not (isinstance(kw.value, ast.Constant)
                                                 and kw.value.value is False):
                out.append(f"{where}: allow_pickle in {'.'.join(name)}")
        if name[:1] == ("subprocess",) and name[-1] in PROCESS_CALLS and node.args:
            first = node.args[0]
            if isinstance(first, ast.Constant | ast.JoinedStr | ast.BinOp):
                out.append(f"{where}: {'.'.join(name)} given a command string")
    return out


def test_the_package_has_source_files() -> None:
    assert len(FILES) > 50


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(SRC)))
def test_no_unpickling_and_no_shell(path: Path) -> None:
    assert _problems(path) == []


def test_the_checker_catches_what_it_forbids(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text(
        "import pickle\nimport subprocess, torch, os\n"
        "torch.load('x')\nsubprocess.run('ls -l', shell=True)\nos.system('x')\n"
        "subprocess.Popen(f'vllm {1}')\n"
    )
    found = _problems(bad, tmp_path)
    assert len(found) == 6, found


def test_the_planner_imports_no_engine_code() -> None:
    """sizing/ is pure arithmetic: engines pass values in (issue 14); plan/ asks engines
    through the registry only, never an engine's own package (issue 42)."""
    found = []
    for path in sorted((SRC / "sizing").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
                ("servelab.serve", "servelab.engines")
            ):
                found.append(f"sizing/{path.name}:{node.lineno}: {node.module}")
    for path in sorted((SRC / "plan").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            module = node.module or "" if isinstance(node, ast.ImportFrom) else ""
            if module.startswith("servelab.engines.") and module != "servelab.engines.base":
                found.append(f"plan/{path.name}:{node.lineno}: {module}")
    assert found == []
