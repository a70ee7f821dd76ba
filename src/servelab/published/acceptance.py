"""Speculative-decoding acceptance lengths from published measurements, as priors.

A plan can predict a drafting build's speed only at an acceptance length. Where no stored run
of the checkpoint measured one, the published measurements of the same model family, method
and draft length ``k`` (``acceptance.toml`` beside this module, each row with its source) are
the prior: :func:`acceptance_prior` returns their spread as an interval, the median as the
point, and every measurement it used; or :class:`NoPrior` saying what is published instead.
Nothing is interpolated between draft lengths or converted from rates at ``k > 1``.

Pure apart from reading the shipped table once (:func:`load_acceptance`).
"""

from __future__ import annotations

import statistics
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from servelab.errors import InputError

SCHEMA = "servelab.acceptance/1"

#: A config's ``model_type`` (top level or ``text_config``) -> the family whose MTP heads
#: share one design. Only families the table has measurements for.
FAMILIES: Mapping[str, str] = {
    "qwen3_5": "qwen3_5",
    "qwen3_5_moe": "qwen3_5",
    "qwen3_5_text": "qwen3_5",
    "qwen3_5_moe_text": "qwen3_5",
    "deepseek_v3": "deepseek_v3",
    "deepseek_v4": "deepseek_v4",
}


def family_of(model_type: str | None) -> str | None:
    """The acceptance family of a config's ``model_type``; None when the table has none."""
    return FAMILIES.get((model_type or "").strip().lower())


def normalize_method(method: str) -> str:
    """vLLM's method name as vLLM normalizes it: every ``*_mtp`` (``qwen3_next_mtp``,
    ``deepseek_mtp``) is ``mtp``."""
    m = method.strip().lower()
    return "mtp" if m.endswith("_mtp") else m


@dataclass(frozen=True)
class AcceptanceMeasurement:
    """One published mean acceptance length (a range where the source gives one)."""

    family: str
    model: str
    method: str
    k: int
    low: float
    high: float
    engine: str
    hardware: str
    workload: str
    date: str | None
    url: str
    quote: str
    note: str = ""

    @property
    def mid(self) -> float:
        """The middle of the published range (the value when it is one number)."""
        return (self.low + self.high) / 2

    @property
    def label(self) -> str:
        """``3.39 (Qwen/Qwen3.5-397B-A17B (NVFP4), vllm on B300, 2026-06-26)``."""
        value = f"{self.low:.2f}" if self.low == self.high else f"{self.low:.2f}-{self.high:.2f}"
        when = f", {self.date}" if self.date else ""
        return f"{value} ({self.model}, {self.engine} on {self.hardware}{when})"


@dataclass(frozen=True)
class AcceptancePrior:
    """The acceptance length a plan may predict at, from published measurements."""

    family: str
    method: str
    k: int
    value: float
    low: float
    high: float
    basis: str  # "model" (this model's own rows) or "family"
    measurements: tuple[AcceptanceMeasurement, ...]

    @property
    def line(self) -> str:
        """One line for a terminal: the prior, its interval and its sources."""
        n = len(self.measurements)
        what = f"{self.family} {self.method} k={self.k}"
        return (f"acceptance length {self.value:.2f} ({self.low:.2f}-{self.high:.2f}) for "
                f"{what}: published prior from {n} measurement{'s' if n != 1 else ''} "
                f"({'this model' if self.basis == 'model' else 'the model family'}): "
                + "; ".join(m.label for m in self.measurements))

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {
            "family": self.family, "method": self.method, "k": self.k, "value": self.value,
            "low": self.low, "high": self.high, "basis": self.basis, "published": True,
            "measurements": [{"model": m.model, "low": m.low, "high": m.high,
                              "engine": m.engine, "hardware": m.hardware,
                              "workload": m.workload, "date": m.date, "url": m.url}
                             for m in self.measurements],
        }


@dataclass(frozen=True)
class NoPrior:
    """No published measurement for this family, method and ``k``, and what there is."""

    family: str | None
    method: str
    k: int
    reason: str

    @property
    def line(self) -> str:
        """One line for a terminal."""
        return f"no published acceptance prior: {self.reason}"


