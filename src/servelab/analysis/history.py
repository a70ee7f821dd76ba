"""Dated series per metric, noise-aware change-point detection, and what changed at a step.

Series: one row per stored run (oldest first) with the run's value of the metric at a workload
point, its standard error from the run's own requests, and the run's recorded factors.

Detection: binary segmentation for shifts in the mean. Each row's noise is
``sigma_i^2 = se_i^2 + tau^2`` — its within-run standard error plus the run-to-run scatter
``tau``, estimated robustly (MAD of successive differences, so that a step does not inflate
it) from the series itself when it has at least 4 rows, and otherwise conservatively taken as
the largest within-run spread. A split is accepted when the drop in weighted squared error
(a chi-square statistic in units of the noise) exceeds ``penalty = chi2_{1-alpha}(1) +
3 ln n`` (default alpha = 0.001); segments are split recursively. So pure noise yields no
change and a step several noise-widths tall is found at the row where it happens.

Attribution: for each step, the factors recorded on the last good and the first bad row
(engine version, engine args, driver, CUDA, torch, checkpoint revision / header hash,
hardware, host, recipe hash) are compared; those that differ are listed, and a factor is
marked *consistent* when it has one value on every row of the segment before and another
one on every row after — the strongest suspects.

JSON schema ``servelab.history/1``::

    {"schema": "servelab.history/1", "subject": str, "series": [
       {"metric", "label", "unit", "point", "higher_is_better", "noise_tau", "penalty",
        "rows": [{"run_id", "started_at", "value", "se", "n"}],
        "changes": [{"index", "last_good_run", "first_bad_run", "last_good_at",
                     "first_bad_at", "before_mean", "after_mean", "rel_change", "statistic",
                     "regression", "factors": [{"name", "before", "after", "consistent"}]}]}]}
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

import numpy as np

from servelab.analysis.metrics import METRICS, MetricDef
from servelab.analysis.stats import as_array, robust_sigma
from servelab.errors import UsageError
from servelab.store.model import STATUS_OK, RunRecord

SCHEMA = "servelab.history/1"

#: chi-square(1 dof) upper quantiles used for the split penalty.
_CHI2_1 = {0.05: 3.841, 0.01: 6.635, 0.001: 10.828, 0.0001: 15.137}


@dataclass(frozen=True, slots=True)
class SeriesRow:
    """One run's value in a series."""

    run_id: str
    started_at: datetime
    value: float
    se: float
    n: int
    sd: float = 0.0


@dataclass(frozen=True, slots=True)
class FactorChange:
    """A recorded factor that differs between the last good and the first bad row."""

    name: str
    before: str | None
    after: str | None
    consistent: bool


@dataclass(frozen=True, slots=True)
class ChangePoint:
    """A detected step in a series: between rows ``index - 1`` and ``index``."""

    index: int
    last_good_run: str
    first_bad_run: str
    last_good_at: datetime
    first_bad_at: datetime
    before_mean: float
    after_mean: float
    rel_change: float
    statistic: float
    regression: bool
    factors: tuple[FactorChange, ...]


@dataclass(frozen=True, slots=True)
class Series:
    """A metric's dated series and the changes found in it."""

    metric: str
    label: str
    unit: str
    point: str
    higher_is_better: bool
    noise_tau: float
    penalty: float
    rows: tuple[SeriesRow, ...]
    changes: tuple[ChangePoint, ...]


@dataclass(frozen=True, slots=True)
class History:
    """Every series of one recipe or model."""

    subject: str
    series: tuple[Series, ...]

    def to_json_dict(self) -> dict[str, Any]:
        """The ``servelab.history/1`` document."""

        def enc(v: Any) -> Any:
            if isinstance(v, datetime):
                return v.isoformat()
            if isinstance(v, dict):
                return {k: enc(x) for k, x in v.items()}
            if isinstance(v, (list, tuple)):
                return [enc(x) for x in v]
            return v

        return {
            "schema": SCHEMA,
            "subject": self.subject,
            "series": [enc(asdict(s)) for s in self.series],
        }

    @property
    def regressions(self) -> list[tuple[Series, ChangePoint]]:
        """Every detected change that made its metric worse."""
        return [(s, c) for s in self.series for c in s.changes if c.regression]


