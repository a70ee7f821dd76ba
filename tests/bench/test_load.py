"""1,000 concurrent streams on loopback complete without a lost sample."""

from __future__ import annotations

import pytest

from servelab.bench.run import BenchConfig, run_bench
from servelab.bench.spec import WorkloadSpec
from servelab.testing.synthetic_server import SyntheticConfig, SyntheticServer


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_thousand_concurrent_streams_lose_nothing() -> None:
    with SyntheticServer(SyntheticConfig(ttft_s=0.2, itl_s=0.02)) as srv:
        res = run_bench(BenchConfig(srv.base_url, WorkloadSpec(
            prompt_lens=(16,), output_len=10, concurrency=(1000,), requests=1000,
            max_repeats=1, warmup_requests=0)))
        counters = srv.counters()
    (pr,) = res.points
    m = pr.metrics
    assert len(pr.samples) == 1000
    assert m.completed == 1000, m.failures
    assert len({s.index for s in pr.samples}) == 1000
    assert all(s.completion_tokens == 10 and len(s.chunk_ns) == 10 for s in pr.samples)
    assert m.total_output_tokens == 10_000 == counters["generation_tokens"]
    assert counters["generation_requests"] == 1000
    assert m.max_concurrent_requests > 900
