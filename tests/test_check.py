"""One Check value: the comparison every prediction-vs-observation table uses."""

from __future__ import annotations

import pytest

from servelab.check import Check
from servelab.sizing.check import KV_CACHE_SIZE, KV_CONCURRENCY, LoggedKv, kv_pool_checks
from servelab.sizing.document import read_plan


def test_interval_check_error_and_verdict() -> None:
    c = Check("decode", 100.0, 90.0, "tok/s", low=85.0, high=110.0)
    assert c.error == pytest.approx(-0.1)
    assert c.inside is True and c.verdict == "inside" and c.matches
    out = Check("decode", 100.0, 80.0, "tok/s", low=85.0, high=110.0)
    assert out.inside is False and out.verdict == "outside" and not out.matches
    bare = Check("decode", 100.0, 80.0, "tok/s")
    assert bare.inside is None and bare.verdict == "no interval" and not bare.matches
    assert Check("decode", 100.0, None).verdict == "not observed"
    assert Check("decode", None, 3.0).verdict == "not predicted"
    assert Check("decode", 0.0, 3.0).error is None  # no ratio to a zero prediction


def test_exact_check_compares_as_printed() -> None:
    assert Check("conc", 4.004, 4.0, exact=True, decimals=2).matches
    assert not Check("conc", 4.006, 4.0, exact=True, decimals=2).matches
    assert Check("K type", "q8_0", "q8_0", exact=True).verdict == "equal"
    wrong = Check("K type", "q8_0", "f16", exact=True)
    assert wrong.verdict == "differs"
    assert wrong.mismatch() == "K type: predicted q8_0, engine logged f16"
    # a silent log matches a prediction of nothing to log, and nothing else
    assert Check("padding layers", 0, None, exact=True).matches
    assert Check("padding %", None, None, exact=True, decimals=2).matches
    assert not Check("block size", 32, None, exact=True).matches
    assert Check("block size", None, 32, exact=True).mismatch() == (
        "block size: predicted -, engine logged 32")


def _doc(engine: str, kv: dict[str, object]) -> dict[str, object]:
    return {"schema": "servelab.plan/1", "engine": {"name": engine}, "kv_pool": kv}


def test_kv_pool_checks_follow_the_engines_arithmetic() -> None:
    vllm = read_plan(_doc("vllm", {"tokens": 1000, "max_concurrency": 2.5,
                                   "engine_version": "0.32.0", "rule": "r"}))
    checks = kv_pool_checks(vllm, LoggedKv(1000, 2.5, None))
    assert [c.label for c in checks] == ["KV pool", KV_CONCURRENCY]
    assert all(c.matches for c in checks)
    assert "vLLM 0.32.0 KV arithmetic (r)" in checks[0].basis
    assert not kv_pool_checks(vllm, LoggedKv(1016, 2.5, None))[0].matches
    # nothing logged: the predictions stand alone
    silent = kv_pool_checks(vllm, None)
    assert [(c.predicted, c.observed) for c in silent] == [(1000.0, None), (2.5, None)]
    # llama.cpp: tokens and the cache's MiB as its log prints them (float32, 2 decimals)
    size = 2 * 2048 * 34 + 2 * 2048 * 64
    lcpp = read_plan(_doc("llamacpp", {"engine": "llamacpp", "tokens": 2048, "bytes": size}))
    t, mib = kv_pool_checks(lcpp, LoggedKv(2048, None, 0.3828125 / 1024))
    assert t.label == "KV cache tokens" and t.matches
    assert mib.label == KV_CACHE_SIZE and mib.predicted == 0.38 and mib.matches
    # a plan that followed another engine's arithmetic is not checked
    assert kv_pool_checks(read_plan(_doc("vllm", {"engine": "llamacpp", "tokens": 1})),
                          LoggedKv(1)) == ()
    assert kv_pool_checks(read_plan({"schema": "servelab.plan/1"}), LoggedKv(1)) == ()
