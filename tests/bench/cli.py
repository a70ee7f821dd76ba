"""Running the ``servelab`` command line as a user does, from bench tests."""

from __future__ import annotations

import subprocess
import sys


def servelab(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """``servelab ARGS`` in a fresh interpreter; output captured, never raises on exit status."""
    code = "from servelab.cli.app import main; main()"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          timeout=timeout, check=False)
