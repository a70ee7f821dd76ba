"""Where a checkpoint's headers come from: a local file, a local directory, or a Hub repo.

The record every reader returns is :class:`~servelab.checkpoint.source_record.
CheckpointSource` (re-exported here); a shard index is checked by
:mod:`servelab.checkpoint.shard_index`; GGUF files are read by
:mod:`servelab.checkpoint.gguf_format`; a Hub repo by :mod:`servelab.checkpoint.hub`.

:func:`load_checkpoint` reads only headers and small JSON side files, never tensor data:

* a single ``.safetensors`` file (its directory's config files are read too when it is
  that directory's only safetensors file);
* a directory with ``model.safetensors.index.json`` (the index is validated against the
  shards: every ``weight_map`` entry must name a tensor its shard holds; unlisted
  tensors and a wrong ``total_size`` are reported as :class:`SourceWarning`);
* a directory with ``model.safetensors`` or other ``*.safetensors`` files and no index;
* a Hub repo id (``org/name``), read remotely by HTTP range requests (headers and small
  JSON files only; :class:`~servelab.checkpoint.hub.HubReader`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from servelab.checkpoint.configs import (
    CONFIG_FILE,
    GENERATION_CONFIG_FILE,
    INDEX_FILE,
    MAX_JSON_FILE_BYTES,
    QUANT_CONFIG_FILE,
    SINGLE_FILE,
    parse_json_object,
)
from servelab.checkpoint.gguf_format import GGUF_SUFFIX, is_gguf, load_gguf
from servelab.checkpoint.hub import DEFAULT_DEADLINE_S, DEFAULT_TIMEOUT_S, HubReader
from servelab.checkpoint.safetensors_format import (
    HEADER_LEN_BYTES,
    MAX_HEADER_LOCAL,
    ShardHeader,
    parse_header,
    read_header_len,
)
from servelab.checkpoint.shard_index import (
    check_index,
    check_unique_names,
    parse_index,
    shard_names,
)
from servelab.checkpoint.source_record import CheckpointSource, SourceWarning, identity_sha256
from servelab.errors import (
    CheckpointError,
    CheckpointNotFoundError,
    ConfigError,
    HeaderError,
    RemoteError,
    ShardIndexError,
    UsageError,
)

__all__ = ["CheckpointSource", "SourceWarning", "load_checkpoint"]

_REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*/[A-Za-z0-9_.\-]+$")


def load_checkpoint(
    location: str | Path,
    *,
    revision: str | None = None,
    token: str | None = None,
    endpoint: str | None = None,
    timeout: float = DEFAULT_TIMEOUT_S,
    deadline: float = DEFAULT_DEADLINE_S,
) -> CheckpointSource:
    """Read a checkpoint's headers and config files from a path or a Hub repo id.

    An existing path is read locally; otherwise ``org/name`` is read from the Hub
    (``revision`` defaults to ``main``). ``timeout`` bounds each network wait and
    ``deadline`` each whole request. Raises :class:`~servelab.errors.CheckpointError`
    subclasses for bad files, :class:`~servelab.errors.RemoteError` for server trouble.
    """
    path = Path(location).expanduser()
    if path.exists():
        if revision is not None:
            raise UsageError(f"{location}: --revision only applies to Hub repo ids")
        if path.is_dir():
            return _load_dir(path, str(location))
        return _load_file(path, str(location))
    text = str(location)
    if isinstance(location, str) and _REPO_ID.match(text) and not text.startswith("."):
        remote = HubReader(
            text,
            revision=revision,
            token=token,
            endpoint=endpoint,
            timeout=timeout,
            deadline=deadline,
        )
        with remote:
            try:
                return remote.load()
            except (CheckpointNotFoundError, RemoteError) as exc:
                if remote.received or remote.commit:
                    raise
                # Nothing was read at all: maybe the user meant a local path.
                note = f" (no local path {text!r} exists, so it was read as a Hub repo id)"
                raise type(exc)(exc.message + note, path=exc.path) from None
    raise CheckpointNotFoundError("no such file or directory (nor a Hub repo id)", path=text)


# --------------------------------------------------------------------------- local


@dataclass
class _Counter:
    n: int = 0


def _read_local_header(path: Path, name: str, counter: _Counter) -> ShardHeader:
    try:
        with path.open("rb") as f:
            size = path.stat().st_size
            prefix = f.read(HEADER_LEN_BYTES)
            counter.n += len(prefix)
            try:
                n = read_header_len(prefix, file=name, max_header=MAX_HEADER_LOCAL)
                # Never read past the file, even when the length lies.
                body = f.read(min(n, max(size - HEADER_LEN_BYTES, 0)))
                counter.n += len(body)
                return parse_header(prefix + body, file=name, file_size=size)
            except HeaderError as exc:
                raise HeaderError(exc.message, path=path, rule=exc.rule) from None
    except FileNotFoundError:
        raise CheckpointNotFoundError("shard file does not exist", path=path) from None
    except IsADirectoryError:
        raise CheckpointError("expected a safetensors file, found a directory", path=path) from None
    except OSError as exc:
        raise CheckpointError(f"cannot read: {exc.strerror}", path=path) from None


def _read_local_json(path: Path, counter: _Counter, *, required: bool) -> dict[str, Any] | None:
    try:
        size = path.stat().st_size
        if size > MAX_JSON_FILE_BYTES:
            raise ConfigError(f"{size:,} bytes is larger than any config should be", path=path)
        raw = path.read_bytes()
    except FileNotFoundError:
        if required:
            raise CheckpointNotFoundError("file does not exist", path=path) from None
        return None
    except OSError as exc:
        raise CheckpointError(f"cannot read: {exc.strerror}", path=path) from None
    counter.n += len(raw)
    return parse_json_object(raw, file=str(path))


def _side_configs(
    directory: Path, counter: _Counter
) -> tuple[dict[str, Any] | None, dict[str, Any] | None, dict[str, Any] | None]:
    return (
        _read_local_json(directory / CONFIG_FILE, counter, required=False),
        _read_local_json(directory / QUANT_CONFIG_FILE, counter, required=False),
        _read_local_json(directory / GENERATION_CONFIG_FILE, counter, required=False),
    )


def gguf_file(path: Path) -> Path | None:
    """The GGUF file a local path names: the file itself, or the one ``.gguf`` file of a
    folder that holds no safetensors (as a download of one quantization leaves it); None
    otherwise. Whoever plans the checkpoint follows llama.cpp's rules for it then."""
    if path.is_file():
        return path if path.suffix == GGUF_SUFFIX or is_gguf(path) else None
    if not path.is_dir() or any(path.glob("*.safetensors")):
        return None
    ggufs = [p for p in path.glob(f"*{GGUF_SUFFIX}") if p.is_file()]
    return ggufs[0] if len(ggufs) == 1 else None


