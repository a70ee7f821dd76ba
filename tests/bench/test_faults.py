"""Every injected fault ends in counted failures, kept samples, and no hang."""

from __future__ import annotations

import time

import pytest

from servelab.bench.run import BenchConfig, run_bench
from servelab.bench.samples import ErrorKind
from servelab.bench.spec import WorkloadSpec
from servelab.bench.transport import Timeouts
from servelab.testing.synthetic_server import Fault, FaultKind, SyntheticConfig, SyntheticServer

SHORT = Timeouts(first_byte_s=0.6, stall_s=0.4, total_s=5.0)

CASES = [
    (Fault(FaultKind.SLOW_FIRST_BYTE, every=2), ErrorKind.TIMEOUT_FIRST_BYTE),
    (Fault(FaultKind.STALL, every=2, after_chunks=3), ErrorKind.TIMEOUT_STALL),
    (Fault(FaultKind.RESET, every=2, after_chunks=2), ErrorKind.DISCONNECT),
    (Fault(FaultKind.HTTP_429, every=2), ErrorKind.HTTP_429),
    (Fault(FaultKind.HTTP_429, every=2, retry_after_s=1), ErrorKind.HTTP_429),
    (Fault(FaultKind.HTTP_500, every=2), ErrorKind.HTTP_5XX),
    (Fault(FaultKind.HTTP_503, every=2), ErrorKind.HTTP_5XX),
    (Fault(FaultKind.HTTP_503, every=2, retry_after_s=1), ErrorKind.HTTP_5XX),
    (Fault(FaultKind.BAD_JSON, every=2, after_chunks=1), ErrorKind.BAD_SSE),
    (Fault(FaultKind.MISSING_USAGE, every=2), ErrorKind.MISSING_USAGE),
    (Fault(FaultKind.USAGE_MISMATCH, every=2), ErrorKind.USAGE_MISMATCH),
]


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("fault", "kind"), CASES, ids=lambda c: getattr(c, "value", None) or
                         f"{c.kind.value}{'-retry-after' if c.retry_after_s else ''}")
def test_fault_is_counted_and_completed_samples_are_kept(fault: Fault, kind: ErrorKind) -> None:
    cfg = SyntheticConfig(ttft_s=0.02, itl_s=0.005, fault=fault)
    t = time.monotonic()
    with SyntheticServer(cfg) as srv:
        res = run_bench(BenchConfig(srv.base_url, WorkloadSpec(
            prompt_lens=(16,), output_len=8, requests=6, max_repeats=1, warmup_requests=0,
            max_backoff_s=1.0), timeouts=SHORT))
        injected = srv.counters()["faults"]
    assert time.monotonic() - t < 30
    (pr,) = res.points
    m = pr.metrics
    assert injected == {fault.kind.value: 3}
    assert len(pr.samples) == 6  # nothing lost
    detail = [(s.error, s.error_detail) for s in pr.samples]
    assert m.failed == 3 and m.failures == {kind.value: 3}, detail
    assert m.completed == 3
    ok = [s for s in pr.samples if s.ok]
    assert all(s.completion_tokens == 8 and len(s.chunk_ns) == 8 for s in ok)
    assert m.ttft_ms is not None and m.ttft_ms.n == 3  # (TPOT needs >1 read: not asserted)
    assert any(f"[{kind.value}]" in n for n in pr.notes)
    if fault.retry_after_s is not None:
        assert any("Retry-After" in n for n in pr.notes)
        assert all(s.retry_after_s == 1.0 for s in pr.samples if not s.ok)
    for s in pr.samples:
        if not s.ok:
            assert s.error is kind and s.error_detail


@pytest.mark.timeout(30)
def test_retry_after_longer_than_the_run_is_cut_to_the_deadline() -> None:
    fault = Fault(FaultKind.HTTP_429, every=1, retry_after_s=3600)
    t = time.monotonic()
    with SyntheticServer(SyntheticConfig(ttft_s=0.01, itl_s=0.002, fault=fault)) as srv:
        res = run_bench(BenchConfig(srv.base_url, WorkloadSpec(
            prompt_lens=(8,), output_len=4, duration_s=1.0, drain_s=1.0, warmup_requests=0,
            max_backoff_s=3600), timeouts=SHORT))
    elapsed = time.monotonic() - t
    assert elapsed < 6.0
    m = res.points[0].metrics
    assert m.completed == 0 and m.failed >= 1 and set(m.failures) == {"http_429"}
    assert any("Retry-After" in n for n in res.points[0].notes)


@pytest.mark.timeout(30)
def test_every_stream_stalls_and_the_run_still_ends() -> None:
    fault = Fault(FaultKind.STALL, every=1, after_chunks=0)
    with SyntheticServer(SyntheticConfig(ttft_s=0.01, itl_s=0.002, fault=fault)) as srv:
        res = run_bench(BenchConfig(srv.base_url, WorkloadSpec(
            prompt_lens=(8,), output_len=4, concurrency=(4,), requests=8, max_repeats=3,
            warmup_requests=0), timeouts=Timeouts(first_byte_s=0.5, stall_s=0.3, total_s=2)))
    pr = res.points[0]
    # A batch that failed entirely is not repeated.
    assert pr.repeats == 1 and pr.metrics.failed == 8
    assert pr.metrics.failures == {"timeout_first_byte": 8}


@pytest.mark.timeout(30)
def test_connection_refused_is_counted_not_raised() -> None:
    import asyncio

    from servelab.bench.client import BenchClient, ClientOptions, RequestSpec

    srv = SyntheticServer().start()
    url = srv.base_url
    srv.stop()

    async def go() -> ErrorKind | None:
        async with BenchClient(url, ClientOptions(model="m"), timeouts=SHORT) as c:
            s = await c.send(RequestSpec("a b", 2, 4), 0, t0_ns=0)
            return s.error

    assert asyncio.run(go()) is ErrorKind.CONNECT
