"""Metrics against the synthetic server with known delays match the configured values."""

from __future__ import annotations

import pytest

from servelab.bench.run import BenchConfig, run_bench
from servelab.bench.spec import WorkloadSpec
from servelab.testing.synthetic_server import SyntheticConfig, SyntheticServer


@pytest.mark.timeout(60)
def test_ttft_tpot_itl_match_the_server_schedule() -> None:
    cfg = SyntheticConfig(ttft_s=0.08, itl_s=0.02)
    with SyntheticServer(cfg) as srv:
        res = run_bench(BenchConfig(srv.base_url, WorkloadSpec(
            prompt_lens=(32,), output_len=12, requests=4, max_repeats=1, warmup_requests=1)))
    (pr,) = res.points
    m = pr.metrics
    assert m.completed == 4 and m.failed == 0
    assert m.ttft_ms is not None and m.tpot_ms is not None and m.itl_ms is not None
    assert 80.0 <= m.ttft_ms.median < 90.0
    assert m.tpot_ms.median == pytest.approx(20.0, rel=0.05)
    assert m.itl_ms.median == pytest.approx(20.0, abs=2.0)
    assert m.decode_tok_s is not None and m.decode_tok_s.median == pytest.approx(50.0, rel=0.05)
    assert m.e2el_ms is not None and m.e2el_ms.median == pytest.approx(80 + 11 * 20, rel=0.03)
    # Tokens come from usage: 12 per request, 1 per chunk.
    assert all(s.completion_tokens == 12 for s in pr.samples)
    assert m.tokens_per_chunk is not None and m.tokens_per_chunk.mean == 1.0
    assert m.total_output_tokens == 48
    assert len(pr.samples) == 5 and sum(s.warmup for s in pr.samples) == 1
    assert res.prompt_source == "server /tokenize"
    assert m.prompt_len_mismatches == 0
    assert all(s.prompt_tokens == 32 for s in pr.samples)


@pytest.mark.timeout(60)
def test_prefill_rate_with_min_latency_subtracted() -> None:
    # 0.1 ms per prompt token on top of a 50 ms fixed TTFT -> 10,000 prefill tok/s.
    cfg = SyntheticConfig(ttft_s=0.05, itl_s=0.005, prefill_s_per_token=1e-4)
    with SyntheticServer(cfg) as srv:
        res = run_bench(BenchConfig(srv.base_url, WorkloadSpec(
            prompt_lens=(1000,), output_len=4, requests=3, max_repeats=1,
            subtract_min_latency=True)))
    assert res.min_latency_ms is not None and 50.0 <= res.min_latency_ms < 55.0
    m = res.points[0].metrics
    assert m.prefill_tok_s is not None
    assert m.prefill_tok_s.median == pytest.approx(10_000, rel=0.1)
    assert m.ttft_ms is not None and m.ttft_ms.median == pytest.approx(150.0, rel=0.05)


@pytest.mark.timeout(60)
def test_speculative_chunks_per_token_itl_and_acceptance() -> None:
    # 3 tokens per chunk after the first: per-chunk ITL 15 ms, per-token 5 ms.
    cfg = SyntheticConfig(ttft_s=0.03, itl_s=0.015, tokens_per_chunk=3)
    with SyntheticServer(cfg) as srv:
        res = run_bench(BenchConfig(srv.base_url, WorkloadSpec(
            prompt_lens=(16,), output_len=31, requests=3, max_repeats=1)))
    m = res.points[0].metrics
    assert m.itl_ms is not None and m.itl_ms.median == pytest.approx(15.0, abs=2.0)
    assert m.itl_token_ms is not None and m.itl_token_ms.median == pytest.approx(5.0, abs=0.7)
    assert m.tokens_per_chunk is not None and m.tokens_per_chunk.mean == 3.0
    # TPOT = (E2E - TTFT) / (31 - 1) = 10 chunks * 15 ms / 30 tokens.
    assert m.tpot_ms is not None and m.tpot_ms.median == pytest.approx(5.0, rel=0.08)
    sc = res.server_counters
    assert sc is not None
    assert sc.mean_acceptance_length == pytest.approx(3.0)
    assert sc.acceptance_rate == pytest.approx(1.0)
    assert sc.generation_tokens == 31 * 4  # 3 measured + 1 warm-up
    # 10 drafts of 2 per request, every draft token accepted at both positions
    assert sc.spec_drafts == 40 and sc.spec_accepted_per_pos == (40.0, 40.0)
    assert sc.acceptance_rate_per_pos == (1.0, 1.0)


