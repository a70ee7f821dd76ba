"""The speed model's calibration levels: which samples a prediction is fitted from, and
the interval it carries. Pure: samples in, frozen fits out (the form:
:mod:`servelab.predict.form`; the fit: :mod:`servelab.predict.solver`).

Where the fit comes from (:func:`calibrate`), first that applies:

1. stored runs on the same (engine, kernel path, hardware), other models than the target,
   with the shipped decode profiles of that path (device-only samples: a GPU's busy time per
   decode step, which fit the device terms and never the host's floor; a build that is only
   ever host-bound cannot tell the two apart);
2. the shipped priors (published measurements) on the same (engine, kernel path, hardware):
   they carry the prediction when the store has no run of that path there, and are the prior
   of the level above otherwise;
3. stored runs on the same (engine, hardware), any kernel path: a labelled **fallback**;
4. the shipped priors for the hardware pooled over kernel paths (labelled);
5. the roofline alone: the physical prior (peak bandwidth and compute, no overheads).

A prefill's host-launch terms come from the pooled levels wherever those fitted them: a kernel
path's own levels hold them there (:func:`fit_levels`), since launching a layer's kernels is
the host's work whatever format the weights are in.

Every fit carries a relative interval half-width meant to cover :data:`COVERAGE` (90 %) of
the points of builds it has not seen (issue 30):

* a level of :data:`MIN_BUILDS` models or more: the 90 % split-conformal quantile of its
  leave-one-model-out errors (:func:`conformal`); fewer: the larger of its own (largest miss,
  widened) and the interval of a level below that has enough; one model: the level below's;
* never narrower than the same build's runs varied about their mean on that hardware
  (:func:`repeat_spread`: a lent H200 comes with a different host each time);
* where the hardware's calibration set holds no model of the target's family, no run of its
  kernel path, or no level with enough models, the larger of that and the error measured
  when a whole family (kernel path) was left out where many were measured
  (:class:`~servelab.predict.holdout.Reference`), with the reason in the label;
* wider than :data:`MAX_RATIO` (upper / lower) it is no prediction (:attr:`Fit.refused`).

The roofline carries none and is printed as an upper bound, never as a prediction. A stored
level with fewer models than the shipped priors of the same scope is pooled with them
(:func:`levels_for`): a level with less evidence never replaces one with more.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol

from servelab.predict.form import (
    FORMS,
    KINDS,
    OVERLAPPED,
    Coefficients,
    Row,
    Sample,
    host_bound,
    overlapping,
    row_seconds,
)
from servelab.predict.solver import PRIOR_WEIGHT, fit_samples
from servelab.predict.widths import (
    COVERAGE,
    MIN_REL_ERROR,
    conformal,
    error_bound,
    relative_errors,
    repeat_spread,
)


class HeldOutWidth(Protocol):
    """A held-out half-width as a level borrows it (:class:`servelab.predict.holdout.Spread`)."""

    @property
    def half_width(self) -> float | None: ...

    def describe(self) -> str: ...


class Reference(Protocol):
    """Where an interval borrows its width when the evidence left cannot bound it
    (:class:`servelab.predict.holdout.Reference` computes it from held-out fits; declared
    here so that this module, which it calls, does not import it back)."""

    def for_hardware(self, hardware: str, kind: str, by: str) -> HeldOutWidth | None: ...

BY_FAMILY = "family"  # servelab.predict.holdout's hold-outs
BY_PATH = "kernel path"
#: Fitted from one family alone, every other family predicted: the evidence of a hardware whose
#: calibration set holds one family (the DGX Spark's shipped priors: builds of one model).
BY_ONE_FAMILY = "one family"

#: Pull that holds a kernel path's host-launch terms (the prefill form's overlapped ones) at
#: the fit over every kernel path of the hardware: effectively a pin (see :func:`fit_levels`).
HOLD_WEIGHT = 1e5
#: Fewest models a level's leave-one-model-out interval rests on for it to bound a new build
#: at 90 % (split conformal: n held-out models bound the next one at n / (n + 1)); a level
#: with fewer takes the larger of its own and the level below's, or a held-out figure.
MIN_BUILDS = 9
#: Widest interval (upper / lower) printed as a prediction: wider, the bound is shown instead.
#: The builds a user chooses between differ by up to about 3x in speed (the seed: 38.3 tok/s
#: FP8 against 106.5 NVFP4-Fast with MTP on one Spark); an interval spanning 4x holds both ends
#: of such a choice and cannot inform it.
MAX_RATIO = 4.0


def too_wide(low: float | None, high: float | None) -> bool:
    """Whether an interval spans more than :data:`MAX_RATIO` (or reaches zero): no prediction.
    The one rule for every interval servelab prints, published or drawn (plan, choose, the
    site, a speculative step)."""
    return low is not None and high is not None and (low <= 0 or high / low > MAX_RATIO)


def too_wide_text(detail: str) -> str:
    """The one sentence saying an interval is too wide to be a prediction, with ``detail``."""
    return f"no prediction: the interval would span more than {MAX_RATIO:g}x ({detail})"


@dataclass(frozen=True)
class Fit:
    """A fitted (or prior) coefficient vector with where it came from and how far it errs."""

    kind: str
    theta: Coefficients
    level: str
    source: str
    models: tuple[str, ...]
    n_samples: int
    rel_error: float | None
    error_basis: str
    fallback: str | None = None
    #: How the decode context term was had (llama.cpp: fitted, or held at the level below's
    #: or 0 where one context length cannot identify it); "" where no sample carries it.
    context_term: str = ""
    #: For the roofline alone: what evidence is missing, naming the priors table searched
    #: (:meth:`servelab.predict.priors.PriorTable.lacks`); "" otherwise.
    missing: str = ""
    #: The interval in words where it is not ``1 ± rel_error`` (the operator model's
    #: ``x exp(±q)``: ``rel_error`` is then tanh(q), the same upper-over-lower ratio); "".
    spread: str = ""

    def seconds(self, row: Row) -> float:
        """Predicted time for one design-matrix row (:func:`row_seconds`)."""
        return row_seconds(self.theta, row)

    def waits_on_host(self, row: Row) -> bool:
        """True for a prefill row whose host launches outlast the device's kernels in this
        fit: its time is the host's (CPU) more than the GPU's."""
        return host_bound(self.theta, row)

    def coefficients(self) -> dict[str, float]:
        """``{term: value}`` in SI units (seconds per byte, per FLOP, per layer, fixed)."""
        return self.theta.as_dict()

    @property
    def refused(self) -> str | None:
        """Why this fit's interval is too wide to be a prediction (upper / lower beyond
        :data:`MAX_RATIO`), or None."""
        e = self.rel_error
        if e is None or (e < 1.0 and (1.0 + e) / (1.0 - e) <= MAX_RATIO):
            return None
        return too_wide_text(f"±{e * 100:.0f}%: {self.error_basis}")

    @property
    def is_roofline(self) -> bool:
        """True for the physical prior alone (an upper bound, not a prediction)."""
        return self.level == "roofline"

    def note(self, kind: str) -> str | None:
        """The calibration's note on this fit of ``kind``: why it is the roofline alone, or
        why it is refused; None for a fit that predicts."""
        if self.is_roofline:
            return f"{kind}: {self.missing}: roofline only"
        if self.refused:
            return f"{kind}: {self.refused}; the roofline is shown as a bound"
        return None

    def label(self) -> str:
        """One line: source, interval basis and fallback, for every output."""
        parts = [self.source]
        if self.refused:
            parts.insert(0, f"no prediction (interval over {MAX_RATIO:g}x)")
        if self.spread:
            parts.append(f"{self.spread} ({self.error_basis})")
        elif self.rel_error is not None:
            parts.append(f"±{self.rel_error * 100:.0f}% ({self.error_basis})")
        if self.fallback:
            parts.append(f"fallback: {self.fallback}")
        if self.context_term:
            parts.append(self.context_term)
        return "; ".join(parts)

    def to_dict(self) -> dict[str, object]:
        """JSON form."""
        return {
            "kind": self.kind,
            "coefficients": self.coefficients(),
            "level": self.level,
            "source": self.source,
            "models": list(self.models),
            "n_samples": self.n_samples,
            "rel_error": self.rel_error,
            "error_basis": self.error_basis,
            "fallback": self.fallback,
            "label": self.label(),
        } | ({"context_term": self.context_term} if self.context_term else {}) | (
            {"missing": self.missing} if self.missing else {})



@dataclass(frozen=True)
class Level:
    """A set of samples tried as one calibration level, with how to describe it."""

    level: str
    samples: tuple[Sample, ...]
    source: str
    fallback: str | None = None
    pooled: bool = False  # over every kernel path of the hardware


@dataclass(frozen=True)
class Target:
    """What is being predicted: engine, kernel path, hardware and the model whose builds the
    fit leaves out (:attr:`~servelab.predict.keys.BuildKey.model`; empty: none)."""

    engine: str
    kernel_path: str
    hardware: str
    model: str = ""
    family: str = ""  # the model's family (servelab.families), "" when not known


_DEFAULT_PATH = re.compile(r"^(?P<scheme>.+) (?:MoE|dense) \(default\)$")


def path_family(kernel_path: str) -> str:
    """The kernel path a fit is made per. A hardware profile that records no specific path for
    a weight scheme names a default one per scheme and model kind (``bf16 MoE (default)``,
    ``bf16 dense (default)``); those are one path here: dense and MoE models of the scheme run
    the same attention and projection kernels, and what MoE adds (routing, the fused-MoE
    kernel's per-expert work) is the expert-slot term, which is zero for a dense model."""
    m = _DEFAULT_PATH.match(kernel_path)
    return f"{m.group('scheme')} (default)" if m else kernel_path


def _kind_levels(levels: Sequence[Level], kind: str, target: Target) -> list[Level]:
    out = []
    gone = target.model or None
    for lv in levels:
        # a speculative step calibrates the draft term (predict.spec), not the plain form
        keep = tuple(s for s in lv.samples
                     if s.kind == kind and not s.is_step and s.build.model != gone)
        if keep:
            out.append(Level(lv.level, keep, lv.source, lv.fallback, lv.pooled))
    return out


def fit_levels(
    levels: Sequence[Level],
    kind: str,
    target: Target,
    physical: Sequence[float],
    lower: Sequence[float] | None = None,
    *,
    intervals: bool = True,
    reference: Reference | None = None,
) -> Fit:
    """The fit for ``kind`` from the first level with samples, each level's prior being the
    fit of the levels below it (down to the physical prior). ``lower`` bounds every fit
    (default: the physical prior itself, i.e. nothing beats the roofline).

    A prefill's host-launch terms (its form's overlapped part) are the host's: the same Python and
    CUDA launches of a layer's kernels whatever format its weights are in. Once a level pooled
    over every kernel path of the hardware has fitted them from launched rows, the kernel
    path's own levels hold them there (:data:`HOLD_WEIGHT`) instead of fitting them again
    from the few builds of one path, whose short prompts then traded launch time against the
    device's terms (H200: leave-one-model-out prefill beyond 25 % went from 12 to 6 of 78
    points, benchmarks/RESULTS.md)."""
    bound = physical if lower is None else lower
    usable = _kind_levels(levels, kind, target)
    roof = Fit(
        kind=kind,
        theta=Coefficients(kind, tuple(float(v) for v in physical)),
        level="roofline",
        source="roofline (peak bandwidth and compute, no overheads): an upper bound",
        models=(),
        n_samples=0,
        rel_error=None,
        error_basis="none",
    )
    fit = roof
    spread = repeat_spread([s for lv in usable for s in lv.samples], kind)
    held = False  # the launch terms fitted over every kernel path below
    grounded = False  # the interval rests on a level of MIN_BUILDS models or more
    ground = ""  # that level's basis
    for lv in reversed(usable):
        prior = fit.theta
        weight: float | tuple[float, ...] = (
            _held_weights(len(prior)) if held and not lv.pooled else PRIOR_WEIGHT
        )
        lengths = context_lengths(lv.samples, kind)
        if lengths == 1:  # one context length per model: the term cannot be told apart
            weight = _hold(weight, len(prior), "s_per_context_layer")
        theta = fit_samples(lv.samples, kind, prior, bound, weight)
        if lengths == 1:  # held: exactly the level below's (0 at the roofline: no term)
            theta = theta.replace(s_per_context_layer=prior.get("s_per_context_layer"))
        errs = relative_errors(lv.samples, kind, prior, bound, weight) if intervals else []
        if lv.pooled and kind == "prefill":
            held = held or any(overlapping(s.features) for s in lv.samples)
        models = tuple(sorted({s.build.model for s in lv.samples}))
        q = conformal(errs) if len(models) >= MIN_BUILDS else None
        if errs and q is not None:
            rel: float | None = max(q, MIN_REL_ERROR)
            basis = (f"{COVERAGE:.0%} of leave-one-model-out errors over {len(models)} models, "
                     f"{len(errs)} points")
        elif errs:
            rel = error_bound(errs, len(models))
            basis = f"leave-one-model-out over {len(models)} models"
        if errs:
            if spread is not None and rel is not None and spread > rel:
                # no narrower than the same build varied between its own runs (on any kernel
                # path: the host that varies is the hardware's)
                rel = spread
                basis += f"; widened to the ±{spread * 100:.0f}% one build varied between runs"
            if len(models) < MIN_BUILDS:
                below = fit.rel_error if grounded else None
                if below is not None and rel is not None and below > rel:
                    rel = below
                    basis = (f"{len(models)} models here, too few to bound a new build at "
                             f"90 %: interval of a level below ({ground})")
                grounded = below is not None
            else:
                grounded, ground = True, basis
        elif fit.rel_error is not None:
            rel = fit.rel_error
            basis = f"one model here; interval of the level below ({fit.error_basis})"
        else:
            rel, basis = None, "one model and no level below: no interval"
        fit = Fit(
            kind=kind,
            theta=theta,
            level=lv.level,
            source=lv.source,
            models=models,
            n_samples=len(lv.samples),
            rel_error=rel,
            error_basis=basis,
            fallback=lv.fallback,
            context_term=_context_note(lengths, theta),
        )
    if intervals and reference is not None and not fit.is_roofline:
        fit = _lent(fit, usable, target, reference, grounded)
    return fit


def _lent(
    fit: Fit, usable: Sequence[Level], target: Target, reference: Reference, grounded: bool
) -> Fit:
    """``fit`` with the interval the evidence behind it can honestly claim: where the levels
    hold no model of the target's family, no run of its kernel path, or too few models to
    bound a new build at 90 % (:data:`MIN_BUILDS`, with no level below that does), the larger
    of its own half-width and the one measured when a whole family (or kernel path) was left
    out (:class:`~servelab.predict.holdout.Reference`: this hardware's own where it was
    measured with enough families, else the hardware measured with the most), with the
    reason."""
    hw = target.hardware
    # what the hardware's calibration set has seen: every level of it (the levels below the
    # fit's are its prior)
    families = sorted({s.build.family for lv in usable for s in lv.samples if s.build.family})
    why: list[tuple[str, str]] = []
    if target.family and target.family not in families:
        why.append((f"no model of family {target.family} on {hw}", BY_FAMILY))
    if fit.fallback:
        why.append((f"no {path_family(target.kernel_path)} run on {hw}", BY_PATH))
    if not grounded:
        fams = f"{len(families)} famil{'y' if len(families) == 1 else 'ies'}"
        models = f"{len(fit.models)} model{'' if len(fit.models) == 1 else 's'}"
        why.append((f"{models} of {fams} on {hw}: too few to bound a new "
                    "build at 90 %", BY_ONE_FAMILY if len(families) <= 1 else BY_FAMILY))
    rel, basis = fit.rel_error, fit.error_basis
    for reason, by in why:
        spread = reference.for_hardware(hw, fit.kind, by)
        if spread is None or spread.half_width is None:
            continue
        if rel is None or spread.half_width > rel:
            rel, basis = spread.half_width, f"{reason}: {spread.describe()}"
    if rel == fit.rel_error:
        return fit
    return replace(fit, rel_error=rel, error_basis=basis)


def context_lengths(samples: Sequence[Sample], kind: str) -> int:
    """The most context lengths one model's samples that carry the decode context term
    show (0: none carries it, e.g. every vLLM sample)."""
    if kind != "decode":
        return 0
    seen: dict[str, set[int]] = {}
    for s in samples:
        if s.kind == kind and s.features.amounts[_CTX_AT] > 0:
            seen.setdefault(s.build.model, set()).add(s.length)
    return max((len(v) for v in seen.values()), default=0)


def _context_note(lengths: int, theta: Coefficients) -> str:
    """How a level had its decode context term (:attr:`Fit.context_term`)."""
    if lengths == 0:
        return ""
    per = theta.get("s_per_context_layer")
    if lengths > 1:
        return (f"decode context term fitted over {lengths} context lengths: {per * 1e9:.3g} ns "
                "per context token x attention layer")
    if per > 0:
        return (f"decode context term of the level below ({per * 1e9:.3g} ns per context "
                "token x attention layer): one context length per model here")
    return ("no decode context term: one context length per model here cannot identify it "
            "(the form without it)")


_CTX_AT = FORMS["decode"].index("s_per_context_layer")


def _hold(weight: float | tuple[float, ...], k: int, name: str) -> tuple[float, ...]:
    """``weight`` (one or per term) with term ``name`` of the decode form held at its prior."""
    w = [weight] * k if isinstance(weight, float) else list(weight)
    w[FORMS["decode"].index(name)] = HOLD_WEIGHT
    return tuple(w)


def _held_weights(k: int) -> tuple[float, ...]:
    """Prior weights that hold a prefill fit's host-launch terms at the prior's values."""
    w = [PRIOR_WEIGHT] * k
    launch = FORMS["prefill"].span(OVERLAPPED)
    w[launch] = [HOLD_WEIGHT] * len(w[launch])
    return tuple(w)


@dataclass(frozen=True)
class Calibration:
    """Decode and prefill fits for one target (engine, kernel path, hardware)."""

    target: Target
    decode: Fit
    prefill: Fit
    notes: tuple[str, ...] = field(default_factory=tuple)

    def to_dict(self) -> dict[str, object]:
        """JSON form."""
        return {
            "target": {
                "engine": self.target.engine,
                "kernel_path": self.target.kernel_path,
                "hardware": self.target.hardware,
            },
            "decode": self.decode.to_dict(),
            "prefill": self.prefill.to_dict(),
            "notes": list(self.notes),
        }


def levels_for(
    target: Target,
    stored: Iterable[Sample],
    priors: Iterable[Sample],
    *,
    origin: str = "stored runs",
) -> list[Level]:
    """The calibration levels for ``target``, most specific first (see module docs);
    ``origin`` names where ``stored`` came from."""
    same_hw = [s for s in stored if s.engine == target.engine and s.hardware == target.hardware]
    priors = list(priors)
    family = path_family(target.kernel_path)
    # Profiled device times of this engine, hardware and kernel path (shipped with the priors)
    # fit the device terms next to the stored runs: they are what tells a host-bound build's
    # floor apart from its kernels (benchmarks/RESULTS.md, H200 decode profiles).
    profiles = [
        s
        for s in priors
        if s.device_only
        and s.engine == target.engine
        and s.hardware == target.hardware
        and path_family(s.kernel_path) == family
        and s not in same_hw
    ]
    fitted_from = origin
    if same_hw and profiles:
        same_hw += profiles
        fitted_from = f"{origin} and shipped decode profiles"

    def split(
        pool: list[Sample], what: str, named: Callable[[Sequence[Sample]], str]
    ) -> tuple[list[Level], list[Level]]:
        """(the level of ``family``, the pooled level) of ``pool``, each empty when it has
        nothing to hold; ``named`` says where a level's samples come from."""
        path = [s for s in pool if path_family(s.kernel_path) == family]
        other = sorted({s.kernel_path for s in pool if path_family(s.kernel_path) != family})
        own = Level(
            what, tuple(path), f"{named(path)} ({target.engine} / {family} / {target.hardware})"
        )
        pooled = Level(
            f"{what}, pooled",
            tuple(pool),
            f"{named(pool)} ({target.engine} / all kernel paths / {target.hardware})",
            fallback=None if path else f"no {family} data; pooled over {', '.join(other)}",
            pooled=True,
        )
        return ([own] if path else []), ([pooled] if other else [])

    def shipped(rows: Sequence[Sample]) -> str:
        sources = sorted({s.source for s in rows})
        return "prior from " + "; ".join(sources) if sources else "prior"

    stored_path, stored_pooled = split(same_hw, origin, lambda _: f"fitted from {fitted_from}")
    # The priors always sit below the stored runs of the same kernel path: with no run on the
    # hardware they carry the prediction; with a few, they are the fit's prior and lend their
    # interval to a level that holds one model only. Shipped measurements of the target's own
    # path also rank above stored runs of other paths only: that pooling is a fallback, and a
    # store holding one small build of another path (a 2-layer floor probe, H200 2026-12-03)
    # had predicted an FP8 MoE build 3.6x too slow from it while the priors held that path.
    pri = [s for s in priors if s.engine == target.engine and s.hardware == target.hardware]
    prior_path, prior_pooled = split(pri, "prior", shipped)
    return (_combined(stored_path, prior_path) + prior_path
            + _combined(stored_pooled, prior_pooled) + prior_pooled)


def _models(levels: Sequence[Level]) -> int:
    return len({s.build.model for lv in levels for s in lv.samples})


def _combined(upper: list[Level], lower: list[Level]) -> list[Level]:
    """``upper`` (stored runs) over ``lower`` (shipped priors of the same scope), or, where
    ``upper`` holds fewer models than ``lower``, one level of both: a level with less evidence
    never replaces one with more. On an H200 store holding one fresh run (a dense 70B), its
    fit had replaced the shipped priors and put a hybrid MoE's 8K prefill 32 % off where the
    priors alone were 5 % off (issue 30); pooled, every sample counts once and the priors'
    builds keep the terms the one run cannot identify. A prior restating a stored point (same
    model, kind, length and graph regime) is left out of the pool: it is the same
    measurement."""
    if not upper or not lower or _models(upper) >= _models(lower):
        return upper
    up, low = upper[0], lower[0]
    seen = {(s.build.model, s.kind, s.length, s.eager) for s in up.samples}
    extra = tuple(s for s in low.samples if (s.build.model, s.kind, s.length, s.eager) not in seen)
    return [Level(f"{up.level} with {low.level}", up.samples + extra,
                  f"{up.source}, pooled with {low.source}", up.fallback, up.pooled)]


def calibrate(
    target: Target,
    stored: Iterable[Sample],
    priors: Iterable[Sample],
    physical: Callable[[str], Sequence[float]],
    lower: Callable[[str], Sequence[float]] | None = None,
    reference: Reference | None = None,
    missing: Callable[[str], str] | None = None,
) -> Calibration:
    """Decode and prefill fits for ``target`` (``physical(kind)``: the roofline coefficients;
    ``lower(kind)``: the bounds, default the roofline's; ``reference``: the held-out
    half-widths an interval borrows where the evidence here cannot bound it, see
    :func:`fit_levels`; ``missing(kind)``: what a fit of the roofline alone lacks, in words,
    kept in the fit and its note; default "no stored run or prior of ENGINE on HARDWARE")."""
    levels = levels_for(target, list(stored), list(priors))
    fits = {
        k: fit_levels(levels, k, target, physical(k), lower(k) if lower else None,
                      reference=reference)
        for k in KINDS
    }
    for k, f in fits.items():
        if f.is_roofline:
            fits[k] = replace(f, missing=missing(k) if missing else
                              f"no stored run or prior of {target.engine} on "
                              f"{target.hardware}")
    notes = tuple(n for k, f in fits.items() if (n := f.note(k)) is not None)
    return Calibration(target, fits["decode"], fits["prefill"], notes)


def interval(
    tok_s: float, rel_error: float | None, bound: float | None = None
) -> tuple[float, float] | None:
    """tok/s interval when predicted / measured tok/s lies within ``1 ± e``, its top capped at
    the roofline ``bound`` (no engine beats the roofline)."""
    if rel_error is None:
        return None
    lo = tok_s / (1.0 + rel_error)
    hi = tok_s / (1.0 - rel_error) if rel_error < 1.0 else math.inf
    if bound is not None and bound > 0:
        hi = min(hi, bound)
        lo = min(lo, bound)
    return lo, hi
