"""The values of a choice: one build's speed figures, what was measured, one ranked row (pure;
:mod:`servelab.choose.rank` documents the JSON form)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from servelab.plan.build import Plan
from servelab.published.runs import PublishedRun

SCHEMA = "servelab.choose/1"

MEASURED, PREDICTED, BOUND, NONE = "measured", "predicted", "bound", "none"


@dataclass(frozen=True)
class Speed:
    """One speed figure and where it came from (see the module docs)."""

    tok_s: float | None
    low: float | None
    high: float | None
    source: str
    basis: str
    run_id: str | None = None

    @property
    def figure(self) -> bool:
        """A measured or predicted value (not a bound, not nothing)."""
        return self.tok_s is not None and self.source in (MEASURED, PREDICTED)

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return asdict(self)


@dataclass(frozen=True)
class Measurement:
    """A speed measured in one stored run (mean of its requests, 95 % CI)."""

    tok_s: float
    low: float | None
    high: float | None
    run_id: str
    samples: int


@dataclass(frozen=True)
class Candidate:
    """One build to rank: its plan (or why it has none) and what the store measured."""

    name: str
    location: str
    plan: Plan | None
    refused: str | None = None
    decode: Measurement | None = None
    prefill: Measurement | None = None
    published: tuple[PublishedRun, ...] = ()
    """Published figures for this build on the hardware (shown, never fitted)."""
    identity: str | None = None
    """What matched the published figures to this build (``ORG/NAME (from ...)``)."""


@dataclass(frozen=True)
class SloTarget:
    """A latency target on single-stream requests: ``metric`` (ttft|tpot) at most
    ``threshold_ms`` (percentiles are not predicted; the interval is used instead)."""

    metric: str
    threshold_ms: float
    label: str


@dataclass(frozen=True)
class Row:
    """One build in the ranked answer."""

    rank: int | None
    build: str
    location: str
    engine: str | None
    scheme: str | None
    quant_label: str | None
    fits: bool | None
    fit: str
    largest_context: int | None
    max_concurrency: float | None
    kv_pool_tokens: int | None
    weights_bytes: int | None
    bytes_per_token: int | None
    decode: Speed
    prefill: Speed
    speculative: Speed | None
    kernel_path: str | None
    compute_precision: str | None
    fallback: str | None
    mtp_declared_layers: int
    mtp_tensors: int
    mtp_usable: bool
    slo: str | None
    verdict: str
    refused: str | None = None
    published: tuple[PublishedRun, ...] = ()
    kernel_risk: str | None = None
    """A reported problem with its kernel path on this hardware, with sources (the plan's)."""
    identity: str | None = None
    """What matched :attr:`published` to this build (``ORG/NAME (from ...)``)."""

    @property
    def best_decode(self) -> Speed:
        """Speculative decode when it is a figure and faster, else plain decode."""
        spec = self.speculative
        if spec is not None and spec.figure and (
                not self.decode.figure or (spec.tok_s or 0) > (self.decode.tok_s or 0)):
            return spec
        return self.decode

    def to_dict(self) -> dict[str, Any]:
        """JSON form (one element of ``builds``)."""
        return {
            "rank": self.rank, "build": self.build, "location": self.location,
            "engine": self.engine, "scheme": self.scheme, "quant_label": self.quant_label,
            "fits": self.fits, "fit": self.fit, "largest_context": self.largest_context,
            "max_concurrency": self.max_concurrency, "kv_pool_tokens": self.kv_pool_tokens,
            "weights_bytes": self.weights_bytes, "bytes_per_token": self.bytes_per_token,
            "decode": self.decode.to_dict(), "prefill": self.prefill.to_dict(),
            "speculative": self.speculative.to_dict() if self.speculative else None,
            "kernel_path": self.kernel_path, "compute_precision": self.compute_precision,
            "fallback": self.fallback,
            "mtp": {"declared_layers": self.mtp_declared_layers, "tensors": self.mtp_tensors,
                    "usable": self.mtp_usable},
            "slo": self.slo, "verdict": self.verdict, "refused": self.refused,
            "published": [{**p.to_dict(), "line": p.line} for p in self.published],
            "kernel_risk": self.kernel_risk, "identity": self.identity,
        }
