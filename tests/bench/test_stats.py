"""Statistics: t quantiles, summaries, confidence intervals, drift."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from servelab.bench.stats import drift, summarize, t975


def test_t_quantiles_match_known_values() -> None:
    assert t975(1) == pytest.approx(12.706)
    assert t975(10) == pytest.approx(2.228)
    # Beyond the table: the Cornish-Fisher expansion (reference values from tables).
    assert t975(40) == pytest.approx(2.021, abs=2e-3)
    assert t975(120) == pytest.approx(1.980, abs=2e-3)
    assert t975(10_000) == pytest.approx(1.960, abs=1e-3)


def test_summary_of_known_values() -> None:
    s = summarize([1.0, 2.0, 3.0, 4.0, 5.0])
    assert s is not None
    assert (s.n, s.mean, s.median, s.min, s.max) == (5, 3.0, 3.0, 1.0, 5.0)
    assert s.std == pytest.approx(math.sqrt(2.5))
    half = 2.776 * math.sqrt(2.5) / math.sqrt(5)
    assert s.ci_low == pytest.approx(3 - half)
    assert s.ci_high == pytest.approx(3 + half)
    assert s.p99 == pytest.approx(float(np.percentile([1, 2, 3, 4, 5], 99)))
    assert summarize([]) is None
    one = summarize([7.0])
    assert one is not None and one.ci_low == one.ci_high == 7.0
    assert math.isinf(one.ci_rel_halfwidth)


def test_mean_ci_covers_the_true_mean_about_95_percent() -> None:
    rng = random.Random(1)
    hits = 0
    trials = 2000
    for _ in range(trials):
        s = summarize([rng.gauss(10.0, 2.0) for _ in range(8)])
        assert s is not None
        hits += s.ci_low <= 10.0 <= s.ci_high
    assert 0.93 < hits / trials < 0.97


def test_median_ci_brackets_the_median() -> None:
    rng = random.Random(2)
    vals = [rng.expovariate(1.0) for _ in range(101)]
    s = summarize(vals)
    assert s is not None
    assert s.median_ci_low <= s.median <= s.median_ci_high
    assert s.median_ci_low > s.min and s.median_ci_high < s.max


def test_drift_flags_a_step_and_not_noise() -> None:
    rng = random.Random(3)
    flat = [100 + rng.gauss(0, 1) for _ in range(20)]
    d = drift(flat)
    assert d is not None and not d.significant
    step = [90 + rng.gauss(0, 1) for _ in range(10)] + [100 + rng.gauss(0, 1) for _ in range(10)]
    d2 = drift(step)
    assert d2 is not None and d2.significant and d2.rel_change == pytest.approx(0.11, abs=0.03)
    assert drift([1.0, 2.0]) is None
