"""The operator model as a prediction source: the stored runs that calibrate it and the
interval from leaving each family out (issue 39 items 3 and 5).

A hardware with shipped operator tables (:data:`TABLES`: the H200's, measured under vLLM
0.26.0) predicts a vLLM build's steps from them (:mod:`servelab.ops.step`), corrected by
what the stored runs of that hardware fit (:mod:`servelab.ops.calibrate`): the shipped
priors' single-stream points of the builds whose configs ship beside the tables
(``runs.json``: benchmarks/ops/export_runs.py) and the host floors of the stored probe runs.
:func:`calibration` fits the corrections on every family (what a plan uses) and predicts
each stored point with its own family left out (what the interval is).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from servelab.ops.calibrate import (
    Choice,
    Corrections,
    Floor,
    HeldOut,
    Observed,
    choose,
    fit,
    held_out,
    price,
)
from servelab.ops.costs import Costs
from servelab.ops.model import StepModel, step_model
from servelab.ops.tables import shipped
from servelab.predict.priors import PriorTable, engine_label, load_priors
from servelab.synth.replica import TEXT_LINEARS, QuantLayout

#: The H200's table set (vLLM 0.26.0).
KEY_H200 = "h200-vllm-0.26.0"
#: Hardware (profile name) -> the shipped operator table set its vLLM steps are read from.
TABLES: Mapping[str, str] = {"h200": KEY_H200}
#: The engine and version the tables were measured under.
TABLE_ENGINE = {"h200-vllm-0.26.0": ("vllm", "0.26.0")}


@dataclass(frozen=True)
class OpsCalibration:
    """The corrections a plan uses and the held-out evidence behind its interval."""

    key: str
    tables_label: str
    corrections: Corrections
    decode: Choice
    prefill: Choice
    held: tuple[HeldOut, ...]

    def choice(self, kind: str) -> Choice:
        return self.decode if kind == "decode" else self.prefill


def runs_doc(key: str) -> Mapping[str, Any]:
    """The shipped ``runs.json`` of table set ``key``."""
    f = resources.files("servelab.ops") / "data" / key / "runs.json"
    doc: Mapping[str, Any] = json.loads(f.read_text(encoding="utf-8"))
    return doc


def layout_of(name: str) -> QuantLayout | None:
    """A stored build's storage layout (``runs.json``'s ``layout``)."""
    return QuantLayout("fp8-block", TEXT_LINEARS) if name == "fp8-block" else None


def observed(priors: PriorTable, doc: Mapping[str, Any], hardware: str,
             engine_version: str) -> tuple[Observed, ...]:
    """The priors' single-stream vLLM points on ``hardware`` whose builds ``doc`` rebuilds
    as operator models (speculative rows excluded)."""
    models: dict[str, StepModel] = {}
    out = []
    for s in priors.samples:
        if (s.hardware != hardware or s.engine != "vllm" or s.spec_method or
                str(s.build) not in doc["builds"]):
            continue
        name = str(s.build)
        if name not in models:
            b = doc["builds"][name]
            models[name] = step_model(b["config"], layout_of(b["layout"]), name=name)
        family = str(getattr(s.build, "family", "") or models[name].family)
        out.append(Observed(name, family, s.kind, s.length, s.seconds * 1e3, models[name],
                            s.device_only))
    del engine_version  # the priors rows of the tables' hardware are the tables' version
    return tuple(out)


def floors_of(doc: Mapping[str, Any]) -> tuple[Floor, ...]:
    return tuple(Floor(str(f["family"]), float(f["ms"])) for f in doc.get("floors", ()))


def calibrate(points: Sequence[Observed], costs: Costs, floors: Sequence[Floor], key: str,
              *, isolation: tuple[float, float] | None = None) -> OpsCalibration:
    """Corrections on every family and the held-out choice per kind (pure)."""
    priced = [price(p, costs) for p in points]
    held = held_out(priced, floors, isolation=isolation)
    return OpsCalibration(key, costs.label, fit(priced, floors, isolation=isolation),
                          choose(held, "decode"), choose(held, "prefill"), held)


def refit(key: str) -> OpsCalibration:
    """Fit table set ``key``'s calibration from its shipped runs (tens of seconds: the
    shipped ``calibration.json`` is its result, :func:`shipped_calibration`)."""
    hw = next(h for h, k in TABLES.items() if k == key)
    doc = runs_doc(key)
    costs = costs_for(key)
    pts = observed(load_priors(), doc, hw, TABLE_ENGINE[key][1])
    return calibrate(pts, costs, floors_of(doc), key)


@functools.lru_cache(maxsize=4)
def costs_for(key: str) -> Costs:
    return Costs([shipped()[key]])


@dataclass(frozen=True)
class ShippedCalibration:
    """What a plan reads: the corrections fitted on every family and, per kind, the stage
    kept and its held-out interval (``calibration.json``, written by
    benchmarks/ops/export_runs.py from :func:`refit`)."""

    key: str
    corrections: Corrections
    decode: Choice
    prefill: Choice

    def choice(self, kind: str) -> Choice:
        return self.decode if kind == "decode" else self.prefill


def calibration_doc(cal: OpsCalibration) -> dict[str, Any]:
    """JSON form of a fitted calibration (with each held-out point)."""
    c = cal.corrections
    return {
        "schema": "servelab.ops.calibration/1",
        "tables": cal.key,
        "corrections": {"isolation_frac": c.isolation_frac,
                        "isolation_cap_ms": c.isolation_cap_ms, "decode_ms": c.decode_ms,
                        "prefill_ms": c.prefill_ms, "floor_ms": c.floor_ms,
                        "families": list(c.families)},
        **{ch.kind: {"stage": ch.stage, "medians": dict(ch.medians),
                     "log_width": ch.log_width, "points": ch.points,
                     "families": ch.families} for ch in (cal.decode, cal.prefill)},
        "held_out": [{"build": h.point.build, "family": h.point.family,
                      "kind": h.point.kind, "length": h.point.length,
                      "device_only": h.point.device_only, "measured_ms": h.point.measured_ms,
                      "operators_ms": h.operators_ms, "isolation_ms": h.isolation_ms,
                      "corrected_ms": h.corrected_ms} for h in cal.held],
    }


def _choice(kind: str, d: Mapping[str, Any]) -> Choice:
    return Choice(kind, str(d["stage"]), tuple((str(k), float(v))
                                               for k, v in d["medians"].items()),
                  float(d["log_width"]), int(d["points"]), int(d["families"]))


@functools.lru_cache(maxsize=4)
def shipped_calibration(key: str) -> ShippedCalibration:
    """Table set ``key``'s shipped ``calibration.json``."""
    f = resources.files("servelab.ops") / "data" / key / "calibration.json"
    d = json.loads(f.read_text(encoding="utf-8"))
    c = d["corrections"]
    corr = Corrections("", float(c["isolation_frac"]), float(c["isolation_cap_ms"]),
                       float(c["decode_ms"]), float(c["prefill_ms"]), float(c["floor_ms"]),
                       tuple(c["families"]))
    return ShippedCalibration(key, corr, _choice("decode", d["decode"]),
                              _choice("prefill", d["prefill"]))


