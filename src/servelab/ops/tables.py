"""Per-operator cost tables: measured latencies with their provenance.

A *table set* is one source's measurements on one GPU with one engine version: servelab's
own (``benchmarks/ops/measure.py`` on the device, shipped under ``servelab/ops/data/``) or
AIConfigurator's (read through :mod:`servelab.ops.aic` when the optional extra is
installed). Its files follow AIConfigurator's per-operator layout where the operator is the
same, so one reader serves both sources: one row per measured point, the operator's shape in
named columns, ``latency`` in milliseconds.

=====================  ========================================================================
file                   columns (besides ``kernel_source`` and ``latency``)
=====================  ========================================================================
gemm                   ``gemm_dtype``, ``m``, ``n``, ``k``
moe                    ``moe_dtype``, ``num_tokens``, ``hidden_size``, ``inter_size``,
                       ``topk``, ``num_experts``, ``distribution``
generation_attention   ``batch_size``, ``isl`` (1), ``step`` (cached tokens: the KV length
                       is ``isl + step``), ``num_heads``, ``num_key_value_heads``,
                       ``head_dim``, ``window_size``, ``sinks``, ``kv_cache_dtype``
context_attention      ``batch_size``, ``isl`` (new tokens), ``prefix`` (cached tokens),
                       the same head columns
gdn                    ``phase`` (context / generation), ``batch_size``, ``num_tokens``,
                       ``num_k_heads``, ``head_k_dim``, ``num_v_heads``, ``head_v_dim``,
                       ``d_conv``, ``state_dtype``
mamba                  ``phase``, ``batch_size``, ``num_tokens``, ``num_heads``,
                       ``head_dim``, ``n_groups``, ``d_state``, ``d_conv``
elementwise            ``op_name`` (rms_norm, qk_norm, rope, silu_mul, kv_write, router,
                       embed), ``num_tokens``, ``width`` (the op's row width), ``heads``,
                       ``head_dim``, ``num_experts``, ``topk``
sampler                ``batch_size``, ``vocab``, ``mode`` (greedy / top_k_top_p)
host                   ``kernels``, ``mode`` (eager / graph), ``launch_ms``
=====================  ========================================================================

Pure: reading takes text (or a directory path at the edge) and returns frozen dataclasses.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from servelab.errors import UsageError

#: The files of a table set, in the order they are listed.
FILES: tuple[str, ...] = (
    "gemm", "moe", "generation_attention", "context_attention", "gdn", "mamba",
    "elementwise", "sampler", "host",
)
#: Columns that hold numbers (every other column is text).
NUMERIC: frozenset[str] = frozenset({
    "m", "n", "k", "num_tokens", "hidden_size", "inter_size", "topk", "num_experts",
    "batch_size", "isl", "step", "prefix", "num_heads", "num_key_value_heads", "head_dim",
    "window_size", "num_k_heads", "head_k_dim", "num_v_heads", "head_v_dim", "d_conv",
    "n_groups", "d_state", "width", "heads", "vocab", "kernels", "latency", "launch_ms",
    "latency_min", "latency_max", "reps",
})


@dataclass(frozen=True)
class Provenance:
    """Where a table set's numbers come from."""

    source: str  # "servelab" or "aiconfigurator"
    gpu: str
    engine: str
    engine_version: str
    date: str
    details: Mapping[str, Any] = field(default_factory=dict)

    def label(self) -> str:
        """One line: source, GPU, engine and version, date."""
        return f"{self.source} {self.gpu} {self.engine} {self.engine_version} ({self.date})"


@dataclass(frozen=True)
class Table:
    """One operator file: its rows (column -> value)."""

    name: str
    rows: tuple[Mapping[str, Any], ...]

    def where(self, **match: Any) -> list[Mapping[str, Any]]:
        """Rows whose columns equal every given value."""
        return [r for r in self.rows if all(r.get(k) == v for k, v in match.items())]


@dataclass(frozen=True)
class TableSet:
    """One source's tables for one GPU and engine version."""

    key: str  # e.g. "h200-vllm-0.26.0"
    provenance: Provenance
    tables: Mapping[str, Table]

    def table(self, name: str) -> Table:
        """The named table (empty when the set has none)."""
        return self.tables.get(name, Table(name, ()))


def _value(column: str, text: str) -> Any:
    if text == "":
        return None
    if column in NUMERIC:
        v = float(text)
        return int(v) if v.is_integer() and column != "latency" else v
    if text in ("True", "False"):
        return text == "True"
    return text


def parse_csv(name: str, text: str) -> Table:
    """A table from CSV text with a header row."""
    reader = csv.DictReader(io.StringIO(text))
    rows = tuple({k: _value(k, v) for k, v in row.items()} for row in reader)
    return Table(name, rows)


def write_csv(rows: Iterable[Mapping[str, Any]], columns: list[str]) -> str:
    """CSV text of ``rows`` over ``columns`` (missing cells empty)."""
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=columns, extrasaction="ignore", lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({c: ("" if r.get(c) is None else r.get(c)) for c in columns})
    return buf.getvalue()


def parse_provenance(doc: Mapping[str, Any]) -> Provenance:
    """The ``meta.json`` of a table set."""
    try:
        return Provenance(
            source=str(doc["source"]),
            gpu=str(doc["gpu"]),
            engine=str(doc["engine"]),
            engine_version=str(doc["engine_version"]),
            date=str(doc["date"]),
            details={k: v for k, v in doc.items()
                     if k not in ("source", "gpu", "engine", "engine_version", "date")},
        )
    except KeyError as e:
        raise UsageError(f"table meta.json lacks {e.args[0]!r}") from e


def load_dir(path: Path, key: str | None = None) -> TableSet:
    """A table set from a directory: ``meta.json`` + ``<file>.csv.gz`` (or ``.csv``)."""
    meta = path / "meta.json"
    if not meta.is_file():
        raise UsageError(f"{path}: no meta.json (not an operator table set)")
    prov = parse_provenance(json.loads(meta.read_text(encoding="utf-8")))
    tables: dict[str, Table] = {}
    for name in FILES:
        for suffix, opener in ((".csv.gz", gzip.open), (".csv", open)):
            f = path / f"{name}{suffix}"
            if f.is_file():
                with opener(f, "rt", encoding="utf-8") as fh:
                    tables[name] = parse_csv(name, fh.read())
                break
    return TableSet(key or path.name, prov, tables)


def shipped() -> dict[str, TableSet]:
    """Every table set shipped with servelab (``servelab/ops/data/<key>/``)."""
    root = resources.files("servelab.ops") / "data"
    out: dict[str, TableSet] = {}
    if not root.is_dir():
        return out
    for child in sorted(root.iterdir(), key=lambda c: c.name):
        if child.is_dir() and (child / "meta.json").is_file():
            with resources.as_file(child) as p:
                out[child.name] = load_dir(Path(p), child.name)
    return out
