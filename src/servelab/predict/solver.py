"""The speed model's solver: coefficients from samples of its form
(:mod:`servelab.predict.form`). Pure.

Fitting (:func:`solve`): weighted least squares on *relative* residuals (each row divided by
its measured time), every coefficient bounded below by physics (per-byte and per-FLOP costs
no lower than the roofline's, overheads non-negative; exact for a summed form: the problem is
strictly convex and :func:`nnls` solves it; a larger-of-two form is solved for each side a
row can be bound by: :func:`_solve_overlap`, :func:`_solve_launched`), and a weak ridge pull
towards a prior coefficient vector, so that directions the data cannot identify (one model:
``n_layers`` is constant, so the per-layer and fixed terms are collinear) come from the prior
instead of from noise.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from servelab.errors import UsageError
from servelab.predict.form import (
    DEVICE,
    HOST,
    OVERLAPPED,
    Coefficients,
    Row,
    Sample,
    overlapping,
    row_seconds,
)

#: Weight of the pull towards the prior, against relative residuals: moving a term by what it
#: contributes to a typical row costs as much as a 10 % miss on one measured point.
PRIOR_WEIGHT = 0.1


def solve(
    rows: Sequence[Row],
    times: Sequence[float],
    prior: Sequence[float],
    *,
    lower: Sequence[float] | None = None,
    prior_weight: float | Sequence[float] = PRIOR_WEIGHT,
) -> tuple[float, ...]:
    """Bounded, prior-regularised least squares on relative residuals.

    Minimises ``sum(((pred_i - t_i) / t_i)^2) + w^2 sum(((theta_j - p_j) / s_j)^2)`` over
    ``theta >= lower`` (default 0), where ``pred_i`` is :func:`row_seconds` and ``s_j`` is what
    one unit of term ``j`` contributes on a typical row, so the pull is the same size for
    every term: it decides only directions the data leave open. The bound is physics: no
    engine reads bytes faster than the hardware's ceiling or multiplies faster than its peak
    (see :func:`physical_bounds`). Rows of one fit are of one kind, and all summed or all of
    one platform's overlapping rows (:func:`~servelab.predict.form.overlapping`): a form
    whose overlapped part is one per-step term and has no host part (decode) goes through
    :func:`_solve_overlap` (device-only rows may sit among them), another (prefill) through
    :func:`_solve_launched`. ``prior_weight``: ``w``, one for every term or one per term (a
    large one holds a term at its prior).
    """
    w = np.broadcast_to(np.asarray(prior_weight, dtype=float), (len(prior),)).copy()
    if len({r.kind for r in rows}) > 1:
        raise UsageError("one fit mixes decode and prefill rows")
    if any(overlapping(r) for r in rows):
        form = rows[0].form
        span = form.span(OVERLAPPED)
        summed = [r for r in rows if not r.overlap and any(r.amounts[span])]
        if summed:
            raise UsageError(f"one fit mixes overlapped and summed {form.kind} rows")
        if span.stop - span.start == 1 and form.span(HOST).stop == form.span(HOST).start:
            return _solve_overlap(rows, times, prior, lower=lower, prior_weight=w)
        return _solve_launched(rows, *_arrays(rows, times, prior, lower), w)
    return _solve_linear(_amounts(rows), times, prior, lower=lower, prior_weight=w)


def _amounts(rows: Sequence[Row]) -> list[tuple[float, ...]]:
    return [r.amounts for r in rows]


def _arrays(
    rows: Sequence[Row] | Sequence[Sequence[float]],
    times: Sequence[float],
    prior: Sequence[float],
    lower: Sequence[float] | None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Rows, times, bound and prior (raised to the bound) as arrays, checked."""
    k = len(prior)
    raw = [r.amounts if isinstance(r, Row) else r for r in rows]
    x = np.asarray(raw, dtype=float).reshape(-1, k)
    t = np.asarray(times, dtype=float)
    if x.shape[0] != t.shape[0]:
        raise UsageError("rows and times differ in length")
    if np.any(t <= 0):
        raise UsageError("measured times must be positive")
    lb = np.zeros(k) if lower is None else np.asarray(lower, dtype=float)
    return x, t, lb, np.maximum(np.asarray(prior, dtype=float), lb)


