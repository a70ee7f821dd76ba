"""One predicted quantity next to what was observed: :class:`Check`. Pure; imports nothing.

Every place servelab sets a prediction beside a measurement or an engine's log uses this one
value: the run summary (``servelab run``), the recipe pages' "planned vs reported" table,
the KV pool against an engine's log (:mod:`servelab.sizing.check`) and the error ledger. It
holds the two values, their label, unit and the basis of the prediction, and it answers the
comparison in one way:

- ``error``: observed / predicted − 1 (negative: lower than predicted);
- an *interval* prediction (``low``..``high``): ``inside`` says whether the observation fell
  in it;
- an *exact* prediction (``exact=True``: arithmetic that must reproduce what the engine
  prints): ``matches`` compares the two at ``decimals`` (as the log prints them), strings
  by equality; a silent log matches a prediction of nothing to log (``None`` or ``0``).

``verdict`` says the outcome in one word: ``"equal"`` / ``"differs"`` (exact),
``"inside"`` / ``"outside"`` (interval), ``"no interval"``, ``"not observed"`` or
``"not predicted"``.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Check", "Value", "ratio_error"]

Value = float | int | str | None


def _is_num(v: Value) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def ratio_error(observed: float | None, predicted: float | None) -> float | None:
    """``observed / predicted - 1``; ``None`` when either is missing or the prediction is 0."""
    if observed is None or not predicted:
        return None
    return observed / predicted - 1.0


@dataclass(frozen=True)
class Check:
    """``predicted`` (with its interval or as exact arithmetic) against ``observed``."""

    label: str
    predicted: Value
    observed: Value
    unit: str = ""
    basis: str = ""  # how the prediction was made ("vLLM 0.32.0 KV arithmetic (...)")
    low: float | None = None
    high: float | None = None
    exact: bool = False
    decimals: int | None = None  # exact numbers compare (and print) at this many decimals

    def text(self, value: Value) -> str | None:
        """A value as the comparison sees it (``decimals`` applied); ``None`` stays ``None``."""
        if value is None:
            return None
        if self.decimals is not None and _is_num(value):
            return f"{float(value):.{self.decimals}f}"
        return str(value)

    @property
    def error(self) -> float | None:
        """observed / predicted − 1 when both are numbers."""
        o, p = self.observed, self.predicted
        if not (_is_num(o) and _is_num(p)):
            return None
        assert isinstance(o, int | float) and isinstance(p, int | float)
        return ratio_error(float(o), float(p))

    @property
    def inside(self) -> bool | None:
        """Whether the observation lies inside the predicted interval (``None``: no
        interval, or nothing observed)."""
        o = self.observed
        if self.low is None or self.high is None or not _is_num(o):
            return None
        assert isinstance(o, int | float)
        return self.low <= o <= self.high

    @property
    def matches(self) -> bool:
        """Exact: equal as printed, or the log is silent and nothing was predicted to log.
        Interval: inside it (a prediction without an interval never matches)."""
        if not self.exact:
            return bool(self.inside)
        if self.observed is None:
            return self.predicted is None or self.text(self.predicted) in ("0", self.text(0))
        return self.text(self.predicted) == self.text(self.observed)

    @property
    def verdict(self) -> str:
        """The outcome in one word (see the module docstring)."""
        if self.exact:
            return "equal" if self.matches else "differs"
        if self.predicted is None:
            return "not predicted"
        if self.observed is None:
            return "not observed"
        inside = self.inside
        if inside is None:
            return "no interval"
        return "inside" if inside else "outside"

    @property
    def both(self) -> bool:
        """Both sides are present (a table of comparisons shows only these)."""
        return self.predicted is not None and self.observed is not None

    def mismatch(self) -> str:
        """``label: predicted X, engine logged Y`` (the line a failed exact check prints)."""
        return (f"{self.label}: predicted {self.text(self.predicted) or '-'}, "
                f"engine logged {self.text(self.observed)}")
