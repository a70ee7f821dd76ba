"""The speculative step's arithmetic on synthetic figures (servelab.predict.specstep).

Every expected number is worked out by hand in the comments from the module's form, so a
change to the form fails here with the term that moved."""

from __future__ import annotations

import math

import pytest

from servelab.errors import UsageError
from servelab.predict.costs import distinct_expert_fraction as expected_distinct_fraction
from servelab.predict.specstep import (
    ONE_BUILD_DRAFT_ERROR,
    ModelBytes,
    StepParts,
    StepSample,
    choose_draft_fit,
    fit_draft_term,
    implied_acceptance,
    spec_tok_s,
    step_interval,
    step_parts,
    step_seconds,
)

# 10 experts, top-2: one token touches 0.2 of the routed bytes, three tokens 1 - 0.8^3.
MODEL = ModelBytes(
    non_routed=100, routed=1000, num_experts=10, top_k=2, lm_head=30,
    head_non_routed=5, head_routed=50, head_layers=1,
)


def _parts(method: str = "mtp", k: int = 2) -> StepParts:
    return step_parts(method, k, MODEL, context_len=10, layers=4, moe_layers=4, kv_read=7,
                      state_bytes=3, head_kv_per_token=1)


def test_distinct_fraction_of_independent_draws() -> None:
    assert expected_distinct_fraction(10, 2, 1) == pytest.approx(0.2)
    assert expected_distinct_fraction(10, 2, 3) == pytest.approx(1 - 0.8**3)
    assert expected_distinct_fraction(4, 4, 2) == 1.0  # every expert picked by every token
    assert expected_distinct_fraction(0, 2, 3) == 0.0  # a dense model routes nothing


def test_mtp_step_by_hand() -> None:
    p = _parts()
    # verify: 100 non-routed + 1000 x (1 - 0.8^3 = 0.488) + 7 KV + state read once and
    # written for 3 positions: 3 x 4 = 12  ->  100 + 488 + 7 + 12 = 607
    assert p.verify_bytes == 607
    # draft: 2 passes x (5 head + 30 lm_head + 10 tokens x 1 KV) = 90; the first pass over 3
    # positions touches 50 x 0.488 = 24.4 of the head's experts, the second 50 x 0.2 = 10
    assert p.draft_bytes == round(90 + 24.4 + 10)
    assert (p.verify_layers, p.draft_layers, p.draft_passes) == (4, 2, 2)
    # slots: 4 MoE layers x 10 experts + 2 head passes x 1 MoE layer x 10 experts
    assert p.expert_slots == 60
    assert p.step_bytes == p.verify_bytes + p.draft_bytes
    assert p.step_layers == 6


def test_verify_reads_the_weights_once_for_k_plus_one_tokens() -> None:
    plain = MODEL.non_routed + MODEL.routed * 0.2 + 7 + 2 * 3  # one token: r+w state
    for k in (1, 2, 3, 5):
        p = _parts(k=k)
        extra_experts = MODEL.routed * (expected_distinct_fraction(10, 2, k + 1) - 0.2)
        assert p.verify_bytes == round(plain + extra_experts + k * 3)
        # far less than k + 1 single-token steps
        assert p.verify_bytes < (k + 1) * plain


def test_ngram_drafts_on_the_host() -> None:
    n, m = _parts("ngram"), _parts("mtp")
    assert n.verify_bytes == m.verify_bytes
    assert (n.draft_bytes, n.draft_layers, n.draft_passes) == (0, 0, 1)
    assert n.expert_slots == 40


def test_refusals() -> None:
    with pytest.raises(UsageError, match="at least one draft token"):
        _parts(k=0)
    with pytest.raises(UsageError, match="medusa"):
        _parts("medusa")
    headless = ModelBytes(non_routed=100, routed=0, num_experts=0, top_k=0, lm_head=30)
    with pytest.raises(UsageError, match="ships none"):
        step_parts("mtp", 2, headless, context_len=1, layers=2, moe_layers=0, kv_read=0,
                   state_bytes=0)
    with pytest.raises(UsageError, match="negative"):
        ModelBytes(non_routed=-1, routed=0, num_experts=0, top_k=0, lm_head=0)


def test_step_seconds_gpu_overlaps_cpu_sums() -> None:
    # GPU: device 4 ms + 2 passes x 1 ms = 6 ms against a 5 ms form (host) floor
    assert step_seconds(5e-3, 4e-3, 2, 1e-3, host_bound=False) == pytest.approx(6e-3)
    # a host-bound GPU step: the draft term hides under the host's 9 ms
    assert step_seconds(9e-3, 4e-3, 2, 1e-3, host_bound=False) == pytest.approx(9e-3)
    # CPU: everything adds
    assert step_seconds(5e-3, 4e-3, 2, 1e-3, host_bound=True) == pytest.approx(7e-3)


