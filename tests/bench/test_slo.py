"""SLO terms, percentile intervals, verdicts and goodput on known samples."""

from __future__ import annotations

import math

import numpy as np
import pytest

from servelab.bench.samples import ErrorKind, RequestSample
from servelab.bench.slo import evaluate, parse_slo, percentile_ci
from servelab.errors import UsageError


def _sample(i: int, ttft_ms: float, tpot_ms: float, n_out: int = 11, *,
            error: ErrorKind | None = None, warmup: bool = False) -> RequestSample:
    t0 = round(ttft_ms * 1e6)
    chunks = tuple(t0 + round(k * tpot_ms * 1e6) for k in range(n_out))
    return RequestSample(index=i, prompt_len=8, max_tokens=n_out, send_ns=i * 1_000_000_000,
                         chunk_ns=chunks if error is None else (), chunk_tokens=None,
                         end_ns=chunks[-1], prompt_tokens=8, completion_tokens=n_out,
                         finish_reason="length", error=error, warmup=warmup)


def test_parse_terms_units_and_defaults() -> None:
    s = parse_slo("ttft_p99=500, tpot<=40ms,e2e_p90:2s")
    assert [(t.metric, t.percentile, t.threshold_ms) for t in s.terms] == [
        ("ttft", 99.0, 500.0), ("tpot", 50.0, 40.0), ("e2el", 90.0, 2000.0)]
    assert s.label == "ttft_p99<=500ms,tpot_p50<=40ms,e2el_p90<=2000ms"


@pytest.mark.parametrize("text", ["", "ttft_p99", "itl_p50=3", "ttft_p100=5", "ttft_p50=0"])
def test_bad_terms(text: str) -> None:
    with pytest.raises(UsageError, match="--slo"):
        parse_slo(text)


def test_percentile_matches_numpy_and_ci_brackets_it() -> None:
    vals = [float(x) for x in np.random.default_rng(3).lognormal(3, 0.5, 400)]
    for p in (50.0, 90.0, 99.0):
        est, lo, hi = percentile_ci(vals, p)
        assert est == pytest.approx(float(np.percentile(vals, p)))
        assert lo <= est <= hi
    _, lo50, hi50 = percentile_ci(vals, 50)
    _, lo50s, hi50s = percentile_ci(vals[:40], 50)
    assert hi50 - lo50 < hi50s - lo50s  # more samples, narrower interval


def test_verdicts_goodput_and_failures_count_as_slow() -> None:
    fast = [_sample(i, ttft_ms=100, tpot_ms=10) for i in range(40)]
    slow = [_sample(40 + i, ttft_ms=900, tpot_ms=10) for i in range(10)]
    warm = [_sample(99, ttft_ms=5000, tpot_ms=99, warmup=True)]
    r = evaluate(parse_slo("ttft_p50=200,tpot_p50=20"), fast + slow + warm)
    assert r.verdict == "pass" and r.met and r.measured == 50
    assert r.good == 40
    assert r.goodput == pytest.approx(40 / r.duration_s)
    assert r.duration_s == pytest.approx(49 + 0.9 + 0.1, rel=1e-6)  # first send → last end
    r99 = evaluate(parse_slo("ttft_p99=200"), fast + slow)
    assert r99.verdict == "fail" and not r99.met
    failed = [_sample(60 + i, 100, 10, error=ErrorKind.HTTP_5XX) for i in range(60)]
    rf = evaluate(parse_slo("ttft_p50=200"), fast[:20] + failed)
    assert math.isinf(rf.terms[0].value_ms) and rf.verdict == "fail" and rf.good == 20


def test_uncertain_when_the_interval_straddles() -> None:
    xs = [_sample(i, ttft_ms=150 + 10 * i, tpot_ms=10) for i in range(11)]  # 150..250
    r = evaluate(parse_slo("ttft_p50=200"), xs)
    assert r.terms[0].value_ms == pytest.approx(200)
    assert r.verdict == "uncertain" and r.met
