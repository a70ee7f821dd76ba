"""How far the *order* of two builds is off: the error of the ratio of two builds' decode
predictions, held out by family. Pure.

An interval says how far one prediction's level may be off; two builds predicted from one
calibration on one hardware share most of that error, so what decides whether their order
can be trusted is the error of their ratio. Here every pair of builds of one family measured
on the same hardware, engine and prompt length is predicted with the whole family held out
of that hardware's calibration (:func:`~servelab.predict.holdout.held_out`, as ``servelab
calibration report --by family`` does), and the pair's error is
``log(predicted ratio) - log(measured ratio)``. :func:`order_error` keeps the half-width that
covers :data:`~servelab.predict.widths.COVERAGE` of those errors (split conformal): two
predictions whose ratio is within it are tied within the uncertainty of their order.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import combinations

from servelab.predict.form import Sample
from servelab.predict.holdout import HeldOutPoint, held_out
from servelab.predict.levels import BY_FAMILY
from servelab.predict.widths import COVERAGE, conformal

POOLED = "pooled"
""":attr:`OrderError.hardware` where the hardware asked for has no pairs of its own."""


@dataclass(frozen=True)
class PairError:
    """One pair of held-out builds of one family at one prompt length."""

    hardware: str
    engine: str
    family: str
    length: int
    a: str
    b: str
    measured_ratio: float
    predicted_ratio: float

    @property
    def log_error(self) -> float:
        """log(predicted ratio) - log(measured ratio)."""
        return math.log(self.predicted_ratio) - math.log(self.measured_ratio)


@dataclass(frozen=True)
class OrderError:
    """The held-out error of the ratio of two builds' decode predictions."""

    half_width: float
    """|log ratio error| covering :attr:`coverage` of the pairs."""
    pairs: int
    families: int
    hardware: str
    """The hardware the pairs were measured on, or :data:`POOLED` (every hardware's pairs,
    the one asked for having none)."""
    asked: str
    coverage: float = COVERAGE

    @property
    def factor(self) -> float:
        """The largest ratio of two predictions that is still a tie."""
        return math.exp(self.half_width)

    @property
    def percent(self) -> float:
        """:attr:`factor` as a percentage off (``1.22`` → 22)."""
        return (self.factor - 1.0) * 100.0

    def tied(self, a: float, b: float) -> bool:
        """Whether two predictions ``a`` and ``b`` (tok/s) are within :attr:`factor`."""
        return a > 0 and b > 0 and abs(math.log(a / b)) <= self.half_width

    def describe(self) -> str:
        """``the order of two builds of one family is right to within 22 % on 114 stored
        pairs (h200, 3 families, held out by family)``."""
        where = (self.hardware if self.hardware != POOLED
                 else f"pooled over every hardware: {self.asked} has no pairs of its own")
        return (f"the order of two builds of one family is right to within "
                f"{self.percent:.0f} % on {self.pairs} stored pairs ({where}, "
                f"{self.families} families, {self.coverage:.0%} of pairs, the family held "
                "out)")


def pair_errors(points: Sequence[HeldOutPoint], engine: str) -> tuple[PairError, ...]:
    """Every pair of ``points`` (held out by family on one hardware and ``engine``) of
    different builds of one family, decode at one prompt length."""
    groups: dict[tuple[str, str, int], list[HeldOutPoint]] = defaultdict(list)
    for p in points:
        if p.kind == "decode" and p.predicted_tok_s and p.measured_tok_s > 0:
            groups[(p.hardware, p.group, p.length)].append(p)
    out = []
    for (hardware, family, length), ps in sorted(groups.items()):
        for a, b in combinations(sorted(ps, key=lambda p: p.build), 2):
            if a.build == b.build or a.predicted_tok_s is None or b.predicted_tok_s is None:
                continue
            out.append(PairError(hardware, engine, family, length, a.build, b.build,
                                 a.measured_tok_s / b.measured_tok_s,
                                 a.predicted_tok_s / b.predicted_tok_s))
    return tuple(out)


def all_pairs(samples: Sequence[Sample], physical: Callable[[str, Sample], Sequence[float]],
              *, lower: Callable[[str, Sample], Sequence[float]] | None = None
              ) -> tuple[PairError, ...]:
    """:func:`pair_errors` over every (hardware, engine) of ``samples``."""
    out: list[PairError] = []
    for hardware, engine in sorted({(s.hardware, s.engine) for s in samples}):
        mine = [s for s in samples if s.hardware == hardware and s.engine == engine]
        out.extend(pair_errors(held_out(mine, physical, BY_FAMILY, lower=lower), engine))
    return tuple(out)


def order_error(pairs: Sequence[PairError], hardware: str,
                coverage: float = COVERAGE) -> OrderError | None:
    """The half-width of ``hardware``'s own pairs, or of every pair (:data:`POOLED`) where
    it has too few to say; None where even the pool is too small."""
    for where, mine in ((hardware, [p for p in pairs if p.hardware == hardware]),
                        (POOLED, list(pairs))):
        width = conformal([p.log_error for p in mine], coverage)
        if width is not None:
            return OrderError(width, len(mine), len({p.family for p in mine}),
                              where, hardware, coverage)
    return None
