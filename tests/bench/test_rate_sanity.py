"""A decode rate is a measurement or nothing (issue 33): a stream that reaches the client in
a few bulk reads gives no per-token figure, a rate whose 95 % CI reaches zero is withheld with
the reason, and the adaptive repetition says why it stopped. Real streams from a real local
server (its output held back into bulk writes), real samples."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.bench.cli import servelab

from servelab.bench.metrics import Metrics, compute, rate_withheld
from servelab.bench.run import BenchConfig, run_bench
from servelab.bench.samples import RequestSample
from servelab.bench.spec import WorkloadSpec
from servelab.bench.stats import summarize
from servelab.bench.workload import notes_for
from servelab.testing.synthetic_server import SyntheticConfig, SyntheticServer

# itl 0: every due chunk goes out at once, up to 64 per write — the whole answer arrives in
# one or two reads, as from a buffering proxy or a client that fell behind
BULK = SyntheticConfig(ttft_s=0.02, itl_s=0.0, max_chunks_per_write=64)


@pytest.mark.timeout(120)
def test_a_stream_read_in_bulk_gives_no_decode_figure(tmp_path: Path) -> None:
    with SyntheticServer(BULK) as srv:
        res = run_bench(BenchConfig(srv.base_url, WorkloadSpec(
            prompt_lens=(16,), output_len=48, requests=4, max_repeats=2, warmup_requests=0)))
        db = tmp_path / "r.db"
        proc = servelab("bench", srv.base_url, "--prompt-lens", "16", "--output-len", "48",
                        "--requests", "4", "--max-repeats", "1", "--warmup", "0", "--db",
                        str(db), "--json")
    (pr,) = res.points
    m = pr.metrics
    assert m.completed == 8 and m.ttft_ms is not None and m.ttft_ms.n == 8  # TTFT stays
    assert m.decode_tok_s is None and m.tpot_ms is None
    assert any("8 completed requests reached the client in a few bulk reads" in n
               for n in pr.notes), pr.notes
    assert not pr.converged
    assert any("stopped: the most batches allowed (2, --max-repeats)" in n for n in pr.notes)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["points"][0]["metrics"]["decode_tok_s"] is None
    listed = json.loads(servelab("runs", "list", "--db", str(db), "--json").stdout)["runs"]
    assert len(listed) == 1 and listed[0]["decode_tok_s"] is None  # nothing stored as a figure


def test_a_rate_whose_ci_reaches_zero_is_withheld() -> None:
    # the demo: a few bulk-read streams among real ones (tok/s per request)
    noisy = summarize([120.0, 95.0, 140_000.0, 110.0])
    assert noisy is not None and noisy.ci_low < 0
    why = rate_withheld("decode", noisy)
    assert why is not None and "reaches zero" in why and "over 4 requests" in why
    assert why.startswith("decode tok/s withheld")
    steady = summarize([120.0, 118.0, 121.0, 119.0])
    assert rate_withheld("decode", steady) is None


def _sample(i: int, ttft_ms: float) -> RequestSample:
    """One completed request: 512 prompt tokens, 8 tokens 10 ms apart after ``ttft_ms``."""
    first = int(ttft_ms * 1e6)
    chunks = tuple(first + k * 10_000_000 for k in range(8))
    return RequestSample(index=i, prompt_len=512, max_tokens=8, send_ns=i * 1_000_000_000,
                         chunk_ns=chunks, chunk_tokens=None, end_ns=chunks[-1] + 1_000_000,
                         prompt_tokens=512, completion_tokens=8, finish_reason="length")


def test_a_prefill_rate_whose_ci_reaches_zero_is_withheld_too() -> None:
    # TTFT barely above the server's floor on two requests and well above it on two: the
    # per-request prefill rates disagree by more than their mean (the 2-request CPU smoke of
    # an H200 recipe printed 279.7 tok/s with a 95 % CI of -81.7..641.1 before this)
    noisy = [_sample(i, t) for i, t in enumerate((5.2, 40.0, 5.05, 38.0))]
    m = compute(noisy, min_latency_ms=5.0)
    assert m.prefill_tok_s is None and m.prefill_flag is not None
    assert m.prefill_flag.startswith("prefill tok/s withheld")
    assert "over 4 requests" in m.prefill_flag
    assert m.decode_tok_s is not None and m.decode_flag is None  # the decode gaps are steady
    assert m.prefill_flag in notes_for(m, noisy)
    assert Metrics.from_json(m.to_json()) == m
    steady = [_sample(i, t) for i, t in enumerate((40.0, 41.0, 39.5, 40.5))]
    s = compute(steady, min_latency_ms=5.0)
    assert s.prefill_tok_s is not None and s.prefill_flag is None
    assert 512 / 0.0365 < s.prefill_tok_s.mean < 512 / 0.0345
