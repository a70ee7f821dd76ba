"""Write a rendered site to a directory, atomically.

The site is rendered in memory, written into a fresh temporary directory beside ``outdir`` and
then swapped into place with renames, so ``outdir`` is either the old site or the new one, never
half of each. A directory that exists but was not built by servelab is never replaced.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from servelab.errors import OutputPathError, UsageError
from servelab.outfile import atomic_dir, check_output_dir
from servelab.site.model import Site
from servelab.site.render import render_site

if TYPE_CHECKING:
    from servelab.store.db import Store

MARKER = ".servelab-site"


@dataclass(frozen=True)
class BuiltSite:
    """What :func:`build_site` wrote."""

    outdir: Path
    files: tuple[str, ...]
    total_bytes: int

    @property
    def index(self) -> Path:
        """The site's front page."""
        return self.outdir / "index.html"


def _check_relative(rel: str) -> PurePosixPath:
    path = PurePosixPath(rel)
    if path.is_absolute() or ".." in path.parts or not path.parts:
        raise ValueError(f"refusing to write outside the site: {rel!r}")
    return path


def check_outdir(outdir: Path) -> Path:
    """Check, before any work, that ``outdir`` can be (re)placed by a site; return it absolute.

    It must be missing, empty or a site servelab built, and its parent writable.
    """
    outdir = Path(os.path.abspath(outdir))
    if outdir.exists():
        if not outdir.is_dir():
            raise UsageError("exists and is not a directory", path=outdir)
        if any(outdir.iterdir()) and not (outdir / MARKER).exists():
            raise UsageError(
                "exists, is not empty and was not built by servelab; refusing to replace it",
                path=outdir,
            )
    check_output_dir(outdir.parent)
    return outdir


def write_files(files: dict[str, str], outdir: Path) -> BuiltSite:
    """Write ``{relative path: content}`` to ``outdir`` atomically (see module docstring)."""
    outdir = check_outdir(outdir)
    try:
        return _write_tree(files, outdir)
    except OSError as exc:
        raise OutputPathError(f"cannot write the site: {exc.strerror or exc}",
                              path=outdir) from None


def _write_tree(files: dict[str, str], outdir: Path) -> BuiltSite:
    total = 0
    with atomic_dir(outdir, replace=True, mode=0o755) as tmp:
        for rel, content in sorted(files.items()):
            target = tmp.joinpath(*_check_relative(rel).parts)
            target.parent.mkdir(parents=True, exist_ok=True)
            data = content.encode("utf-8")
            target.write_bytes(data)
            total += len(data)
        (tmp / MARKER).write_text("built by servelab site build\n", encoding="utf-8")
    return BuiltSite(outdir, tuple(sorted(files)), total)


def build_site(site: Site, outdir: Path) -> BuiltSite:
    """Render ``site`` and write it to ``outdir`` atomically."""
    return write_files(render_site(site), outdir)


def publish(store: Store, outdir: Path, *, title: str = "servelab recipes") -> BuiltSite:
    """Rebuild the whole site from every run and experiment in ``store`` (after a run)."""
    from servelab.site.collect import collect_site

    return build_site(collect_site(store, title=title), outdir)
