"""What a recipe page may show a stranger. Pure.

A recipe page is shared: it names the model by its id (a Hub repo id, or the name of the
tiny model ``servelab synth`` builds), shows a command a reader can run, and uses the
recipe's own port. The paths of the machine that ran it (checkpoint directories, the engine's
venv, the run directory) and the port a run happened to get stay on the run page.

- :func:`model_ref` reads the model's id from the stored recipe text;
- :func:`shareable_argv` turns the argument list servelab ran into one without local paths:
  the launcher by name (``python`` / ``vllm``), the model by id, ``--port`` the recipe's;
- :func:`shareable_recipe` is the recipe text with absolute paths replaced, published next
  to the page so ``servelab run <slug>.toml`` reproduces the run.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any, Literal

LOCAL_PATH = "<local path>"
DEFAULT_PORT = 8000

_ABS_PATH = re.compile(r"^(?:/|~/|[A-Za-z]:[\\/])")
# An absolute path of two or more parts anywhere in prose ("... not installed at
# /root/.local/share/servelab/engines/vllm-cpu"); not a URL's path, not "tok/s" or "1/2".
_PROSE_ABS_PATH = re.compile(r"(?<![\w.:/~])(?:~|)/[\w.@+-]+(?:/[\w.@+-]*)+")
# A quoted absolute path inside recipe text: "/home/x/models", '~/venv/bin/python'.
_QUOTED_ABS_PATH = re.compile(r"""(["'])(?:/|~/|[A-Za-z]:[\\/])[^"'\n]*\1""")


@dataclass(frozen=True)
class ModelRef:
    """The model as a reader can name it."""

    id: str
    kind: Literal["repo", "synth", "path", "unknown"]
    revision: str | None = None

    @property
    def display(self) -> str:
        """How pages name it: the repo id, ``synth:<arch>``, or the served name."""
        if self.kind == "synth":
            return f"synth:{self.id}"
        if self.kind == "repo" and self.revision:
            return f"{self.id}@{self.revision}"
        return self.id

    @property
    def note(self) -> str:
        """One sentence on where the model comes from."""
        if self.kind == "repo":
            return f"Hugging Face Hub repo {self.display}."
        if self.kind == "synth":
            return (f"A tiny random-weight {self.id} checkpoint that servelab builds locally "
                    "(the recipe's [model] synth); servelab run builds it.")
        if self.kind == "path":
            return f"A local checkpoint directory, served as {self.id}."
        return f"Served as {self.id}."


def recipe_doc(text: str | None) -> Mapping[str, Any]:
    """The stored recipe text as TOML, or ``{}`` when there is none or it does not parse."""
    if not text:
        return {}
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        return {}


def model_ref(doc: Mapping[str, Any], fallback: str) -> ModelRef:
    """The model's id from a recipe's ``[model]`` table; ``fallback`` (the served name)."""
    model = doc.get("model")
    if isinstance(model, Mapping):
        revision = model.get("revision") if isinstance(model.get("revision"), str) else None
        if isinstance(model.get("repo"), str):
            return ModelRef(model["repo"], "repo", revision)
        if isinstance(model.get("synth"), str):
            return ModelRef(model["synth"], "synth")
        if isinstance(model.get("path"), str):
            served = model.get("served_name")
            name = served if isinstance(served, str) else PurePosixPath(model["path"]).name
            return ModelRef(name or fallback, "path")
    return ModelRef(fallback, "unknown")


def recipe_port(doc: Mapping[str, Any]) -> int:
    """``[engine] port`` of the recipe (what its API examples use), else 8000."""
    engine = doc.get("engine")
    port = engine.get("port") if isinstance(engine, Mapping) else None
    return port if isinstance(port, int) and not isinstance(port, bool) else DEFAULT_PORT


def is_local_path(arg: str) -> bool:
    """True for an absolute (or home-relative) file-system path."""
    return bool(_ABS_PATH.match(arg))


def _launcher(argv: Sequence[str], model: str) -> tuple[list[str], int]:
    """The launcher by name and where the engine's own arguments start."""
    if len(argv) >= 3 and argv[1] == "-m":
        return ["python", "-m", argv[2]], 3
    if len(argv) >= 3 and argv[1] == "serve":
        return ["vllm", "serve", model], 3
    if argv:
        return [PurePosixPath(argv[0]).name or argv[0]], 1
    return [], 0


def shareable_argv(argv: Sequence[str], *, model: str, port: int) -> tuple[str, ...]:
    """The engine command with the model by id, the recipe's port and no local paths."""
    out, i = _launcher(argv, model)
    while i < len(argv):
        arg = argv[i]
        flag, eq, value = arg.partition("=")
        if flag in ("--model", "--port") and eq:
            out.append(f"{flag}={model if flag == '--model' else port}")
        elif flag in ("--model", "--port") and i + 1 < len(argv):
            out += [arg, model if arg == "--model" else str(port)]
            i += 1
        elif eq and flag.startswith("--") and is_local_path(value):
            out.append(f"{flag}={LOCAL_PATH}")
        else:
            out.append(LOCAL_PATH if is_local_path(arg) else arg)
        i += 1
    return tuple(out)


def scrub_paths(text: str, paths: Sequence[str]) -> str:
    """``text`` with each of ``paths`` (this machine's) replaced by ``<local path>``, and
    any other absolute path too (an engine's install directory in a failure reason)."""
    for path in sorted((p for p in paths if p and len(p) > 1), key=len, reverse=True):
        text = text.replace(path, LOCAL_PATH)
    return _PROSE_ABS_PATH.sub(LOCAL_PATH, text)


def shareable_recipe(text: str) -> str:
    """Recipe text with quoted absolute paths replaced (relative ones are the reader's)."""
    return _QUOTED_ABS_PATH.sub(lambda m: f"{m.group(1)}{LOCAL_PATH}{m.group(1)}", text)


__all__ = [
    "DEFAULT_PORT",
    "LOCAL_PATH",
    "ModelRef",
    "is_local_path",
    "model_ref",
    "recipe_doc",
    "recipe_port",
    "scrub_paths",
    "shareable_argv",
    "shareable_recipe",
]