# ---------------------------------------------------------------------------- detection core


def _wcost(y: np.ndarray[Any, Any], w: np.ndarray[Any, Any]) -> float:
    mean = float((w * y).sum() / w.sum())
    return float((w * (y - mean) ** 2).sum())


def _best_split(
    y: np.ndarray[Any, Any], w: np.ndarray[Any, Any], min_size: int
) -> tuple[int, float]:
    n = len(y)
    total = _wcost(y, w)
    best_k, best_gain = -1, 0.0
    for k in range(min_size, n - min_size + 1):
        gain = total - _wcost(y[:k], w[:k]) - _wcost(y[k:], w[k:])
        if gain > best_gain:
            best_k, best_gain = k, gain
    return best_k, best_gain


def detect_changes(
    values: Sequence[float],
    ses: Sequence[float] | None = None,
    *,
    alpha: float = 0.001,
    min_size: int = 1,
    min_rel_floor: float = 1e-3,
    fallback_tau: float = 0.0,
) -> tuple[list[tuple[int, float]], float, float]:
    """Change points of a series: ``([(index, statistic)], tau, penalty)``.

    ``index`` is the first row after the step. ``ses`` are per-row standard errors (0 when
    unknown). ``fallback_tau`` is the run-to-run noise assumed when the series is too short
    (< 4 rows) to estimate it (callers pass the largest within-run spread); a short series
    with no noise information at all (bare readings) never reports a change.
    ``min_rel_floor`` keeps the noise above 0.1 % of the series' median so that identical
    readings (e.g. integers read from a log) do not make every wiggle "significant".
    """
    y = as_array(values)
    if len(y) != len(values):
        raise ValueError("series values must be finite")
    n = len(y)
    se = np.zeros(n) if ses is None else np.asarray(ses, dtype=np.float64)
    if n < 2:
        return [], 0.0, 0.0
    if alpha not in _CHI2_1:
        raise UsageError(f"alpha must be one of {sorted(_CHI2_1)}")
    tau = robust_sigma(y) if n >= 4 else fallback_tau
    floor = min_rel_floor * abs(float(np.median(y)))
    penalty = _CHI2_1[alpha] + 3.0 * math.log(n)
    if n < 4 and tau == 0.0 and not bool(np.any(se > 0)):
        # Two or three bare readings carry no information about their noise: no verdict.
        return [], 0.0, penalty

    def segment(tau: float) -> list[tuple[int, float]]:
        sigma2 = np.maximum(se**2 + tau**2, floor**2 if floor > 0 else 1e-300)
        w = 1.0 / sigma2
        found: list[tuple[int, float]] = []

        def recurse(lo: int, hi: int) -> None:
            if hi - lo < 2 * min_size:
                return
            k, gain = _best_split(y[lo:hi], w[lo:hi], min_size)
            if k < 0 or gain <= penalty:
                return
            found.append((lo + k, gain))
            recurse(lo, lo + k)
            recurse(lo + k, hi)

        recurse(0, n)
        return sorted(found)

    found = segment(tau)
    # The MAD estimate is robust but noisy; refine it from the residuals around the segment
    # means found so far (steps removed), keeping the larger of the two, until stable.
    for _ in range(3):
        bounds = [0, *[k for k, _ in found], n]
        dof = n - (len(bounds) - 1)
        if n < 4 or dof < 3:
            break
        resid = np.concatenate([y[a:b] - y[a:b].mean() for a, b in itertools.pairwise(bounds)])
        refined = max(tau, float(math.sqrt(float((resid**2).sum()) / dof)))
        if refined <= tau * (1 + 1e-9):
            break
        tau = refined
        again = segment(tau)
        if again == found:
            break
        found = again
    return sorted(found), tau, penalty


def change_points(values: Sequence[float], ses: Sequence[float] | None = None) -> list[int]:
    """Indices of the first row after each detected step (see :func:`detect_changes`)."""
    found, _tau, _penalty = detect_changes(values, ses)
    return [k for k, _ in found]


# ---------------------------------------------------------------------------- series building


