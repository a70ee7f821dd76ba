"""Ties within the uncertainty of the order (issue 40): the pairwise error of two builds'
decode predictions, and what decides between tied builds (pure, no checkpoint)."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from servelab.choose.row import Row, Speed
from servelab.choose.ties import order_ties, tie_key, tied, what_decides
from servelab.predict.calibration import reference_of
from servelab.predict.pairs import POOLED, PairError, all_pairs, order_error
from servelab.predict.priors import load_priors
from servelab.published.runs import PublishedRun


def _pair(hw: str, err: float, family: str = "f") -> PairError:
    return PairError(hw, "vllm", family, 512, "a", "b", 1.0, math.exp(err))


def test_order_error_is_the_hardware_own_else_pooled() -> None:
    pairs = [_pair("h200", e / 100) for e in range(1, 21)] + [_pair("gb10", 0.5)]
    own = order_error(pairs, "h200")
    assert own is not None and own.hardware == "h200" and own.pairs == 20
    assert own.half_width == pytest.approx(0.19)  # ceil(21 x 0.9) = 19th of 20
    pooled = order_error(pairs, "gb10")  # one pair of its own: too few to say
    assert pooled is not None and pooled.hardware == POOLED and pooled.pairs == 21
    assert "gb10 has no pairs of its own" in pooled.describe()
    assert order_error([_pair("h200", 0.1)], "h200") is None


def test_shipped_pairs_are_the_family_held_out_ratio_errors() -> None:
    """Every pair recomputes from its held-out predictions; the Spark has none of its own."""
    ref = reference_of([], load_priors(None))
    pairs = all_pairs(ref.samples, ref.physical, lower=ref.lower)
    assert pairs and all(p.a != p.b for p in pairs)
    assert len({p.family for p in pairs}) >= 3
    spark = order_error(pairs, "dgx-spark")
    assert spark is not None and spark.hardware == POOLED
    assert 1.05 < spark.factor < 1.6  # an order is neither certain nor a guess


def _row(build: str, tok_s: float, **kw: object) -> Row:
    speed = Speed(tok_s, tok_s * 0.7, tok_s * 1.4, "predicted", "fit")
    none = Speed(None, None, None, "none", "")
    base = Row(None, build, build, "vllm", None, None, True, "", 262144, 10.0, 0, 0, 100,
               speed, none, None, "PATH", None, None, 0, 0, False, None, "")
    return replace(base, **kw)  # type: ignore[arg-type]


def _pub(build: str, value: float) -> PublishedRun:
    return PublishedRun(build, "dgx-spark", "vllm", "decode_tok_s", value, "2026-07-28",
                        "a page", "quote", prompt_tokens=2048)


def test_tied_builds_rank_by_published_figure_then_kernel_risk_then_memory() -> None:
    ref = reference_of([], load_priors(None))
    order = order_error(all_pairs(ref.samples, ref.physical, lower=ref.lower), "dgx-spark")
    a, b = _row("a", 42.6), _row("b", 38.5, max_concurrency=20.0)
    assert tied(a, b, order) and not tied(a, b, None)  # the old rule: 1 % only
    assert not tied(a, _row("c", 42.6 / (order.factor * 1.01) if order else 1.0), order)
    # nothing published: memory decides (b holds more requests)
    assert [r.build for r in order_ties([a, b], order, 2048, lambda x, y: True)] == ["b", "a"]
    assert what_decides(b, a, 2048).startswith("memory decides")
    # a reported kernel-path problem outranks memory
    risky = replace(b, kernel_risk="garbage output (http://x)")
    assert [r.build for r in order_ties([a, risky], order, 2048, lambda x, y: True)] == [
        "a", "b"]
    # a published figure outranks both
    pa, pb = replace(a, published=(_pub("a", 37.0),)), replace(risky, published=(_pub("b", 39.0),))
    assert [r.build for r in order_ties([pa, pb], order, 2048, lambda x, y: True)] == ["b", "a"]
    assert tie_key(pb, 2048)[:2] == (0, -39.0)
    assert "published: 39 tok/s" in what_decides(pb, pa, 2048)
