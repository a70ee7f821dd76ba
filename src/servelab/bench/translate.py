"""One run, three peers' metric names: ``vllm bench serve``, AIPerf and GuideLLM.

Every figure is computed from the same raw per-request timestamps (send, every chunk,
end) and the server's usage counts, under each tool's documented definition:

- vLLM (``vllm bench serve --save-result`` keys): see :mod:`servelab.bench.vllm_compat`.
- AIPerf (metric tags of its metrics reference): ``ttft``, ``ttst`` (first to second
  chunk), ``inter_token_latency`` ((request_latency − ttft) / (osl − 1): per request, what
  vLLM calls TPOT), ``inter_chunk_latency`` (every chunk gap), ``request_latency``,
  ``output_token_throughput_per_user`` (1 / inter_token_latency), ``input_sequence_length``,
  ``output_sequence_length``, and the run's ``request_count``, ``error_request_count``,
  ``benchmark_duration``, ``request_throughput``, ``output_token_throughput``,
  ``total_output_tokens``, ``total_isl``; statistics ``avg min max p50 p90 p95 p99 std``.
- GuideLLM (``GenerativeMetrics`` fields, ``successful`` requests):
  ``time_to_first_token_ms``, ``inter_token_latency_ms`` ((last − first token) /
  (tokens − 1)), ``time_per_output_token_ms`` ((last token − request start) / tokens: it
  includes the TTFT), ``request_latency`` (seconds), ``prompt_token_count``,
  ``output_token_count``, and the rates ``requests_per_second``,
  ``output_tokens_per_second``, ``tokens_per_second`` (GuideLLM reports rates as a
  distribution over time; only their mean, total ÷ duration, is given here).

Requests whose answer the server held back and sent in bulk give no per-token figure in
any of the three (as in servelab's own metrics); warm-up requests are excluded.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from servelab.bench.metrics import buffered, per_request
from servelab.bench.vllm_compat import to_vllm
from servelab.bench.workload import PointResult

TOOLS = ("vllm", "aiperf", "guidellm")

#: The same quantity under each tool's name (key paths into :func:`translate`'s output).
CONCEPTS: tuple[tuple[str, str, str, str], ...] = (
    ("TTFT mean, ms", "mean_ttft_ms", "ttft.avg", "time_to_first_token_ms.mean"),
    ("TTFT p99, ms", "p99_ttft_ms", "ttft.p99", "time_to_first_token_ms.p99"),
    ("decode time per token mean, ms", "mean_tpot_ms", "inter_token_latency.avg",
     "inter_token_latency_ms.mean"),
    ("chunk gap mean, ms", "mean_itl_ms", "inter_chunk_latency.avg", "–"),
    ("E2E latency mean, ms", "mean_e2el_ms", "request_latency.avg",
     "request_latency.mean (s)"),
    ("requests/s", "request_throughput", "request_throughput.avg",
     "requests_per_second.mean"),
    ("output tokens/s", "output_throughput", "output_token_throughput.avg",
     "output_tokens_per_second.mean"),
    ("completed requests", "completed", "request_count.avg", "request_latency.count"),
)


def _aiperf_stats(values: list[float], unit: str) -> dict[str, Any]:
    if not values:
        return {"unit": unit, "avg": None}
    a = np.asarray(values, dtype=np.float64)
    p50, p90, p95, p99 = (float(x) for x in np.percentile(a, [50, 90, 95, 99]))
    return {"unit": unit, "avg": float(a.mean()), "min": float(a.min()), "max": float(a.max()),
            "p50": p50, "p90": p90, "p95": p95, "p99": p99, "std": float(a.std())}


def _guidellm_stats(values: list[float]) -> dict[str, Any]:
    if not values:
        return {"count": 0, "mean": None}
    a = np.asarray(values, dtype=np.float64)
    p50, p90, p95, p99 = (float(x) for x in np.percentile(a, [50, 90, 95, 99]))
    return {"count": int(a.size), "mean": float(a.mean()), "median": float(np.median(a)),
            "min": float(a.min()), "max": float(a.max()), "std_dev": float(a.std()),
            "p50": p50, "p90": p90, "p95": p95, "p99": p99}


def _single(v: float, unit: str) -> dict[str, Any]:
    return {"unit": unit, "avg": v}


def translate(pr: PointResult, *, model: str, backend: str) -> dict[str, dict[str, Any]]:
    """The point's metrics under each tool's names: ``{"vllm": ..., "aiperf": ...,
    "guidellm": ...}``."""
    measured = [s for s in pr.samples if not s.warmup]
    ok = [s for s in measured if s.ok]
    m = pr.metrics
    ttft: list[float] = []
    e2e: list[float] = []
    tpot: list[float] = []
    chunk_gaps: list[float] = []
    ttst: list[float] = []
    isl: list[float] = []
    osl: list[float] = []
    per_user: list[float] = []
    tpot_incl: list[float] = []
    for s in ok:
        d = per_request(s)
        ttft.append(d["ttft_ms"])
        e2e.append(d["e2el_ms"])
        if "tpot_ms" in d:
            tpot.append(d["tpot_ms"])
            per_user.append(1000.0 / d["tpot_ms"])
        c = s.chunk_ns
        chunk_gaps.extend((c[i] - c[i - 1]) / 1e6 for i in range(1, len(c)))
        if len(c) > 1:
            ttst.append((c[1] - c[0]) / 1e6)
        isl.append(float(s.prompt_tokens or 0))
        osl.append(float(s.completion_tokens or 0))
        if s.completion_tokens and not buffered(s):
            tpot_incl.append(d["e2el_ms"] / s.completion_tokens)
    aiperf: dict[str, Any] = {
        "ttft": _aiperf_stats(ttft, "ms"), "ttst": _aiperf_stats(ttst, "ms"),
        "inter_token_latency": _aiperf_stats(tpot, "ms"),
        "inter_chunk_latency": _aiperf_stats(chunk_gaps, "ms"),
        "request_latency": _aiperf_stats(e2e, "ms"),
        "output_token_throughput_per_user": _aiperf_stats(per_user, "tokens/sec/user"),
        "input_sequence_length": _aiperf_stats(isl, "tokens"),
        "output_sequence_length": _aiperf_stats(osl, "tokens"),
        "request_count": _single(float(m.completed), "requests"),
        "error_request_count": _single(float(m.failed), "requests"),
        "benchmark_duration": _single(m.duration_s, "sec"),
        "request_throughput": _single(m.request_throughput, "requests/sec"),
        "output_token_throughput": _single(m.output_throughput, "tokens/sec"),
        "total_output_tokens": _single(float(m.total_output_tokens), "tokens"),
        "total_isl": _single(float(m.total_input_tokens), "tokens"),
    }
    guidellm: dict[str, Any] = {
        "time_to_first_token_ms": _guidellm_stats(ttft),
        "inter_token_latency_ms": _guidellm_stats(tpot),
        "time_per_output_token_ms": _guidellm_stats(tpot_incl),
        "request_latency": _guidellm_stats([x / 1000.0 for x in e2e]),
        "prompt_token_count": _guidellm_stats(isl),
        "output_token_count": _guidellm_stats(osl),
        "requests_per_second": {"mean": m.request_throughput},
        "output_tokens_per_second": {"mean": m.output_throughput},
        "tokens_per_second": {"mean": m.total_token_throughput},
    }
    return {"vllm": to_vllm(pr, model=model, backend=backend), "aiperf": aiperf,
            "guidellm": guidellm}


def lookup(tree: dict[str, Any], path: str) -> Any:
    """Value at a dotted path (``ttft.avg``; a trailing `` (s)`` note is ignored); None if
    the path is absent."""
    cur: Any = tree
    for part in path.split(" ")[0].split("."):
        if not isinstance(cur, dict) or part not in cur:
            return None
        cur = cur[part]
    return cur
