"""Where servelab keeps its own data: engine venvs, built tiny models, runs.

``SERVELAB_HOME`` overrides the platform's user data directory.
"""

from __future__ import annotations

import os
from pathlib import Path

from platformdirs import user_data_dir

__all__ = ["runs_dir", "servelab_home", "synth_models_dir"]


def servelab_home() -> Path:
    """The servelab data directory (``$SERVELAB_HOME`` or the platform's user data dir)."""
    env = os.environ.get("SERVELAB_HOME")
    if env:
        return Path(env).expanduser().absolute()
    return Path(user_data_dir("servelab", appauthor=False))


def runs_dir() -> Path:
    """Default parent of run directories."""
    return servelab_home() / "runs"


def synth_models_dir() -> Path:
    """Where tiny generated models are cached."""
    return servelab_home() / "models" / "synth"