def _length(value: Any, where: str) -> tuple[float, float]:
    if isinstance(value, list) and len(value) == 2:
        lo, hi = value
    else:
        lo = hi = value
    for v in (lo, hi):
        if isinstance(v, bool) or not isinstance(v, int | float) or v < 1:
            raise InputError(f"{where}: an acceptance length is a number >= 1 or [low, high], "
                             f"not {value!r}")
    if lo > hi:
        raise InputError(f"{where}: low {lo} is above high {hi}")
    return float(lo), float(hi)


def parse_acceptance(doc: Mapping[str, Any], source: str) -> tuple[AcceptanceMeasurement, ...]:
    """The measurements of an acceptance document (``acceptance.toml``'s schema); InputError
    naming ``source`` and the curve on anything malformed."""
    if doc.get("schema") != SCHEMA:
        raise InputError(f"expected schema {SCHEMA!r}, not {doc.get('schema')!r}", path=source)
    curves = doc.get("curve")
    if not isinstance(curves, list) or not curves:
        raise InputError("no [[curve]] tables", path=source)
    out: list[AcceptanceMeasurement] = []
    for i, c in enumerate(curves):
        where = f"{source}: curve {i + 1}"
        if not isinstance(c, Mapping):
            raise InputError(f"{where} must be a table")
        missing = [k for k in ("family", "model", "method", "engine", "hardware", "workload",
                               "url", "quote", "lengths") if not c.get(k)]
        if missing:
            raise InputError(f"{where} lacks {', '.join(missing)}")
        lengths = c["lengths"]
        if not isinstance(lengths, Mapping):
            raise InputError(f"{where}.lengths must map draft lengths to acceptance lengths")
        for key, value in lengths.items():
            try:
                k = int(key)
            except ValueError:
                raise InputError(f"{where}.lengths: draft length {key!r} is not a number") from None
            lo, hi = _length(value, f"{where}.lengths.{key}")
            if hi > k + 1:
                raise InputError(f"{where}.lengths.{key}: {hi} exceeds k + 1 = {k + 1}")
            out.append(AcceptanceMeasurement(
                str(c["family"]), str(c["model"]), normalize_method(str(c["method"])), k, lo,
                hi, str(c["engine"]), str(c["hardware"]), str(c["workload"]),
                str(c["date"]) if c.get("date") else None, str(c["url"]), str(c["quote"]),
                str(c.get("note", ""))))
    return tuple(out)


@cache
def load_acceptance() -> tuple[AcceptanceMeasurement, ...]:
    """The shipped table (``acceptance.toml`` beside this module)."""
    text = resources.files("servelab.published").joinpath("acceptance.toml").read_text(
        encoding="utf-8")
    return parse_acceptance(tomllib.loads(text), "servelab/published/acceptance.toml")


def acceptance_prior(
    family: str | None,
    method: str,
    k: int,
    *,
    model: str | None = None,
    table: Sequence[AcceptanceMeasurement] | None = None,
) -> AcceptancePrior | NoPrior:
    """The published prior for ``family``, ``method`` and draft length ``k``: this ``model``'s
    own measurements when the table has them, else the family's; the point is their median
    middle, the interval spans every measurement (a range's ends included)."""
    meth = normalize_method(method)
    rows = tuple(table if table is not None else load_acceptance())
    if family is None:
        return NoPrior(None, meth, k, "the model family has no published acceptance lengths")
    same = [m for m in rows if m.family == family and m.method == meth]
    if not same:
        return NoPrior(family, meth, k, f"nothing published for {family} {meth}")
    at_k = [m for m in same if m.k == k]
    if not at_k:
        ks = ", ".join(str(x) for x in sorted({m.k for m in same}))
        return NoPrior(family, meth, k,
                       f"{family} {meth}: published at k = {ks}, not k = {k} (not interpolated)")
    own = [m for m in at_k if model and m.model.lower().startswith(model.lower())]
    use, basis = (own, "model") if own else (at_k, "family")
    return AcceptancePrior(family, meth, k, round(statistics.median(m.mid for m in use), 3),
                           min(m.low for m in use), max(m.high for m in use), basis,
                           tuple(use))
