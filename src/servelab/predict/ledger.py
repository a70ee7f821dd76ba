"""The error ledger: leave-one-model-out predictions against measurements. Pure.

For every build in the samples, servelab forgets it, calibrates exactly as it would for a
build it has never run (same levels, same fallbacks, same interval rule: see
:mod:`servelab.predict`) and predicts its measured points. Each row says what was
measured, what would have been predicted, whether the measurement fell inside the printed
interval, and where the prediction came from. This is the evidence behind every interval
servelab prints (``servelab calibration report``; linked from every page).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import MISSING, asdict, dataclass, fields
from typing import Any

from servelab.check import Check
from servelab.errors import InputError
from servelab.predict.form import Sample, row_seconds
from servelab.predict.holdout import Reference
from servelab.predict.keys import BuildKey
from servelab.predict.levels import Fit, Target, fit_levels, interval, levels_for
from servelab.predict.widths import repeat_spread

#: Predicts one measured speculative step of a left-out build from the decode fit of its
#: target (steps/s, low, high, where the draft term came from): the draft term's
#: calibration (:func:`servelab.predict.spec.step_predictor`).
StepPredictor = Callable[
    [Target, Fit, Sample, float | None],
    tuple[float | None, float | None, float | None, str],
]

#: The ledger kind of a speculative run's rows: one verification step per second, not tokens.
STEP_KIND = "spec step"


@dataclass(frozen=True)
class LedgerRow:
    """One measured point against its leave-one-model-out prediction."""

    hardware: str
    engine: str
    kernel_path: str
    model: str
    kind: str
    length: int
    measured_tok_s: float
    predicted_tok_s: float | None
    low: float | None
    high: float | None
    level: str
    source: str
    predicted: bool = True
    unit: str = "tok/s"  # "steps/s" for a speculative run's steps (kind STEP_KIND)

    @property
    def check(self) -> Check:
        """The measurement against its leave-one-model-out prediction, as one
        :class:`~servelab.check.Check` (the comparison run summaries and pages make)."""
        return Check(f"{self.model} {self.kind} at {self.length:,}", self.predicted_tok_s,
                     self.measured_tok_s, self.unit, f"{self.level}: {self.source}",
                     self.low, self.high)

    @property
    def error(self) -> float | None:
        """measured / predicted - 1, as run summaries and pages state it (negative: the
        build ran slower than predicted)."""
        return self.check.error

    @property
    def inside(self) -> bool | None:
        """Whether the measurement lies inside the printed interval."""
        return self.check.inside

    def to_dict(self) -> dict[str, Any]:
        """JSON form (the error and the inside flag included)."""
        d = asdict(self)
        d["error"] = self.error
        d["inside_interval"] = self.inside
        return d


@dataclass(frozen=True)
class LedgerSummary:
    """Per (hardware, kind): how large the misses were and how often the interval held."""

    hardware: str
    kind: str
    points: int
    predicted_points: int
    max_abs_error: float | None
    median_abs_error: float | None
    inside: int
    #: How far one build's reruns strayed from their mean on this hardware (the floor under
    #: every interval: :func:`servelab.predict.levels.repeat_spread`); None without reruns.
    rerun_spread: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return asdict(self)


def ledger(
    stored: Sequence[Sample],
    priors: Sequence[Sample],
    physical: Callable[[str, Sample], Sequence[float]],
    *,
    origin: str = "stored runs",
    lower: Callable[[str, Sample], Sequence[float]] | None = None,
    steps: StepPredictor | None = None,
    reference: Reference | None = None,
) -> tuple[LedgerRow, ...]:
    """Leave-one-model-out rows for every sample in ``stored``.

    ``physical(kind, sample)`` gives the roofline coefficients of the sample's hardware and
    kernel path (the prior of last resort and the lower bound); ``origin`` names where
    ``stored`` came from (``"shipped priors"`` when the ledger checks the table itself);
    ``lower(kind, sample)`` bounds the fits (default: the roofline coefficients);
    ``steps`` predicts a speculative step (decode form + draft term); without it a step is
    predicted by the decode form alone.
    ``reference``: the held-out half-widths an interval borrows where the evidence left
    cannot bound it (:func:`~servelab.predict.levels.fit_levels`; it holds the build
    itself, a small leak the per-family view of benchmarks/loo_family.py avoids). A fit whose
    interval is too wide to be a prediction (:attr:`~servelab.predict.levels.Fit.refused`)
    predicts nothing.
    """
    rows: list[LedgerRow] = []
    by_build: dict[tuple[str, str, BuildKey], list[Sample]] = {}
    for s in stored:
        if not s.device_only:  # a profiled device time is an input, not a speed to check
            by_build.setdefault((s.hardware, s.engine, s.build), []).append(s)
    for (hardware, engine, build), mine in sorted(
        by_build.items(), key=lambda kv: (kv[0][0], kv[0][1], str(kv[0][2]))
    ):
        others = [s for s in stored if s.build != build]
        for kind in ("decode", "prefill"):
            points = sorted((s for s in mine if s.kind == kind), key=lambda s: s.length)
            if not points:
                continue
            target = Target(engine, points[0].kernel_path, hardware, build.model, build.family)
            roof = physical(kind, points[0])
            levels = levels_for(target, others, priors, origin=origin)
            floor = lower(kind, points[0]) if lower else None
            fit = fit_levels(levels, kind, target, roof, floor, reference=reference)
            for s in points:
                tok = lo = hi = None
                source = fit.label()
                ceiling = floor if floor is not None else roof
                least = row_seconds(ceiling, s.features)
                if not fit.is_roofline and not fit.refused and s.is_step and steps is not None:
                    tok, lo, hi, source = steps(target, fit, s, 1.0 / least if least else None)
                elif not fit.is_roofline and not fit.refused:
                    seconds = fit.seconds(s.features)
                    if seconds > 0:
                        tokens = 1.0 if kind == "decode" else s.length
                        tok = tokens / seconds
                        band = interval(tok, fit.rel_error, tokens / least if least else None)
                        lo, hi = band if band else (None, None)
                step = build.is_step
                rows.append(
                    LedgerRow(
                        hardware=hardware,
                        engine=engine,
                        kernel_path=s.kernel_path,
                        model=str(build),
                        kind=STEP_KIND if step else kind,
                        length=s.length,
                        measured_tok_s=s.tok_s,
                        predicted_tok_s=tok,
                        low=lo,
                        high=hi,
                        level=fit.level,
                        source=source,
                        unit="steps/s" if step else "tok/s",
                    )
                )
    return tuple(rows)


def summarize(
    rows: Sequence[LedgerRow], samples: Sequence[Sample] = ()
) -> tuple[LedgerSummary, ...]:
    """One :class:`LedgerSummary` per (hardware, kind); ``samples`` (the ledger's input) give
    each its rerun spread: misses inside it are what the same build varies between runs."""
    out = []
    keys = sorted({(r.hardware, r.kind) for r in rows})
    for hardware, kind in keys:
        mine = [r for r in rows if r.hardware == hardware and r.kind == kind]
        errs = sorted(abs(r.error) for r in mine if r.error is not None)
        step = kind == STEP_KIND
        pool = [s for s in samples if s.hardware == hardware and s.build.is_step == step]
        out.append(
            LedgerSummary(
                hardware=hardware,
                kind=kind,
                points=len(mine),
                predicted_points=len(errs),
                max_abs_error=errs[-1] if errs else None,
                median_abs_error=errs[len(errs) // 2] if errs else None,
                inside=sum(1 for r in mine if r.inside),
                rerun_spread=repeat_spread(pool, "decode" if step else kind),
            )
        )
    return tuple(out)


SCHEMA = "servelab.ledger/1"
_ROW_FIELDS = {f.name: f for f in fields(LedgerRow)}
_SUMMARY_FIELDS = {f.name: f for f in fields(LedgerSummary)}


@dataclass(frozen=True)
class LedgerDocument:
    """The ledger as ``servelab calibration report --json`` writes it (``servelab.ledger/1``)."""

    priors_version: str
    rows: tuple[LedgerRow, ...]
    summary: tuple[LedgerSummary, ...]

    def to_dict(self) -> dict[str, Any]:
        """JSON form; :func:`read_ledger` reads it back."""
        return {
            "schema": SCHEMA,
            "priors_version": self.priors_version,
            "rows": [r.to_dict() for r in self.rows],
            "summary": [s.to_dict() for s in self.summary],
        }


def _record(cls: type[Any], names: dict[str, Any], item: Any, what: str,
            source: str) -> Any:
    if not isinstance(item, dict):
        raise InputError(f"a ledger {what} is not an object: {str(item)[:60]}", path=source)
    given = {k: v for k, v in item.items() if k in names}
    missing = [n for n, f in names.items() if n not in given
               and f.default is MISSING and f.default_factory is MISSING]
    if missing:
        raise InputError(f"a ledger {what} lacks {', '.join(missing)}", path=source)
    return cls(**given)


def read_ledger(doc: Any, *, source: str = "input") -> LedgerDocument:
    """The typed reader of a ``servelab.ledger/1`` document (parsed JSON); an InputError
    naming ``source`` and the problem otherwise. The derived ``error`` and
    ``inside_interval`` keys are recomputed, not read."""
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        raise InputError(f"not a {SCHEMA} document", path=source)
    rows, summary = doc.get("rows"), doc.get("summary")
    if not isinstance(rows, list) or not isinstance(summary, list):
        raise InputError("a ledger needs 'rows' and 'summary' lists", path=source)
    return LedgerDocument(
        priors_version=str(doc.get("priors_version") or ""),
        rows=tuple(_record(LedgerRow, _ROW_FIELDS, r, "row", source) for r in rows),
        summary=tuple(_record(LedgerSummary, _SUMMARY_FIELDS, s, "summary", source)
                      for s in summary),
    )
