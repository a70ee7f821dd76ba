"""The engine registry: every engine servelab can serve with, by its ``[engine] name``.

Adding an engine is one folder (``servelab/engines/<name>/``, an object satisfying
:class:`~servelab.engines.base.Engine`) plus one line in :data:`ENGINES`.
"""

from __future__ import annotations

from servelab.engines.base import Engine
from servelab.engines.llamacpp import LLAMACPP
from servelab.engines.synthetic import SYNTHETIC
from servelab.engines.vllm import VLLM
from servelab.errors import UsageError

__all__ = ["DEFAULT_ENGINE", "ENGINES", "get_engine"]

ENGINES: dict[str, Engine] = {
    VLLM.name: VLLM,
    LLAMACPP.name: LLAMACPP,
    SYNTHETIC.name: SYNTHETIC,
}
DEFAULT_ENGINE = "vllm"  # what a recipe's [engine] table without a name means


def get_engine(name: str) -> Engine:
    """The registered engine ``name``; :class:`UsageError` lists the choices."""
    try:
        return ENGINES[name]
    except KeyError:
        raise UsageError(f"unknown engine {name!r}; choose one of {', '.join(ENGINES)}") from None