def _solve_overlap(
    rows: Sequence[Row],
    times: Sequence[float],
    prior: Sequence[float],
    *,
    lower: Sequence[float] | None,
    prior_weight: np.ndarray,
) -> tuple[float, ...]:
    """:func:`solve` for overlapping rows: ``t = max(device terms, h)``, ``h`` the host's time
    per step (the form's one overlapped term). Exact over the floors that can matter: for each
    candidate ``h`` (the bound, the prior's, every measured time) the points measured above
    ``h`` are device-bound and fit the device terms by :func:`_solve_linear`, with every
    device-only row (a profiled device time: no floor applies); the candidate with the lowest
    objective wins. A build that is device-bound everywhere leaves ``h`` at most its fastest
    point."""
    k = len(prior)
    form = rows[0].form
    dev, h_at = form.span(DEVICE), form.span(OVERLAPPED).start
    x, t, lb, p = _arrays(rows, times, prior, lower)
    device_only = np.array([not overlapping(r) for r in rows], dtype=bool)
    y = x[:, dev]
    per_step = x.copy()
    per_step[:, h_at] = 1.0
    unit = _units(per_step / t[:, None], k)
    best: tuple[float, tuple[float, ...]] | None = None
    walls = (float(v) for v, d in zip(t, device_only, strict=True) if not d and v >= lb[h_at])
    for h in sorted({float(lb[h_at]), float(p[h_at]), *walls}):
        fitted = device_only | (t > h)
        if fitted.any():
            device = np.asarray(
                _solve_linear(
                    y[fitted].tolist(),
                    t[fitted].tolist(),
                    p[dev].tolist(),
                    lower=lb[dev].tolist(),
                    prior_weight=prior_weight[dev],
                )
            )
        else:
            device = p[dev].copy()
        theta = p.copy()
        theta[dev] = device
        theta[h_at] = h
        pred = np.where(device_only, y @ device, np.maximum(y @ device, h))
        cost = float(np.sum(((pred - t) / t) ** 2))
        cost += float(np.sum((prior_weight * unit * (theta - p)) ** 2))
        if best is None or cost < best[0]:
            best = (cost, tuple(float(v) for v in theta))
    assert best is not None  # the bound itself is always a candidate
    return best[1]


def _solve_linear(
    rows: Sequence[Sequence[float]],
    times: Sequence[float],
    prior: Sequence[float],
    *,
    lower: Sequence[float] | None = None,
    prior_weight: float | np.ndarray = PRIOR_WEIGHT,
    unit: np.ndarray | None = None,
) -> tuple[float, ...]:
    """:func:`solve` for summed rows: bounded linear least squares with the pull to ``prior``
    (``unit``: each term's typical contribution, default from ``rows``). Exact: the pull makes
    the problem strictly convex, and :func:`nnls` finds its one minimum."""
    k = len(prior)
    x, t, lb, p = _arrays(rows, times, prior, lower)
    a = x / t[:, None]
    b = np.ones_like(t) - a @ lb  # solve for delta = theta - lower >= 0
    if unit is None:
        unit = _units(a, k)
    reg = np.diag(prior_weight * unit)
    a_all = np.vstack([a, reg])
    b_all = np.concatenate([b, prior_weight * unit * (p - lb)])
    delta = nnls(a_all, b_all)
    return tuple(float(v) for v in lb + delta)


def _units(a: np.ndarray, k: int) -> np.ndarray:
    """What one unit of each term contributes to a typical (relative) row: the median of its
    column, 1 where the column is all zero."""
    col = np.median(np.abs(a), axis=0) if a.shape[0] else np.ones(k)
    return np.where(col > 0, col, 1.0)


