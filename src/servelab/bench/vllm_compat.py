"""Import and export ``vllm bench serve`` result JSON.

Export: one point of a servelab result → the keys ``vllm bench serve --save-result``
writes (``completed``, ``failed``, ``mean_ttft_ms``, ``median_tpot_ms``,
``p99_itl_ms``, ``output_throughput``, ...; with ``--save-detailed`` also the
per-request ``ttfts``, ``itls``, ``latencies``, ``input_lens``, ``output_lens``).

Import: such a file → :class:`VllmResult`, keeping the aggregate numbers exactly as
vLLM computed them and, when the file is detailed, rebuilding per-request
:class:`RequestSample` objects so servelab's own metrics can be computed on them.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from servelab.bench.metrics import Metrics, compute, per_request
from servelab.bench.samples import ErrorKind, RequestSample
from servelab.bench.workload import PointResult
from servelab.errors import InputError

PERCENTILES = (50.0, 90.0, 95.0, 99.0)
_METRICS = ("ttft", "tpot", "itl", "e2el")


def _pct_key(p: float) -> str:
    return str(int(p)) if p == int(p) else str(p)


def _dist(prefix: str, values_ms: list[float], out: dict[str, Any]) -> None:
    a = np.asarray(values_ms or [0.0], dtype=np.float64)
    out[f"mean_{prefix}_ms"] = float(a.mean())
    out[f"median_{prefix}_ms"] = float(np.median(a))
    out[f"std_{prefix}_ms"] = float(a.std())
    for p in PERCENTILES:
        out[f"p{_pct_key(p)}_{prefix}_ms"] = float(np.percentile(a, p))


def to_vllm(pr: PointResult, *, model: str, backend: str, detailed: bool = False,
            burstiness: float | None = None, date: str | None = None) -> dict[str, Any]:
    """A ``vllm bench serve``-style result dict for one point (warm-up excluded);
    ``burstiness``: the gamma shape of the arrivals (vLLM's ``--burstiness``), if any;
    ``date``: when the run started, ``YYYYmmdd-HHMMSS`` UTC as vLLM writes it (so that
    ``servelab runs import`` takes the file)."""
    measured = [s for s in pr.samples if not s.warmup]
    ok = [s for s in measured if s.ok]
    m = pr.metrics
    cols: dict[str, list[float]] = {k: [] for k in _METRICS}
    for s in ok:
        d = per_request(s)
        cols["ttft"].append(d.get("ttft_ms", 0.0))
        if "tpot_ms" in d:
            cols["tpot"].append(d["tpot_ms"])
        cols["e2el"].append(d.get("e2el_ms", 0.0))
        c = s.chunk_ns
        cols["itl"].extend((c[i] - c[i - 1]) / 1e6 for i in range(1, len(c)))
    out: dict[str, Any] = {
        "backend": backend, "endpoint_type": backend, "model_id": model,
        "num_prompts": len(measured), "max_concurrency": pr.point.concurrency,
        "request_rate": pr.point.request_rate if pr.point.request_rate else "inf",
        "duration": m.duration_s, "completed": m.completed, "failed": m.failed,
        "total_input_tokens": m.total_input_tokens, "total_output_tokens": m.total_output_tokens,
        "request_throughput": m.request_throughput, "output_throughput": m.output_throughput,
        "total_token_throughput": m.total_token_throughput,
        "max_concurrent_requests": m.max_concurrent_requests,
    }
    if burstiness is not None:
        out["burstiness"] = burstiness
    if date is not None:
        out["date"] = date
    for k in _METRICS:
        _dist(k, cols[k], out)
    if detailed:
        out["input_lens"] = [s.prompt_tokens or s.prompt_len for s in measured]
        out["output_lens"] = [s.completion_tokens or 0 for s in measured]
        out["ttfts"] = [(s.ttft_ns or 0) / 1e9 for s in measured]
        out["itls"] = [[(s.chunk_ns[i] - s.chunk_ns[i - 1]) / 1e9
                        for i in range(1, len(s.chunk_ns))] for s in measured]
        out["latencies"] = [(s.latency_ns or 0) / 1e9 for s in measured]
        out["start_times"] = [s.send_ns / 1e9 for s in measured]
        out["errors"] = ["" if s.ok else f"{s.error}: {s.error_detail}" for s in measured]
    return out


@dataclass(frozen=True, slots=True)
class VllmResult:
    """A ``vllm bench serve`` result as vLLM computed it, plus rebuilt samples if detailed."""

    path: str
    aggregates: dict[str, float]
    """Every numeric top-level key (``mean_ttft_ms``, ``output_throughput``, ...)."""
    samples: tuple[RequestSample, ...]
    """Empty unless the file has per-request arrays (``--save-detailed``)."""
    info: dict[str, Any]
    """Non-numeric top-level keys (model_id, backend, date, ...)."""

    def metrics(self) -> Metrics | None:
        """servelab's metrics recomputed from the rebuilt samples (None if not detailed)."""
        return compute(self.samples) if self.samples else None


def from_vllm(data: dict[str, Any], *, path: str = "<dict>") -> VllmResult:
    """Parse a ``vllm bench serve`` result dict."""
    aggregates = {k: float(v) for k, v in data.items()
                  if isinstance(v, int | float) and not isinstance(v, bool)
                  and math.isfinite(float(v))}
    info = {k: v for k, v in data.items() if isinstance(v, str | bool) or v is None}
    samples: list[RequestSample] = []
    if all(k in data for k in ("ttfts", "itls", "latencies", "output_lens")):
        n = len(data["ttfts"])
        starts = data.get("start_times") or [0.0] * n
        t_first = min(starts) if starts else 0.0
        in_lens = data.get("input_lens") or [0] * n
        errors = data.get("errors") or [""] * n
        for i in range(n):
            ttft = float(data["ttfts"][i] or 0.0)
            itl = [float(x) for x in (data["itls"][i] or [])]
            times = [ttft]
            for g in itl:
                times.append(times[-1] + g)
            chunk_ns = tuple(round(t * 1e9) for t in times) if ttft > 0 else ()
            err = errors[i] if i < len(errors) else ""
            out_len = int(data["output_lens"][i] or 0)
            if not err and not chunk_ns and not out_len:
                err = "no output"
            samples.append(RequestSample(
                index=i, prompt_len=int(in_lens[i] or 0), max_tokens=out_len,
                send_ns=round((float(starts[i]) - t_first) * 1e9), chunk_ns=chunk_ns,
                chunk_tokens=None,
                end_ns=round(float(data["latencies"][i] or 0.0) * 1e9),
                prompt_tokens=int(in_lens[i] or 0), completion_tokens=out_len,
                finish_reason=None,
                error=(ErrorKind.REPORTED if err else
                       ErrorKind.NO_CHOICES if not chunk_ns else None),
                error_detail=str(err)[:200] if err else None,
            ))
    return VllmResult(path=path, aggregates=aggregates, samples=tuple(samples), info=info)


def load_vllm(path: Path) -> VllmResult:
    """Read a ``vllm bench serve`` result file; InputError naming the file otherwise."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise InputError(f"cannot read a vllm bench serve result: {exc}", path=path) from exc
    if not isinstance(data, dict) or "completed" not in data:
        raise InputError("not a vllm bench serve result (no 'completed' key)", path=path)
    try:
        return from_vllm(data, path=str(path))
    except (TypeError, ValueError, IndexError) as exc:
        raise InputError(f"malformed vllm bench serve result: {exc!r}", path=path) from exc
