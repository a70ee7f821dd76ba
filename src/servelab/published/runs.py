"""Published runs: what someone measured for a build on a machine, each row with its source.

The shipped table is ``runs.toml`` beside this module (the seed recipe page's rows,
llama.cpp's own DGX Spark benchmarks, ...); a team's own rows come in through
``servelab runs import`` in the same schema (:data:`SCHEMA`). :func:`published_for` is the
matcher "published figures for this build on this hardware". A published figure is shown
beside a prediction, labelled ("published: 106.5 tok/s decode, MTP k=3 (source, date)"),
and never fitted.

Pure apart from reading the shipped table once (:func:`load_published`).
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import date
from functools import cache
from importlib import resources
from typing import Any

from servelab.errors import InputError

SCHEMA = "servelab.published/1"
#: metric -> unit
METRICS: Mapping[str, str] = {
    "decode_tok_s": "tok/s",
    "prefill_tok_s": "tok/s",
    "kv_pool_tokens": "tokens",
    "weights_gib": "GiB",
}
_KEYS = {
    "build", "hardware", "gpus", "engine", "engine_version", "flags", "spec", "metric",
    "value", "prompt_tokens", "output_tokens", "concurrency", "context", "date", "source",
    "url", "document", "quote", "note",
}
_REQUIRED = ("build", "hardware", "engine", "metric", "value", "date", "source", "quote")


@dataclass(frozen=True)
class PublishedRun:
    """One published figure for one build on one machine."""

    build: str
    hardware: str
    engine: str
    metric: str
    value: float
    date: str
    source: str
    quote: str
    url: str | None = None
    document: str | None = None
    gpus: int = 1
    engine_version: str | None = None
    flags: tuple[str, ...] = ()
    spec: str | None = None
    prompt_tokens: int | None = None
    output_tokens: int | None = None
    concurrency: int | None = None
    context: int | None = None
    note: str = ""

    @property
    def unit(self) -> str:
        """``tok/s``, ``tokens`` or ``GiB``."""
        return METRICS[self.metric]

    @property
    def where(self) -> str:
        """Where to check it: the URL, else the named document."""
        return self.url or self.document or ""

    @property
    def line(self) -> str:
        """``published: 106.5 tok/s decode, MTP k=3, vllm 0.24.0 (source, 2026-07-28)``."""
        what = self.metric.replace("_tok_s", "").replace("_", " ")
        value = f"{self.value:,.2f}".rstrip("0").rstrip(".") if self.value % 1 else \
            f"{self.value:,.0f}"
        parts = [f"published: {value} {self.unit} {what}"]
        if self.spec:
            parts.append(self.spec.upper().replace(" K=", " k="))
        if self.prompt_tokens is not None:
            parts.append(f"{self.prompt_tokens:,}-token prompt")
        if self.context is not None:
            parts.append(f"at a {self.context:,}-token context")
        engine = f"{self.engine} {self.engine_version}" if self.engine_version else self.engine
        parts.append(engine)
        return f"{', '.join(parts)} ({self.source}, {self.date})"

    def to_dict(self) -> dict[str, Any]:
        """The row in the import schema (what :func:`parse_published` reads back)."""
        d: dict[str, Any] = {
            "build": self.build, "hardware": self.hardware, "engine": self.engine,
            "metric": self.metric, "value": self.value, "date": self.date,
            "source": self.source, "quote": self.quote,
        }
        for key in ("url", "document", "engine_version", "spec", "prompt_tokens",
                    "output_tokens", "concurrency", "context"):
            if getattr(self, key) is not None:
                d[key] = getattr(self, key)
        if self.gpus != 1:
            d["gpus"] = self.gpus
        if self.flags:
            d["flags"] = list(self.flags)
        if self.note:
            d["note"] = self.note
        return d


def _opt_int(row: Mapping[str, Any], key: str, where: str) -> int | None:
    v = row.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise InputError(f"{where}.{key} must be a whole number >= 0, not {v!r}")
    return v


def parse_row(row: Any, where: str) -> PublishedRun:
    """One published row; InputError naming ``where`` and the problem."""
    if not isinstance(row, Mapping):
        raise InputError(f"{where} must be a table/object")
    unknown = set(row) - _KEYS
    if unknown:
        raise InputError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}")
    missing = [k for k in _REQUIRED if row.get(k) in (None, "")]
    if missing:
        raise InputError(f"{where} lacks {', '.join(missing)}")
    if not (row.get("url") or row.get("document")):
        raise InputError(f"{where} needs url or document: where the figure can be checked")
    metric = str(row["metric"])
    if metric not in METRICS:
        raise InputError(f"{where}.metric {metric!r} is not one of {', '.join(METRICS)}")
    value = row["value"]
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise InputError(f"{where}.value must be a positive number, not {value!r}")
    when = row["date"]
    try:
        day = when if isinstance(when, date) else date.fromisoformat(str(when))
    except ValueError:
        raise InputError(f"{where}.date {when!r} is not YYYY-MM-DD") from None
    flags = row.get("flags") or []
    if not isinstance(flags, list) or not all(isinstance(f, str) for f in flags):
        raise InputError(f"{where}.flags must be a list of strings")
    gpus = _opt_int(row, "gpus", where)
    return PublishedRun(
        build=str(row["build"]), hardware=str(row["hardware"]), engine=str(row["engine"]),
        metric=metric, value=float(value), date=day.isoformat(), source=str(row["source"]),
        quote=str(row["quote"]), url=str(row["url"]) if row.get("url") else None,
        document=str(row["document"]) if row.get("document") else None,
        gpus=gpus if gpus else 1,
        engine_version=str(row["engine_version"]) if row.get("engine_version") else None,
        flags=tuple(flags), spec=str(row["spec"]) if row.get("spec") else None,
        prompt_tokens=_opt_int(row, "prompt_tokens", where),
        output_tokens=_opt_int(row, "output_tokens", where),
        concurrency=_opt_int(row, "concurrency", where),
        context=_opt_int(row, "context", where), note=str(row.get("note") or ""),
    )


def is_published_doc(doc: Any) -> bool:
    """Whether a document is in the published-runs schema."""
    return isinstance(doc, Mapping) and doc.get("schema") == SCHEMA


def parse_published(doc: Mapping[str, Any], source: str) -> tuple[PublishedRun, ...]:
    """The rows of a published-runs document (TOML ``[[runs]]`` or JSON ``"runs": [...]``)."""
    if not is_published_doc(doc):
        raise InputError(f"expected schema {SCHEMA!r}, not {doc.get('schema')!r}", path=source)
    rows = doc.get("runs")
    if not isinstance(rows, list) or not rows:
        raise InputError("no published runs (a 'runs' list)", path=source)
    return tuple(parse_row(r, f"{source}: run {i + 1}") for i, r in enumerate(rows))


@cache
def load_published() -> tuple[PublishedRun, ...]:
    """The shipped table (``runs.toml`` beside this module)."""
    text = resources.files("servelab.published").joinpath("runs.toml").read_text(
        encoding="utf-8")
    return parse_published(tomllib.loads(text), "servelab/published/runs.toml")


def _norm_build(build: str) -> str:
    b = build.strip().lower().removeprefix("hf://").removeprefix("https://huggingface.co/")
    return b.split("@", 1)[0].rstrip("/")


def published_for(
    build: str,
    hardware: str,
    *,
    runs: Sequence[PublishedRun] | None = None,
    metric: str | None = None,
    engine: str | None = None,
) -> tuple[PublishedRun, ...]:
    """Published figures for ``build`` (a Hub repo id; case, ``hf://`` and ``@revision``
    aside) on ``hardware`` (a profile name, as the caller resolved it), newest first; only
    ``metric`` / ``engine`` when given."""
    want, hw = _norm_build(build), hardware.strip().lower()
    rows = runs if runs is not None else load_published()
    out = [r for r in rows if _norm_build(r.build) == want and r.hardware.lower() == hw
           and (metric is None or r.metric == metric)
           and (engine is None or r.engine.lower() == engine.lower())]
    return tuple(sorted(out, key=lambda r: r.date, reverse=True))