def nnls(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``argmin ||a x - b||`` over ``x >= 0`` (Lawson and Hanson's active-set method, on
    columns scaled to unit norm: the design's columns span twenty orders of magnitude)."""
    n = a.shape[1]
    norms = np.linalg.norm(a, axis=0)
    scale = np.where(norms > 0, norms, 1.0)
    m = a / scale
    x = np.zeros(n)
    passive = np.zeros(n, dtype=bool)
    tol = 10 * np.finfo(float).eps * max(m.shape) * max(float(np.abs(m).sum(axis=0).max()), 1.0)
    for _ in range(10 * n + 10):  # finite in exact arithmetic; the cap guards degenerate cycling
        w = m.T @ (b - m @ x)
        free = ~passive & (w > tol)
        if not free.any():
            break
        passive[int(np.argmax(np.where(free, w, -np.inf)))] = True
        while True:
            z = np.zeros(n)
            z[passive] = np.linalg.lstsq(m[:, passive], b, rcond=None)[0]
            if np.all(z[passive] > 0):
                x = z
                break
            neg = passive & (z <= 0) & (x > z)
            alpha = float(np.min(x[neg] / (x[neg] - z[neg]))) if neg.any() else 0.0
            x = x + alpha * (z - x)
            passive &= x > tol
            x[~passive] = 0.0
    return x / scale


def _solve_launched(
    rows: Sequence[Row],
    x: np.ndarray,
    t: np.ndarray,
    lb: np.ndarray,
    p: np.ndarray,
    prior_weight: np.ndarray,
) -> tuple[float, ...]:
    """:func:`solve` for prefill rows with host launches, ``t = host + max(device, launches)``
    (``rows``, as ``x``, times ``t``, bound ``lb`` and prior ``p`` as :func:`_arrays` gives
    them): each such row is bound by one of the two; for a given choice the fit is
    :func:`_solve_linear` on the rows with the other part zeroed. Starting from every row
    device-bound, every row launch-bound and the prior's own choice, each fit reassigns the
    rows to the part it predicts longer until a choice repeats; the lowest objective (the max
    form's residuals and the same pull) wins. A local search, not an exhaustive one: a row near
    the crossover can sit on either side."""
    has = np.array([overlapping(r) for r in rows], dtype=bool)
    unit = _units(x / t[:, None], len(p))
    dev, launch = rows[0].form.span(DEVICE), rows[0].form.span(OVERLAPPED)

    def device_bound(theta: np.ndarray) -> np.ndarray:
        busy = x[:, dev] @ theta[dev]
        bound: np.ndarray = ~has | (busy >= x[:, launch] @ theta[launch])
        return bound

    def objective(theta: np.ndarray) -> float:
        pred = np.array([row_seconds(theta.tolist(), r) for r in rows])
        cost = float(np.sum(((pred - t) / t) ** 2))
        return cost + float(np.sum((prior_weight * unit * (theta - p)) ** 2))

    best: tuple[float, tuple[float, ...]] | None = None
    for start in (np.ones(len(t), dtype=bool), ~has, device_bound(p)):
        on_device, seen = start, set()
        while on_device.tobytes() not in seen:
            seen.add(on_device.tobytes())
            y = x.copy()
            y[~on_device, dev] = 0.0
            y[on_device, launch] = 0.0
            theta = np.asarray(
                _solve_linear(y.tolist(), t.tolist(), p.tolist(), lower=lb.tolist(),
                              prior_weight=prior_weight, unit=unit)
            )
            cost = objective(theta)
            if best is None or cost < best[0]:
                best = (cost, tuple(float(v) for v in theta))
            on_device = device_bound(theta)
    assert best is not None
    return best[1]


def fit_samples(
    samples: Sequence[Sample],
    kind: str,
    prior: Sequence[float],
    lower: Sequence[float] | None = None,
    prior_weight: float | Sequence[float] = PRIOR_WEIGHT,
) -> Coefficients:
    """Coefficients for ``kind`` from ``samples`` (those of that kind) around ``prior``."""
    rows = [s.features for s in samples if s.kind == kind]
    times = [s.seconds for s in samples if s.kind == kind]
    return Coefficients(kind, solve(rows, times, prior, lower=lower, prior_weight=prior_weight))

