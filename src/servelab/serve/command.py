"""An engine's argument list and environment, made safe to show and to store.

Each engine builds its own argument vector (``servelab.engines.<name>``, never a shell
string); :func:`display_command` renders one for humans (shell-quoted, for copy and paste
only) with secrets masked by :mod:`servelab.redact`, the one masker.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence

from servelab.redact import redact_args, redact_env

__all__ = ["display_command"]


def display_command(argv: Sequence[str], env: dict[str, str] | None = None) -> str:
    """Shell-quoted rendering of an argument list, secrets masked (display only)."""
    safe_env = redact_env(env or {})
    prefix = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(safe_env.items()))
    cmd = shlex.join(redact_args(argv))
    return f"{prefix} {cmd}" if prefix else cmd
