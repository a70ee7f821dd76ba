"""Held out by family and by kernel path: what the speed model misses by when the calibration
set of a hardware has never seen the family (or the kernel path) of the build it predicts.
Pure.

Leave-one-model-out (:mod:`servelab.predict.ledger`) measures a new *build* of what a level
holds; the siblings of one model predict each other well and say nothing about another
family. Here every build of one family (or of one kernel path) is left out of the hardware's
calibration together, the rest fitted exactly as for a build never run
(:func:`~servelab.predict.levels.levels_for`, :func:`~servelab.predict.levels.fit_levels`),
and the left-out builds' measured points predicted. :func:`conformal` turns the errors into the
half-width that covers :data:`COVERAGE` of such points; :class:`Reference` keeps it per kind
for the hardware measured with the most families, whose figure a hardware with fewer lends.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from servelab.predict.form import Sample
from servelab.predict.levels import (
    BY_ONE_FAMILY,
    BY_PATH,
    Target,
    fit_levels,
    levels_for,
    path_family,
)
from servelab.predict.widths import COVERAGE, conformal

#: Fewest families on a hardware for its own leave-one-family-out to stand for it; with fewer
#: it borrows the figure of the hardware measured with the most families.
MIN_FAMILIES = 3


def group_of(s: Sample, by: str) -> str:
    """The group ``s`` is left out (or, :data:`BY_ONE_FAMILY`, kept) with: its build's
    family, or its kernel path's family."""
    return path_family(s.kernel_path) if by == BY_PATH else s.build.family


@dataclass(frozen=True)
class HeldOutPoint:
    """One measured point predicted with its whole group (family or kernel path) left out."""

    hardware: str
    kind: str
    by: str
    group: str
    build: str
    length: int
    measured_tok_s: float
    predicted_tok_s: float | None
    level: str
    #: The half-width the fit's own calibration levels give it (their leave-one-model-out
    #: errors, nothing lent); None unless asked for (``intervals``) or where they give none.
    own_rel_error: float | None = None

    @property
    def error(self) -> float | None:
        """predicted / measured - 1 (the interval rule's error; None without a prediction)."""
        if self.predicted_tok_s is None:
            return None
        return self.predicted_tok_s / self.measured_tok_s - 1.0

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {**asdict(self), "error": self.error}


def held_out(
    samples: Sequence[Sample],
    physical: Callable[[str, Sample], Sequence[float]],
    by: str,
    *,
    lower: Callable[[str, Sample], Sequence[float]] | None = None,
    origin: str = "stored runs",
    intervals: bool = False,
) -> tuple[HeldOutPoint, ...]:
    """Every measured point of ``samples`` predicted with its group (``by``: family or kernel
    path) left out of its hardware's calibration; hardware with one group only is skipped
    (nothing is left to fit from). ``physical`` / ``lower``: the roofline coefficients and the
    bounds of a sample's hardware and kernel path (as for :func:`~servelab.predict.ledger.
    ledger`). Samples without a family are kept in the fits and never left out.
    ``intervals``: also the half-width each fit's own levels would print (slower)."""
    out: list[HeldOutPoint] = []
    keys = sorted({(s.hardware, s.engine) for s in samples})
    for hardware, engine in keys:
        here = [s for s in samples if s.hardware == hardware and s.engine == engine]
        groups = sorted({group_of(s, by) for s in here if group_of(s, by)})
        if len(groups) < 2:
            continue
        for g in groups:
            if by == BY_ONE_FAMILY:  # fitted from family g alone, the others predicted
                rest = [s for s in here if group_of(s, by) == g]
                mine = [s for s in here if group_of(s, by) not in ("", g) and not s.device_only]
            else:
                rest = [s for s in here if group_of(s, by) != g]
                mine = [s for s in here if group_of(s, by) == g and not s.device_only]
            # one fit per (kernel path, kind): every build of the group is left out of it
            for path, kind in sorted({(s.kernel_path, s.kind) for s in mine}):
                points = sorted((s for s in mine if s.kernel_path == path and s.kind == kind),
                                key=lambda s: (str(s.build), s.length))
                target = Target(engine, path, hardware)
                levels = levels_for(target, rest, [], origin=origin)
                first = points[0]
                fit = fit_levels(levels, kind, target, physical(kind, first),
                                 lower(kind, first) if lower else None, intervals=intervals)
                for s in points:
                    tok = None
                    if not fit.is_roofline:
                        seconds = fit.seconds(s.features)
                        tokens = 1.0 if kind == "decode" else s.length
                        tok = tokens / seconds if seconds > 0 else None
                    out.append(HeldOutPoint(hardware, kind, by, g, str(s.build), s.length,
                                            s.tok_s, tok, fit.level, fit.rel_error))
    return tuple(out)


