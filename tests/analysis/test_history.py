"""history: planted steps found at the right date and attributed; pure noise flags nothing."""

from __future__ import annotations

from datetime import date
from typing import Any

import numpy as np
import pytest
from tests.analysis.datasets import _days, seed_like_dataset
from tests.store.records import make_run

from servelab.analysis import change_points, detect_changes, history


def test_seed_drop_is_flagged_with_date_and_changed_factors() -> None:
    h = history("qwen3.6-35b-a3b-nvfp4", seed_like_dataset(), metrics=["decode_tok_s"])
    (series,) = h.series
    assert [r.run_id for r in series.rows][:2] == ["good-0", "good-1"]
    (change,) = series.changes
    assert change.regression
    assert change.first_bad_at.date() == date(2026, 7, 27)
    assert change.last_good_at.date() == date(2026, 7, 21)
    assert (change.last_good_run, change.first_bad_run) == ("good-5", "bad-0")
    assert change.before_mean == pytest.approx(76.8, rel=0.02)
    assert change.after_mean == pytest.approx(42.6, rel=0.02)
    names = {f.name: f for f in change.factors}
    assert set(names) == {"engine_version", "driver"}
    assert names["driver"].before == "580.95" and names["driver"].after == "580.126"
    assert all(f.consistent for f in change.factors)
    assert [c for _s, c in h.regressions] == [change]
    assert h.to_json_dict()["series"][0]["changes"][0]["first_bad_run"] == "bad-0"


@pytest.mark.parametrize(
    "factor, before, after",
    [
        ("driver", "580.95", "580.126"),
        ("checkpoint_revision", "abc123", "def456"),
        ("host", "spark-1", "spark-2"),
    ],
)
def test_planted_step_is_attributed_to_the_one_factor_that_changed(
    factor: str, before: str, after: str
) -> None:
    rng = np.random.default_rng(7)
    days = _days("2026-06-01", 20)
    runs = []
    for i, day in enumerate(days):
        bad = i >= 12
        varied: dict[str, Any] = {factor: after if bad else before}
        runs.append(
            make_run(
                day=day,
                seed=i,
                run_id=f"r{i:02d}",
                decode=(60.0 if bad else 66.0) * (1 + 0.01 * rng.standard_normal()),
                **varied,
            )
        )
    (series,) = history("x", runs, metrics=["decode_tok_s"]).series
    (change,) = series.changes
    assert change.index == 12 and change.first_bad_at.date().isoformat() == days[12]
    assert [(f.name, f.before, f.after, f.consistent) for f in change.factors] == [
        (factor, before, after, True)
    ]


def test_improvement_is_a_change_but_not_a_regression() -> None:
    runs = [
        make_run(day=d, seed=i, decode=40.0 if i < 5 else 60.0, run_id=f"r{i}")
        for i, d in enumerate(_days("2026-06-01", 10))
    ]
    (series,) = history("x", runs, metrics=["decode_tok_s"]).series
    (change,) = series.changes
    assert not change.regression and change.rel_change == pytest.approx(0.5, rel=0.05)


@pytest.mark.parametrize("seed", range(20))
def test_pure_noise_yields_no_regression(seed: int) -> None:
    rng = np.random.default_rng(1000 + seed)
    days = _days("2026-01-01", 25)
    runs = [
        make_run(
            day=d,
            seed=seed * 100 + i,
            run_id=f"n{i}",
            decode=50.0 * (1 + 0.015 * rng.standard_normal()),
        )
        for i, d in enumerate(days)
    ]
    h = history("noise", runs, metrics=["decode_tok_s", "ttft_s", "weights_gib"])
    assert h.regressions == []
    assert all(s.changes == () for s in h.series)


def test_detector_on_plain_numbers() -> None:
    assert change_points([10.0, 10.1, 9.9, 10.0, 10.05, 5.0, 5.1, 4.9, 5.05]) == [5]
    assert change_points([10.0, 10.1, 9.9, 10.0, 10.05, 9.95]) == []
    # Identical readings (e.g. KV pool tokens from the log) are stable: no change...
    assert change_points([308955.0] * 8) == []
    # ...and a real change in them is found, however clean the series.
    assert change_points([308955.0] * 4 + [200000.0] * 4) == [4]
    found, tau, penalty = detect_changes([1.0, 1.0, 5.0, 5.0, 9.0, 9.0, 9.0, 9.0])
    assert [k for k, _ in found] == [2, 4] and penalty > 0 and tau >= 0


def test_bare_short_series_makes_no_claim_but_sampled_one_does() -> None:
    # Two summary readings (no per-request samples): their noise is unknown, so no verdict.
    assert change_points([38.63, 38.27]) == []
    assert change_points([76.8, 42.6]) == []
    # The seed's FP8 rows with their requests: 52.3 -> 38.3 tok/s is far outside the noise.
    runs = [
        make_run(day="2026-07-06", decode=52.3, seed=1, run_id="old", driver="580.95"),
        make_run(day="2026-07-28", decode=38.3, seed=2, run_id="new", driver="580.126"),
    ]
    (series,) = history("fp8", runs, metrics=["decode_tok_s"]).series
    (change,) = series.changes
    assert change.regression and [f.name for f in change.factors] == ["driver"]
