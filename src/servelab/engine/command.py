"""An engine's argument list and environment, made safe to show and to store.

Each engine builds its own argument vector (``servelab.engines.<name>``, never a shell
string); :func:`display_command` renders one for humans (shell-quoted, for copy and paste
only) with secrets masked by :func:`redact_argv` and :func:`redact_env`.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence

__all__ = [
    "display_command",
    "redact_argv",
    "redact_env",
]

SECRET_FLAGS = ("--api-key", "--hf-token", "--ssl-keyfile-password")
_SECRET_ENV = ("TOKEN", "KEY", "SECRET", "PASSWORD")
REDACTED = "***"

def redact_argv(argv: Sequence[str]) -> list[str]:
    """The argument list with secret values (``--api-key X``, ``--api-key=X``) masked."""
    out: list[str] = []
    hide_next = False
    for arg in argv:
        if hide_next:
            out.append(REDACTED)
            hide_next = False
            continue
        name, eq, _value = arg.partition("=")
        if name in SECRET_FLAGS:
            if eq:
                out.append(f"{name}={REDACTED}")
            else:
                out.append(arg)
                hide_next = True
            continue
        out.append(arg)
    return out


def redact_env(env: dict[str, str]) -> dict[str, str]:
    """Environment with the values of token/key/secret/password variables masked."""
    return {
        k: (REDACTED if any(w in k.upper() for w in _SECRET_ENV) else v) for k, v in env.items()
    }


def display_command(argv: Sequence[str], env: dict[str, str] | None = None) -> str:
    """Shell-quoted rendering of an argument list, secrets masked (display only)."""
    safe_env = redact_env(env or {})
    prefix = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(safe_env.items()))
    cmd = shlex.join(redact_argv(argv))
    return f"{prefix} {cmd}" if prefix else cmd
