"""What an engine declares about its installable builds, and the one logged-step runner.

An engine lists its :class:`EngineBuild` s (:attr:`servelab.engines.base.Engine.builds`);
:mod:`servelab.serve.install` installs them. A build that compiles a server executable
after pip names a :class:`Builder` (llama.cpp's ``llama-server``), which runs its steps
through :func:`run_logged`.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from servelab.errors import EngineError

__all__ = ["Builder", "EngineBuild", "Step", "run_logged"]

Step = Callable[[str], None]


class Builder(Protocol):
    """Compiles a build's server executable inside its engine directory."""

    def target(self, root: Path) -> Path:
        """Where the executable is installed under engine directory ``root``."""
        ...

    def build(self, root: Path, python: Path, log: Path, step: Step) -> Path:
        """Build and install the executable under ``root``; return its path."""
        ...

    def versions(self, executable: Path) -> dict[str, str] | None:
        """What the executable reports about itself, or ``None`` when it does not run."""
        ...


@dataclass(frozen=True)
class EngineBuild:
    """One installable engine build: what to pip install and what to remove after.

    ``versions`` maps each reported name to the distributions that may provide it (the
    first one installed wins); ``versions[0]`` is the engine itself and its name is the
    key of the engine's version in manifests. ``import_name`` is imported once after
    installing to prove the engine loads. ``python_env`` names an environment variable
    that points servelab at an engine interpreter installed by other means.

    ``shared_env``: the engine is importable from servelab's own environment (installed
    beside servelab, or shipped with it), so it gets no venv of its own: its interpreter
    is servelab's, and ``servelab engine install`` only checks that it imports.
    """

    name: str
    engine: str
    packages: tuple[str, ...]
    remove: tuple[str, ...]
    versions: tuple[tuple[str, tuple[str, ...]], ...]
    import_name: str
    python_env: str
    remove_reason: str = ""
    builder: Builder | None = None
    shared_env: bool = False

    @property
    def version_key(self) -> str:
        """The manifest key holding the engine's own version (e.g. ``"vllm"``)."""
        return self.versions[0][0]


def run_logged(argv: list[str], log: Path, what: str, cwd: Path | None = None) -> None:
    """Run ``argv`` with its output appended to ``log``; :class:`EngineError` on failure.

    The command runs in a process group of its own; if servelab is interrupted while it
    runs (Ctrl-C, or SIGTERM turned into an exception), the whole group — a compiler a
    build tool started too — is stopped before the exception goes on, so nothing keeps
    writing into a folder the caller is about to remove."""
    with log.open("a", encoding="utf-8") as fh:
        fh.write(f"\n$ {' '.join(argv)}\n")
        fh.flush()
        try:
            proc = subprocess.Popen(
                argv, stdout=fh, stderr=subprocess.STDOUT, cwd=cwd, start_new_session=True
            )
        except OSError as exc:
            raise EngineError(f"{what} failed: {exc}", path=log) from None
        try:
            rc = proc.wait()
        except BaseException:
            _stop_group(proc)
            raise
    if rc != 0:
        tail = log.read_text(encoding="utf-8", errors="replace").strip().splitlines()[-5:]
        raise EngineError(f"{what} failed (exit {rc}); last lines: " + " | ".join(tail), path=log)


def _stop_group(proc: subprocess.Popen[bytes], grace_s: float = 10.0) -> None:
    """SIGTERM the process group of ``proc``, then SIGKILL what is left after ``grace_s``
    (a compiler the build tool started is in that group too)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(grace_s)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
