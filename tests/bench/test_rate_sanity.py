"""A decode rate is a measurement or nothing (issue 33): a stream that reaches the client in
a few bulk reads gives no per-token figure, a rate whose 95 % CI reaches zero is withheld with
the reason, and the adaptive repetition says why it stopped. Real streams from a real local
server (its output held back into bulk writes), real samples."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.bench.cli import servelab

from servelab.bench.metrics import decode_withheld
from servelab.bench.run import BenchConfig, run_bench
from servelab.bench.spec import WorkloadSpec
from servelab.bench.stats import summarize
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
    why = decode_withheld(noisy)
    assert why is not None and "reaches zero" in why and "over 4 requests" in why
    steady = summarize([120.0, 118.0, 121.0, 119.0])
    assert decode_withheld(steady) is None
