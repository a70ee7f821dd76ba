"""Where a plan's speculative-decode acceptance length came from. Pure.

``servelab plan --mtp-acceptance`` takes ``auto`` (the default: the acceptance stored runs
of the same checkpoint, method and ``k`` measured), ``none``, or lengths to predict at.
:func:`parse_acceptance_option` reads the option; :class:`AcceptanceSource` is what the
plan records and prints: the lengths it predicted at and whether they were *given* or
*measured* (with the run ids), or why there is no speculative prediction. Servelab never
invents an acceptance length.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from servelab.errors import UsageError

AUTO: Final = "auto"
NONE: Final = "none"
DEFAULT_METHOD = "mtp"

AcceptanceOption = Literal["auto", "none"] | tuple[float, ...]
SourceKind = Literal["given", "measured", "published", "none"]


@dataclass(frozen=True, slots=True)
class SpecConfig:
    """How a server drafts: vLLM's method name (normalized) and ``num_speculative_tokens``."""

    method: str
    draft_tokens: int

    @property
    def label(self) -> str:
        """``ngram k=3``."""
        return f"{self.method} k={self.draft_tokens}"


def normalize_method(method: str) -> str:
    """vLLM's method name as vLLM itself normalizes it: every ``*_mtp`` is ``mtp``."""
    m = method.strip().lower()
    return "mtp" if m.endswith("_mtp") else m


def spec_config_from_mapping(cfg: Any) -> SpecConfig | None:
    """A ``--speculative-config`` mapping's method and ``k``; None when either is missing."""
    if not isinstance(cfg, Mapping):
        return None
    method, k = cfg.get("method"), cfg.get("num_speculative_tokens")
    if not isinstance(method, str) or not method or isinstance(k, bool) or not isinstance(k, int):
        return None
    if k <= 0:
        return None
    return SpecConfig(normalize_method(method), k)


def parse_acceptance_option(text: str | None) -> AcceptanceOption:
    """``auto`` (also for None/empty), ``none``, or comma-separated lengths (each ≥ 1)."""
    value = (text or AUTO).strip().lower()
    if value == AUTO:
        return AUTO
    if value == NONE:
        return NONE
    out: list[float] = []
    for part in value.split(","):
        try:
            out.append(float(part))
        except ValueError:
            raise UsageError(
                f"--mtp-acceptance takes auto, none or lengths like 1.5,2; not {text!r}"
            ) from None
    return tuple(out)


@dataclass(frozen=True)
class AcceptanceSource:
    """The acceptance lengths a plan's speculative prediction uses, and their provenance."""

    kind: SourceKind
    method: str
    draft_tokens: int
    lengths: tuple[float, ...] = ()
    detail: str = ""
    """``given (--mtp-acceptance)``, ``measured in run(s) …``, or why there is none."""
    run_ids: tuple[str, ...] = ()
    spread: tuple[float, float] | None = None
    stdev: float | None = None
    position_rates: tuple[float, ...] = ()
    measured: dict[str, Any] | None = field(default=None, compare=False)

    @property
    def line(self) -> str:
        """One line for the plan's output."""
        if self.kind == "none":
            return f"no speculative-decode prediction: {self.detail}"
        what = f"{self.method} k={self.draft_tokens}"
        if self.kind == "given":
            lengths = ", ".join(f"{a:g}" for a in self.lengths)
            return f"acceptance length {lengths} ({what}): given (--mtp-acceptance)"
        (a,) = self.lengths
        if self.kind == "published":
            return self.detail  # the prior's own line: value, range, sources
        text = f"acceptance length {a:.3f} ({what}): {self.detail}"
        if self.spread is not None and len(self.run_ids) > 1:
            text += f"; per run {self.spread[0]:.3f} to {self.spread[1]:.3f}"
        if self.position_rates:
            rates = ", ".join(f"{r:.3f}" for r in self.position_rates)
            text += f"; accepted per draft position {rates}"
        return text

    def to_dict(self) -> dict[str, Any]:
        """JSON form (the plan document's ``speculative``)."""
        return {
            "acceptance_source": self.kind,
            "method": self.method,
            "draft_tokens": self.draft_tokens,
            "acceptance_lengths": list(self.lengths),
            "detail": self.detail,
            "run_ids": list(self.run_ids),
            "spread": list(self.spread) if self.spread is not None else None,
            "stdev": self.stdev,
            "position_rates": list(self.position_rates),
            "measured": self.measured,
        }


def given(lengths: Sequence[float], *, method: str, draft_tokens: int) -> AcceptanceSource:
    """Lengths the user gave."""
    return AcceptanceSource("given", method, draft_tokens, tuple(lengths),
                            "given (--mtp-acceptance)")


def unavailable(reason: str, *, method: str, draft_tokens: int) -> AcceptanceSource:
    """No speculative prediction, and why."""
    return AcceptanceSource("none", method, draft_tokens, (), reason)
