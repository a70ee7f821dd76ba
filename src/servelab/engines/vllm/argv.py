"""vLLM's argument list from a recipe (never a shell string).

:func:`build_argv` is pure: it takes vLLM's ``[engine]`` table and the target servelab
resolved (launcher, model reference, served name, port) and returns the argument vector
``subprocess`` runs.
"""

from __future__ import annotations

import json

from servelab.engines.base import ServeTarget
from servelab.engines.vllm.recipe import VllmFlags, VllmSection

__all__ = ["API_SERVER_MODULE", "build_argv", "flag_args"]

# The CPU build's `vllm` console script is broken; the module entry point works on all builds.
API_SERVER_MODULE = "vllm.entrypoints.openai.api_server"


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _json(value: object) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


def flag_args(flags: VllmFlags) -> list[str]:
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


def build_argv(eng: VllmSection, target: ServeTarget) -> list[str]:
    """The engine's argument list.

    ``target.launcher`` is either ``[python]`` (run as ``python -m vllm...api_server
    --model M``) or ``[executable]`` when the recipe names a ``vllm`` executable
    (``vllm serve M``).
    """
    launcher = target.launcher
    if eng.executable is not None:
        argv = [*launcher, "serve", target.model]
    else:
        argv = [*launcher, "-m", API_SERVER_MODULE, "--model", target.model]
    if target.revision is not None:
        argv += ["--revision", target.revision]
    argv += ["--served-model-name", target.served_name]
    argv += ["--host", eng.host, "--port", str(target.port)]
    argv += flag_args(eng.flags)
    return argv


