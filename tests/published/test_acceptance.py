"""Published acceptance-length priors (issue 40): the shipped table and the loader."""

from __future__ import annotations

import re
import tomllib
from importlib import resources

import pytest

from servelab.errors import InputError
from servelab.published.acceptance import (
    AcceptanceMeasurement,
    AcceptancePrior,
    NoPrior,
    acceptance_prior,
    family_of,
    load_acceptance,
    parse_acceptance,
)


def test_every_shipped_measurement_is_sourced_and_quoted() -> None:
    rows = load_acceptance()
    assert len(rows) >= 30
    for m in rows:
        assert m.url.startswith("https://"), m
        assert 1 <= m.low <= m.high <= m.k + 1, m
        digits = re.findall(r"\d+(?:\.\d+)?", m.quote)
        if "rate" in m.quote.lower() and m.k == 1:  # a k=1 rate: length = 1 + rate
            assert any(abs(1 + float(d) / 100 - m.low) < 1e-9 or abs(1 + float(d) / 100 - m.high)
                       < 1e-9 for d in digits), m
        else:  # the length as the source writes it
            assert f"{m.low:.2f}" in m.quote or f"{m.high:.2f}" in m.quote, m


def test_the_seed_family_k3_prior_spans_its_measurements() -> None:
    # Qwen3.6-35B-A3B (model_type qwen3_5_moe) drafting with its MTP head at k=3, as the seed
    # page's NVFP4-Fast recipe does
    fam = family_of("qwen3_5_moe")
    assert fam == "qwen3_5" and family_of("qwen3_5_moe_text") == "qwen3_5"
    prior = acceptance_prior(fam, "qwen3_next_mtp", 3)  # vLLM's *_mtp names are "mtp"
    assert isinstance(prior, AcceptancePrior)
    assert (prior.low, prior.high, prior.value) == (2.52, 3.39, 3.33)
    assert prior.basis == "family" and len(prior.measurements) == 3
    assert "published prior from 3 measurements" in prior.line
    assert all(m.url in prior.line or m.model in prior.line for m in prior.measurements)
    own = acceptance_prior(fam, "mtp", 3, model="Qwen/Qwen3.5-397B-A17B")
    assert isinstance(own, AcceptancePrior) and own.basis == "model"
    assert (own.low, own.high) == (3.33, 3.39)


def test_k1_ranges_come_from_rates_exactly() -> None:
    prior = acceptance_prior("qwen3_5", "mtp", 1)
    assert isinstance(prior, AcceptancePrior)
    assert (prior.low, prior.high) == (1.75, 1.93)
    ds = acceptance_prior(family_of("deepseek_v3"), "deepseek_mtp", 1)
    assert isinstance(ds, AcceptancePrior) and (ds.low, ds.high) == (1.85, 1.90)


@pytest.mark.parametrize("family, method, k, says", [
    ("qwen3_5", "mtp", 9, "published at k = 1, 2, 3, 4, 5, 6, 7, 8, not k = 9"),
    ("qwen3_5", "eagle3", 3, "nothing published for qwen3_5 eagle3"),
    (family_of("qwen3_next"), "mtp", 3, "no published acceptance lengths"),
    ("deepseek_v3", "mtp", 3, "not interpolated"),
])
def test_none_known_is_said(family: str | None, method: str, k: int, says: str) -> None:
    got = acceptance_prior(family, method, k)
    assert isinstance(got, NoPrior) and says in got.reason


def test_a_bad_table_is_refused_naming_the_curve() -> None:
    text = resources.files("servelab.published").joinpath("acceptance.toml").read_text(
        encoding="utf-8")
    doc = tomllib.loads(text)
    doc["curve"][2]["lengths"] = {"3": 5.0}  # more than k + 1 tokens per step
    with pytest.raises(InputError, match=r"curve 3\.lengths\.3: 5\.0 exceeds k"):
        parse_acceptance(doc, "acc.toml")
    doc["curve"][2]["lengths"] = {"3": 2.52}
    del doc["curve"][0]["url"]
    with pytest.raises(InputError, match="curve 1 lacks url"):
        parse_acceptance(doc, "acc.toml")
    with pytest.raises(InputError, match="schema"):
        parse_acceptance({"curve": []}, "acc.toml")


def test_a_table_given_replaces_the_shipped_one() -> None:
    mine = (AcceptanceMeasurement("qwen3_5", "m", "mtp", 2, 2.5, 2.5, "vllm", "h200", "w", None,
                                  "https://example.org", "2.50"),)
    got = acceptance_prior("qwen3_5", "mtp", 2, table=mine)
    assert isinstance(got, AcceptancePrior) and (got.value, got.low, got.high) == (2.5, 2.5, 2.5)
