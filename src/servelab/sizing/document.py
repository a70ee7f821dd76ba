"""A stored plan (``servelab.plan/1``, :meth:`servelab.plan.build.Plan.to_dict`), typed.

Runs keep their plan as JSON (``RunRecord.prediction``). Everything that reads it — the run
summary, the site, calibration — goes through :func:`read_plan` instead of indexing the
dictionary by hand. The reader is tolerant (a missing or malformed part reads as ``None``
or an empty tuple) because stored documents come from older servelab versions too, and it
accepts the speed prediction nested under ``"speed"`` or at the top level.

Each predicted point keeps the point as stored (:attr:`PredictedSpeed.raw`), so a field the
prediction model adds later (an interval, a source) is readable before this module names it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from servelab.errors import InputError

__all__ = ["PlanDocument", "PredictedSpeed", "SpeedKind", "load_plan", "read_plan"]

SpeedKind = Literal["decode", "prefill"]
_LENGTH_KEY: dict[SpeedKind, str] = {"decode": "context_len", "prefill": "prompt_len"}


def _num(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _map(value: Any) -> Mapping[str, Any] | None:
    return value if isinstance(value, Mapping) else None


@dataclass(frozen=True)
class PredictedSpeed:
    """One predicted decode (at a context length) or prefill (of a prompt length) point.

    ``roofline_tok_s`` is a bound; ``predicted_tok_s`` with ``predicted_low`` /
    ``predicted_high`` is the calibrated prediction and its interval (``None`` when no fit
    applied). Documents older than the interval model stored ``calibrated_tok_s`` instead;
    it reads as ``predicted_tok_s`` without an interval.
    """

    kind: SpeedKind
    tokens: int  # context length (decode) or prompt length (prefill)
    roofline_tok_s: float | None
    predicted_tok_s: float | None = None
    predicted_low: float | None = None
    predicted_high: float | None = None
    bytes_per_token: float | None = None  # decode: bytes read per generated token
    bound: str | None = None  # prefill: "compute" or "bandwidth"
    raw: Mapping[str, Any] = field(default_factory=dict)

    @property
    def interval(self) -> tuple[float, float, float] | None:
        """``(predicted, low, high)`` when all three are positive, else ``None``."""
        nums = (self.predicted_tok_s, self.predicted_low, self.predicted_high)
        if any(v is None or v <= 0 for v in nums):
            return None
        value, low, high = nums
        assert value is not None and low is not None and high is not None
        return value, low, high


@dataclass(frozen=True)
class PlanDocument:
    """The parts of a stored plan that readers use; ``raw`` is the whole document."""

    decode: tuple[PredictedSpeed, ...] = ()
    prefill: tuple[PredictedSpeed, ...] = ()
    bandwidth: float | None = None  # bytes/s the roofline used
    bandwidth_source: str | None = None
    compute_source: str | None = None
    decode_fit: Mapping[str, Any] | None = None  # the calibration fit used (label, ...)
    prefill_fit: Mapping[str, Any] | None = None
    kv_tokens: int | None = None
    kv_max_concurrency: float | None = None
    kv_engine_version: str | None = None
    kv_rule: str | None = None
    kv_engine: str | None = None  # whose KV arithmetic: "vllm" or "llamacpp" (None: no pool)
    kv_bytes: int | None = None  # llama.cpp: the cache's bytes (K and V of every layer)
    engine_name: str | None = None  # the engine planned for ("vllm", "llamacpp")
    weights_resident_bytes: int | None = None
    weights_source: str | None = None
    raw: Mapping[str, Any] = field(default_factory=dict)

    @property
    def kv_arithmetic(self) -> str | None:
        """Whose KV arithmetic the plan followed, for labels: ``vLLM`` or ``llama.cpp``."""
        if self.kv_engine is None:
            return None
        return "llama.cpp" if self.kv_engine == "llamacpp" else "vLLM"

    def speeds(self, kind: SpeedKind) -> tuple[PredictedSpeed, ...]:
        """The decode or prefill points."""
        return self.decode if kind == "decode" else self.prefill

    def speed_at(self, kind: SpeedKind, tokens: int) -> PredictedSpeed | None:
        """The point predicted for exactly ``tokens``, if any."""
        return next((p for p in self.speeds(kind) if p.tokens == tokens), None)

    def fit(self, kind: SpeedKind) -> Mapping[str, Any] | None:
        """The calibration fit document used for ``kind`` (its ``label`` names it), if any."""
        return self.decode_fit if kind == "decode" else self.prefill_fit


def _points(speed: Mapping[str, Any], kind: SpeedKind) -> tuple[PredictedSpeed, ...]:
    points = speed.get(kind)
    if not isinstance(points, Sequence) or isinstance(points, str):
        return ()
    out: list[PredictedSpeed] = []
    for p in points:
        if not isinstance(p, Mapping) or (tokens := _int(p.get(_LENGTH_KEY[kind]))) is None:
            continue
        predicted = _num(p.get("predicted_tok_s"))
        out.append(PredictedSpeed(
            kind=kind, tokens=tokens, roofline_tok_s=_num(p.get("roofline_tok_s")),
            predicted_tok_s=predicted if predicted is not None else _num(
                p.get("calibrated_tok_s")),
            predicted_low=_num(p.get("predicted_low")),
            predicted_high=_num(p.get("predicted_high")),
            bytes_per_token=_num(p.get("bytes_per_token")), bound=_str(p.get("bound")), raw=p,
        ))
    return tuple(out)


def read_plan(doc: Mapping[str, Any] | None) -> PlanDocument:
    """Read a stored plan (or a bare speed prediction); ``PlanDocument()`` for ``None``."""
    if not isinstance(doc, Mapping):
        return PlanDocument()
    speed = _map(doc.get("speed")) or doc
    kv = _map(doc.get("kv_pool")) or {}
    weights = _map(doc.get("weights")) or {}
    engine = _map(doc.get("engine")) or {}
    kv_doc = _map(doc.get("kv_pool"))
    return PlanDocument(
        decode=_points(speed, "decode"),
        prefill=_points(speed, "prefill"),
        bandwidth=_num(speed.get("bandwidth")),
        bandwidth_source=_str(speed.get("bandwidth_source")),
        compute_source=_str(speed.get("compute_source")),
        decode_fit=_map(speed.get("decode_fit")),
        prefill_fit=_map(speed.get("prefill_fit")),
        kv_tokens=_int(kv.get("tokens")),
        kv_max_concurrency=_num(kv.get("max_concurrency")),
        kv_engine_version=_str(kv.get("engine_version")),
        kv_rule=_str(kv.get("rule")),
        kv_engine=None if kv_doc is None else _str(kv_doc.get("engine")) or "vllm",
        kv_bytes=_int(kv.get("bytes")),
        engine_name=_str(engine.get("name")),
        weights_resident_bytes=_int(weights.get("resident_bytes")),
        weights_source=_str(weights.get("source")),
        raw=doc,
    )


PLAN_SCHEMA = "servelab.plan/1"


def load_plan(path: Path) -> PlanDocument:
    """Read a plan file (``servelab plan --json`` saved): an InputError naming the file and
    the problem when it is not JSON, not a ``servelab.plan/1`` document, or a part a reader
    needs has the wrong shape."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise InputError("no such file", path=path) from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read: {exc}", path=path) from exc
    except json.JSONDecodeError as exc:
        raise InputError(f"not JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})",
                         path=path) from exc
    if not isinstance(doc, Mapping) or doc.get("schema") != PLAN_SCHEMA:
        got = doc.get("schema") if isinstance(doc, Mapping) else type(doc).__name__
        raise InputError(f"not a {PLAN_SCHEMA} document (schema {got!r})", path=path)
    for part in ("kv_pool", "weights", "speed", "engine", "hardware"):
        if part in doc and doc[part] is not None and not isinstance(doc[part], Mapping):
            raise InputError(f"'{part}' is not an object", path=path)
    speed = doc.get("speed") or {}
    for kind in ("decode", "prefill"):
        if not isinstance(speed.get(kind, []), list):
            raise InputError(f"'speed.{kind}' is not a list", path=path)
    return read_plan(doc)
