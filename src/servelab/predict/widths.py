"""How far a fit's predictions miss, and the interval half-width that says so: held-out
(leave-one-model-out) errors, how far one build's reruns stray, and the half-width a set of
errors supports (split conformal where enough points were held out, the widened largest
miss where not). Pure numbers.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from servelab.predict.form import Row, Sample, row_seconds
from servelab.predict.solver import PRIOR_WEIGHT, fit_samples

__all__ = ["COVERAGE", "MIN_REL_ERROR", "conformal", "error_bound", "relative_errors",
           "repeat_spread"]

#: The share of held-out points an interval is meant to cover.
COVERAGE = 0.9
#: Smallest interval half-width printed (measurement noise between runs of one build).
MIN_REL_ERROR = 0.03


def relative_errors(
    samples: Sequence[Sample],
    kind: str,
    prior: Sequence[float],
    lower: Sequence[float] | None = None,
    prior_weight: float | Sequence[float] = PRIOR_WEIGHT,
) -> list[float]:
    """Leave-one-model-out errors of tokens/s (predicted / measured - 1) over ``samples``."""
    mine = [s for s in samples if s.kind == kind]
    models = sorted({s.build.model for s in mine})
    errs: list[float] = []
    if len(models) < 2:
        return errs
    for m in models:
        train = [s for s in mine if s.build.model != m]
        theta = fit_samples(train, kind, prior, lower, prior_weight)
        for s in mine:
            if s.build.model == m:
                pred = row_seconds(theta, s.features)
                errs.append(s.seconds / pred - 1.0 if pred > 0 else math.inf)
    return errs


def repeat_spread(samples: Sequence[Sample], kind: str) -> float | None:
    """How far one run's tokens/s strayed from the mean of its build's runs of the same work
    (same build and costs: kind, length, graph regime, layers), largest over the builds in
    ``samples`` run more than once: what the same work varies between runs, and between the
    machines a lent GPU comes with, which no fit of the build's costs can predict. ``None``
    when no point was measured twice. On the H200 (2026-12-03/04) Qwen3-Next's 2,048-token
    prefill took 41.6-57.8 ms in three sessions with the same flags (benchmarks/RESULTS.md)."""
    groups: dict[tuple[str, Row], list[float]] = {}
    for s in samples:
        if s.kind == kind and not s.device_only:  # same build, same costs: the same work
            g = groups.setdefault((s.build.model, s.features), [])
            # a shipped prior restating a stored run (to its printed digits) is not a rerun
            if not any(abs(s.tok_s / v - 1.0) < 5e-4 for v in g):
                g.append(s.tok_s)
    devs = [
        abs(v * len(g) / sum(g) - 1.0) for g in groups.values() if len(g) > 1 for v in g
    ]
    return max(devs) if devs else None


def error_bound(errs: Sequence[float], models: int) -> float:
    """Interval half-width from leave-one-model-out errors: the largest miss, widened by
    ``1 + 1/models`` because it rests on that few models (floored at measurement noise).
    Used where too few points were held out for :func:`conformal` to say."""
    return max(max(abs(e) for e in errs) * (1.0 + 1.0 / max(models, 1)), MIN_REL_ERROR)


def conformal(errors: Sequence[float], coverage: float = COVERAGE) -> float | None:
    """The half-width that covers ``coverage`` of points like ``errors`` (split conformal:
    the ceil((n + 1) x coverage)-th smallest |error|); None when there are too few errors to
    say (fewer than 9 for 90 %)."""
    errs = sorted(abs(e) for e in errors)
    k = math.ceil((len(errs) + 1) * coverage)
    return errs[k - 1] if 0 < k <= len(errs) else None
