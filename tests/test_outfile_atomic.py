"""The one temp-then-rename: atomic_file / atomic_dir (issue 34), on real files.

Every hand-written temp-file-then-rename in src went through these; the source check at
the bottom keeps it that way.
"""

from __future__ import annotations

import ast
import os
import stat
from pathlib import Path

import pytest

from servelab.outfile import atomic_dir, atomic_file

SRC = Path(__file__).resolve().parents[1] / "src" / "servelab"


def _names(d: Path) -> list[str]:
    return sorted(p.name for p in d.iterdir())


def test_atomic_file_replaces_whole_or_not_at_all(tmp_path: Path) -> None:
    target = tmp_path / "x.gguf"
    target.write_text("old")
    old = os.umask(0o022)
    try:
        with atomic_file(target) as tmp:
            tmp.write_text("new")
            assert target.read_text() == "old"  # nothing visible until the block ends
    finally:
        os.umask(old)
    assert target.read_text() == "new" and stat.S_IMODE(target.stat().st_mode) == 0o644
    with pytest.raises(RuntimeError), atomic_file(target) as tmp:
        tmp.write_text("half")
        raise RuntimeError("writer failed")
    assert target.read_text() == "new" and _names(tmp_path) == ["x.gguf"]


def test_atomic_file_keeps_a_given_mode(tmp_path: Path) -> None:
    with atomic_file(tmp_path / "bin" / "server", mode=0o755) as tmp:
        tmp.write_bytes(b"#!/bin/sh\n")
    assert stat.S_IMODE((tmp_path / "bin" / "server").stat().st_mode) == 0o755


def test_atomic_dir_new_refused_and_replaced(tmp_path: Path) -> None:
    out = tmp_path / "site"
    with atomic_dir(out) as tmp:
        (tmp / "a").write_text("1")
        assert not out.exists()
    assert _names(out) == ["a"]
    # Without replace an existing non-empty directory stays and the new tree is dropped.
    with pytest.raises(OSError), atomic_dir(out) as tmp:
        (tmp / "b").write_text("2")
    assert _names(out) == ["a"] and _names(tmp_path) == ["site"]
    with atomic_dir(out, replace=True, mode=0o755) as tmp:
        (tmp / "b").write_text("2")
    assert _names(out) == ["b"] and stat.S_IMODE(out.stat().st_mode) == 0o755
    with pytest.raises(KeyboardInterrupt), atomic_dir(out, replace=True) as tmp:
        (tmp / "c").write_text("3")
        raise KeyboardInterrupt
    assert _names(out) == ["b"] and _names(tmp_path) == ["site"]


def _renames(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
            if name in ("replace", "rename", "mkstemp", "NamedTemporaryFile") and (
                name != "replace"
                or (isinstance(f, ast.Attribute) and getattr(f.value, "id", "") == "os")
            ):
                found.append(f"{path.relative_to(SRC)}:{node.lineno}: {name}")
    return found


def test_no_hand_written_temp_then_rename_outside_outfile() -> None:
    found = [r for p in sorted(SRC.rglob("*.py")) if p.name != "outfile.py" for r in _renames(p)]
    assert found == []
