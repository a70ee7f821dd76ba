"""The shipped priors: a small, versioned table of published measurements with their sources.

``priors.toml`` beside this module holds one row per measured single-stream point and the
costs servelab computes for it (bytes read, FLOPs, layers). :func:`load_priors` turns the rows
into :class:`~servelab.predict.form.Sample` values; the speed model fits them when the
results store has no run on the hardware being planned, and labels every such prediction
"prior from <source>". A user file of the same shape can replace the table (``--priors``).
"""

from __future__ import annotations

import functools
import tomllib
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from servelab.errors import InputError, UsageError
from servelab.families import FAMILIES
from servelab.predict.form import KINDS, Sample
from servelab.predict.keys import BuildKey

SCHEMA = "servelab.priors/1"
_REQUIRED = {
    "model": str,
    "engine": str,
    "engine_version": str,
    "kernel_path": str,
    "hardware": str,
    "kind": str,
    "length": int,
    "layers": int,
    "bytes_read": int | float,
    "flops": int | float,
    "tok_s": int | float,
    "source": str,
}
_OPTIONAL = {
    "note": str,
    "family": str,
    "compute": str,
    "expert_slots": int,
    "platform": str,
    "linear_layers": int,
    "expert_flops": int | float,
    # a speculative step (tok_s: verification steps per second, the measured decode tok/s
    # over the measured mean acceptance length; bytes, layers, expert slots: the whole
    # step's): its draft method and how many draft passes it ran
    "spec_method": str,
    "draft_passes": int,
}
# true/false keys: a prefill longer than the engine's largest CUDA graph; a profiled device
# time per decode step (tok_s = 1 / that time), not a measured token rate
_FLAGS = {"eager", "device_only"}


SHIPPED_ORIGIN = "servelab/predict/priors.toml"

#: How an engine is named in a message.
ENGINE_LABELS = {"vllm": "vLLM", "llamacpp": "llama.cpp"}


def engine_label(engine: str) -> str:
    """``llamacpp`` -> ``llama.cpp`` (an engine servelab has no label for: its name)."""
    return ENGINE_LABELS.get(engine, engine)


@dataclass(frozen=True)
class PriorTable:
    """The table's version and its rows as samples."""

    version: str
    samples: tuple[Sample, ...]
    origin: str

    def hardware(self) -> tuple[str, ...]:
        """Hardware names that have at least one prior."""
        return tuple(sorted({s.hardware for s in self.samples}))

    def label(self) -> str:
        """Which table a prediction used, for its notes: the shipped one, or a user's file
        by its name (a note can reach a page: no local directories)."""
        if self.origin == SHIPPED_ORIGIN:
            return f"shipped priors table {self.version} ({self.origin})"
        return f"priors table {self.version} (file {Path(self.origin).name}, not the shipped one)"

    def lacks(self, kind: str, engine: str, hardware: str) -> str:
        """What this table lacks for a ``kind`` fit of ``engine`` on ``hardware``, naming the
        table (the shipped one, or a user's file by its name) and what it does hold there: the
        engine's other kind, or other engines' rows (so a line never blames the hardware for
        the engine's gap), e.g. "shipped llama.cpp decode prior for rtx-5090 (the shipped
        llama.cpp priors for rtx-5090 are prefill only)"."""
        label = engine_label(engine)
        shipped = self.origin == SHIPPED_ORIGIN
        prior = (f"shipped {label} {kind} prior for {hardware}" if shipped
                 else f"{label} {kind} prior in {Path(self.origin).name} for {hardware}")
        here = [s for s in self.samples if s.hardware == hardware]
        kinds = sorted({s.kind for s in here if s.engine == engine and s.kind != kind})
        others = sorted({engine_label(s.engine) for s in here if s.engine != engine})
        held = (f"{label} priors" if kinds else "priors") + (
            "" if shipped else f" in {Path(self.origin).name}")
        what = ", ".join(kinds or others)
        if not what:
            return prior
        return f"{prior} (the {'shipped ' if shipped else ''}{held} for {hardware} are " \
               f"{what} only)"


