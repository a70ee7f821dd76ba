"""Reading a measured table at a shape: log-space interpolation, honest about extrapolation.

Latency is interpolated linearly in (log x, log latency) between the two measured points that
bracket ``x`` (tokens, batch, context). Outside the measured range it is extrapolated: above
the largest point, proportionally to ``x`` (the work grows linearly with tokens); below the
smallest, held at the smallest point's latency (a kernel does not get faster than its fixed
cost). Either way the result says so (:attr:`Read.extrapolated`).

Two-dimensional reads (attention: batch x context; new tokens x cached prefix) interpolate
in the first axis at each measured value of the second, then in the second.

Pure: sequences of numbers in, :class:`Read` out.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Read:
    """A latency read from a table (ms), and how."""

    ms: float
    extrapolated: bool = False
    note: str = ""


def _log(x: float) -> float:
    return math.log(max(x, 1e-9))


def interp1(xs: Sequence[float], ys: Sequence[float], x: float) -> Read:
    """``y(x)`` from points ``(xs, ys)`` (``xs`` ascending, positive)."""
    if not xs:
        raise ValueError("no points to interpolate")
    if len(xs) != len(ys):
        raise ValueError("xs and ys differ in length")
    if x <= xs[0]:
        return Read(ys[0], extrapolated=x < xs[0],
                    note=f"below the smallest measured {xs[0]:g}" if x < xs[0] else "")
    if x >= xs[-1]:
        if x == xs[-1]:
            return Read(ys[-1])
        return Read(ys[-1] * x / xs[-1], extrapolated=True,
                    note=f"scaled linearly above the largest measured {xs[-1]:g}")
    i = bisect_left(xs, x)
    if xs[i] == x:
        return Read(ys[i])
    x0, x1, y0, y1 = xs[i - 1], xs[i], ys[i - 1], ys[i]
    t = (_log(x) - _log(x0)) / (_log(x1) - _log(x0))
    return Read(math.exp(_log(y0) + t * (_log(y1) - _log(y0))))


def series(points: Mapping[float, float]) -> tuple[list[float], list[float]]:
    """Sorted (xs, ys) of a ``{x: y}`` mapping."""
    xs = sorted(points)
    return xs, [points[x] for x in xs]


Rows = tuple[tuple[float, list[float], list[float]], ...]


def grid_rows(grid: Mapping[tuple[float, float], float]) -> Rows:
    """A grid ``{(a_i, b_j): y}`` split into its rows: ``(b_j, a's, y's)``, each sorted (what
    :func:`interp2` reads; a caller reading one grid many times splits it once)."""
    by_b: dict[float, dict[float, float]] = {}
    for (ai, bj), y in grid.items():
        by_b.setdefault(bj, {})[ai] = y
    return tuple((bj, *series(row)) for bj, row in by_b.items() if row)


def interp2(grid: Mapping[tuple[float, float], float], a: float, b: float,
            b_transform: Callable[[float], float] | None = None,
            rows: Rows | None = None) -> Read:
    """``y(a, b)`` on a (possibly ragged) grid ``{(a_i, b_j): y}``: along ``a`` at each
    measured ``b``, then along ``b``. ``b`` may be zero (no cached prefix): the ``b`` axis is
    then read as ``b + 1`` so the logarithm is defined (``b_transform`` overrides). A grid
    that measured one value of ``b`` only is read at that value alone (``ValueError``
    otherwise: it says nothing about how the work grows along ``b``). ``rows``: the grid
    already split by :func:`grid_rows`."""
    bt = b_transform or (lambda v: v + 1.0)
    reads: dict[float, Read] = {}
    for bj, xs, ys in (rows if rows is not None else grid_rows(grid)):
        reads[bj] = interp1(xs, ys, a)
    if not reads:
        raise ValueError("empty grid")
    bs = sorted(reads)
    xs = [bt(v) for v in bs]
    ys = [reads[v].ms for v in bs]
    if len(xs) == 1 and bt(b) != xs[0]:
        # one measured value of the second axis: nothing says how the work grows along it
        raise ValueError(f"the grid measured the second axis at {bs[0]:g} only, not {b:g}")
    r = interp1(xs, ys, bt(b))
    # the second axis scales the work only partly (fixed costs): above the largest measured
    # value, extrapolate by the measured slope between the last two points instead
    if bt(b) > xs[-1] and len(xs) >= 2:
        slope = (_log(ys[-1]) - _log(ys[-2])) / (_log(xs[-1]) - _log(xs[-2]))
        ms = math.exp(_log(ys[-1]) + slope * (_log(bt(b)) - _log(xs[-1])))
        r = Read(ms, True, f"extrapolated above the largest measured {bs[-1]:g} by the "
                 "measured log-log slope")
    inner = [reads[v] for v in bs]
    ext = r.extrapolated or any(x.extrapolated for x in inner)
    notes = "; ".join(dict.fromkeys(n for n in [r.note, *(x.note for x in inner)] if n))
    return Read(r.ms, ext, notes)
