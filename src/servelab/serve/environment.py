"""Software around the engine, recorded with each run: torch, its CUDA build, the driver.

Read from the engine's install manifest, else by asking the engine's interpreter for its
package versions (metadata only, nothing imported), and from ``nvidia-smi`` when the machine
has one. Anything that cannot be read stays ``None`` ("not recorded" on the pages).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass


@dataclass(frozen=True)
class EngineEnvironment:
    """Versions that explain a result besides the engine's own."""

    torch: str | None
    cuda: str | None
    driver: str | None


def cuda_of_torch(torch_version: str | None) -> str | None:
    """``2.11.0+cu130`` → ``13.0``; CPU and unknown builds → ``None``."""
    m = re.search(r"\+cu(\d+)(\d)$", torch_version or "")
    return f"{int(m.group(1))}.{m.group(2)}" if m else None


def nvidia_driver(timeout_s: float = 10.0) -> str | None:
    """The NVIDIA driver version, or ``None`` without ``nvidia-smi``."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        proc = subprocess.run(
            [exe, "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = proc.stdout.strip().splitlines()
    return lines[0].strip() if proc.returncode == 0 and lines else None


def environment_of(torch: str | None) -> EngineEnvironment:
    """The environment of an engine whose torch is ``torch`` (``None``: unknown)."""
    return EngineEnvironment(torch=torch, cuda=cuda_of_torch(torch), driver=nvidia_driver())
