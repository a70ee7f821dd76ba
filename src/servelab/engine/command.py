"""Recipe → the exact engine argument list (never a shell string).

:func:`build_argv` is pure: it takes the recipe and the already-resolved launcher,
model reference and port, and returns the argument vector ``subprocess`` runs.
:func:`display_command` renders it for humans (shell-quoted, for copy and paste only).
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Sequence
from pathlib import Path

from servelab.engine.recipe import EngineFlags, Recipe

__all__ = [
    "API_SERVER_MODULE",
    "build_argv",
    "display_command",
    "flag_args",
    "redact_argv",
    "redact_env",
]

SECRET_FLAGS = ("--api-key", "--hf-token", "--ssl-keyfile-password")
_SECRET_ENV = ("TOKEN", "KEY", "SECRET", "PASSWORD")
REDACTED = "***"

# The CPU build's `vllm` console script is broken; the module entry point works on all builds.
API_SERVER_MODULE = "vllm.entrypoints.openai.api_server"


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _json(value: object) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


def flag_args(flags: EngineFlags) -> list[str]:
    """Engine flags as arguments, in a stable order; ``None`` flags are left out."""
    out: list[str] = []
    for name in (
        "max_model_len",
        "kv_cache_memory_bytes",
        "gpu_memory_utilization",
        "dtype",
        "kv_cache_dtype",
        "max_num_seqs",
        "max_num_batched_tokens",
    ):
        value = getattr(flags, name)
        if value is not None:
            out += [_flag(name), str(value)]
    out += flags.layout().argv()
    for name in ("enable_prefix_caching", "enforce_eager", "trust_remote_code"):
        value = getattr(flags, name)
        if value is True:
            out.append(_flag(name))
        elif value is False and name == "enable_prefix_caching":
            out.append("--no-enable-prefix-caching")
    if flags.speculative_config is not None:
        out += ["--speculative-config", _json(flags.speculative_config)]
    if flags.chat_template_kwargs is not None:
        out += ["--default-chat-template-kwargs", _json(flags.chat_template_kwargs)]
    out += list(flags.extra)
    return out


def build_argv(
    recipe: Recipe,
    *,
    launcher: Sequence[str],
    model: str | Path,
    port: int,
) -> list[str]:
    """The engine's argument list.

    ``launcher`` is either ``[python]`` (run as ``python -m vllm...api_server --model M``)
    or ``[executable]`` when the recipe names a ``vllm`` executable (``vllm serve M``).
    """
    eng = recipe.engine
    if eng.executable is not None:
        argv = [*launcher, "serve", str(model)]
    else:
        argv = [*launcher, "-m", API_SERVER_MODULE, "--model", str(model)]
    if recipe.model.revision is not None:
        argv += ["--revision", recipe.model.revision]
    argv += ["--served-model-name", recipe.served_model_name()]
    argv += ["--host", eng.host, "--port", str(port)]
    argv += flag_args(eng.flags)
    return argv


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
