"""Output files: checked before any long work, written whole or not at all.

Every command that writes a file goes through this module (issue 33):

- :func:`check_output_file` / :func:`check_output_dir` run before a measurement or a build
  starts: an output path that cannot be written is an :class:`~servelab.errors.OutputPathError`
  (one line naming the path, exit 2), not a traceback after the work is done. The check is a
  real one: it creates (and removes) a temporary file in the nearest existing directory, so it
  holds for root, read-only mounts and paths through a regular file alike;
- :func:`write_text` / :func:`write_bytes` / :func:`write_json` write through a temporary file
  in the same directory and a rename, so a reader (or a crash, a Ctrl-C or a full disk midway)
  sees the old file or the new one, never half of one. The file gets the permissions a plain
  ``open(path, "w")`` would give (0666 less the umask, usually 0644), not ``mkstemp``'s 0600.
  A failed write raises :class:`~servelab.errors.OutputPathError` naming the path and the
  operating system's reason (``No space left on device``, ...), the old file untouched;
- :func:`atomic_file` / :func:`atomic_dir` are the same temp-then-rename for writers that
  need a path of their own (a GGUF or sparse safetensors writer, a copied executable, a
  checkpoint or site directory built file by file). Every temp-file-then-rename write in
  servelab goes through these two (the helpers above use :func:`atomic_file`).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from servelab.errors import OutputPathError

__all__ = ["atomic_dir", "atomic_file", "check_new_checkpoint", "check_output_dir",
           "check_output_file", "dir_mode", "file_mode", "write_bytes", "write_json",
           "write_text"]


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def file_mode() -> int:
    """0666 less the process umask: what ``open(path, "w")`` would create."""
    return 0o666 & ~_umask()


def dir_mode() -> int:
    """0777 less the process umask: what ``mkdir`` would create."""
    return 0o777 & ~_umask()


def _nearest_existing(path: Path) -> Path:
    p = path
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


def _probe_dir(directory: Path, target: Path) -> None:
    """Create and remove a temporary file in ``directory``; OutputPathError if that fails."""
    base = _nearest_existing(directory)
    if not base.is_dir():
        raise OutputPathError(f"cannot write here: {base} is not a directory", path=target)
    try:
        fd, tmp = tempfile.mkstemp(dir=base, prefix=".servelab-probe-")
    except OSError as exc:
        raise OutputPathError(f"cannot write here: {exc.strerror or exc} ({base})",
                              path=target) from None
    os.close(fd)
    os.unlink(tmp)


def check_output_file(path: Path) -> Path:
    """Check that ``path`` can be created or replaced by a file; return it.

    Missing parent directories are fine when they can be created (the writers create them).
    """
    path = Path(path)
    if path.is_dir():
        raise OutputPathError("is a directory; give a file name", path=path)
    _probe_dir(path.parent, path)
    return path


def check_output_dir(path: Path) -> Path:
    """Check that ``path`` is (or can become) a directory files can be written into."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise OutputPathError("exists and is not a directory", path=path)
    _probe_dir(path, path)
    return path


def check_new_checkpoint(path: Path, *, force: bool) -> Path:
    """Check that ``path`` can receive a checkpoint: OutputPathError when it already holds
    one (``config.json``, safetensors or GGUF files) and ``force`` is not given, or when it
    cannot be written."""
    path = Path(path)
    if path.is_dir() and not force:
        held = sorted(p.name for p in path.iterdir()
                      if p.name == "config.json" or p.suffix in (".safetensors", ".gguf")
                      or p.name.endswith(".safetensors.index.json"))
        if held:
            shown = ", ".join(held[:3]) + (f" and {len(held) - 3} more" if len(held) > 3 else "")
            raise OutputPathError(f"already holds a checkpoint ({shown}); pass --force to "
                                  "overwrite it", path=path)
    return check_output_dir(path)


@contextmanager
def atomic_file(path: Path, *, mode: int | None = None) -> Iterator[Path]:
    """A temporary file beside ``path`` to write to; when the block ends without an error it
    gets ``mode`` (default :func:`file_mode`) and replaces ``path``, else it is removed.

    ``OSError`` s are not translated (callers that write user output use :func:`write_bytes`).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        os.chmod(tmp, file_mode() if mode is None else mode)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


@contextmanager
def atomic_dir(path: Path, *, replace: bool = False, mode: int | None = None) -> Iterator[Path]:
    """A temporary directory beside ``path`` to fill; when the block ends without an error it
    gets ``mode`` (default :func:`dir_mode`) and is renamed to ``path``, else it is removed.

    ``path`` must not exist unless ``replace``: then the old directory is moved aside, the new
    one put in its place (the old one put back if that fails) and the old one removed, so a
    reader sees the whole old tree or the whole new one. A ``path`` that appears meanwhile
    (another process building the same thing) makes the rename fail with ``OSError``.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}.tmp-"))
    try:
        yield tmp
        tmp.chmod(dir_mode() if mode is None else mode)
        if replace and path.exists():
            old = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}.old-"))
            old.rmdir()
            path.rename(old)
            try:
                tmp.rename(path)
            except OSError:
                old.rename(path)
                raise
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, path)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (see the module docstring)."""
    try:
        with atomic_file(path) as tmp, tmp.open("wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
    except OSError as exc:
        raise OutputPathError(f"cannot write: {exc.strerror or exc}", path=path) from None


def write_text(path: Path, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically."""
    write_bytes(path, text.encode("utf-8"))


def write_json(path: Path, data: Any, *, indent: int | None = 1, **dumps: Any) -> None:
    """Write ``data`` as JSON (plus a newline) to ``path`` atomically."""
    write_text(path, json.dumps(data, indent=indent, **dumps) + "\n")
