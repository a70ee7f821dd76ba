"""Statistics for benchmark samples: summaries, 95 % confidence intervals, drift.

Pure functions over sequences of floats; no I/O. The mean's interval uses Student's
t; the median's interval is distribution-free (binomial order statistics).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

# Two-sided 95 % Student-t quantiles (0.975) for df = 1..30.
_T975 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)
_Z975 = 1.959963984540054


def t975(df: int) -> float:
    """The 0.975 quantile of Student's t with ``df`` degrees of freedom."""
    if df < 1:
        raise ValueError("df must be >= 1")
    if df <= len(_T975):
        return _T975[df - 1]
    z = _Z975
    return z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)


@dataclass(frozen=True, slots=True)
class Summary:
    """Summary of one metric over n samples, with 95 % confidence intervals."""

    n: int
    mean: float
    median: float
    std: float
    min: float
    max: float
    p90: float
    p95: float
    p99: float
    ci_low: float
    """95 % CI of the mean (Student t); equals the mean when n < 2."""
    ci_high: float
    median_ci_low: float
    """Distribution-free 95 % CI of the median (order statistics)."""
    median_ci_high: float

    @property
    def ci_rel_halfwidth(self) -> float:
        """Half-width of the mean's CI relative to the mean (inf when undefined)."""
        if self.n < 2 or self.mean == 0:
            return math.inf
        return (self.ci_high - self.ci_low) / 2 / abs(self.mean)

    def to_json(self) -> dict[str, Any]:
        """Plain-JSON form."""
        return {
            "n": self.n, "mean": self.mean, "median": self.median, "std": self.std,
            "min": self.min, "max": self.max, "p90": self.p90, "p95": self.p95,
            "p99": self.p99, "ci95": [self.ci_low, self.ci_high],
            "median_ci95": [self.median_ci_low, self.median_ci_high],
            "ci95_rel_halfwidth": (
                self.ci_rel_halfwidth if math.isfinite(self.ci_rel_halfwidth) else None
            ),
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Summary:
        """Inverse of :meth:`to_json`."""
        return cls(n=int(d["n"]), mean=d["mean"], median=d["median"], std=d["std"],
                   min=d["min"], max=d["max"], p90=d["p90"], p95=d["p95"], p99=d["p99"],
                   ci_low=d["ci95"][0], ci_high=d["ci95"][1],
                   median_ci_low=d["median_ci95"][0], median_ci_high=d["median_ci95"][1])


def summarize(values: Sequence[float]) -> Summary | None:
    """Summarize ``values``; None when there are none."""
    if len(values) == 0:
        return None
    a = np.asarray(values, dtype=np.float64)
    n = int(a.size)
    mean = float(a.mean())
    std = float(a.std(ddof=1)) if n > 1 else 0.0
    if n > 1:
        half = t975(n - 1) * std / math.sqrt(n)
        lo, hi = mean - half, mean + half
    else:
        lo = hi = mean
    s = np.sort(a)
    if n >= 6:
        k = _Z975 * math.sqrt(n) / 2
        j = max(math.floor(n / 2 - k), 0)
        u = min(math.ceil(n / 2 + k), n - 1)
        mlo, mhi = float(s[j]), float(s[u])
    else:
        mlo, mhi = float(s[0]), float(s[-1])
    p90, p95, p99 = (float(x) for x in np.percentile(a, [90, 95, 99]))
    return Summary(n=n, mean=mean, median=float(np.median(a)), std=std, min=float(s[0]),
                   max=float(s[-1]), p90=p90, p95=p95, p99=p99, ci_low=lo, ci_high=hi,
                   median_ci_low=mlo, median_ci_high=mhi)


def percentile(values: Sequence[float], p: float) -> float:
    """The p-th percentile (numpy's linear interpolation, as ``vllm bench serve``)."""
    return float(np.percentile(np.asarray(values, dtype=np.float64), p)) if values else 0.0


@dataclass(frozen=True, slots=True)
class Drift:
    """Whether a metric moved between the first and the second half of a series."""

    first_mean: float
    second_mean: float
    rel_change: float
    significant: bool

    def to_json(self) -> dict[str, Any]:
        """Plain-JSON form."""
        return {"first_mean": self.first_mean, "second_mean": self.second_mean,
                "rel_change": self.rel_change, "significant": self.significant}


def drift(values: Sequence[float], *, min_rel: float = 0.02) -> Drift | None:
    """Compare the first and second half of a series in measurement order.

    Flags a drift (typically a warm-up that was not excluded, or thermal throttling)
    when the halves differ by more than both ``min_rel`` and twice their combined
    standard error. None for fewer than 6 values.
    """
    n = len(values)
    if n < 6:
        return None
    a = np.asarray(values, dtype=np.float64)
    h = n // 2
    x, y = a[:h], a[n - h:]
    m1, m2 = float(x.mean()), float(y.mean())
    se = math.sqrt(float(x.var(ddof=1)) / h + float(y.var(ddof=1)) / h)
    rel = (m2 - m1) / abs(m1) if m1 else math.inf
    sig = abs(m2 - m1) > 2 * se and abs(rel) > min_rel
    return Drift(first_mean=m1, second_mean=m2, rel_change=rel, significant=bool(sig))
