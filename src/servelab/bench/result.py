"""The result of a benchmark run and its JSON form (schema ``servelab.bench/1``).

JSON schema ``servelab.bench/1`` (all times in the units their key names say)::

    {
      "schema": "servelab.bench/1",
      "servelab_version": str,
      "base_url": str, "model": str, "endpoint": "completions" | "chat",
      "started_at": ISO-8601 UTC, "finished_at": ISO-8601 UTC,
      "prompt_source": "server /tokenize" | "tokenizer <dir>",
      "client": {"temperature", "ignore_eos", "continuous_usage", "chat_template_kwargs",
                 "timeouts": {"first_byte_s", "stall_s", "total_s"}},
      "workload": WorkloadSpec fields (prompt_lens, output_len, concurrency, request_rate,
                  requests, duration_s, warmup_requests, ci_target, max_repeats, ...),
      "min_latency_ms": float | null,      # measured minimal request, when subtracted
      "server_counters": {prompt_tokens, generation_tokens, spec_decode_*} | null,
      "points": [{
          "prompt_len", "output_len", "concurrency", "request_rate", "depth",
          "repeats": int, "converged": bool, "ci_rel": {metric: float | null},
          "drift": {metric: {first_mean, second_mean, rel_change, significant}},
          "notes": [str],
          "metrics": {completed, failed, failures: {kind: n}, prompt_len_mismatches,
                      duration_s, total_input_tokens, total_output_tokens,
                      request_throughput, output_throughput, total_token_throughput,
                      max_concurrent_requests, min_latency_ms,
                      ttft_ms | tpot_ms | itl_ms | itl_token_ms | e2el_ms |
                      decode_tok_s | prefill_tok_s | tokens_per_chunk:
                        {n, mean, median, std, min, max, p90, p95, p99,
                         ci95: [lo, hi], median_ci95: [lo, hi], ci95_rel_halfwidth} | null},
          "samples": [RequestSample.to_json(): index, prompt_len, max_tokens, send_ns,
                      chunk_ns[], chunk_tokens[] | null, end_ns, prompt_tokens,
                      completion_tokens, finish_reason, error, error_detail, http_status,
                      retry_after_s, warmup]
      }],
      "notes": [str],
      "token_check": {ok, requests, client_prompt_tokens, client_completion_tokens,
                      prompt_len_mismatches, server_prompt_tokens, server_generation_tokens,
                      counters_compared, skipped_reason, problems: [str]} | null,
      "partial": str    # only in an incomplete result: why it stopped (the last point may
                        # be cut short; its notes say so)
    }

    Samples of open-loop runs also carry ``scheduled_ns`` (dispatch lag = send_ns −
    scheduled_ns; summarized as ``metrics.dispatch_lag_ms``); ``server_counters`` also
    carries ``prefix_cache_queries``, ``prefix_cache_hits`` and ``prefix_cache_hit_rate``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from servelab.bench.metrics import Metrics
from servelab.bench.samples import RequestSample
from servelab.bench.spec import WorkloadSpec
from servelab.bench.specdecode import CounterDelta
from servelab.bench.stats import Drift
from servelab.bench.tokencheck import TokenCheck
from servelab.bench.workload import Point, PointResult
from servelab.errors import InputError
from servelab.outfile import write_json

SCHEMA = "servelab.bench/1"


@dataclass(frozen=True, slots=True)
class BenchResult:
    """A whole run: target, workload, per-point samples and metrics."""

    base_url: str
    model: str
    endpoint: str
    started_at: str
    finished_at: str
    prompt_source: str
    client: dict[str, Any]
    workload: WorkloadSpec
    points: tuple[PointResult, ...]
    min_latency_ms: float | None
    server_counters: CounterDelta | None
    servelab_version: str
    notes: tuple[str, ...] = field(default=())
    schema: str = SCHEMA
    token_check: TokenCheck | None = None
    partial: str | None = None
    """Why the run is incomplete (``interrupted (Ctrl-C)``, ``running``, an error), or None."""

    def to_json(self, *, include_samples: bool = True) -> dict[str, Any]:
        """The documented JSON form (see the module docstring)."""
        pts = []
        for pr in self.points:
            d: dict[str, Any] = {
                "prompt_len": pr.point.prompt_len, "output_len": pr.point.output_len,
                "concurrency": pr.point.concurrency, "request_rate": pr.point.request_rate,
                "depth": pr.point.depth,
                "repeats": pr.repeats, "converged": pr.converged, "ci_rel": dict(pr.ci_rel),
                "drift": {k: v.to_json() for k, v in pr.drift.items()},
                "notes": list(pr.notes), "metrics": pr.metrics.to_json(),
            }
            if include_samples:
                d["samples"] = [s.to_json() for s in pr.samples]
            pts.append(d)
        return {
            "schema": self.schema, "servelab_version": self.servelab_version,
            "base_url": self.base_url, "model": self.model, "endpoint": self.endpoint,
            "started_at": self.started_at, "finished_at": self.finished_at,
            "prompt_source": self.prompt_source, "client": self.client,
            "workload": self.workload.to_json(), "min_latency_ms": self.min_latency_ms,
            "server_counters": (self.server_counters.to_json()
                                if self.server_counters is not None else None),
            "points": pts, "notes": list(self.notes),
            "token_check": self.token_check.to_json() if self.token_check is not None else None,
            **({"partial": self.partial} if self.partial is not None else {}),
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> BenchResult:
        """Read the JSON form back; InputError for another schema."""
        if d.get("schema") != SCHEMA:
            raise InputError(f"not a servelab bench result (schema {d.get('schema')!r})")
        pts = []
        for p in d["points"]:
            pts.append(PointResult(
                point=Point(p["prompt_len"], p["output_len"], p["concurrency"],
                            p["request_rate"], p.get("depth", 0)),
                samples=tuple(RequestSample.from_json(s) for s in p.get("samples", [])),
                metrics=Metrics.from_json(p["metrics"]), repeats=p["repeats"],
                converged=p["converged"], ci_rel=dict(p["ci_rel"]),
                drift={k: Drift(**v) for k, v in p["drift"].items()},
                notes=tuple(p["notes"]),
            ))
        sc = d.get("server_counters")
        tc = d.get("token_check")
        return cls(
            base_url=d["base_url"], model=d["model"], endpoint=d["endpoint"],
            started_at=d["started_at"], finished_at=d["finished_at"],
            prompt_source=d["prompt_source"], client=d["client"],
            workload=WorkloadSpec.from_json(d["workload"]), points=tuple(pts),
            min_latency_ms=d.get("min_latency_ms"),
            server_counters=CounterDelta.from_json(sc) if sc is not None else None,
            servelab_version=d["servelab_version"], notes=tuple(d.get("notes", [])),
            token_check=TokenCheck.from_json(tc) if tc is not None else None,
            partial=d.get("partial"),
        )


def write_json_atomic(path: Path, data: Any) -> None:
    """Write JSON to ``path`` through a temporary file and a rename (:mod:`servelab.outfile`)."""
    write_json(path, data)


def read_result(data: Any, *, source: str | Path = "input") -> BenchResult:
    """The typed reader of a stored ``servelab.bench/1`` document (parsed JSON);
    InputError naming ``source`` and the problem when it is not one."""
    if not isinstance(data, dict):
        raise InputError("not a servelab bench result (not a JSON object)", path=source)
    if data.get("schema") != SCHEMA:
        raise InputError(f"not a {SCHEMA} document (schema {data.get('schema')!r})",
                         path=source)
    try:
        return BenchResult.from_json(data)
    except KeyError as exc:
        raise InputError(f"malformed bench result: missing key {exc}", path=source) from exc
    except (TypeError, ValueError, AttributeError) as exc:
        raise InputError(f"malformed bench result: {exc!r}", path=source) from exc


def load(path: Path) -> BenchResult:
    """Read a saved result; InputError naming the file when it is not one."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise InputError(f"cannot read a bench result: {exc}", path=path) from exc
    return read_result(data, source=path)
