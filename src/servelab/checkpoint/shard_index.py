"""``model.safetensors.index.json``: its shape, and its agreement with the shards' headers.

Pure functions over the parsed index and :class:`ShardHeader` s, shared by the local and
the Hub reader.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import PurePosixPath
from typing import Any, Final

from servelab.checkpoint.safetensors_format import ShardHeader
from servelab.checkpoint.source_record import SourceWarning
from servelab.errors import ShardIndexError

__all__ = ["MAX_SHARDS", "check_index", "check_unique_names", "parse_index", "shard_names"]

#: Real checkpoints have at most a few hundred shards; an index naming more is hostile.
MAX_SHARDS: Final = 4096


def _safe_shard_name(name: str) -> bool:
    p = PurePosixPath(name)
    return (
        bool(name)
        and not p.is_absolute()
        and "\\" not in name
        and ".." not in p.parts
        and ":" not in name
        and "\x00" not in name
    )


def parse_index(
    index: Mapping[str, Any], *, file: str
) -> tuple[dict[str, str], Mapping[str, Any] | None]:
    """Validate the shape of a ``model.safetensors.index.json`` document.

    Returns ``(weight_map, metadata)``. Shard names must be plain relative paths (no
    ``..``, no absolute paths): they are joined to a directory or a URL.
    """
    wm = index.get("weight_map")
    if not isinstance(wm, dict) or not wm:
        raise ShardIndexError(
            "'weight_map' must be a non-empty object", path=file, rule="index-bad-weight-map"
        )
    for tensor, shard in wm.items():
        if not isinstance(shard, str):
            raise ShardIndexError(
                f"weight_map[{tensor!r}] is not a file name", path=file, rule="index-bad-weight-map"
            )
    for shard in set(wm.values()):
        if not _safe_shard_name(shard):
            raise ShardIndexError(
                f"shard name {shard!r} is not a plain relative path",
                path=file,
                rule="index-unsafe-shard-name",
            )
    shards = len(set(wm.values()))
    if shards > MAX_SHARDS:
        raise ShardIndexError(
            f"index names {shards:,} shard files (limit {MAX_SHARDS:,})",
            path=file,
            rule="index-too-many-shards",
        )
    meta = index.get("metadata")
    if meta is not None and not isinstance(meta, dict):
        raise ShardIndexError("'metadata' must be an object", path=file, rule="index-bad-metadata")
    return wm, meta


def shard_names(weight_map: Mapping[str, str]) -> list[str]:
    """The distinct shard files of a weight map, sorted by name."""
    return sorted(set(weight_map.values()))


def check_unique_names(shards: tuple[ShardHeader, ...], *, where: str) -> None:
    """Tensor names must be unique across shards (as within one header)."""
    if len(shards) < 2:
        return
    seen: dict[str, str] = {}
    for s in shards:
        for t in s.tensors:
            other = seen.setdefault(t.name, s.file)
            if other != s.file:
                raise ShardIndexError(
                    f"tensor {t.name!r} appears in both {other} and {s.file}",
                    path=where,
                    rule="duplicate-tensor",
                )


def check_index(
    weight_map: Mapping[str, str],
    metadata: Mapping[str, Any] | None,
    shards: tuple[ShardHeader, ...],
    *,
    file: str,
) -> list[SourceWarning]:
    """Check an index against the headers of its shards.

    Errors (:class:`ShardIndexError`): a tensor in two shards (``duplicate-tensor``), a
    ``weight_map`` entry its shard does not hold (``index-missing-tensor``) or that lives
    in another shard (``index-wrong-shard``). Warnings: tensors the index does not list
    (``index-unlisted-tensor``) and a ``total_size`` that differs from the sum of the
    tensors' bytes (``index-total-size``).
    """
    check_unique_names(shards, where=file)
    actual = {t.name: s.file for s in shards for t in s.tensors}
    warnings: list[SourceWarning] = []
    if actual != weight_map:
        for tensor, shard in weight_map.items():
            where = actual.get(tensor)
            if where is None:
                raise ShardIndexError(
                    f"weight_map lists {tensor!r} in {shard}, which does not hold it",
                    path=file,
                    rule="index-missing-tensor",
                )
            if where != shard:
                raise ShardIndexError(
                    f"weight_map puts {tensor!r} in {shard}, but it is in {where}",
                    path=file,
                    rule="index-wrong-shard",
                )
        unlisted = [n for n in actual if n not in weight_map]
        warnings.append(
            SourceWarning(
                "index-unlisted-tensor",
                f"{len(unlisted)} tensor(s) in the shards are not in weight_map, "
                f"e.g. {unlisted[0]!r}",
            )
        )
    total = (metadata or {}).get("total_size")
    data = sum(t.nbytes for s in shards for t in s.tensors)
    if total is None:
        warnings.append(SourceWarning("index-total-size", "index metadata has no total_size"))
    elif type(total) is not int or total != data:
        warnings.append(
            SourceWarning(
                "index-total-size",
                f"index total_size {total!r} differs from the tensors' {data:,} bytes",
            )
        )
    return warnings
