"""The acceptance length a plan predicts speculative decode at: given, measured, or none.

``--mtp-acceptance auto`` (the default) looks for stored runs of the same checkpoint (its
header fingerprint) that served with the same method and ``k`` and scraped vLLM's
spec-decode counters (:func:`servelab.analysis.acceptance.measured_acceptance`); without
one, the published acceptance prior of the model's family, method and ``k``
(:func:`servelab.published.acceptance.acceptance_prior`: its median and the range of every
measurement, which the plan's speculative interval carries); without either there is no
speculative prediction and the plan says why in one line.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from servelab.analysis.acceptance import (
    RunAcceptance,
    measured_acceptance,
    measured_configs,
    run_acceptance,
)
from servelab.plan.build import Plan
from servelab.predict.spec import MtpPoint
from servelab.published.acceptance import AcceptancePrior, acceptance_prior, family_of
from servelab.sizing.specsource import (
    NONE,
    AcceptanceOption,
    AcceptanceSource,
    given,
    unavailable,
)
from servelab.store.model import RunRecord

__all__ = ["SpeculativeSummary", "resolve_acceptance", "speculative_hint",
           "speculative_summary"]


def resolve_acceptance(
    option: AcceptanceOption,
    *,
    method: str,
    draft_tokens: int,
    header_hash: str | None,
    runs: Sequence[RunRecord],
    use_store: bool = True,
    model_type: str | None = None,
) -> AcceptanceSource | None:
    """What to predict speculative decode at; None when no speculative plan was asked for
    (``none``, or ``auto`` without draft tokens). ``model_type``: the text model's, whose
    published prior ``auto`` falls back to where no stored run measured one."""
    if option == NONE:
        return None
    if isinstance(option, tuple):
        return given(option, method=method, draft_tokens=draft_tokens)
    if draft_tokens <= 0:
        return None
    found = _resolve_stored(method=method, draft_tokens=draft_tokens, header_hash=header_hash,
                            runs=runs, use_store=use_store)
    if found.kind != "none":
        return found
    prior = acceptance_prior(family_of(model_type), method, draft_tokens)
    if not isinstance(prior, AcceptancePrior):
        return unavailable(f"{found.detail}; {prior.line}", method=method,
                           draft_tokens=draft_tokens)
    return AcceptanceSource("published", prior.method, draft_tokens, (prior.value,),
                            f"{prior.line}; no stored run measured it ({found.detail})",
                            spread=(prior.low, prior.high))


def _resolve_stored(*, method: str, draft_tokens: int, header_hash: str | None,
                    runs: Sequence[RunRecord], use_store: bool) -> AcceptanceSource:
    """The acceptance stored runs of this checkpoint measured, or why there is none."""
    what = f"{method} k={draft_tokens}"
    if not use_store:
        return unavailable(
            f"stored runs are ignored, so no measured {what} acceptance; give --mtp-acceptance",
            method=method, draft_tokens=draft_tokens)
    if header_hash is None:
        return unavailable("the checkpoint has no header fingerprint to match stored runs by; "
                           "give --mtp-acceptance", method=method, draft_tokens=draft_tokens)
    m = measured_acceptance(runs, header_hash=header_hash, method=method,
                            draft_tokens=draft_tokens)
    if m is None:
        return unavailable(
            f"no stored run of this checkpoint measured {what} acceptance (vLLM's "
            "spec-decode counters); give --mtp-acceptance",
            method=method, draft_tokens=draft_tokens)
    return AcceptanceSource(
        "measured", m.config.method, m.config.draft_tokens, (m.value,), m.source,
        run_ids=m.run_ids, spread=(m.low, m.high), stdev=m.stdev,
        position_rates=m.position_rates, measured=m.to_dict(),
    )


def speculative_hint(runs: Sequence[RunRecord], header_hash: str | None) -> str | None:
    """A note when stored runs measured speculative decoding of this checkpoint but the plan
    asked for none (no ``--draft-tokens``)."""
    if header_hash is None:
        return None
    configs = measured_configs(runs, header_hash=header_hash)
    if not configs:
        return None
    opts = "; ".join(f"--spec-method {c.method} --draft-tokens {c.draft_tokens}"
                     for c in configs)
    return (f"stored runs measured speculative-decoding acceptance for this checkpoint: "
            f"{opts} predicts it")


@dataclass(frozen=True)
class SpeculativeSummary:
    """What ``servelab run`` prints about speculative decoding: the acceptance this run
    measured, and the acceptance (with its source) and speed the plan predicted before it."""

    measured: RunAcceptance | None
    source: AcceptanceSource | None
    predicted: MtpPoint | None

    def to_dict(self) -> dict[str, Any]:
        """JSON form; the prediction is marked as such."""
        m, p = self.measured, self.predicted
        return {
            "measured_acceptance_length": m.acceptance_length if m else None,
            "measured_position_rates": list(m.position_rates) if m else [],
            "prediction": self.source.to_dict() if self.source else None,
            "predicted_tok_s": p.predicted_tok_s if p else None,
            "predicted_interval": [p.predicted_low, p.predicted_high] if p else None,
            "predicted": True,
        }


def speculative_summary(record: RunRecord, plan: Plan | None) -> SpeculativeSummary | None:
    """The run's speculative-decoding summary; None when it neither drafted nor planned to."""
    measured = run_acceptance(record)
    source = plan.speculative if plan is not None else None
    if measured is None and source is None:
        return None
    point = plan.speed.mtp[0] if plan is not None and plan.speed.mtp else None
    return SpeculativeSummary(measured, source, point)
