"""Corrections to the operator sum fitted on stored runs, and the interval from leaving each
family out of them (issue 39 item 5).

The operator sum (:func:`~servelab.ops.step.step_time`) is the kernels' time as the tables
measured each alone. Three corrections carry it to an engine's step, each fitted on stored
runs (:class:`Observed`):

* ``isolation``: each operator call's isolated time ``t`` less ``min(fraction * t, cap)``,
  what a graph of back-to-back kernels does not pay, the pair (a grid: fraction 0..0.6, cap
  0..30 us) minimizing the squared log error of the adjusted sum on profiled device-only
  decode steps;
* ``overhead``: the engine's per-step work the operators do not contain (scheduling, input
  preparation), one constant for decode and one for prefill, each the median of (measured -
  adjusted sum) over the runs (decode: only steps longer than the host's floor);
* ``floor``: a decode step is never shorter than the host's floor, the median of the stored
  probe runs (2 to 4 of a model's layers: the step's time is the engine's host work).

:func:`held_out` predicts every stored point with its whole family left out of every
correction; :func:`choose` keeps, per kind, the most corrected stage only where it lowers
the held-out median |log error| (both reported) and gives the interval: the 90th percentile
of the held-out |log error| of the kept stage (:func:`log_quantile`), ``x exp(±q)``.

Pure: stored points, costs and floors in, frozen values out.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from servelab.ops.costs import Costs
from servelab.ops.model import StepModel
from servelab.ops.step import EngineSteps, StepShape, step_time

#: Output tokens of the stored single-stream runs (their recipes: 128): a decode step's
#: context is the prompt plus half of them.
HALF_OUTPUT = 64
#: Stages, least corrected first.
STAGES = ("operators", "isolation", "corrected")
STAGE_LABELS = {
    "operators": "the operators' sum as measured alone",
    "isolation": "the operators' sum less what a graph of kernels does not pay",
    "corrected": "the operators' sum with isolation, engine overhead and host floor "
                 "fitted on stored runs",
}
#: The quantile of held-out |log error| that gives the interval.
QUANTILE = 0.9
#: Isolation grid: fraction 0, 0.02 .. 0.6; cap 0, 0.5 .. 30 us.
_FRACS = np.arange(31) * 0.02
_CAPS = np.arange(61) * 0.0005


@dataclass(frozen=True)
class Observed:
    """One stored single-stream point: a decode step (TPOT) or a whole prefill (TTFT) of
    ``model`` at ``length`` prompt tokens, measured ``measured_ms``."""

    build: str
    family: str
    kind: str  # "decode" or "prefill"
    length: int
    measured_ms: float
    model: StepModel
    device_only: bool = False  # a profiled device time per decode step, not a token rate


@dataclass(frozen=True)
class Floor:
    """A stored host-floor probe run: its family and median decode step."""

    family: str
    ms: float


@dataclass(frozen=True)
class Corrections:
    """The corrections fitted with ``left_out`` (a family, or "" for none) left out."""

    left_out: str
    isolation_frac: float
    isolation_cap_ms: float
    decode_ms: float
    prefill_ms: float
    floor_ms: float
    families: tuple[str, ...]  # whose runs fitted them

    def engine(self, cuda_graph_max: int = 512) -> EngineSteps:
        return EngineSteps(cuda_graph_max=cuda_graph_max, isolation_frac=self.isolation_frac,
                           isolation_cap_ms=self.isolation_cap_ms)

    def label(self) -> str:
        return (f"isolation min({self.isolation_frac:.2f} t, {self.isolation_cap_ms * 1e3:.1f} "
                f"us), engine overhead decode {self.decode_ms:+.2f} ms (host floor "
                f"{self.floor_ms:.2f} ms), prefill {self.prefill_ms:+.2f} ms")


def decode_context(length: int) -> int:
    """A stored decode point's step context: the prompt plus half the output."""
    return length + HALF_OUTPUT


