"""Metrics from samples, with the conventions of ``vllm bench serve``.

- TTFT: send → first chunk that carries ``choices``.
- ITL (per chunk): gaps between consecutive chunks with ``choices``. With
  speculative decoding a chunk can carry several tokens, so the per-token ITL
  (gap ÷ tokens in that chunk, known only from per-chunk usage) is reported apart.
- E2E latency: send → last chunk with ``choices``.
- TPOT: (E2E − TTFT) / (completion tokens − 1), tokens from ``usage``.
- Single-stream decode tok/s = 1 / TPOT (per request).
- Prefill tok/s = prompt tokens / TTFT. TTFT includes network, HTTP and queueing
  time; with ``min_latency_ms`` (a measured minimal request) that part is
  subtracted first.
- Throughputs: tokens of completed requests over the wall time from the first send
  to the last response end.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from servelab.bench.samples import RequestSample
from servelab.bench.stats import Summary, summarize


@dataclass(frozen=True, slots=True)
class Metrics:
    """Computed metrics of one workload point (warm-up samples excluded)."""

    completed: int
    failed: int
    failures: dict[str, int]
    """Failed requests by :class:`~servelab.bench.samples.ErrorKind` value."""
    prompt_len_mismatches: int
    """Completed requests whose ``usage.prompt_tokens`` differs from the built length."""
    duration_s: float
    total_input_tokens: int
    total_output_tokens: int
    request_throughput: float
    output_throughput: float
    total_token_throughput: float
    max_concurrent_requests: int
    ttft_ms: Summary | None
    tpot_ms: Summary | None
    itl_ms: Summary | None
    """Per chunk."""
    itl_token_ms: Summary | None
    """Per token: each chunk gap divided by the tokens it carried (needs per-chunk usage)."""
    e2el_ms: Summary | None
    decode_tok_s: Summary | None
    prefill_tok_s: Summary | None
    tokens_per_chunk: Summary | None
    """Tokens per chunk after the first (1.0 without speculative decoding)."""
    min_latency_ms: float | None = None
    dispatch_lag_ms: Summary | None = None
    """Open loop: send time minus scheduled time, per request (the client's own lag)."""
    decode_flag: str | None = None
    """Why ``decode_tok_s`` is None although requests completed (:func:`rate_withheld`)."""
    prefill_flag: str | None = None
    """Why ``prefill_tok_s`` is None although requests completed (:func:`rate_withheld`)."""

    def to_json(self) -> dict[str, Any]:
        """Plain-JSON form (schema ``servelab.bench/1``, ``points[].metrics``)."""
        def s(x: Summary | None) -> dict[str, Any] | None:
            return x.to_json() if x is not None else None

        return {
            "completed": self.completed, "failed": self.failed, "failures": dict(self.failures),
            "prompt_len_mismatches": self.prompt_len_mismatches,
            "duration_s": self.duration_s, "total_input_tokens": self.total_input_tokens,
            "total_output_tokens": self.total_output_tokens,
            "request_throughput": self.request_throughput,
            "output_throughput": self.output_throughput,
            "total_token_throughput": self.total_token_throughput,
            "max_concurrent_requests": self.max_concurrent_requests,
            "ttft_ms": s(self.ttft_ms), "tpot_ms": s(self.tpot_ms), "itl_ms": s(self.itl_ms),
            "itl_token_ms": s(self.itl_token_ms), "e2el_ms": s(self.e2el_ms),
            "decode_tok_s": s(self.decode_tok_s), "prefill_tok_s": s(self.prefill_tok_s),
            "tokens_per_chunk": s(self.tokens_per_chunk),
            "min_latency_ms": self.min_latency_ms,
            "dispatch_lag_ms": s(self.dispatch_lag_ms),
            **({"decode_flag": self.decode_flag} if self.decode_flag is not None else {}),
            **({"prefill_flag": self.prefill_flag} if self.prefill_flag is not None else {}),
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Metrics:
        """Inverse of :meth:`to_json`."""
        def s(key: str) -> Summary | None:
            v = d.get(key)
            return Summary.from_json(v) if v is not None else None

        return cls(
            completed=d["completed"], failed=d["failed"], failures=dict(d["failures"]),
            prompt_len_mismatches=d["prompt_len_mismatches"], duration_s=d["duration_s"],
            total_input_tokens=d["total_input_tokens"],
            total_output_tokens=d["total_output_tokens"],
            request_throughput=d["request_throughput"],
            output_throughput=d["output_throughput"],
            total_token_throughput=d["total_token_throughput"],
            max_concurrent_requests=d["max_concurrent_requests"],
            ttft_ms=s("ttft_ms"), tpot_ms=s("tpot_ms"), itl_ms=s("itl_ms"),
            itl_token_ms=s("itl_token_ms"), e2el_ms=s("e2el_ms"),
            decode_tok_s=s("decode_tok_s"), prefill_tok_s=s("prefill_tok_s"),
            tokens_per_chunk=s("tokens_per_chunk"), min_latency_ms=d.get("min_latency_ms"),
            dispatch_lag_ms=s("dispatch_lag_ms"), decode_flag=d.get("decode_flag"),
            prefill_flag=d.get("prefill_flag"),
        )


def max_concurrency(samples: Iterable[RequestSample]) -> int:
    """Largest number of requests in flight at once."""
    events: list[tuple[int, int]] = []
    for s in samples:
        events.append((s.send_ns, 1))
        events.append((s.send_ns + s.end_ns, -1))
    events.sort(key=lambda e: (e[0], e[1]))
    cur = best = 0
    for _, d in events:
        cur += d
        best = max(best, cur)
    return best


def buffered(s: RequestSample) -> bool:
    """True when the server held most of the answer back and sent it in bulk.

    If the first chunk already carries more than half of the completion tokens, the time to
    it is not a time to first token and the gaps after it are not per-token times: the
    sample keeps its TTFT and E2E as the client saw them, but gives no TPOT, decode or
    prefill figure (a loaded server's output coalescing does this).
    """
    ct = s.completion_tokens or 0
    return bool(s.ok and s.chunk_tokens and ct > 2 and 2 * s.chunk_tokens[0] > ct)


MIN_GAP_NS = 50_000
"""Chunks less than 50 µs apart came out of one socket read: no decode step is that short."""


def bulk_read(s: RequestSample) -> bool:
    """True when the stream reached the client in a few bulk reads: fewer than a quarter of
    the gaps between its chunks are real gaps (>= :data:`MIN_GAP_NS`), so its (E2E − TTFT)
    is not a sum of decode steps and gives no TPOT or decode figure (a buffering proxy or
    server does this; the issue-33 demo read 55,152 tok/s from such streams). A server that
    runs late and sends two or three due chunks per write keeps its schedule: not flagged."""
    c = s.chunk_ns
    gaps = len(c) - 1
    if not s.ok or gaps < 2:
        return False
    real = sum(1 for i in range(1, len(c)) if c[i] - c[i - 1] >= MIN_GAP_NS)
    return 4 * real < gaps


def rate_withheld(name: str, summary: Summary | None) -> str | None:
    """Why a point's ``name`` rate (decode, prefill) is not a figure (its 95 % CI reaches
    zero: the requests disagree by more than the rate itself), or None."""
    if summary is None or summary.n < 2 or summary.ci_low > 0:
        return None
    return (f"{name} tok/s withheld: its 95% CI [{summary.ci_low:,.0f}, "
            f"{summary.ci_high:,.0f}] over {summary.n} requests reaches zero (mean "
            f"{summary.mean:,.0f}); not a measurement")


def per_request(s: RequestSample, min_latency_ms: float | None = None) -> dict[str, float]:
    """Derived values of one completed sample: ttft/tpot/e2el in ms, decode/prefill tok/s."""
    out: dict[str, float] = {}
    if not s.ok or s.ttft_ns is None or s.latency_ns is None:
        return out
    ttft_ms = s.ttft_ns / 1e6
    out["ttft_ms"] = ttft_ms
    out["e2el_ms"] = s.latency_ns / 1e6
    ct = s.completion_tokens or 0
    if buffered(s):
        return out  # the answer was held back and sent in bulk: no per-token timing
    if ct > 1 and s.latency_ns > s.ttft_ns and not bulk_read(s):
        tpot_ms = (s.latency_ns - s.ttft_ns) / 1e6 / (ct - 1)
        out["tpot_ms"] = tpot_ms
        out["decode_tok_s"] = 1000.0 / tpot_ms
    if s.prompt_tokens:
        base = ttft_ms - (min_latency_ms or 0.0)
        if base > 0:
            out["prefill_tok_s"] = s.prompt_tokens / (base / 1000.0)
    return out


def span_s(samples: Sequence[RequestSample]) -> float:
    """Seconds from the first send to the last response end (0 without samples)."""
    if not samples:
        return 0.0
    start = min(s.send_ns for s in samples)
    end = max(s.send_ns + s.end_ns for s in samples)
    return max((end - start) / 1e9, 1e-9)


def compute(samples: Sequence[RequestSample], *, min_latency_ms: float | None = None) -> Metrics:
    """Metrics over the non-warm-up samples of one workload point."""
    measured = [s for s in samples if not s.warmup]
    ok = [s for s in measured if s.ok]
    failures = Counter(s.error.value for s in measured if s.error is not None)
    cols: dict[str, list[float]] = {k: [] for k in (
        "ttft_ms", "tpot_ms", "e2el_ms", "decode_tok_s", "prefill_tok_s")}
    itl: list[float] = []
    itl_tok: list[float] = []
    tpc: list[float] = []
    for s in ok:
        for k, v in per_request(s, min_latency_ms).items():
            cols[k].append(v)
        c = s.chunk_ns
        itl.extend((c[i] - c[i - 1]) / 1e6 for i in range(1, len(c)))
        if s.chunk_tokens is not None:
            for i in range(1, len(c)):
                k_tok = s.chunk_tokens[i]
                if k_tok > 0:
                    itl_tok.append((c[i] - c[i - 1]) / 1e6 / k_tok)
                    tpc.append(float(k_tok))
    duration = span_s(measured)
    tin = sum(s.prompt_tokens or 0 for s in ok)
    tout = sum(s.completion_tokens or 0 for s in ok)

    def rate(x: float) -> float:
        return x / duration if duration > 0 else 0.0

    decode = summarize(cols["decode_tok_s"])
    flag = rate_withheld("decode", decode)
    prefill = summarize(cols["prefill_tok_s"])
    pflag = rate_withheld("prefill", prefill)

    return Metrics(
        completed=len(ok), failed=len(measured) - len(ok), failures=dict(failures),
        prompt_len_mismatches=sum(1 for s in ok if s.prompt_len_mismatch),
        duration_s=duration, total_input_tokens=tin, total_output_tokens=tout,
        request_throughput=rate(len(ok)), output_throughput=rate(tout),
        total_token_throughput=rate(tin + tout),
        max_concurrent_requests=max_concurrency(measured),
        ttft_ms=summarize(cols["ttft_ms"]), tpot_ms=summarize(cols["tpot_ms"]),
        itl_ms=summarize(itl), itl_token_ms=summarize(itl_tok),
        e2el_ms=summarize(cols["e2el_ms"]), decode_tok_s=None if flag else decode,
        prefill_tok_s=None if pflag else prefill, tokens_per_chunk=summarize(tpc),
        min_latency_ms=min_latency_ms,
        dispatch_lag_ms=summarize([s.dispatch_lag_ns / 1e6 for s in measured
                                   if s.dispatch_lag_ns is not None]),
        decode_flag=flag, prefill_flag=pflag,
    )
