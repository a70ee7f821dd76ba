"""What the speed model is handed for one plan: the stored runs' samples (as values, from
:mod:`servelab.evidence`), the priors table, and speculative decode's acceptance length with
its source. Data only; :func:`servelab.predict.model.speed_for` reads it.
"""

from __future__ import annotations

from dataclasses import dataclass

from servelab.predict.form import Sample
from servelab.predict.levels import Calibration
from servelab.predict.priors import PriorTable
from servelab.sizing.specsource import AcceptanceSource

__all__ = ["Evidence"]


@dataclass(frozen=True)
class Evidence:
    """The evidence a plan's predictions stand on."""

    samples: tuple[Sample, ...] = ()
    """Stored runs' samples on the plan's hardware (they calibrate plain decode and prefill)."""
    draft_samples: tuple[Sample, ...] = ()
    """Every stored run's samples, any hardware (their speculative steps calibrate the draft
    term; another machine's are a labelled fallback)."""
    priors: PriorTable | None = None
    """The priors table under the stored samples (``None``: the shipped one)."""
    acceptance: AcceptanceSource | None = None
    """Where speculative decode is predicted, and why (``None``: no speculative plan)."""
    notes: tuple[str, ...] = ()
    """What the evidence adds to the plan's notes (stored measurements the plan did not use)."""
    leave_out: str = ""
    """A model left out of every fit (a held-out check of the prediction)."""
    calibration: Calibration | None = None
    """Fits given instead of fitted (a test's or a replay's), used as they are."""
    calibrate: bool = True
    """False: no fit at all, the roofline bound alone."""

    @property
    def fitted(self) -> bool:
        """Whether the plan's fits are fitted here from the evidence, nothing held out (not
        given, not the roofline alone, not a held-out check): where an operator model may
        predict instead (:mod:`servelab.predict.ops_speed`)."""
        return self.calibration is None and self.calibrate and not self.leave_out
