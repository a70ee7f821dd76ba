"""A shipped efficiency fit (``servelab/ops/data/efficiency.json``) and the step times it
predicts on hardware without operator tables (issue 39, item 4).

The file is written by ``benchmarks/ops_beyond_h200.py --write``: per engine, the
efficiencies :func:`servelab.ops.efficiency.fit` fitted to every published end-to-end point
the project keeps (``benchmarks/ops/published.py``, each with its source), the held-out
error of each point (its unit left out, :func:`servelab.ops.efficiency.held_out`) and the
points themselves. :func:`predict` divides a step's operator rooflines by the hardware's
fitted efficiencies and widens the time by the held-out errors
(:func:`servelab.ops.efficiency.interval`).
"""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from servelab.errors import UsageError
from servelab.ops.efficiency import (
    Efficiency,
    ErrorRecord,
    Fit,
    HeldOut,
    Interval,
    PointWork,
    RooflineCosts,
    interval,
)
from servelab.ops.model import StepModel
from servelab.ops.step import (
    EngineSteps,
    SeqGroup,
    StepShape,
    StepTime,
    kernel_count,
    step_time,
)


def _eff_doc(e: Efficiency) -> dict[str, Any]:
    return {"mem": e.mem, "compute": e.compute, "kernel_us": e.kernel_us}


def fit_doc(f: Fit, errors: Sequence[HeldOut], points: Sequence[PointWork],
            provenance: Mapping[str, Any]) -> dict[str, Any]:
    """A JSON-ready record of one engine's fit, its held-out errors and the points (with
    their sources) it was fitted to."""
    return {
        "engine": f.engine, "lambda": f.lam,
        "hardware": {h: _eff_doc(e) for h, e in f.hardware.items()},
        "mean": _eff_doc(f.mean),
        "mem_class": dict(f.mean.mem_class), "compute_class": dict(f.mean.compute_class),
        "held_out": [dataclasses.asdict(h.record()) for h in errors],
        "points": [{"ident": p.ident, "hardware": p.hardware, "kind": p.kind,
                    "build": p.build, "family": p.family, "measured_ms": p.measured_ms,
                    "role": p.role, "source": p.source} for p in points],
        **dict(provenance),
    }


def load_fit(doc: Mapping[str, Any]) -> tuple[Fit, list[ErrorRecord]]:
    """A fit and its held-out errors from :func:`fit_doc`'s record."""
    try:
        eng = str(doc["engine"])
        mc = {str(k): float(v) for k, v in doc["mem_class"].items()}
        cc = {str(k): float(v) for k, v in doc["compute_class"].items()}
        src = str(doc.get("source", f"fitted to {len(doc['points'])} {eng} points"))

        def eff(h: str, d: Mapping[str, Any]) -> Efficiency:
            return Efficiency(h, eng, float(d["mem"]), float(d["compute"]),
                              float(d["kernel_us"]), mc, cc, source=src)

        f = Fit(eng, {h: eff(h, d) for h, d in doc["hardware"].items()},
                eff("mean", doc["mean"]), tuple(str(p["ident"]) for p in doc["points"]),
                float(doc["lambda"]))
        errs = [ErrorRecord(**{k: r[k] for k in ("ident", "hardware", "engine", "kind",
                                                  "family", "build", "log_error", "unit")})
                for r in doc["held_out"]]
    except (KeyError, TypeError, ValueError) as e:
        raise UsageError(f"efficiency fit record: {e}") from e
    return f, errs


def shipped_fits() -> dict[str, tuple[Fit, list[ErrorRecord]]]:
    """The fits shipped with servelab (``servelab/ops/data/efficiency.json``), by engine
    (empty when none is shipped)."""
    return dict(_shipped())


@functools.cache
def _shipped() -> tuple[tuple[str, tuple[Fit, list[ErrorRecord]]], ...]:
    f = resources.files("servelab.ops") / "data" / "efficiency.json"
    if not f.is_file():
        return ()
    try:
        doc = json.loads(f.read_text(encoding="utf-8"))
        fits = doc["fits"]
    except (json.JSONDecodeError, KeyError, TypeError) as e:
        raise UsageError(f"servelab/ops/data/efficiency.json: not an efficiency fit ({e})") \
            from e
    return tuple((str(d["engine"]), load_fit(d)) for d in fits)


