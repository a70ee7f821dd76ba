"""The evidence stored runs hold for one plan (:class:`~servelab.predict.evidence.Evidence`):
the samples of the runs on the plan's hardware, every run's speculative steps when the plan
drafts, the priors table, and the acceptance length to predict speculative decode at (given,
measured by runs of the same checkpoint, or none with the reason). Values out; the speed
model never reads a stored record itself.
"""

from __future__ import annotations

from collections.abc import Sequence

from servelab.evidence.acceptance import resolve_acceptance, speculative_hint
from servelab.evidence.runs import samples_from_runs
from servelab.plan.request import PlanRequest
from servelab.predict.evidence import Evidence
from servelab.predict.priors import load_priors
from servelab.sizing.specsource import AUTO
from servelab.store.model import RunRecord

__all__ = ["evidence_for"]


def evidence_for(request: PlanRequest, header_hash: str | None,
                 every: Sequence[RunRecord], *, model_type: str | None = None) -> Evidence:
    """What the successful runs ``every`` say for ``request``'s plan of the checkpoint whose
    headers hash to ``header_hash``: those on the request's hardware calibrate plain decode
    and prefill; all of them may hold this checkpoint's measured acceptance and drafting
    steps (drafting runs calibrate the speculative step, not plain decode: predict.spec).

    Speculative decode is predicted at the request's acceptance lengths, or ``auto``: what
    stored runs of this checkpoint with the same method and draft tokens measured, else the
    published prior of the model's family (``model_type``, the text model's). A plan
    that drafts nothing notes the configurations stored runs measured (when the request
    asks for that note).
    """
    spec, hardware = request.speculation, request.hardware.name
    acceptance = resolve_acceptance(spec.acceptance, method=spec.method,
                                    draft_tokens=spec.draft_tokens, header_hash=header_hash,
                                    runs=every, use_store=request.store.use,
                                    model_type=model_type)
    hint = speculative_hint(every, header_hash) if (
        spec.hint and spec.acceptance == AUTO and spec.draft_tokens <= 0) else None
    drafts = acceptance is not None and bool(acceptance.lengths)
    return Evidence(
        samples=tuple(samples_from_runs([r for r in every if r.hardware == hardware])),
        draft_samples=tuple(samples_from_runs(every)) if drafts else (),
        priors=load_priors(request.store.priors),
        acceptance=acceptance,
        notes=(hint,) if hint else (),
    )