def test_tok_s_is_accepted_tokens_per_step_over_step_time() -> None:
    assert spec_tok_s(3.0, 0.03) == pytest.approx(100.0)
    assert implied_acceptance(100.0, 0.03) == pytest.approx(3.0)
    with pytest.raises(UsageError):
        spec_tok_s(2.0, 0.0)
    with pytest.raises(UsageError):
        spec_tok_s(2.0, math.inf)


def _sample(build: str, form: float, per_pass: float, k: int = 2) -> StepSample:
    p = _parts(k=k)
    return StepSample(f"{build} [mtp k={k} step]", "hw", "mtp", p.draft_passes,
                      form + p.draft_passes * per_pass, form, "synthetic")


def test_draft_term_recovers_a_known_per_pass_time() -> None:
    samples = [_sample("a", f, 1e-3) for f in (4e-3, 5e-3, 6e-3)]
    fit = fit_draft_term(samples, "mtp", "synthetic")
    assert fit is not None
    assert fit.per_pass == pytest.approx(1e-3)
    assert fit.builds == ("a",) and fit.n_samples == 3
    assert fit.rel_error is None  # one build: no leave-one-build-out
    assert fit_draft_term(samples, "eagle", "synthetic") is None


def test_draft_term_floor_and_leave_one_build_out() -> None:
    # a step faster than its form alone cannot make the draft term negative
    fast = [StepSample("a [mtp k=2 step]", "hw", "mtp", 2, 3e-3, 4e-3, "synthetic")]
    fit = fit_draft_term(fast, "mtp", "synthetic")
    assert fit is not None and fit.per_pass == 0.0
    # two builds, 1 ms and 2 ms per pass: a's own 1 ms against b's 2 ms misses by 0.5,
    # b's 2 ms against a's 1 ms by 1.0; the largest, widened by 1 + 1/2 builds: 1.5
    two = [_sample("a", 4e-3, 1e-3), _sample("b", 4e-3, 2e-3)]
    fit2 = fit_draft_term(two, "mtp", "synthetic")
    assert fit2 is not None
    assert fit2.rel_error == pytest.approx(1.5)
    # pooled: s = sum(p r / t^2) / sum(p^2 / t^2) with p = 2, r = 2 ms and 4 ms, t = 6, 8 ms
    num = 2 * 2e-3 / 6e-3**2 + 2 * 4e-3 / 8e-3**2
    den = 4 / 6e-3**2 + 4 / 8e-3**2
    assert fit2.per_pass == pytest.approx(num / den)


def test_step_interval_adds_the_parts_errors() -> None:
    # form 10 ms known to ±25 % (time 8 to 13.33 ms), draft 2 ms known to ±50 % (1 to 3 ms):
    # fastest 9 ms, slowest 16.33 ms; acceptance 3 -> 183.7 to 333.3 tok/s
    lo, hi = step_interval(3.0, 10e-3, 0.25, 2e-3, 0.5) or (0.0, 0.0)
    assert lo == pytest.approx(3.0 / (10e-3 / 0.75 + 3e-3))
    assert hi == pytest.approx(3.0 / 9e-3)
    # one build: the draft term from none to twice itself (8 ms to 17.33 ms)
    lo1, hi1 = step_interval(3.0, 10e-3, 0.25, 2e-3, None) or (0.0, 0.0)
    assert lo1 == pytest.approx(3.0 / (10e-3 / 0.75 + 4e-3))
    assert hi1 == pytest.approx(3.0 / 8e-3)
    # capped at the roofline; none without a decode interval
    lo2, hi2 = step_interval(3.0, 10e-3, 0.25, 2e-3, 0.5, bound=300.0) or (0.0, 0.0)
    assert (lo2, hi2) == (lo, 300.0)
    assert step_interval(3.0, 10e-3, None, 2e-3, 0.5) is None


def test_draft_levels_same_hardware_first_then_a_labelled_fallback() -> None:
    here = _sample("a", 4e-3, 1e-3)
    there = StepSample("b [mtp k=2 step]", "other", "mtp", 2, 8e-3, 4e-3, "synthetic")
    fit = choose_draft_fit([here, there], hardware="hw", method="mtp")
    assert fit is not None and fit.per_pass == pytest.approx(1e-3)
    assert fit.builds == ("a",) and fit.rel_error is None
    # leaving a out, the other machine's 2 ms per pass is a fallback of at least ±100 %
    out = choose_draft_fit([here, there], hardware="hw", method="mtp", leave_out="a [x]")
    assert out is not None and out.per_pass == pytest.approx(2e-3)
    assert out.rel_error == ONE_BUILD_DRAFT_ERROR
    assert "fallback: no mtp step measured on hw; from other" in out.label
    assert choose_draft_fit([here], hardware="hw", method="mtp", leave_out="a") is None
