"""experiment: criteria grammar, deltas with CIs, and verdicts with known answers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from tests.store.records import make_run

from servelab.analysis import Group, criteria_from_toml, parse_criteria, run_experiment
from servelab.analysis.experiment import ADOPT, FAIL, INCONCLUSIVE, PASS, REJECT, Clause
from servelab.errors import InputError, UsageError

CRITERIA = "adopt if decode >= +5% and memory not worse"


def _groups(decode_b: float, weights_b: float, **kw: Any) -> tuple[Group, Group]:
    base = make_run(decode=67.9, seed=1, run_id="base", weights_gib=21.5, power_w=95.0)
    var = make_run(decode=decode_b, seed=2, run_id="var", weights_gib=weights_b, **kw)
    return Group("baseline", (base,)), Group("variant", (var,))


def test_grammar() -> None:
    assert parse_criteria(CRITERIA) == (
        Clause("decode >= +5%", "decode_tok_s", "threshold", ">=", 5.0, True),
        Clause("memory not worse", "weights_gib", "not_worse"),
    )
    assert parse_criteria("ttft <= -10%, power < 200, prefill better")[1] == Clause(
        "power < 200", "power_w", "threshold", "<", 200.0, False
    )
    with pytest.raises(UsageError, match="cannot parse criterion 'decode is faster'"):
        parse_criteria("decode is faster")
    with pytest.raises(UsageError, match="unknown metric 'speed'"):
        parse_criteria("speed >= 5%")


def test_criteria_toml_table(tmp_path: Path) -> None:
    path = tmp_path / "criteria.toml"
    path.write_text('[criteria]\ndecode = ">= +5%"\nmemory = "not worse"\n')
    text = criteria_from_toml(path)
    assert parse_criteria(text) == parse_criteria(CRITERIA)
    path.write_text('[criteria]\ndecode = "faster please"\n')
    with pytest.raises(UsageError):
        criteria_from_toml(path)
    path.write_text("decode = 1\n")
    with pytest.raises(InputError, match=r"criteria\.toml: no \[criteria\] table"):
        criteria_from_toml(path)


def test_clear_win_is_adopted() -> None:
    base, var = _groups(106.5, 21.5, power_w=96.0)  # the seed's MTP: +57 % decode, same weights
    res = run_experiment(base, var, CRITERIA)
    assert res.verdict == ADOPT
    decode = next(d for d in res.deltas if d.metric == "decode_tok_s")
    assert decode.rel_diff == pytest.approx(106.5 / 67.9 - 1, rel=0.05)
    assert decode.rel_ci_low is not None and decode.rel_ci_high is not None
    assert decode.rel_diff is not None
    assert 0.05 < decode.rel_ci_low < decode.rel_diff < decode.rel_ci_high
    assert {d.metric for d in res.deltas} >= {
        "decode_tok_s",
        "prefill_tok_s",
        "weights_gib",
        "kv_pool_tokens",
        "power_w",
    }
    assert [c.status for c in res.clauses] == [PASS, PASS]
    doc = res.to_json_dict()
    assert doc["schema"] == "servelab.experiment/1" and doc["verdict"] == "adopt"


def test_more_memory_rejects_even_when_faster() -> None:
    res = run_experiment(*_groups(106.5, 35.28), CRITERIA)
    assert res.verdict == REJECT
    assert [c.status for c in res.clauses] == [PASS, FAIL]


def test_too_small_a_gain_rejects_and_a_borderline_one_is_inconclusive() -> None:
    assert run_experiment(*_groups(68.5, 21.5), CRITERIA).verdict == REJECT  # ~+1 %
    # Noisy variant close to the +5 % bar: the CI straddles it, so no decision.
    base = Group("b", (make_run(decode=67.9, seed=1, rel_noise=0.05, n=15),))
    var = Group("v", (make_run(decode=67.9 * 1.05, seed=2, rel_noise=0.05, n=15),))
    res = run_experiment(base, var, "decode >= +5%")
    assert res.verdict == INCONCLUSIVE
    assert "[" in res.clauses[0].reason  # the CI is shown


def test_unmeasured_metric_is_inconclusive() -> None:
    base, var = _groups(106.5, 21.5)  # variant has no power reading
    res = run_experiment(base, var, "decode >= 5% and power not worse")
    assert res.verdict == INCONCLUSIVE
    assert "not measured" in res.clauses[1].reason
