"""Statistics on per-request samples: Welch's t-test, bootstrap CIs, robust noise (numpy only).

The Student-t CDF is computed from the regularized incomplete beta function (Lentz's continued
fraction, Numerical Recipes §6.4), accurate to ~1e-12, so no scipy is needed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

FloatArray = NDArray[np.float64]


def as_array(values: Sequence[float] | FloatArray) -> FloatArray:
    """Finite values of ``values`` as a float64 array."""
    arr = np.asarray(values, dtype=np.float64)
    return arr[np.isfinite(arr)]


def _betacf(a: float, b: float, x: float) -> float:
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 400):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-14:
            break
    return h


def betainc(a: float, b: float, x: float) -> float:
    """Regularized incomplete beta function I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    ln_front = (
        math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    )
    front = math.exp(ln_front)
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def t_sf_two_sided(t: float, df: float) -> float:
    """Two-sided p-value P(|T| >= |t|) for Student's t with ``df`` degrees of freedom."""
    if not math.isfinite(t):
        return 0.0
    if df <= 0 or not math.isfinite(df):
        # df -> infinity: the normal distribution
        return math.erfc(abs(t) / math.sqrt(2.0))
    return betainc(df / 2.0, 0.5, df / (df + t * t))


def t_quantile(p: float, df: float) -> float:
    """The ``p`` quantile (0.5 < p < 1) of Student's t, by bisection on the CDF."""
    lo, hi = 0.0, 1e3
    target = 2.0 * (1.0 - p)
    for _ in range(200):
        mid = (lo + hi) / 2.0
        if t_sf_two_sided(mid, df) > target:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2.0


@dataclass(frozen=True, slots=True)
class Welch:
    """Welch's unequal-variance t-test of mean(b) - mean(a)."""

    mean_a: float
    mean_b: float
    diff: float
    t: float
    df: float
    p_value: float
    n_a: int
    n_b: int


def welch_test(a: Sequence[float] | FloatArray, b: Sequence[float] | FloatArray) -> Welch:
    """Welch's t-test on two samples (needs at least 2 finite values in each)."""
    xa, xb = as_array(a), as_array(b)
    na, nb = len(xa), len(xb)
    if na < 2 or nb < 2:
        raise ValueError("Welch's test needs at least two values per sample")
    ma, mb = float(xa.mean()), float(xb.mean())
    va, vb = float(xa.var(ddof=1)) / na, float(xb.var(ddof=1)) / nb
    se2 = va + vb
    diff = mb - ma
    if se2 == 0.0:
        p = 1.0 if diff == 0.0 else 0.0
        return Welch(
            ma,
            mb,
            diff,
            math.copysign(math.inf, diff) if diff else 0.0,
            float(na + nb - 2),
            p,
            na,
            nb,
        )
    t = diff / math.sqrt(se2)
    df = se2**2 / ((va**2 / (na - 1) if na > 1 else 0.0) + (vb**2 / (nb - 1) if nb > 1 else 0.0))
    return Welch(ma, mb, diff, t, df, t_sf_two_sided(t, df), na, nb)


def mean_ci(values: Sequence[float] | FloatArray, conf: float = 0.95) -> tuple[float, float, float]:
    """(mean, low, high): Student-t confidence interval of the mean."""
    x = as_array(values)
    if len(x) == 0:
        raise ValueError("no values")
    m = float(x.mean())
    if len(x) < 2:
        return m, m, m
    half = t_quantile(0.5 + conf / 2.0, len(x) - 1) * float(x.std(ddof=1)) / math.sqrt(len(x))
    return m, m - half, m + half


def bootstrap_ratio_ci(
    a: Sequence[float] | FloatArray,
    b: Sequence[float] | FloatArray,
    *,
    conf: float = 0.95,
    n_boot: int = 2000,
    seed: int = 0,
) -> tuple[float, float, float]:
    """(ratio, low, high) of mean(b)/mean(a) with a percentile bootstrap CI (fixed seed)."""
    xa, xb = as_array(a), as_array(b)
    if len(xa) == 0 or len(xb) == 0:
        raise ValueError("no values")
    ma = float(xa.mean())
    ratio = float(xb.mean()) / ma if ma != 0 else math.inf
    rng = np.random.default_rng(seed)
    ia = rng.integers(0, len(xa), size=(n_boot, len(xa)))
    ib = rng.integers(0, len(xb), size=(n_boot, len(xb)))
    den = xa[ia].mean(axis=1)
    num = xb[ib].mean(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratios = num / den
    ratios = ratios[np.isfinite(ratios)]
    if len(ratios) == 0:
        return ratio, ratio, ratio
    alpha = (1.0 - conf) / 2.0
    lo, hi = np.quantile(ratios, [alpha, 1.0 - alpha])
    return ratio, float(lo), float(hi)


def robust_sigma(values: Sequence[float] | FloatArray) -> float:
    """Noise level of a series robust to a few steps: MAD of successive differences / √2."""
    x = as_array(values)
    if len(x) < 3:
        return 0.0
    d = np.diff(x)
    mad = float(np.median(np.abs(d - np.median(d))))
    return 1.4826 * mad / math.sqrt(2.0)
