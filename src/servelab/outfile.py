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
  operating system's reason (``No space left on device``, ...), the old file untouched.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from servelab.errors import OutputPathError

__all__ = ["check_new_checkpoint", "check_output_dir", "check_output_file", "file_mode",
           "write_bytes", "write_json", "write_text"]


def file_mode() -> int:
    """0666 less the process umask: what ``open(path, "w")`` would create."""
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


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


def write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (see the module docstring)."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as exc:
        raise OutputPathError(f"cannot write: {exc.strerror or exc}", path=path) from None
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, file_mode())
        os.replace(tmp, path)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise OutputPathError(f"cannot write: {exc.strerror or exc}", path=path) from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_text(path: Path, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically."""
    write_bytes(path, text.encode("utf-8"))


def write_json(path: Path, data: Any, *, indent: int | None = 1, **dumps: Any) -> None:
    """Write ``data`` as JSON (plus a newline) to ``path`` atomically."""
    write_text(path, json.dumps(data, indent=indent, **dumps) + "\n")