def _load_file(path: Path, location: str) -> CheckpointSource:
    if path.suffix == GGUF_SUFFIX or is_gguf(path):
        return load_gguf(path, location)
    counter = _Counter()
    shard = _read_local_header(path, path.name, counter)
    config = quant = gen = None
    siblings = sorted(path.parent.glob("*.safetensors"))
    if siblings == [path] or [p.resolve() for p in siblings] == [path.resolve()]:
        config, quant, gen = _side_configs(path.parent, counter)
    shards = (shard,)
    return CheckpointSource(
        location=location,
        kind="file",
        revision=None,
        shards=shards,
        config=config,
        quant_config=quant,
        generation_config=gen,
        index_metadata=None,
        header_sha256=identity_sha256(shards),
        bytes_fetched=counter.n,
    )


def _load_dir(path: Path, location: str) -> CheckpointSource:
    counter = _Counter()
    warnings: list[SourceWarning] = []
    index_path = path / INDEX_FILE
    index_metadata: Mapping[str, Any] | None = None
    weight_map: dict[str, str] | None = None
    if index_path.exists():
        index = _read_local_json(index_path, counter, required=True)
        assert index is not None
        weight_map, index_metadata = parse_index(index, file=str(index_path))
        names = shard_names(weight_map)
        for name in names:
            if not (path / name).is_file():
                raise ShardIndexError(
                    f"index names shard {name!r}, which does not exist",
                    path=index_path,
                    rule="missing-shard",
                )
        others = sorted(p.name for p in path.glob("*.safetensors") if p.name not in set(names))
        if others:
            warnings.append(
                SourceWarning(
                    "index-unlisted-file",
                    f"{len(others)} safetensors file(s) not named by {INDEX_FILE} "
                    f"(not read): {', '.join(others[:3])}",
                )
            )
    elif (path / SINGLE_FILE).is_file():
        names = [SINGLE_FILE]
    else:
        names = sorted(p.name for p in path.glob("*.safetensors") if p.is_file())
        ggufs = sorted(p for p in path.glob(f"*{GGUF_SUFFIX}") if p.is_file())
        if (one := gguf_file(path)) is not None:
            return load_gguf(one, location)
        if not names:
            if ggufs:
                raise UsageError(
                    f"{path}: {len(ggufs)} GGUF files and no safetensors; inspect one file"
                )
            if any(path.glob("*.bin")) or any(path.glob("*.pt")):
                raise CheckpointError(
                    "only pickle-based weights (*.bin/*.pt) here; servelab reads safetensors "
                    "only and never unpickles",
                    path=path,
                )
            raise CheckpointNotFoundError("no *.safetensors files in this directory", path=path)
        if len(names) > 1:
            warnings.append(
                SourceWarning(
                    "no-index",
                    f"{len(names)} safetensors files and no {INDEX_FILE}; reading all of them",
                )
            )
    shards = tuple(_read_local_header(path / n, n, counter) for n in names)
    if weight_map is not None:
        warnings.extend(check_index(weight_map, index_metadata, shards, file=str(index_path)))
    else:
        check_unique_names(shards, where=str(path))
    config, quant, gen = _side_configs(path, counter)
    return CheckpointSource(
        location=location,
        kind="dir",
        revision=None,
        shards=shards,
        config=config,
        quant_config=quant,
        generation_config=gen,
        index_metadata=index_metadata,
        header_sha256=identity_sha256(shards),
        bytes_fetched=counter.n,
        warnings=tuple(warnings),
    )


