"""The numpy-only statistics against known values."""

from __future__ import annotations

import numpy as np
import pytest

from servelab.analysis.stats import (
    betainc,
    bootstrap_ratio_ci,
    mean_ci,
    robust_sigma,
    t_quantile,
    t_sf_two_sided,
    welch_test,
)


def test_t_distribution_matches_tables() -> None:
    # Standard t-table values (two-sided).
    assert t_sf_two_sided(2.228138852, 10) == pytest.approx(0.05, abs=1e-9)
    assert t_sf_two_sided(1.0, 3) == pytest.approx(0.391002, abs=1e-6)
    assert t_sf_two_sided(12.7062047, 1) == pytest.approx(0.05, abs=1e-7)
    assert t_quantile(0.975, 30) == pytest.approx(2.042272, abs=1e-6)
    assert t_quantile(0.995, 5) == pytest.approx(4.032143, abs=1e-6)
    assert betainc(2.0, 3.0, 0.4) == pytest.approx(0.5248, abs=1e-12)


def test_welch_matches_a_hand_computed_example() -> None:
    a = [27.5, 21.0, 19.0, 23.6, 17.0, 17.9, 16.9, 20.1, 21.9, 22.6, 23.1, 19.6, 19.0, 21.7, 21.4]
    b = [27.1, 22.0, 20.8, 23.4, 23.4, 23.5, 25.8, 22.0, 24.8, 20.2, 21.9, 22.1, 22.9, 20.5, 24.4]
    w = welch_test(a, b)
    # Welch's classic example 1: t = -2.46 (a - b), df = 24.99, p = 0.021
    assert w.t == pytest.approx(2.46, abs=0.01)
    assert w.df == pytest.approx(24.99, abs=0.02)
    assert w.p_value == pytest.approx(0.021, abs=0.001)


def test_intervals_cover_and_noise_is_robust_to_a_step() -> None:
    rng = np.random.default_rng(5)
    x = rng.normal(100.0, 2.0, 400)
    _m, lo, hi = mean_ci(x)
    assert lo < 100.0 < hi and hi - lo < 1.0
    ratio, rlo, rhi = bootstrap_ratio_ci(x, x * 1.10)
    assert ratio == pytest.approx(1.10) and rlo < 1.10 < rhi
    series = np.r_[rng.normal(50, 1, 20), rng.normal(30, 1, 20)]
    assert robust_sigma(series) == pytest.approx(1.0, rel=0.35)
    assert np.std(series) > 9  # the naive estimate is swamped by the step
