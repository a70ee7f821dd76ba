"""A set of safetensors files of known tensors with sparse zero data: real headers (the
shapes and dtypes a published build stores), no weights. What a header replica is written
with (:mod:`servelab.synth.replica`)."""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from servelab.outfile import atomic_file

__all__ = ["TensorSpec", "write_json", "write_safetensors_set"]

_DTYPE_BITS = {
    "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6, "BOOL": 8, "U8": 8, "I8": 8, "F8_E5M2": 8,
    "F8_E4M3": 8, "F8_E8M0": 8, "I16": 16, "U16": 16, "F16": 16, "BF16": 16, "I32": 32,
    "U32": 32, "F32": 32, "I64": 64, "U64": 64, "F64": 64,
}  # fmt: skip


@dataclass(frozen=True)
class TensorSpec:
    """One tensor of a replica: name, safetensors dtype and shape."""

    name: str
    dtype: str
    shape: tuple[int, ...]

    @property
    def nbytes(self) -> int:
        """Bytes the tensor occupies."""
        return math.prod(self.shape) * _DTYPE_BITS[self.dtype] // 8


def _header_bytes(tensors: Sequence[TensorSpec]) -> tuple[bytes, int]:
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    off = 0
    for t in tensors:
        n = t.nbytes
        header[t.name] = {"dtype": t.dtype, "shape": list(t.shape), "data_offsets": [off, off + n]}
        off += n
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)  # the reference writer pads the header to 8 bytes
    return raw, off


def _write_sparse(path: Path, tensors: Sequence[TensorSpec]) -> int:
    raw, data = _header_bytes(tensors)
    with atomic_file(path) as tmp, tmp.open("wb") as f:
        f.write(struct.pack("<Q", len(raw)))
        f.write(raw)
        f.truncate(8 + len(raw) + data)  # sparse: no data blocks are allocated
    return data


def _shards(tensors: Sequence[TensorSpec], max_shard_bytes: int | None) -> list[list[TensorSpec]]:
    if not max_shard_bytes:
        return [list(tensors)]
    shards: list[list[TensorSpec]] = [[]]
    size = 0
    for t in tensors:
        if shards[-1] and size + t.nbytes > max_shard_bytes:
            shards.append([])
            size = 0
        shards[-1].append(t)
        size += t.nbytes
    return shards


def write_json(path: Path, doc: Mapping[str, Any]) -> None:
    with atomic_file(path) as tmp:
        tmp.write_text(json.dumps(doc, indent=2) + "\n")


def write_safetensors_set(
    out_dir: Path,
    tensors: Iterable[TensorSpec],
    *,
    max_shard_bytes: int | None = None,
) -> list[Path]:
    """Write ``tensors`` as sparse safetensors shards (plus an index when sharded)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    all_t = list(tensors)
    groups = _shards(all_t, max_shard_bytes)
    if len(groups) == 1:
        path = out_dir / "model.safetensors"
        _write_sparse(path, groups[0])
        return [path]
    paths = []
    weight_map: dict[str, str] = {}
    total = 0
    for i, g in enumerate(groups, 1):
        name = f"model-{i:05d}-of-{len(groups):05d}.safetensors"
        total += _write_sparse(out_dir / name, g)
        weight_map.update({t.name: name for t in g})
        paths.append(out_dir / name)
    write_json(
        out_dir / "model.safetensors.index.json",
        {"metadata": {"total_size": total}, "weight_map": weight_map},
    )
    return paths
