"""measured_acceptance: pooled acceptance of stored runs with known counters, matched by
checkpoint fingerprint, method and k; runs that cannot say are left out."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from servelab.analysis.acceptance import (
    measured_acceptance,
    measured_configs,
    run_acceptance,
    spec_config_of,
)
from servelab.evidence.acceptance import resolve_acceptance
from servelab.sizing.specsource import SpecConfig, parse_acceptance_option
from servelab.store.model import STATUS_FAILED, RunRecord

HASH = "a" * 64


def _run(run_id: str, *, drafts: float, accepted: float, per_pos: list[float] | None = None,
         method: str = "ngram", k: int = 3, header: str = HASH, status: str = "ok",
         in_recipe: bool = False) -> RunRecord:
    spec = json.dumps({"method": method, "num_speculative_tokens": k})
    counters: dict[str, Any] = {
        "spec_decode_num_drafts": drafts, "spec_decode_num_draft_tokens": drafts * k,
        "spec_decode_num_accepted_tokens": accepted,
    }
    if per_pos is not None:
        counters["spec_decode_num_accepted_tokens_per_pos"] = per_pos
    recipe = (f'[engine.flags]\nspeculative_config = {{ method = "{method}", '
              f"num_speculative_tokens = {k} }}\n")
    return RunRecord(
        started_at=datetime(2026, 12, 3, tzinfo=UTC), run_id=run_id, status=status,
        checkpoint_header_hash=header,
        engine_args=() if in_recipe else ("python", "--port", "1", "--speculative-config", spec),
        recipe_text=recipe if in_recipe else None,
        extra={"bench": {"server_counters": counters}},
    )


def test_pooled_value_spread_positions_and_run_ids() -> None:
    runs = [
        _run("r2", drafts=100, accepted=150, per_pos=[80, 45, 25]),  # 2.5
        _run("r1", drafts=50, accepted=100, per_pos=[45, 35, 20]),  # 3.0
        _run("other-k", drafts=10, accepted=5, k=2),
        _run("other-method", drafts=10, accepted=5, method="eagle"),
        _run("other-model", drafts=10, accepted=5, header="b" * 64),
        _run("failed", drafts=10, accepted=5, status=STATUS_FAILED),
        _run("no-drafts", drafts=0, accepted=0),
        _run("impossible", drafts=10, accepted=31),  # more than k per draft
    ]
    m = measured_acceptance(runs, header_hash=HASH, method="ngram", draft_tokens=3)
    assert m is not None
    assert m.run_ids == ("r1", "r2")
    assert m.value == pytest.approx(1 + 250 / 150)
    assert (m.low, m.high) == pytest.approx((2.5, 3.0))
    assert m.stdev == pytest.approx(0.5 / 2**0.5)
    assert m.position_rates == pytest.approx((125 / 150, 80 / 150, 45 / 150))
    assert m.source == "measured in run(s) r1, r2"
    assert m.to_dict()["runs"][0]["acceptance_length"] == pytest.approx(3.0)


def test_config_from_the_recipe_and_mtp_names_normalized() -> None:
    run = _run("r", drafts=10, accepted=12, method="qwen3_next_mtp", k=2, in_recipe=True)
    assert spec_config_of(run) == SpecConfig("mtp", 2)
    m = measured_acceptance([run], header_hash=HASH, method="deepseek_mtp", draft_tokens=2)
    assert m is not None and m.value == pytest.approx(2.2) and m.stdev is None
    assert m.position_rates == ()  # not scraped: none claimed
    assert measured_configs([run], header_hash=HASH) == (SpecConfig("mtp", 2),)


def test_no_matching_run_is_none_and_plan_says_why() -> None:
    runs = [_run("r", drafts=10, accepted=5)]
    assert measured_acceptance(runs, header_hash=HASH, method="mtp", draft_tokens=3) is None
    plain = RunRecord(started_at=datetime(2026, 12, 3, tzinfo=UTC), run_id="p",
                      checkpoint_header_hash=HASH)
    assert run_acceptance(plain) is None
    # a drafting run is no plain-decode calibration sample; an MTP one is a step sample
    assert spec_config_of(runs[0]) is not None and spec_config_of(plain) is None
    src = resolve_acceptance("auto", method="mtp", draft_tokens=3, header_hash=HASH, runs=runs)
    assert src is not None and src.kind == "none" and src.lengths == ()
    assert src.line.startswith("no speculative-decode prediction: no stored run")


def test_resolution_given_overrides_measured_and_none_opts_out() -> None:
    runs = [_run("r", drafts=10, accepted=15)]
    auto = resolve_acceptance("auto", method="ngram", draft_tokens=3, header_hash=HASH,
                              runs=runs)
    assert auto is not None and auto.kind == "measured" and auto.lengths == (2.5,)
    assert "measured in run(s) r" in auto.line
    given = resolve_acceptance((1.5, 2.0), method="ngram", draft_tokens=3, header_hash=HASH,
                               runs=runs)
    assert given is not None and given.kind == "given" and given.lengths == (1.5, 2.0)
    assert resolve_acceptance("none", method="ngram", draft_tokens=3, header_hash=HASH,
                              runs=runs) is None
    ignored = resolve_acceptance("auto", method="ngram", draft_tokens=3, header_hash=HASH,
                                 runs=runs, use_store=False)
    assert ignored is not None and ignored.kind == "none"


def test_option_parsing() -> None:
    assert parse_acceptance_option(None) == "auto"
    assert parse_acceptance_option(" None ") == "none"
    assert parse_acceptance_option("1.5,2") == (1.5, 2.0)
    from servelab.errors import UsageError

    with pytest.raises(UsageError, match="auto, none or lengths"):
        parse_acceptance_option("fast")


def test_auto_without_a_measured_run_takes_the_published_prior_of_the_family() -> None:
    """Issue 40: a build that ships an MTP head gets its speculative figure from the shipped
    acceptance priors (per family, method and k, with sources) when no stored run measured
    one; a measured run still wins, and a family without priors says so."""
    src = resolve_acceptance("auto", method="qwen3_next_mtp", draft_tokens=3, header_hash=HASH,
                             runs=[], use_store=False, model_type="qwen3_5_moe")
    assert src is not None and src.kind == "published" and src.draft_tokens == 3
    (value,) = src.lengths
    assert src.spread is not None and src.spread[0] <= value <= src.spread[1]
    assert src.line.startswith(f"acceptance length {value:.2f}")
    assert "qwen3_5 mtp k=3: published prior" in src.line and "https://" not in src.line
    # no published k=9 for the family: no prediction, with both reasons
    none = resolve_acceptance("auto", method="mtp", draft_tokens=9, header_hash=HASH, runs=[],
                              model_type="qwen3_5_moe")
    assert none is not None and none.kind == "none" and "not k = 9" in none.line
    measured = resolve_acceptance("auto", method="ngram", draft_tokens=3, header_hash=HASH,
                                  runs=[_run("r", drafts=10, accepted=15)],
                                  model_type="qwen3_5_moe")
    assert measured is not None and measured.kind == "measured"
