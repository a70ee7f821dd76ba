"""Fit how far an engine gets from the roofline, from measured runs.

A :class:`Measurement` is one measured speed plus what it cost per token: bytes for a
decode run (so achieved bandwidth = tok/s x bytes/token), FLOPs for a prefill run. The
efficiency of a run is achieved ÷ the hardware's ceiling (measured by a probe when the
profile has one, else published). Runs are grouped by (engine, version, backend path,
hardware, kind); each group yields an :class:`~servelab.plan.predict.Efficiency` with its
spread (min..max). The results store feeds a plain sequence of Measurements
(``servelab.pipeline.calibration.measurements_from_runs``); a JSON list of objects with the
same field names does too (:func:`load_measurements`).
"""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from servelab.errors import InputError
from servelab.hardware.profiles import HardwareProfile
from servelab.plan.predict import Efficiency

KINDS = ("decode", "prefill")


@dataclass(frozen=True)
class Measurement:
    """One measured run (decode: per-token bytes; prefill: per-token FLOPs)."""

    engine: str
    engine_version: str
    backend: str
    hardware: str
    kind: str
    length: int
    tok_s: float
    cost_per_token: float
    precision: str = "bf16"
    label: str = ""

    def key(self) -> tuple[str, str, str, str, str]:
        """The calibration group this run belongs to."""
        return (self.engine, self.engine_version, self.backend, self.hardware, self.kind)


def key_text(key: Sequence[str]) -> str:
    """``vllm 0.24.0 / TRITON Fp8 / dgx-spark / decode``."""
    engine, version, backend, hardware, kind = key
    return f"{engine} {version} / {backend} / {hardware} / {kind}"


def efficiency_of(m: Measurement, hardware: HardwareProfile) -> float:
    """Achieved ÷ ceiling for one run."""
    if m.kind == "decode":
        ceiling, _ = hardware.effective_bandwidth_ceiling()
    else:
        rate = hardware.compute_rate(m.precision)
        if rate is None:
            raise InputError(f"{hardware.name} has no {m.precision} compute figure to calibrate")
        ceiling = rate
    return m.tok_s * m.cost_per_token / ceiling


def fit_efficiencies(
    runs: Iterable[Measurement], hardware_for: Callable[[str], HardwareProfile]
) -> dict[tuple[str, str, str, str, str], Efficiency]:
    """Efficiency per (engine, version, backend, hardware, kind) with min..max spread."""
    groups: dict[tuple[str, str, str, str, str], list[float]] = defaultdict(list)
    for m in runs:
        groups[m.key()].append(efficiency_of(m, hardware_for(m.hardware)))
    return {
        k: Efficiency(
            key=key_text(k), n=len(v), median=statistics.median(v), low=min(v), high=max(v)
        )
        for k, v in groups.items()
    }


def lookup(
    fits: Mapping[tuple[str, str, str, str, str], Efficiency],
    *,
    engine: str,
    engine_version: str,
    backend: str,
    hardware: str,
    kind: str,
) -> Efficiency | None:
    """The best-matching fit: exact key, else same engine/backend/hardware any version,
    else same hardware and kind (pooled). ``matched`` says which."""
    exact = fits.get((engine, engine_version, backend, hardware, kind))
    if exact:
        return exact
    def same_version_free(k: tuple[str, str, str, str, str]) -> bool:
        return k[0] == engine and k[2] == backend and k[3:] == (hardware, kind)

    def same_backend_free(k: tuple[str, str, str, str, str]) -> bool:
        return k[0] == engine and k[3:] == (hardware, kind)

    for matched, pred in (("any version", same_version_free), ("any backend", same_backend_free)):
        cands = [e for k, e in fits.items() if pred(k)]
        if cands:
            n = sum(c.n for c in cands)
            med = statistics.median([c.median for c in cands])
            return Efficiency(
                key=f"{engine} * / {backend if matched == 'any version' else '*'} / "
                f"{hardware} / {kind}",
                n=n,
                median=med,
                low=min(c.low for c in cands),
                high=max(c.high for c in cands),
                matched=matched,
            )
    return None


_FIELDS = {f.name for f in fields(Measurement)}
_REQUIRED = {"engine", "engine_version", "backend", "hardware", "kind", "length", "tok_s",
             "cost_per_token"}


def measurement_from_dict(d: Mapping[str, Any], *, where: str) -> Measurement:
    """One Measurement from a JSON object; errors name ``where``."""
    missing = _REQUIRED - set(d)
    if missing:
        raise InputError(f"{where}: missing {', '.join(sorted(missing))}")
    unknown = set(d) - _FIELDS
    if unknown:
        raise InputError(f"{where}: unknown field(s) {', '.join(sorted(unknown))}")
    try:
        m = Measurement(
            engine=str(d["engine"]),
            engine_version=str(d["engine_version"]),
            backend=str(d["backend"]),
            hardware=str(d["hardware"]),
            kind=str(d["kind"]),
            length=int(d["length"]),
            tok_s=float(d["tok_s"]),
            cost_per_token=float(d["cost_per_token"]),
            precision=str(d.get("precision", "bf16")),
            label=str(d.get("label", "")),
        )
    except (TypeError, ValueError) as exc:
        raise InputError(f"{where}: {exc}") from exc
    if m.kind not in KINDS:
        raise InputError(f"{where}: kind must be decode or prefill, got {m.kind!r}")
    if m.tok_s <= 0 or m.cost_per_token <= 0 or m.length <= 0:
        raise InputError(f"{where}: tok_s, cost_per_token and length must be positive")
    return m


def load_measurements(path: str | Path) -> list[Measurement]:
    """Read a JSON list of measured runs (fields as :class:`Measurement`)."""
    p = Path(path)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise InputError("calibration file not found", path=p) from exc
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InputError(f"not valid JSON: {exc}", path=p) from exc
    if isinstance(data, Mapping):
        data = data.get("runs")
    if not isinstance(data, list) or not data:
        raise InputError("expected a non-empty JSON list of runs (or {\"runs\": [...]})", path=p)
    out = []
    for i, d in enumerate(data):
        if not isinstance(d, Mapping):
            raise InputError(f"{p}: run [{i}] is not an object")
        out.append(measurement_from_dict(d, where=f"{p}: run [{i}]"))
    return out