def build_series(
    runs: Sequence[RunRecord], metric: MetricDef, point: str | None
) -> list[tuple[SeriesRow, RunRecord]]:
    """(row, run) pairs of successful runs that have this metric, oldest first."""
    rows = []
    for run in sorted(runs, key=lambda r: (r.started_at, r.run_id or "")):
        if run.status != STATUS_OK or run.run_id is None:
            continue
        value = metric.run_value(run, point)
        if value is None or not math.isfinite(value):
            continue
        vals = metric.sample_values(run, point)
        sd = float(np.std(vals, ddof=1)) if len(vals) >= 2 else 0.0
        se = sd / math.sqrt(len(vals)) if len(vals) >= 2 else 0.0
        rows.append((SeriesRow(run.run_id, run.started_at, value, se, len(vals), sd), run))
    return rows


def _factor_changes(
    before: Sequence[RunRecord], after: Sequence[RunRecord]
) -> tuple[FactorChange, ...]:
    good, bad = before[-1].factors, after[0].factors
    out = []
    for name in good:
        if good[name] == bad[name]:
            continue
        vals_before = {r.factors[name] for r in before}
        vals_after = {r.factors[name] for r in after}
        consistent = len(vals_before) == 1 and len(vals_after) == 1 and vals_before != vals_after
        out.append(FactorChange(name, good[name], bad[name], consistent))
    out.sort(key=lambda f: not f.consistent)
    return tuple(out)


def analyse_series(
    runs: Sequence[RunRecord],
    metric: MetricDef,
    point: str | None,
    *,
    alpha: float = 0.001,
) -> Series:
    """The dated series of ``metric`` at ``point`` over ``runs`` with its change points."""
    pairs = build_series(runs, metric, point)
    rows = [p[0] for p in pairs]
    recs = [p[1] for p in pairs]
    found, tau, penalty = detect_changes(
        [r.value for r in rows],
        [r.se for r in rows],
        alpha=alpha,
        fallback_tau=max((r.sd for r in rows), default=0.0),
    )
    bounds = [0, *[k for k, _ in found], len(rows)]
    changes = []
    for j, (k, stat) in enumerate(found):
        seg_before = slice(bounds[j], k)
        seg_after = slice(k, bounds[j + 2])
        before_vals = [r.value for r in rows[seg_before]]
        after_vals = [r.value for r in rows[seg_after]]
        b_mean = sum(before_vals) / len(before_vals)
        a_mean = sum(after_vals) / len(after_vals)
        rel = (a_mean - b_mean) / b_mean if b_mean else math.inf
        worse = (a_mean < b_mean) if metric.higher_is_better else (a_mean > b_mean)
        changes.append(
            ChangePoint(
                index=k,
                last_good_run=rows[k - 1].run_id,
                first_bad_run=rows[k].run_id,
                last_good_at=rows[k - 1].started_at,
                first_bad_at=rows[k].started_at,
                before_mean=b_mean,
                after_mean=a_mean,
                rel_change=rel,
                statistic=stat,
                regression=worse,
                factors=_factor_changes(recs[seg_before], recs[seg_after]),
            )
        )
    return Series(
        metric.name,
        metric.label,
        metric.unit,
        point or "",
        metric.higher_is_better,
        tau,
        penalty,
        tuple(rows),
        tuple(changes),
    )


def history(
    subject: str,
    runs: Sequence[RunRecord],
    *,
    metrics: Sequence[str] | None = None,
    alpha: float = 0.001,
) -> History:
    """Series and change points for every metric and workload point the runs measured."""
    names = (
        list(metrics)
        if metrics
        else ["decode_tok_s", "prefill_tok_s", "ttft_s", "weights_gib", "kv_pool_tokens"]
    )
    points: dict[str, None] = {}
    for r in sorted(runs, key=lambda r: r.started_at):
        for p in r.points:
            points.setdefault(p, None)
    out = []
    for name in names:
        m = METRICS[name]
        for point in (list(points) or [""]) if m.per_sample is not None else [""]:
            s = analyse_series(runs, m, point if point else None, alpha=alpha)
            if s.rows:
                out.append(s)
    return History(subject, tuple(out))