@dataclass(frozen=True)
class OpsTables:
    """Where a plan's operator-model steps come from, whichever the tables: the costs, the
    corrections on top of them, per kind the stage kept and its interval, and the words a
    plan prints (``source``: the prediction's source; ``basis``: the interval's; ``short``:
    the one-line basis of the plan's answer)."""

    hardware: str
    label: str  # the tables in a refusal note ("H200 kernel tables")
    costs: Costs = field(repr=False, compare=False)
    corrections: Corrections
    decode: Choice
    prefill: Choice
    source: Mapping[str, str]
    basis: Mapping[str, str]
    short: str
    #: The prefill overhead per engine step of a prompt (True: as the stored runs' held-out
    #: fit prices it) or once per prompt (as the step a prompt starts pays under load).
    prefill_per_step: bool = True
    #: The interval was measured on other hardware and carried here as is (so a fitted
    #: prediction from runs on this hardware with a narrower interval is kept instead).
    carried: bool = False

    def choice(self, kind: str) -> Choice:
        return self.decode if kind == "decode" else self.prefill


def _h200_source(cal: ShippedCalibration, hw: str, kind: str) -> str:
    engine, version = TABLE_ENGINE[cal.key]
    corr = ("" if cal.choice(kind).stage == "operators" else
            f"; corrected on stored {hw} runs of {len(cal.corrections.families)} families")
    return (f"operator model: {hw} kernel tables measured under {engine_label(engine)} "
            f"{version}{corr}")


def held_out_basis(ch: Choice) -> str:
    """A held-out interval's basis in words."""
    return (f"from leaving each family out: 90th percentile of the |log error| of "
            f"{ch.points} stored points, {ch.families} families")


def shipped_tables(hardware: str) -> OpsTables | None:
    """``hardware``'s own shipped operator tables and calibration (:data:`TABLES`), or None."""
    key = TABLES.get(hardware)
    if key is None:
        return None
    cal = shipped_calibration(key)
    hw = hardware.upper()
    return OpsTables(
        hardware, f"{hw} kernel tables", costs_for(key), cal.corrections, cal.decode,
        cal.prefill, {k: _h200_source(cal, hw, k) for k in ("decode", "prefill")},
        {k: held_out_basis(cal.choice(k)) for k in ("decode", "prefill")},
        f"{hardware} kernel timings, checked on {len(cal.corrections.families)} families' "
        "runs (each left out)")
