"""The builder writes atomically and never replaces what it did not build."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from servelab.errors import UsageError
from servelab.site.build import MARKER, build_site, write_files
from servelab.site.model import Site


def test_build_writes_the_site(tmp_path: Path, site_factory: Callable[..., Site]) -> None:
    built = build_site(site_factory(), tmp_path / "out")
    assert built.index.is_file()
    assert (tmp_path / "out" / MARKER).is_file()
    on_disk = sorted(str(p.relative_to(built.outdir)) for p in built.outdir.rglob("*")
                     if p.is_file() and p.name != MARKER)
    assert on_disk == list(built.files)
    assert built.total_bytes == sum((built.outdir / f).stat().st_size for f in built.files)
    for name in ("recipes/tiny-fp8.html", "recipes/tiny-fp8.md", "recipes/tiny-fp8-decode.svg",
                 "recipes/tiny-fp8-memory.svg", "recipes/tiny-fp8-history-0.svg",
                 "models/tiny-moe.html", "experiments/fp8-vs-nvfp4.html", "runs/r1.html",
                 "style.css"):
        assert name in built.files


def test_rebuild_replaces_and_failure_keeps_the_old_site(tmp_path: Path) -> None:
    out = tmp_path / "out"
    write_files({"index.html": "one", "old.html": "gone later"}, out)
    write_files({"index.html": "two"}, out)
    assert (out / "index.html").read_text() == "two"
    assert not (out / "old.html").exists()
    # a file that would land outside the site aborts the build half-way ...
    with pytest.raises(ValueError, match="outside the site"):
        write_files({"a.html": "x", "b.html": "y", "z/../../evil.html": "no"}, out)
    # ... and the previous site is untouched, with no temporary directories left behind
    assert (out / "index.html").read_text() == "two"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    assert not (tmp_path / "evil.html").exists()


def test_refuses_to_replace_a_foreign_directory(tmp_path: Path) -> None:
    out = tmp_path / "mine"
    out.mkdir()
    (out / "precious.txt").write_text("keep me")
    with pytest.raises(UsageError, match="not built by servelab"):
        write_files({"index.html": "x"}, out)
    assert (out / "precious.txt").read_text() == "keep me"
    (tmp_path / "file").write_text("x")
    with pytest.raises(UsageError, match="not a directory"):
        write_files({"index.html": "x"}, tmp_path / "file")


def test_empty_existing_directory_is_fine(tmp_path: Path) -> None:
    out = tmp_path / "empty"
    out.mkdir()
    write_files({"index.html": "x"}, out)
    assert (out / "index.html").read_text() == "x"
