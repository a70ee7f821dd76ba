"""Flat summary rows of a result, and their CSV / Markdown renderings."""

from __future__ import annotations

import csv
import io
from typing import Any

from servelab.bench.result import BenchResult
from servelab.bench.stats import Summary

COLUMNS = (
    ("prompt_len", "prompt"), ("depth", "depth"), ("output_len", "output"), ("concurrency", "conc"),
    ("request_rate", "req/s"), ("completed", "ok"), ("failed", "failed"),
    ("decode_tok_s_median", "decode tok/s (median)"), ("decode_tok_s_ci95", "± 95% CI"),
    ("prefill_tok_s_median", "prefill tok/s (median)"),
    ("ttft_ms_median", "TTFT ms (median)"), ("ttft_ms_p99", "TTFT ms (p99)"),
    ("tpot_ms_median", "TPOT ms (median)"), ("itl_ms_median", "ITL ms/chunk (median)"),
    ("tokens_per_chunk_mean", "tok/chunk"), ("output_throughput", "output tok/s"),
    ("total_token_throughput", "total tok/s"), ("dispatch_lag_ms_p99", "send lag ms (p99)"),
    ("repeats", "batches"),
    ("converged", "CI met"),
)


def _med(s: Summary | None) -> float | None:
    return s.median if s is not None else None


def summary_rows(result: BenchResult) -> list[dict[str, Any]]:
    """One flat row per point, keys as in :data:`COLUMNS`."""
    rows = []
    for pr in result.points:
        m = pr.metrics
        dec = m.decode_tok_s
        rows.append({
            "prompt_len": pr.point.prompt_len, "depth": pr.point.depth,
            "output_len": pr.point.output_len,
            "concurrency": pr.point.concurrency, "request_rate": pr.point.request_rate,
            "completed": m.completed, "failed": m.failed,
            "decode_tok_s_median": _med(dec),
            "decode_tok_s_ci95": ((dec.ci_high - dec.ci_low) / 2) if dec and dec.n > 1 else None,
            "prefill_tok_s_median": _med(m.prefill_tok_s),
            "ttft_ms_median": _med(m.ttft_ms),
            "ttft_ms_p99": m.ttft_ms.p99 if m.ttft_ms else None,
            "tpot_ms_median": _med(m.tpot_ms), "itl_ms_median": _med(m.itl_ms),
            "tokens_per_chunk_mean": m.tokens_per_chunk.mean if m.tokens_per_chunk else None,
            "output_throughput": m.output_throughput,
            "total_token_throughput": m.total_token_throughput,
            "dispatch_lag_ms_p99": m.dispatch_lag_ms.p99 if m.dispatch_lag_ms else None,
            "repeats": pr.repeats, "converged": pr.converged,
        })
    return rows


def fmt(v: Any) -> str:
    """Compact text for a cell."""
    if v is None:
        return "–"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.3g}" if abs(v) < 10 else f"{v:.1f}"
    return str(v)


def to_csv(result: BenchResult) -> str:
    """CSV with a header row of the machine keys."""
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=[k for k, _ in COLUMNS], lineterminator="\n")
    w.writeheader()
    for row in summary_rows(result):
        w.writerow({k: ("" if v is None else v) for k, v in row.items()})
    return buf.getvalue()


def to_markdown(result: BenchResult) -> str:
    """A Markdown table plus the run's notes."""
    lines = ["| " + " | ".join(t for _, t in COLUMNS) + " |",
             "|" + "|".join("---:" for _ in COLUMNS) + "|"]
    for row in summary_rows(result):
        lines.append("| " + " | ".join(fmt(row[k]) for k, _ in COLUMNS) + " |")
    notes = list(result.notes) + [f"{pr.point.label}: {n}" for pr in result.points
                                  for n in pr.notes]
    if notes:
        lines.append("")
        lines += [f"- {n}" for n in notes]
    return "\n".join(lines) + "\n"
