"""The kernel path a plan assumes for a build, and why: the engine's own selection where
servelab has read it, else the hardware profile's table, said as such. Data only.

An engine's start-up rules make it (:meth:`~servelab.sizing.startup.StartupRules.kernels`:
vLLM's reads its fused-MoE and linear-kernel selection, :mod:`servelab.engines.vllm.kernels`);
a plan without such rules (llama.cpp's) takes the profile's table
(:func:`profile_assumption`). The speed model reads :attr:`KernelAssumption.path`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from servelab.hardware.profiles import HardwareProfile, KernelPath
from servelab.sizing.weights import Weights

__all__ = ["ENGINE", "PROFILE", "KernelAssumption", "profile_assumption"]

ENGINE, PROFILE = "engine", "profile"


@dataclass(frozen=True)
class KernelAssumption:
    """The kernel path a plan assumes for its build's weights, where it comes from and why."""

    path: KernelPath
    origin: str  # ENGINE (the engine's own selection, as servelab read it) | PROFILE
    reason: str  # why this path: the selection's reason and source, or why the table
    risk: str | None = None
    """A reported problem with this path on this hardware (wrong output, a crash), with its
    sources; None when none is known."""
    layers: Mapping[str, Any] = field(default_factory=dict)
    """The engine's answer per layer kind (``moe``, ``linear``), as JSON."""

    @property
    def calibrated_as(self) -> str | None:
        """The name the speed model calibrates the path under, where it differs from its own
        (the path as the priors and stored runs recorded it)."""
        return self.path.calibration or None

    @property
    def line(self) -> str:
        """One line: the path assumed, its compute, where it comes from and why."""
        p = self.path
        where = "the engine's own selection" if self.origin == ENGINE else \
            "the hardware profile's table"
        text = f"kernel path {p.name} ({p.compute} compute), from {where}: {self.reason}"
        if self.calibrated_as:
            text += (f"; calibrated with the runs recorded as {self.calibrated_as} (the same "
                     f"{p.compute} path on this hardware)")
        return text

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {
            "path": self.path.name, "compute": self.path.compute, "origin": self.origin,
            "reason": self.reason, "source": self.path.source,
            "calibrated_as": self.calibrated_as, "risk": self.risk,
            "layers": dict(self.layers),
        }


def profile_assumption(hardware: HardwareProfile, weights: Weights, why: str) -> KernelAssumption:
    """The profile table's path for ``weights`` on ``hardware``, and why the table is used
    (``why``: the engine's selection is not read, or not known here)."""
    path = hardware.kernel_path(weights.scheme, moe=weights.moe)
    cited = f" ({path.source})" if path.source else ""
    return KernelAssumption(path, PROFILE, f"{why}; {hardware.name}'s table{cited}")