@dataclass(frozen=True)
class Spread:
    """One held-out half-width: kind, how it was held out, where, over how much."""

    kind: str
    by: str
    hardware: str
    half_width: float | None
    points: int
    groups: int

    def describe(self) -> str:
        """``±41% from leave-one-family-out on h200 (4 families, 62 points)``."""
        width = f"±{self.half_width * 100:.0f}%" if self.half_width is not None else "no bound"
        unit = "kernel paths" if self.by == BY_PATH else "families"
        how = ("fitted from one family, the others predicted" if self.by == BY_ONE_FAMILY
               else f"leave-one-{self.by.replace(' ', '-')}-out")
        return f"{width} {how} on {self.hardware} ({self.groups} {unit}, {self.points} points)"


class Reference:
    """Held-out half-widths, computed when first asked for (:meth:`for_hardware`): what a
    prediction carries for a family or kernel path its hardware has not seen, or where that
    hardware's calibration set is too thin to bound a new build. From ``samples`` (every
    stored and shipped measurement; ``physical`` / ``lower`` as for :func:`held_out`)."""

    def __init__(
        self,
        samples: Sequence[Sample],
        physical: Callable[[str, Sample], Sequence[float]],
        *,
        lower: Callable[[str, Sample], Sequence[float]] | None = None,
        origin: str = "stored runs",
        coverage: float = COVERAGE,
    ) -> None:
        self.samples = tuple(samples)
        self.physical, self.lower, self.origin, self.coverage = physical, lower, origin, coverage
        self._spreads: dict[tuple[str, str, str], Spread | None] = {}
        self._points: dict[tuple[str, str], tuple[HeldOutPoint, ...]] = {}

    def families(self, hardware: str) -> int:
        """How many families ``hardware``'s samples hold."""
        return len({s.build.family for s in self.samples
                    if s.hardware == hardware and s.build.family})

    def points(self, hardware: str, by: str) -> tuple[HeldOutPoint, ...]:
        """:func:`held_out` on ``hardware`` (cached)."""
        key = (hardware, by)
        if key not in self._points:
            mine = [s for s in self.samples if s.hardware == hardware]
            self._points[key] = held_out(mine, self.physical, by, lower=self.lower,
                                         origin=self.origin)
        return self._points[key]

    def spread(self, hardware: str, kind: str, by: str) -> Spread | None:
        """The held-out half-width of ``kind`` on ``hardware`` (None: nothing held out)."""
        key = (hardware, kind, by)
        if key not in self._spreads:
            mine = [p for p in self.points(hardware, by) if p.kind == kind]
            errs = [p.error for p in mine if p.error is not None]
            self._spreads[key] = (
                Spread(kind, by, hardware, conformal(errs, self.coverage), len(errs),
                       len({p.group for p in mine}))
                if mine else None
            )
        return self._spreads[key]

    def for_hardware(self, hardware: str, kind: str, by: str) -> Spread | None:
        """``hardware``'s own spread where it was measured with at least
        :data:`MIN_FAMILIES` families, else that of the hardware measured with the most."""
        ranked = sorted({s.hardware for s in self.samples},
                        key=lambda h: (-self.families(h), h))
        order = [hardware] if self.families(hardware) >= MIN_FAMILIES else []
        order += [h for h in ranked[:1] if h != hardware]
        for h in order:
            got = self.spread(h, kind, by)
            if got is not None and got.half_width is not None:
                return got
        return None
