"""The metrics analysis works on, and how each is read from a stored run.

Per-request metrics (decode, prefill, TTFT, TPOT, E2E) come from the run's samples, so that
comparisons can test them against the measured noise; run-wide metrics (weights, KV pool,
power) are single numbers read from the engine's log or a probe.

A run's value of a per-request metric at a workload point is the mean over its completed
requests at that point; when a run has no samples (e.g. imported summaries), the stored
:class:`~servelab.store.Metric` of that name and point, then the headline column, is used.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from servelab.errors import UsageError
from servelab.store.model import RunRecord, Sample


def _decode(s: Sample) -> float | None:
    return s.decode_tok_s


def _prefill(s: Sample) -> float | None:
    return s.prefill_tok_s


def _ttft(s: Sample) -> float | None:
    return s.ttft_s if s.ok else None


def _tpot(s: Sample) -> float | None:
    return s.tpot_s if s.ok else None


def _e2e(s: Sample) -> float | None:
    return s.e2e_s if s.ok else None


def _itl_p99(s: Sample) -> float | None:
    return s.itl_p99_s if s.ok else None


@dataclass(frozen=True, slots=True)
class MetricDef:
    """One metric: name, display label, unit, direction and where its values come from."""

    name: str
    label: str
    unit: str
    higher_is_better: bool
    per_sample: Callable[[Sample], float | None] | None = None
    headline: Callable[[RunRecord], float | None] | None = None

    def sample_values(self, run: RunRecord, point: str | None) -> list[float]:
        """Per-request values of this metric in ``run`` at ``point`` (all points if None)."""
        if self.per_sample is None:
            return []
        out = []
        for s in run.samples_at(point):
            v = self.per_sample(s)
            if v is not None:
                out.append(v)
        return out

    def run_value(self, run: RunRecord, point: str | None) -> float | None:
        """The run's value: mean of its samples, else its stored metric, else its headline."""
        values = self.sample_values(run, point)
        if values:
            return sum(values) / len(values)
        stored = run.metric(self.name, point or "")
        if stored is not None:
            return stored.value
        if self.headline is not None and (point is None or point == "" or not run.samples):
            return self.headline(run)
        return None


METRICS: dict[str, MetricDef] = {
    m.name: m
    for m in (
        MetricDef("decode_tok_s", "decode", "tok/s", True, _decode, lambda r: r.decode_tok_s),
        MetricDef("prefill_tok_s", "prefill", "tok/s", True, _prefill, lambda r: r.prefill_tok_s),
        MetricDef("ttft_s", "TTFT", "s", False, _ttft),
        MetricDef("tpot_s", "TPOT", "s", False, _tpot),
        MetricDef("e2e_s", "E2E latency", "s", False, _e2e),
        MetricDef("itl_p99_s", "ITL p99", "s", False, _itl_p99),
        MetricDef("weights_gib", "weights", "GiB", False, None, lambda r: r.weights_gib),
        MetricDef(
            "kv_pool_tokens",
            "KV pool",
            "tokens",
            True,
            None,
            lambda r: float(r.kv_pool_tokens) if r.kv_pool_tokens is not None else None,
        ),
        MetricDef("power_w", "power", "W", False, None, lambda r: r.power_w),
    )
}

#: Short names accepted on the command line and in criteria.
ALIASES: dict[str, str] = {
    "decode": "decode_tok_s",
    "prefill": "prefill_tok_s",
    "ttft": "ttft_s",
    "tpot": "tpot_s",
    "e2e": "e2e_s",
    "latency": "e2e_s",
    "itl": "itl_p99_s",
    "memory": "weights_gib",
    "footprint": "weights_gib",
    "weights": "weights_gib",
    "kv": "kv_pool_tokens",
    "kv_pool": "kv_pool_tokens",
    "power": "power_w",
}

PER_REQUEST = ("decode_tok_s", "prefill_tok_s", "ttft_s", "tpot_s", "e2e_s")
RUN_WIDE = ("weights_gib", "kv_pool_tokens", "power_w")


def metric_def(name: str) -> MetricDef:
    """Look up a metric by name or alias; UsageError naming the known ones otherwise."""
    key = ALIASES.get(name.strip().lower(), name.strip())
    found = METRICS.get(key)
    if found is None:
        known = ", ".join(sorted({*METRICS, *ALIASES}))
        raise UsageError(f"unknown metric {name!r} (known: {known})")
    return found


def all_points(runs: Sequence[RunRecord]) -> list[str]:
    """Workload points present in any run's samples, in first-seen order."""
    seen: dict[str, None] = {}
    for r in runs:
        for p in r.points:
            seen.setdefault(p, None)
    return list(seen)


def common_points(runs: Sequence[RunRecord]) -> list[str]:
    """Workload points present in every run's samples, in the first run's order."""
    if not runs:
        return []
    points = list(runs[0].points)
    for r in runs[1:]:
        have = set(r.points)
        points = [p for p in points if p in have]
    return points
