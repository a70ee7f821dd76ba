"""What a sample measured, as a typed key: the build of a model. Pure.

Leave-one-model-out leaves out every build of a model (``model``); two builds of one checkpoint
(a BF16 and an FP32 cast) are told apart by the weight bytes they read per token; a
speculative run's samples are the steps of a verification (``step``), not tokens; ``family``
(:mod:`servelab.families`) is what leave-one-family-out leaves out.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from servelab.units import MIB


@dataclass(frozen=True)
class BuildKey:
    """One build: the model it is a build of, its family, the weight MiB it reads per token
    (0.1 MiB: what tells two builds of one checkpoint apart; ``None`` where unknown) and, for
    a speculative run's samples, the step they time (``"mtp k=2"``)."""

    model: str
    family: str = ""
    weight_mib: float | None = None
    step: str = ""

    @classmethod
    def of(cls, model: str, weight_bytes: float | None = None, family: str = "") -> BuildKey:
        """The key of ``model`` whose build reads ``weight_bytes`` of weights per token."""
        mib = round(weight_bytes / MIB, 1) if weight_bytes is not None else None
        return cls(model, family, mib)

    def stepped(self, label: str) -> BuildKey:
        """The key of this build's speculative steps under ``label`` (``"mtp k=2"``)."""
        return replace(self, step=label)

    @property
    def is_step(self) -> bool:
        """Whether the key names a speculative run's steps (see :meth:`stepped`)."""
        return bool(self.step)

    def __str__(self) -> str:
        """The printed name: ``"m [12.3 MiB/token]"``, ``"m [12.3 MiB/token] [mtp k=2 step]"``."""
        text = self.model
        if self.weight_mib is not None:
            text += f" [{self.weight_mib:,.1f} MiB/token]"
        if self.step:
            text += f" [{self.step} step]"
        return text
