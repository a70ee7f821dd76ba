"""The record of a checkpoint read without its tensor data, whatever it was read from.

:class:`CheckpointSource` is what every reader returns: the local safetensors reader and
the Hub reader (:mod:`servelab.checkpoint.sources`, :mod:`servelab.checkpoint.hub`) and
the GGUF reader (:mod:`servelab.checkpoint.gguf_format`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Literal

from servelab.checkpoint.safetensors_format import ShardHeader, TensorEntry

__all__ = ["CheckpointSource", "SourceKind", "SourceWarning", "identity_sha256"]

SourceKind = Literal["file", "dir", "hub"]


@dataclass(frozen=True, slots=True)
class SourceWarning:
    """Something odd about a checkpoint that does not stop it from being read."""

    code: str
    message: str


@dataclass(frozen=True)
class CheckpointSource:
    """Everything read from a checkpoint without touching its tensor data."""

    location: str
    kind: SourceKind
    revision: str | None
    shards: tuple[ShardHeader, ...]
    config: Mapping[str, Any] | None
    quant_config: Mapping[str, Any] | None
    generation_config: Mapping[str, Any] | None
    index_metadata: Mapping[str, Any] | None
    header_sha256: str
    bytes_fetched: int
    commit: str | None = None
    """Hub only: the commit the reads were pinned to (from ``X-Repo-Commit``), if known."""
    warnings: tuple[SourceWarning, ...] = field(default=())

    @cached_property
    def tensors(self) -> tuple[TensorEntry, ...]:
        """All tensors of all shards, in shard order then header order."""
        return tuple(t for s in self.shards for t in s.tensors)


def identity_sha256(shards: tuple[ShardHeader, ...]) -> str:
    """Checkpoint identity: a hash over each shard's name and raw header bytes' hash."""
    h = hashlib.sha256()
    for s in shards:
        h.update(f"{s.file}\n{s.sha256}\n".encode())
    return h.hexdigest()