@dataclass(frozen=True)
class RooflinePrediction:
    """One step on hardware without tables: the time, its interval (or why none)."""

    hardware: str
    engine: str
    kind: str
    ms: float
    interval: Interval
    step: StepTime
    kernels: int
    source: str


@dataclass(frozen=True)
class FittedSteps:
    """One build's engine steps on one hardware from the fitted rooflines: each operator's
    roofline over the hardware's efficiencies, run without CUDA graphs, plus the fit's time
    per kernel launch."""

    model: StepModel
    costs: RooflineCosts = field(repr=False, compare=False)
    kernels: int  # launches per step
    kernel_us: float  # the fit's time per launch
    source: str  # where the efficiencies came from

    @property
    def launch_ms(self) -> float:
        """A step's launches."""
        return self.kernels * self.kernel_us / 1e3

    def step(self, shape: StepShape) -> StepTime:
        """The operators of a step at ``shape``."""
        return step_time(self.model, self.costs, shape, EngineSteps(cuda_graph_max=0))

    def device_ms(self, groups: Sequence[SeqGroup]) -> float:
        """The operators' sum of a step serving ``groups`` (0 for none)."""
        return self.step(StepShape(tuple(groups))).device_ms if groups else 0.0


def fitted_steps(model: StepModel, profile: object, engine: str,
                 fitted: tuple[Fit, Sequence[ErrorRecord]] | None = None) -> FittedSteps:
    """``model``'s steps on ``profile`` under the shipped (or given) ``engine`` fit."""
    f, _ = _resolve(engine, fitted)
    eff = f.efficiency(getattr(profile, "name", str(profile)))
    return FittedSteps(model, RooflineCosts(profile, eff), kernel_count(model), eff.kernel_us,
                       eff.source)


def predict(model: StepModel, shape: StepShape, profile: object, engine: str,
            fitted: tuple[Fit, Sequence[ErrorRecord]] | None = None) -> RooflinePrediction:
    """``model``'s step at ``shape`` on ``profile`` for ``engine``: the operators' rooflines
    divided by the shipped (or given) fit's efficiencies, plus the per-launch time; the
    interval from the fit's held-out errors."""
    fit = _resolve(engine, fitted)
    steps = fitted_steps(model, profile, engine, fit)
    hw = getattr(profile, "name", str(profile))
    st = steps.step(shape)
    ms = st.device_ms + steps.launch_ms
    kind = "decode" if shape.decode_only else "prefill"
    return RooflinePrediction(hw, engine, kind, ms, interval(ms, fit[1], hw, engine, kind), st,
                              steps.kernels, steps.source)


def predict_prefill(model: StepModel, length: int, budget: int, profile: object, engine: str,
                    fitted: tuple[Fit, Sequence[ErrorRecord]] | None = None
                    ) -> RooflinePrediction:
    """A ``length``-token prompt's prefill as the engine runs it
    (:meth:`StepShape.chunked_prefill`), each step as :func:`predict` prices it, summed; the
    interval of the whole from the fit's held-out prefill errors (``step``: the last
    chunk's)."""
    if length < 1 or budget < 1:
        raise UsageError(f"a prefill needs a prompt and a step budget (got {length}, {budget})")
    fit = _resolve(engine, fitted)
    parts = [predict(model, shape, profile, engine, fit)
             for shape in StepShape.chunked_prefill(length, budget)]
    ms = sum(p.ms for p in parts)
    last = parts[-1]
    return dataclasses.replace(last, ms=ms, interval=interval(ms, fit[1], last.hardware, engine,
                                                             "prefill"))


def _resolve(engine: str, fitted: tuple[Fit, Sequence[ErrorRecord]] | None
             ) -> tuple[Fit, Sequence[ErrorRecord]]:
    if fitted is not None:
        return fitted
    fits = shipped_fits()
    if engine not in fits:
        raise UsageError(f"no fitted {engine} efficiencies shipped (fits: "
                         f"{', '.join(sorted(fits)) or 'none'})")
    return fits[engine]