@pytest.mark.timeout(60)
def test_speculative_partial_last_draft_per_position() -> None:
    """30 tokens at 3 per chunk: 1 + 9 full drafts + one draft with only position 0
    accepted, so acceptance length 1 + 19/10 and position rates (1.0, 0.9)."""
    with SyntheticServer(SyntheticConfig(ttft_s=0.01, itl_s=0.002, tokens_per_chunk=3)) as srv:
        res = run_bench(BenchConfig(srv.base_url, WorkloadSpec(
            prompt_lens=(16,), output_len=30, requests=2, max_repeats=1, warmup_requests=0)))
    sc = res.server_counters
    assert sc is not None and sc.spec_drafts == 20 and sc.spec_accepted == 38
    assert sc.mean_acceptance_length == pytest.approx(2.9)
    assert sc.spec_accepted_per_pos == (20.0, 18.0)
    assert sc.acceptance_rate_per_pos == pytest.approx((1.0, 0.9))
    assert res.to_json()["server_counters"]["spec_decode_acceptance_rate_per_pos"] == \
        pytest.approx([1.0, 0.9])


@pytest.mark.timeout(60)
def test_chat_endpoint_counts_template_tokens() -> None:
    with SyntheticServer(SyntheticConfig(ttft_s=0.01, itl_s=0.002)) as srv:
        res = run_bench(BenchConfig(srv.base_url, WorkloadSpec(
            prompt_lens=(40,), output_len=5, requests=3, max_repeats=1), endpoint="chat",
            chat_template_kwargs={"enable_thinking": False}))
    pr = res.points[0]
    assert pr.metrics.completed == 3
    assert all(s.prompt_tokens == 40 for s in pr.samples)


@pytest.mark.timeout(90)
def test_repeats_until_ci_target_or_max_repeats() -> None:
    with SyntheticServer(SyntheticConfig(ttft_s=0.02, itl_s=0.004)) as srv:
        loose = run_bench(BenchConfig(srv.base_url, WorkloadSpec(
            prompt_lens=(16,), output_len=8, requests=3, max_repeats=4, ci_target=0.5)))
        tight = run_bench(BenchConfig(srv.base_url, WorkloadSpec(
            prompt_lens=(16,), output_len=8, requests=3, max_repeats=3, ci_target=1e-6)))
    assert loose.points[0].converged and loose.points[0].repeats == 1
    assert not tight.points[0].converged and tight.points[0].repeats == 3
    assert tight.points[0].metrics.completed == 9
    assert any("95% CI not within" in n for n in tight.points[0].notes)


@pytest.mark.timeout(60)
def test_poisson_rate_and_concurrency_sweep() -> None:
    with SyntheticServer(SyntheticConfig(ttft_s=0.01, itl_s=0.002)) as srv:
        res = run_bench(BenchConfig(srv.base_url, WorkloadSpec(
            prompt_lens=(8, 24), output_len=4, concurrency=(1, 4), request_rate=50.0,
            requests=8, max_repeats=1, warmup_requests=0)))
    assert [(p.point.prompt_len, p.point.concurrency) for p in res.points] == [
        (8, 1), (8, 4), (24, 1), (24, 4)]
    for p in res.points:
        assert p.metrics.completed == 8
        assert p.metrics.max_concurrent_requests <= p.point.concurrency