def operator_ms(model: StepModel, costs: Costs, kind: str, length: int, *,
                device_only: bool = False, isolation: tuple[float, float] = (0.0, 0.0),
                context: int | None = None, budget: int = 8192) -> float:
    """The operator sum of one decode step at ``context`` (default: ``length`` plus half
    the stored runs' output) or of a ``length``-token prefill, in chunks of at most
    ``budget`` tokens over the prefix before them, with ``isolation`` taken off each call."""
    frac, cap = isolation
    if kind == "decode":
        ctx = decode_context(length) if context is None else context
        st = step_time(model, costs, StepShape.decode(1, ctx),
                       EngineSteps(isolation_frac=frac, isolation_cap_ms=cap))
        return st.device_ms if device_only else st.total_ms
    eng = EngineSteps(cuda_graph_max=0, isolation_frac=frac, isolation_cap_ms=cap)
    return sum(step_time(model, costs, shape, eng).total_ms
               for shape in StepShape.chunked_prefill(length, budget))


def prefill_steps(length: int, budget: int = 8192) -> int:
    """Engine steps a ``length``-token prompt takes at ``budget`` tokens a step."""
    return max(1, -(-length // budget))


@dataclass(frozen=True)
class Priced:
    """A stored point's operator calls as the tables price them, each alone: per engine
    step, the calls' counts and isolated times and the host's issue time (so any isolation
    adjustment is arithmetic, not another lookup)."""

    point: Observed
    steps: tuple[tuple[np.ndarray, np.ndarray, float], ...]

    def ms(self, isolation: tuple[float, float] = (0.0, 0.0)) -> float:
        """The point's operator sum with ``isolation`` taken off each call (as
        :func:`operator_ms`)."""
        frac, cap = isolation
        total = 0.0
        for n, t, host in self.steps:
            device = float((n * np.maximum(t - np.minimum(frac * t, cap), 0.1 * t)).sum())
            total += device if self.point.device_only else max(device, host)
        return total


def price(p: Observed, costs: Costs, budget: int = 8192) -> Priced:
    """``p``'s operator calls, read once (decode: one step; prefill: its chunks)."""
    if p.kind == "decode":
        shapes = [(StepShape.decode(1, decode_context(p.length)), EngineSteps())]
    else:
        shapes, done = [], 0
        while done < p.length:
            chunk = min(budget, p.length - done)
            shapes.append((StepShape.prefill(chunk, done), EngineSteps(cuda_graph_max=0)))
            done += chunk
    steps = []
    for shape, eng in shapes:
        st = step_time(p.model, costs, shape, eng)
        steps.append((np.array([float(i.count) for i in st.items]),
                      np.array([i.lookup.ms for i in st.items]), st.host_ms))
    return Priced(p, tuple(steps))


def fit_isolation(profiled: Sequence[Priced]) -> tuple[float, float]:
    """(fraction, cap ms) minimizing the squared log error of the adjusted operator sum on
    ``profiled`` device-only decode steps (the grid; ties: the smallest fraction, then cap)."""
    if not profiled:
        return 0.0, 0.0
    err = np.zeros((len(_FRACS), len(_CAPS)))
    fr = _FRACS[:, None, None]
    cp = _CAPS[None, :, None]
    for p in profiled:
        n, t, _ = p.steps[0]
        adj = np.maximum(t - np.minimum(fr * t, cp), 0.1 * t)
        pred = (adj * n).sum(axis=2)
        err += np.log(pred / p.point.measured_ms) ** 2
    fi, ci = np.unravel_index(int(np.argmin(err)), err.shape)
    return float(_FRACS[fi]), float(_CAPS[ci])


def fit(priced: Sequence[Priced], floors: Sequence[Floor], *, left_out: str = "",
        isolation: tuple[float, float] | None = None) -> Corrections:
    """The corrections fitted on the ``priced`` points and ``floors`` of every family but
    ``left_out`` (``isolation`` given: that pair instead of the fit)."""
    use = [p for p in priced if p.point.family != left_out]
    other_floors = [f.ms for f in floors if f.family != left_out]
    floor = statistics.median(other_floors) if other_floors else 0.0
    iso = isolation if isolation is not None else fit_isolation(
        [p for p in use if p.point.device_only and p.point.kind == "decode"])
    overhead: dict[str, float] = {}
    for kind in ("decode", "prefill"):
        gaps = []
        for q in use:
            if q.point.kind != kind or q.point.device_only:
                continue
            adj = q.ms(iso)
            # decode: over device-bound steps only (a step shorter than the host's floor
            # waits for the host: the floor, not the gap, sets it)
            if kind == "prefill" or adj > floor:
                gaps.append(q.point.measured_ms - adj)
        overhead[kind] = statistics.median(gaps) if gaps else 0.0
    return Corrections(left_out, iso[0], iso[1], overhead["decode"], overhead["prefill"],
                       floor, tuple(sorted({p.point.family for p in use})))


def corrected_ms(adjusted_ms: float, kind: str, corr: Corrections, *,
                 device_only: bool = False, steps: int = 1) -> float:
    """An adjusted operator sum with the engine overhead (per step) and host floor."""
    if device_only:
        return adjusted_ms
    if kind == "decode":
        return max(adjusted_ms + corr.decode_ms, corr.floor_ms)
    return adjusted_ms + steps * corr.prefill_ms


@dataclass(frozen=True)
class HeldOut:
    """A stored point predicted with its family left out: each stage's prediction."""

    point: Observed
    operators_ms: float
    isolation_ms: float
    corrected_ms: float
    corrections: Corrections

    def ms(self, stage: str) -> float:
        return {"operators": self.operators_ms, "isolation": self.isolation_ms,
                "corrected": self.corrected_ms}[stage]

    def error(self, stage: str) -> float:
        """predicted / measured - 1."""
        return self.ms(stage) / self.point.measured_ms - 1.0


def held_out(priced: Sequence[Priced], floors: Sequence[Floor], *,
             isolation: tuple[float, float] | None = None) -> tuple[HeldOut, ...]:
    """Every point predicted with its whole family left out of every correction."""
    out: dict[int, HeldOut] = {}
    for fam in sorted({p.point.family for p in priced}):
        corr = fit(priced, floors, left_out=fam, isolation=isolation)
        iso = (corr.isolation_frac, corr.isolation_cap_ms)
        for i, p in enumerate(priced):
            if p.point.family != fam:
                continue
            adj = p.ms(iso)
            out[i] = HeldOut(p.point, p.ms(), adj,
                             corrected_ms(adj, p.point.kind, corr,
                                          device_only=p.point.device_only,
                                          steps=len(p.steps)), corr)
    return tuple(out[i] for i in range(len(priced)))


def log_quantile(errors: Sequence[float], q: float = QUANTILE) -> float:
    """The ``q`` quantile of |log(1 + error)| (linear between order statistics)."""
    a = sorted(abs(math.log1p(e)) for e in errors)
    if not a:
        raise ValueError("no errors")
    pos = q * (len(a) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(a) - 1)
    return a[lo] + (a[hi] - a[lo]) * (pos - lo)


@dataclass(frozen=True)
class Choice:
    """For one kind: the stage kept, each stage's held-out median |error| and the
    interval's half-width in log space."""

    kind: str
    stage: str
    medians: tuple[tuple[str, float], ...]
    log_width: float
    points: int
    families: int

    @property
    def low_factor(self) -> float:
        return math.exp(-self.log_width)

    @property
    def high_factor(self) -> float:
        return math.exp(self.log_width)

    @property
    def percent(self) -> float:
        """The interval's half-width as a percent of the prediction (the wider side)."""
        return (self.high_factor - 1.0) * 100.0


def choose(held: Sequence[HeldOut], kind: str) -> Choice:
    """The most corrected stage whose held-out median |error| is lower than every less
    corrected stage's (a correction is kept only where it lowers held-out error), with the
    interval from its held-out errors."""
    sel = [h for h in held if h.point.kind == kind and not h.point.device_only]
    if not sel:
        raise ValueError(f"no stored {kind} point")
    med = {s: statistics.median(abs(h.error(s)) for h in sel) for s in STAGES}
    stage = STAGES[0]
    for s in STAGES[1:]:
        if med[s] < med[stage]:
            stage = s
    width = log_quantile([h.error(stage) for h in sel])
    return Choice(kind, stage, tuple(med.items()), width, len(sel),
                  len({h.point.family for h in sel}))