def _sample(row: Any, where: str) -> Sample:
    if not isinstance(row, dict):
        raise InputError(f"{where}: not a table")
    unknown = set(row) - set(_REQUIRED) - set(_OPTIONAL) - _FLAGS
    if unknown:
        raise InputError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}")
    for key in _REQUIRED:
        if key not in row:
            raise InputError(f"{where}: missing {key}")
    for key, typ in {**_REQUIRED, **_OPTIONAL}.items():
        value = row.get(key)
        if key in row and (isinstance(value, bool) or not isinstance(value, typ)):
            raise InputError(f"{where}: {key} has the wrong type ({type(value).__name__})")
    for key in _FLAGS & set(row):
        if not isinstance(row[key], bool):
            raise InputError(f"{where}: {key} must be true or false")
    if row["kind"] not in KINDS:
        raise InputError(f"{where}: kind must be decode or prefill")
    if row["tok_s"] <= 0:
        raise InputError(f"{where}: tok_s must be positive")
    known = {f.name for f in FAMILIES}
    if row.get("family", "") and row["family"] not in known:
        raise InputError(f"{where}: family {row['family']!r} is not one servelab reads "
                         f"({', '.join(sorted(known))})")
    length = int(row["length"])
    tokens = 1 if row["kind"] == "decode" else length
    try:
        return Sample(
            build=BuildKey(row["model"], family=row.get("family", ""),
                           step=row.get("spec_method", "")),
            engine=row["engine"],
            kernel_path=row["kernel_path"],
            hardware=row["hardware"],
            kind=row["kind"],
            length=length,
            layers=int(row["layers"]),
            bytes_read=float(row["bytes_read"]),
            flops=float(row["flops"]),
            seconds=tokens / float(row["tok_s"]),
            source=row["source"],
            compute=row.get("compute", "bf16"),
            expert_slots=int(row.get("expert_slots", 0)),
            platform=row.get("platform", "cuda"),
            eager=bool(row.get("eager", False)),
            linear_layers=int(row.get("linear_layers", 0)),
            device_only=bool(row.get("device_only", False)),
            expert_flops=float(row.get("expert_flops", 0.0)),
            spec_method=row.get("spec_method", ""),
            draft_passes=int(row.get("draft_passes", 0)),
        )
    except UsageError as exc:
        raise InputError(f"{where}: {exc}") from exc


def parse_priors(text: str, origin: str) -> PriorTable:
    """A :class:`PriorTable` from TOML text; errors name ``origin``."""
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"{origin}: not valid TOML: {exc}") from exc
    if doc.get("schema") != SCHEMA:
        raise InputError(f"{origin}: schema must be {SCHEMA!r}")
    version = doc.get("version")
    if not isinstance(version, str) or not version:
        raise InputError(f"{origin}: missing version")
    rows = doc.get("sample")
    if not isinstance(rows, list) or not rows:
        raise InputError(f"{origin}: no [[sample]] rows")
    samples = tuple(_sample(r, f"{origin}: sample [{i}]") for i, r in enumerate(rows))
    return PriorTable(version, samples, origin)


@functools.cache
def shipped_priors() -> PriorTable:
    """The table shipped with servelab."""
    text = resources.files("servelab.predict").joinpath("priors.toml").read_text(encoding="utf-8")
    return parse_priors(text, SHIPPED_ORIGIN)


def load_priors(path: str | Path | None = None) -> PriorTable:
    """The shipped table, or the user's file at ``path``."""
    if path is None:
        return shipped_priors()
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise InputError("priors file not found", path=p) from exc
    except UnicodeDecodeError as exc:
        raise InputError(f"not UTF-8 text: {exc}", path=p) from exc
    return parse_priors(text, str(p))
