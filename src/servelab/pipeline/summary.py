"""Measured against predicted: the rows ``servelab run`` prints after a run. Pure.

Each row pairs a measured single-stream number (mean with its 95 % CI, from the stored
metrics) with the plan's prediction for the same prompt length, and for decode the
bandwidth the measurement implies: measured tok/s × predicted bytes read per token, as a
fraction of the bandwidth the roofline used.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from servelab.check import Check
from servelab.points import PointKey
from servelab.sizing.document import SpeedKind, read_plan
from servelab.store.model import Metric


@dataclass(frozen=True)
class SummaryRow:
    """One metric at one prompt length: measured vs predicted."""

    kind: str  # "decode" | "prefill"
    prompt_tokens: int
    measured_tok_s: float | None
    ci_low: float | None
    ci_high: float | None
    samples: int
    roofline_tok_s: float | None
    predicted_tok_s: float | None
    predicted_low: float | None
    predicted_high: float | None
    achieved_bandwidth: float | None  # bytes/s implied by the measurement (decode only)
    roofline_fraction: float | None  # measured ÷ roofline

    @property
    def check(self) -> Check:
        """The measurement against the prediction, as one :class:`~servelab.check.Check`."""
        return Check(f"{self.kind} at {self.prompt_tokens:,} tokens", self.predicted_tok_s,
                     self.measured_tok_s, "tok/s", low=self.predicted_low,
                     high=self.predicted_high)

    @property
    def error(self) -> float | None:
        """measured / predicted - 1 (negative: slower than predicted)."""
        return self.check.error

    @property
    def inside_interval(self) -> bool | None:
        """Whether the measurement fell inside the predicted interval."""
        return self.check.inside

    def to_dict(self) -> dict[str, Any]:
        """JSON form; predictions are marked as such."""
        return {
            "kind": self.kind,
            "prompt_tokens": self.prompt_tokens,
            "measured_tok_s": self.measured_tok_s,
            "ci95": [self.ci_low, self.ci_high],
            "samples": self.samples,
            "predicted_roofline_tok_s": self.roofline_tok_s,
            "predicted_tok_s": self.predicted_tok_s,
            "predicted_interval": [self.predicted_low, self.predicted_high],
            "error_vs_prediction": self.error,
            "inside_interval": self.inside_interval,
            "achieved_bandwidth_bytes_s": self.achieved_bandwidth,
            "fraction_of_roofline": self.roofline_fraction,
        }


def summarize(
    metrics: Sequence[Metric],
    prediction: Mapping[str, Any] | None,
    prompt_lens: Sequence[int],
) -> tuple[SummaryRow, ...]:
    """Rows for every prompt length of the single-stream (concurrency 1) points."""
    plan = read_plan(prediction)
    by_key = {(m.name, m.point): m for m in metrics}
    rows: list[SummaryRow] = []
    kinds: tuple[tuple[SpeedKind, str], ...] = (
        ("decode", "decode_tok_s"),
        ("prefill", "prefill_tok_s"),
    )
    for kind, metric_name in kinds:
        for n in prompt_lens:
            m = by_key.get((metric_name, PointKey(n, 1).label))
            p = plan.speed_at(kind, n)
            roof = p.roofline_tok_s if p else None
            measured = m.value if m is not None else None
            achieved = None
            if kind == "decode" and measured is not None and p and p.bytes_per_token:
                achieved = measured * p.bytes_per_token
            fraction = measured / roof if measured is not None and roof else None
            if fraction is None and achieved and plan.bandwidth:
                fraction = achieved / plan.bandwidth
            rows.append(
                SummaryRow(
                    kind=kind,
                    prompt_tokens=n,
                    measured_tok_s=measured,
                    ci_low=m.ci_low if m is not None else None,
                    ci_high=m.ci_high if m is not None else None,
                    samples=m.n if m is not None else 0,
                    roofline_tok_s=roof,
                    predicted_tok_s=p.predicted_tok_s if p else None,
                    predicted_low=p.predicted_low if p else None,
                    predicted_high=p.predicted_high if p else None,
                    achieved_bandwidth=achieved,
                    roofline_fraction=fraction,
                )
            )
    return tuple(rows)
