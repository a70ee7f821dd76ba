"""An engine's start-up memory check, as values: whether it starts at a utilization on the
memory it sees, and the KV budget it gets (vLLM's rule: :mod:`servelab.engines.vllm.memcheck`).

Data only: the planner carries a :class:`StartupMemory` in its plan and prints its lines; the
engine's start-up rules (:class:`~servelab.sizing.startup.StartupRules.memory_check`) make it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from servelab.units import GIB

__all__ = ["DEPENDS", "NOT_KNOWN", "NO_CHECK", "REFUSES", "STARTS", "FreeCheck",
           "StartupMemory", "gib_text"]

STARTS, REFUSES, DEPENDS, NO_CHECK, NOT_KNOWN = (
    "starts", "refuses", "depends on free memory", "no check", "not known")


def gib_text(n: int) -> str:
    return f"{n / GIB:,.2f} GiB"


@dataclass(frozen=True)
class FreeCheck:
    """The check at one stated free-memory figure."""

    free_bytes: int
    source: str
    starts: bool
    label: str = ""
    """A few words for a terminal (``stated default``, ``lowest stated``, ``measured``);
    ``source`` says where the figure comes from in full."""

    @property
    def named(self) -> str:
        """``112.40 GiB free (stated default)``."""
        return f"{gib_text(self.free_bytes)} free ({self.label or self.source})"


@dataclass(frozen=True)
class StartupMemory:
    """Whether the engine starts at a utilization, and the KV budget it gets."""

    version: str
    total_bytes: int
    utilization: float
    utilization_source: str
    requested_bytes: int
    checks: tuple[FreeCheck, ...]
    verdict: str  # STARTS | REFUSES | DEPENDS | NO_CHECK | NOT_KNOWN
    passing_utilization: float | None  # the largest (0.01 steps) that passes at every figure
    kv_budget_bytes: int | None
    kv_source: str
    source: str

    @property
    def line(self) -> str:
        """One line for a terminal: the verdict, the figures and the fix."""
        gib = gib_text
        if self.verdict == NOT_KNOWN:
            return f"start-up memory check: not known ({self.source})"
        if self.verdict == NO_CHECK:
            return f"vLLM {self.version} skips the free-memory check ({self.source})"
        head = (f"vLLM {self.version} asks for {self.utilization:g} x {gib(self.total_bytes)} "
                f"= {gib(self.requested_bytes)} at start ({self.utilization_source})")
        figures = "; ".join(
            f"{'starts' if c.starts else 'refuses'} with {c.named}" for c in self.checks)
        fix = ""
        if self.verdict != STARTS and self.passing_utilization is not None:
            fix = f"; --gpu-memory-utilization {self.passing_utilization:.2f} passes"
        return f"{head}: {figures}{fix}"

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {
            "version": self.version, "total_bytes": self.total_bytes,
            "utilization": self.utilization, "utilization_source": self.utilization_source,
            "requested_bytes": self.requested_bytes,
            "checks": [{"free_bytes": c.free_bytes, "label": c.label, "source": c.source,
                        "starts": c.starts} for c in self.checks],
            "verdict": self.verdict, "passing_utilization": self.passing_utilization,
            "kv_budget_bytes": self.kv_budget_bytes, "kv_source": self.kv_source,
            "source": self.source,
        }
