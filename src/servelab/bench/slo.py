"""Service-level objectives on latency percentiles, their verdicts, and goodput.

An SLO is a list of ``METRIC_pPP <= MS`` terms over per-request TTFT, TPOT or E2E
latency, e.g. ``ttft_p99=500,tpot_p50=40``. A point meets the SLO when every term's
percentile, over all measured requests, is within its threshold. A failed request
counts as infinitely slow: an overloaded server that drops requests does not meet an
SLO by dropping them.

Each percentile comes with a distribution-free 95 % confidence interval (binomial
order statistics), so the verdict is three-valued: ``pass`` (the whole interval is
within the threshold), ``fail`` (the whole interval is above it) or ``uncertain``.

Goodput (``vllm bench serve --goodput``'s definition): measured requests whose every
per-request value is within its term's threshold, per second of the point's duration.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from servelab.bench.metrics import per_request, span_s
from servelab.bench.samples import RequestSample
from servelab.errors import UsageError

SloMetric = Literal["ttft", "tpot", "e2el"]
Verdict = Literal["pass", "fail", "uncertain"]
_Z975 = 1.959963984540054
_TERM = re.compile(r"^(ttft|tpot|e2el|e2e)(?:_p(\d+(?:\.\d+)?))?\s*(?:<=|=|:)\s*"
                   r"(\d+(?:\.\d+)?)\s*(ms|s)?$")


@dataclass(frozen=True, slots=True)
class SloTerm:
    """``percentile`` of ``metric`` must be at most ``threshold_ms``."""

    metric: SloMetric
    percentile: float
    threshold_ms: float

    @property
    def label(self) -> str:
        """E.g. ``ttft_p99<=500ms``."""
        return f"{self.metric}_p{self.percentile:g}<={self.threshold_ms:g}ms"


@dataclass(frozen=True, slots=True)
class Slo:
    """All terms must hold."""

    terms: tuple[SloTerm, ...]

    @property
    def label(self) -> str:
        """The terms joined by commas."""
        return ",".join(t.label for t in self.terms)

    def to_json(self) -> list[dict[str, Any]]:
        """Plain-JSON form."""
        return [{"metric": t.metric, "percentile": t.percentile,
                 "threshold_ms": t.threshold_ms} for t in self.terms]


def parse_slo(text: str) -> Slo:
    """Parse ``ttft_p99=500,tpot_p50<=40ms,e2el_p90=2s`` (percentile 50 when omitted)."""
    terms: list[SloTerm] = []
    for raw in text.split(","):
        part = raw.strip().lower()
        if not part:
            continue
        m = _TERM.match(part)
        if m is None:
            raise UsageError(f"--slo: cannot read {raw.strip()!r}; expected e.g. ttft_p99=500 "
                             "(metric ttft|tpot|e2el, percentile, threshold in ms or with s)")
        metric = "e2el" if m.group(1) == "e2e" else m.group(1)
        pct = float(m.group(2)) if m.group(2) else 50.0
        thr = float(m.group(3)) * (1000.0 if m.group(4) == "s" else 1.0)
        if not 0 < pct < 100 or thr <= 0:
            raise UsageError(f"--slo: {raw.strip()!r}: percentile must be in (0, 100) and the "
                             "threshold > 0")
        terms.append(SloTerm(metric, pct, thr))  # type: ignore[arg-type]
    if not terms:
        raise UsageError("--slo: no terms")
    return Slo(tuple(terms))


@dataclass(frozen=True, slots=True)
class TermResult:
    """One term evaluated on one point."""

    term: SloTerm
    n: int
    value_ms: float
    """The percentile (inf when failed requests reach it)."""
    ci_low_ms: float
    ci_high_ms: float
    verdict: Verdict

    def to_json(self) -> dict[str, Any]:
        """Plain-JSON form (inf as null)."""
        def f(x: float) -> float | None:
            return x if math.isfinite(x) else None

        return {"term": self.term.label, "n": self.n, "value_ms": f(self.value_ms),
                "ci95_ms": [f(self.ci_low_ms), f(self.ci_high_ms)], "verdict": self.verdict}


@dataclass(frozen=True, slots=True)
class SloResult:
    """An SLO evaluated on one point's measured requests."""

    terms: tuple[TermResult, ...]
    good: int
    """Requests meeting every term's threshold."""
    measured: int
    duration_s: float

    @property
    def verdict(self) -> Verdict:
        """``fail`` if any term fails, ``pass`` if all pass, else ``uncertain``."""
        vs = {t.verdict for t in self.terms}
        return "fail" if "fail" in vs else "pass" if vs == {"pass"} else "uncertain"

    @property
    def met(self) -> bool:
        """Point estimates all within thresholds (the verdict when the CI cannot decide)."""
        return all(t.value_ms <= t.term.threshold_ms for t in self.terms)

    @property
    def goodput(self) -> float:
        """Good requests per second."""
        return self.good / self.duration_s if self.duration_s > 0 else 0.0

    def to_json(self) -> dict[str, Any]:
        """Plain-JSON form."""
        return {"verdict": self.verdict, "met": self.met, "good": self.good,
                "measured": self.measured, "goodput_req_s": self.goodput,
                "terms": [t.to_json() for t in self.terms]}


def percentile_ci(values: Sequence[float], p: float) -> tuple[float, float, float]:
    """The p-th percentile and its distribution-free 95 % CI (normal approximation to the
    binomial ranks, as for the median in :mod:`servelab.bench.stats`)."""
    s = sorted(values)
    n = len(s)
    if n == 0:
        return math.inf, math.inf, math.inf
    q = p / 100.0
    pos = q * (n - 1)
    lo_i, hi_i = math.floor(pos), math.ceil(pos)
    a, b = s[lo_i], s[hi_i]
    est = a if lo_i == hi_i or a == b else a + (b - a) * (pos - lo_i)
    half = _Z975 * math.sqrt(n * q * (1 - q))
    j = max(math.floor(n * q - half) - 1, 0)
    k = min(math.ceil(n * q + half), n - 1)
    return est, s[j], s[k]


def _value(s: RequestSample, metric: SloMetric) -> float:
    d = per_request(s)
    v = d.get(f"{metric}_ms")
    if v is None and metric == "tpot" and s.ok:
        return 0.0  # a one-token answer has no time per output token
    return v if v is not None and s.ok else math.inf


def evaluate(slo: Slo, samples: Sequence[RequestSample]) -> SloResult:
    """Evaluate ``slo`` over the non-warm-up samples."""
    measured = [s for s in samples if not s.warmup]
    terms = []
    for t in slo.terms:
        vals = [_value(s, t.metric) for s in measured]
        est, lo, hi = percentile_ci(vals, t.percentile)
        verdict: Verdict = ("pass" if hi <= t.threshold_ms else
                            "fail" if lo > t.threshold_ms else "uncertain")
        terms.append(TermResult(t, len(vals), est, lo, hi, verdict))
    good = sum(1 for s in measured
               if all(_value(s, t.metric) <= t.threshold_ms for t in slo.terms))
    return SloResult(tuple(terms), good, len(measured), span_s(measured))
