"""compare: same distribution -> "no significant difference"; a real difference -> found."""

from __future__ import annotations

import pytest
from tests.store.records import make_run

from servelab.analysis import Group, compare_groups
from servelab.analysis.compare import BASELINE, BETTER, NO_DIFFERENCE, SAME, WORSE, Comparison, Row
from servelab.errors import UsageError


def _row(comp: Comparison, metric: str, point: str = "p2048-c1") -> Row:
    return next(r for r in comp.rows if r.metric == metric and r.point == point)


def test_two_samples_of_one_distribution_are_no_significant_difference() -> None:
    # Like the seed's "vLLM 0.24.0 vs 0.26.0 within 1 %": two versions, same true speed.
    a = make_run(decode=38.3, seed=0, engine_version="0.24.0", run_id="a")
    b = make_run(decode=38.3, seed=100, engine_version="0.26.0", run_id="b")
    comp = compare_groups([Group("0.24.0", (a,)), Group("0.26.0", (b,))])
    cell = _row(comp, "decode_tok_s").cells[1]
    assert cell.verdict == NO_DIFFERENCE
    assert cell.p_value is not None and cell.p_value >= 0.05
    assert abs(cell.rel_diff or 0) < 0.02
    assert comp.significant() == []


def test_false_positive_rate_is_calibrated_to_alpha() -> None:
    # 200 same-distribution pairs at alpha = 0.05: ~10 expected "differences"; a fixed
    # threshold or a broken test statistic would be far off (P(X > 20) < 0.001 if calibrated).
    flagged = 0
    for s in range(200):
        a = make_run(decode=38.3, seed=s)
        b = make_run(decode=38.3, seed=10_000 + s)
        (row,) = compare_groups([Group("a", (a,)), Group("b", (b,))], metrics=["decode_tok_s"]).rows
        flagged += row.cells[1].verdict != NO_DIFFERENCE
    assert 2 <= flagged <= 20


def test_a_real_difference_is_significant_with_direction() -> None:
    base = make_run(decode=42.6, seed=1, run_id="nvfp4")
    fast = make_run(decode=106.5, seed=2, run_id="fast", weights_gib=19.0)
    slow = make_run(decode=38.3, seed=3, run_id="fp8", weights_gib=35.28)
    comp = compare_groups([Group("nvfp4", (base,)), Group("fast", (fast,)), Group("fp8", (slow,))])
    decode = _row(comp, "decode_tok_s")
    assert [c.verdict for c in decode.cells] == [BASELINE, BETTER, WORSE]
    assert decode.cells[1].rel_diff == pytest.approx(106.5 / 42.6 - 1, rel=0.03)
    lo, hi = decode.cells[2].ratio_ci_low, decode.cells[2].ratio_ci_high
    assert lo is not None and hi is not None and lo < 38.3 / 42.6 < hi and hi < 1
    # A latency (lower is better): faster decode means smaller TPOT, also "better".
    assert _row(comp, "tpot_s").cells[1].verdict == BETTER
    weights = _row(comp, "weights_gib", "")
    assert next(c.verdict for c in weights.cells) == BASELINE
    assert weights.cells[1].verdict.startswith("better") and weights.cells[2].verdict.startswith(
        "worse"
    )
    assert _row(comp, "kv_pool_tokens", "").cells[1].verdict == SAME
    doc = comp.to_json_dict()
    assert doc["schema"] == "servelab.compare/1"
    assert [g["run_ids"] for g in doc["groups"]] == [["nvfp4"], ["fast"], ["fp8"]]


def test_groups_pool_their_runs_and_small_true_difference_is_detected_with_enough_data() -> None:
    a = tuple(
        make_run(decode=50.0, seed=s, n=200, rel_noise=0.01, run_id=f"a{s}") for s in range(3)
    )
    b = tuple(
        make_run(decode=51.0, seed=10 + s, n=200, rel_noise=0.01, run_id=f"b{s}") for s in range(3)
    )
    comp = compare_groups([Group("label:a", a), Group("label:b", b)], metrics=["decode_tok_s"])
    (row,) = comp.rows
    assert row.cells[1].n == 600 and row.cells[1].verdict == BETTER


def test_compare_needs_two_groups() -> None:
    with pytest.raises(UsageError):
        compare_groups([Group("a", (make_run(),))])


def test_points_measured_by_only_some_runs_are_compared_where_present() -> None:
    a = make_run(decode=40.0, seed=1, point="p512-c1", run_id="a")
    b = make_run(decode=40.0, seed=2, point="p512-c1", run_id="b")
    c = make_run(decode=30.0, seed=3, point="p8192-c1", run_id="c")
    comp = compare_groups(
        [Group("a", (a,)), Group("b", (b,)), Group("c", (c,))], metrics=["decode_tok_s"]
    )
    (row,) = comp.rows  # p8192 has only one group: nothing to compare there
    assert row.point == "p512-c1"
    assert [c.verdict for c in row.cells] == [BASELINE, NO_DIFFERENCE, "not measured"]
