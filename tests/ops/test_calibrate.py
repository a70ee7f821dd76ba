"""servelab.ops.calibrate's rules on values: a correction is kept only where it lowers the
held-out error, and the interval is the held-out |log error|'s 90th percentile."""

from __future__ import annotations

import math

import pytest

from servelab.ops.calibrate import Corrections, HeldOut, Observed, choose, log_quantile
from servelab.ops.model import step_model
from servelab.predict.ops_source import KEY_H200, runs_doc

CORR = Corrections("", 0.4, 0.01, 0.2, 14.0, 2.4, ("llama",))


def _held(errors: list[tuple[float, float, float]]) -> list[HeldOut]:
    """Decode points measured 10 ms, predicted with the given (operators, isolation,
    corrected) relative errors."""
    cfg = runs_doc(KEY_H200)["builds"]["llama-3.2-3b-bf16-random"]["config"]
    model = step_model(cfg)
    out = []
    for i, (a, b, c) in enumerate(errors):
        p = Observed(f"b{i}", f"fam{i % 3}", "decode", 512, 10.0, model)
        out.append(HeldOut(p, 10.0 * (1 + a), 10.0 * (1 + b), 10.0 * (1 + c), CORR))
    return out


def test_a_correction_that_raises_the_held_out_error_is_not_kept() -> None:
    held = _held([(0.4, 0.05, 0.10), (0.5, -0.04, 0.12), (0.3, 0.02, -0.09)])
    ch = choose(held, "decode")
    assert ch.stage == "isolation"
    assert dict(ch.medians)["corrected"] > dict(ch.medians)["isolation"]
    held = _held([(0.4, 0.2, 0.01), (0.5, -0.2, 0.02), (0.3, 0.3, -0.03)])
    assert choose(held, "decode").stage == "corrected"
    held = _held([(0.01, 0.2, 0.1), (0.02, -0.2, 0.1), (0.03, 0.3, -0.1)])
    assert choose(held, "decode").stage == "operators"


def test_the_interval_is_the_held_out_quantile_and_misses_the_rest() -> None:
    errs = [0.01 * i for i in range(1, 21)]  # 1 % .. 20 %
    q = log_quantile(errs)
    assert math.log(1.18) < q < math.log(1.20)
    ch = choose(_held([(0.5, 0.5, e) for e in errs]), "decode")
    assert ch.log_width == pytest.approx(q)
    outside = [e for e in errs if abs(math.log1p(e)) > ch.log_width]
    assert outside == [0.19, 0.2]  # the interval can miss: a tenth of the points are outside
    assert ch.low_factor == pytest.approx(1 / ch.high_factor)
