"""Where a checkpoint's headers come from: a local file, a local directory, or a Hub repo.

:func:`load_checkpoint` reads only headers and small JSON side files, never tensor data:

* a single ``.safetensors`` file (its directory's config files are read too when it is
  that directory's only safetensors file);
* a directory with ``model.safetensors.index.json`` (the index is validated against the
  shards: every ``weight_map`` entry must name a tensor its shard holds; unlisted
  tensors and a wrong ``total_size`` are reported as :class:`SourceWarning`);
* a directory with ``model.safetensors`` or other ``*.safetensors`` files and no index;
* a Hub repo id (``org/name``), read remotely with HTTP range requests like
  ``huggingface_hub``: one ranged GET of the first 100,000 bytes of each shard and a
  second range only when the header is longer. URLs, the endpoint (``HF_ENDPOINT`` or
  ``endpoint=``) and the token (``token=``, else ``HF_TOKEN`` / ``hf auth login``) come
  from ``huggingface_hub``; reads are pinned to the commit the first answer names
  (``X-Repo-Commit``), so all shards come from one snapshot; the transport is a plain
  ``httpx.Client`` with redirects followed by hand (bounded, no scheme downgrade, the
  token dropped when the host changes), per-request timeouts and an overall deadline,
  and a cap on the bytes read from any response so that a server that ignores ``Range``
  cannot make us download weights.
"""

from __future__ import annotations

import hashlib
import re
import threading
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path, PurePosixPath
from typing import Any, Final, Literal
from urllib.parse import urljoin, urlsplit

import httpx

from servelab import __version__
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
from servelab.checkpoint.safetensors_format import (
    HEADER_LEN_BYTES,
    MAX_HEADER_LOCAL,
    MAX_HEADER_REMOTE,
    ShardHeader,
    TensorEntry,
    parse_header,
    read_header_len,
)
from servelab.errors import (
    CheckpointError,
    CheckpointNotFoundError,
    ConfigError,
    HeaderError,
    RemoteError,
    ShardIndexError,
    UsageError,
)

SourceKind = Literal["file", "dir", "hub"]

#: huggingface_hub's first range: bytes 0-100000 (100,001 bytes).
FIRST_RANGE_BYTES: Final = 100_001
MAX_REDIRECTS: Final = 5
DEFAULT_TIMEOUT_S: Final = 10.0
DEFAULT_DEADLINE_S: Final = 120.0
MAX_PARALLEL_SHARDS: Final = 8
#: Real checkpoints have at most a few hundred shards; an index naming more is hostile.
MAX_SHARDS: Final = 4096
_REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*/[A-Za-z0-9_.\-]+$")
_COMMIT = re.compile(r"^[0-9a-f]{40}$")


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
        remote = _Remote(
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
        if not names and len(ggufs) == 1:
            return load_gguf(ggufs[0], location)
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


# --------------------------------------------------------------------------- index


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


# --------------------------------------------------------------------------- remote


@dataclass(frozen=True, slots=True)
class _Fetched:
    data: bytes
    total: int | None
    ranged: bool = True
    """False when the server ignored ``Range`` and answered 200 with the whole file."""


_CONTENT_RANGE = re.compile(r"^bytes (\d+)-(\d+)/(\d+|\*)$")


class _Remote:
    """One Hub repo at one revision, read by bounded HTTP requests."""

    def __init__(
        self,
        repo_id: str,
        *,
        revision: str | None,
        token: str | None,
        endpoint: str | None,
        timeout: float,
        deadline: float,
    ) -> None:
        import huggingface_hub
        from huggingface_hub import constants, get_token

        self.repo_id = repo_id
        self.revision = revision
        self.pinned = revision or constants.DEFAULT_REVISION
        self.commit: str | None = None
        self.endpoint = (endpoint or constants.ENDPOINT).rstrip("/")
        # huggingface_hub's own token resolution (HF_TOKEN, then `hf auth login`'s file),
        # unless implicit tokens are disabled. Not build_hf_headers(): its user-agent
        # code fetches a registry from the endpoint as a side effect.
        if token is None and not constants.HF_HUB_DISABLE_IMPLICIT_TOKEN:
            token = get_token()
        self.headers = {
            "user-agent": f"servelab/{__version__}; hf_hub/{huggingface_hub.__version__}"
        }
        if token:
            self.headers["authorization"] = f"Bearer {token}"
        self.deadline = deadline
        self.client = httpx.Client(
            timeout=httpx.Timeout(timeout), follow_redirects=False, trust_env=True
        )
        self.received = 0
        self._lock = threading.Lock()

    def __enter__(self) -> _Remote:
        return self

    def __exit__(self, *exc: object) -> None:
        self.client.close()

    # -- addressing

    def display(self, file: str) -> str:
        rev = self.commit[:12] if self.commit else self.pinned
        return f"{self.repo_id}@{rev}/{file}"

    def url(self, file: str) -> str:
        from huggingface_hub import hf_hub_url

        return hf_hub_url(self.repo_id, file, revision=self.pinned, endpoint=self.endpoint)

    # -- transport

    def _send(self, url: str, extra: Mapping[str, str], file: str) -> httpx.Response:
        """GET ``url`` (streamed), following at most MAX_REDIRECTS redirects safely."""
        # identity: count real bytes, and no compression bombs
        headers = {**self.headers, "Accept-Encoding": "identity", **extra}
        origin = urlsplit(url)
        for _ in range(MAX_REDIRECTS + 1):
            try:
                resp = self.client.send(
                    self.client.build_request("GET", url, headers=headers), stream=True
                )
            except httpx.TimeoutException:
                raise RemoteError(
                    "timed out waiting for the server", path=self.display(file)
                ) from None
            except httpx.HTTPError as exc:
                raise RemoteError(f"request failed: {exc}", path=self.display(file)) from None
            if resp.status_code not in (301, 302, 303, 307, 308):
                return resp
            location = resp.headers.get("location")
            resp.close()
            if not location:
                raise RemoteError(
                    f"HTTP {resp.status_code} redirect without a Location", path=self.display(file)
                )
            target = urljoin(url, location)
            parts = urlsplit(target)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise RemoteError(f"refusing redirect to {target!r}", path=self.display(file))
            if urlsplit(url).scheme == "https" and parts.scheme == "http":
                raise RemoteError(
                    f"refusing redirect from https to plain http ({parts.netloc})",
                    path=self.display(file),
                )
            if (parts.scheme, parts.netloc) != (origin.scheme, origin.netloc):
                # Another host (e.g. the Hub's CDN): never send it our token.
                headers = {k: v for k, v in headers.items() if k.lower() != "authorization"}
            url = target
        raise RemoteError(f"more than {MAX_REDIRECTS} redirects", path=self.display(file))

    def _check_status(self, resp: httpx.Response, file: str) -> None:
        code = resp.status_code
        if code < 400:
            return
        err = resp.headers.get("x-error-code", "")
        where = self.display(file)
        if err in ("RepositoryNotFound", "RevisionNotFound"):
            raise CheckpointNotFoundError(
                f"Hub says {err}: check the repo id and --revision (a private repo also "
                "needs a token: `hf auth login` or HF_TOKEN)",
                path=where,
            )
        if code in (401, 403):
            raise RemoteError(
                f"HTTP {code}: access denied; the repo may be gated or private (log in with "
                "`hf auth login` or set HF_TOKEN)",
                path=where,
            )
        raise RemoteError(f"HTTP {code} from the server", path=where)

    def _read(self, resp: httpx.Response, limit: int, file: str, started: float) -> bytes:
        """Read at most ``limit`` body bytes, then stop (never the rest of a weights file)."""
        chunks: list[bytes] = []
        have = 0
        try:
            for chunk in resp.iter_raw():
                with self._lock:
                    self.received += len(chunk)
                chunks.append(chunk)
                have += len(chunk)
                if have >= limit:
                    break
                if time.monotonic() - started > self.deadline:
                    raise RemoteError(
                        f"gave up after {self.deadline:.0f} s (server too slow)",
                        path=self.display(file),
                    )
        except httpx.TimeoutException:
            raise RemoteError("timed out reading the response", path=self.display(file)) from None
        except httpx.HTTPError as exc:
            raise RemoteError(f"response broken off: {exc}", path=self.display(file)) from None
        finally:
            resp.close()
        return b"".join(chunks)[:limit]

    def get(
        self,
        file: str,
        *,
        start: int | None = None,
        length: int | None = None,
        limit: int = MAX_JSON_FILE_BYTES,
        optional: bool = False,
    ) -> _Fetched | None:
        """GET a file, or the byte range ``[start, start+length)``; ``None`` if optional
        and absent. A server that ignores the range is read only up to ``length`` bytes
        (``start`` must then be 0)."""
        extra = {}
        if start is not None and length is not None:
            extra["Range"] = f"bytes={start}-{start + length - 1}"
        started = time.monotonic()
        resp = self._send(self.url(file), extra, file)
        if (
            resp.status_code == 404
            and optional
            and resp.headers.get("x-error-code", "")
            not in ("RepositoryNotFound", "RevisionNotFound")
        ):
            self._note_commit(resp)  # the Hub names the commit even for a missing file
            resp.close()
            return None
        if resp.status_code == 416 and start is not None:
            resp.close()
            return _Fetched(b"", self._total_from_range(resp.headers.get("content-range")))
        try:
            self._check_status(resp, file)
        except BaseException:
            resp.close()
            raise
        self._note_commit(resp)
        total = None
        if resp.status_code == 206:
            cr = resp.headers.get("content-range", "")
            m = _CONTENT_RANGE.match(cr.strip())
            if not m or (start is not None and int(m.group(1)) != start):
                resp.close()
                raise RemoteError(
                    f"server answered with range {cr!r}, not the one asked for",
                    path=self.display(file),
                )
            total = None if m.group(3) == "*" else int(m.group(3))
        else:
            if start:
                resp.close()
                raise RemoteError("server ignored the Range request", path=self.display(file))
            cl = resp.headers.get("content-length")
            total = int(cl) if cl and cl.isdigit() else None
            if length is None and total is not None and total > limit:
                resp.close()
                raise RemoteError(
                    f"{total:,} bytes is larger than the {limit:,}-byte limit",
                    path=self.display(file),
                )
        want = limit if length is None else min(length, limit)
        data = self._read(resp, want + (1 if length is None else 0), file, started)
        if length is None and len(data) > limit:
            raise RemoteError(f"more than the {limit:,}-byte limit", path=self.display(file))
        if length is not None and len(data) < length:
            available = None if total is None else total - (start or 0)
            if available is None or len(data) < min(length, available):
                raise RemoteError(
                    f"short read: asked for {length:,} bytes from offset {start or 0:,}, "
                    f"got {len(data):,}",
                    path=self.display(file),
                )
        return _Fetched(data, total, ranged=resp.status_code == 206)

    def _total_from_range(self, value: str | None) -> int | None:
        m = re.match(r"^bytes \*/(\d+)$", (value or "").strip())
        return int(m.group(1)) if m else None

    def _note_commit(self, resp: httpx.Response) -> None:
        commit = resp.headers.get("x-repo-commit", "")
        with self._lock:  # shards are read in threads; the first commit named wins
            if self.commit is None and _COMMIT.match(commit):
                self.commit = commit
                self.pinned = commit  # every later read sees the same snapshot

    # -- checkpoint pieces

    def header(self, file: str) -> ShardHeader:
        """One shard's header: the first 100,001 bytes, then the rest of ``N`` if needed."""
        first = self.get(file, start=0, length=FIRST_RANGE_BYTES, limit=FIRST_RANGE_BYTES)
        assert first is not None
        return self._header_from(file, first)

    def _header_from(self, file: str, first: _Fetched) -> ShardHeader:
        where = self.display(file)
        try:
            n = read_header_len(first.data, file=file, max_header=MAX_HEADER_REMOTE)
            raw = first.data
            need = HEADER_LEN_BYTES + n
            if len(raw) < need and (first.total is None or first.total >= need):
                if first.ranged:
                    more = self.get(file, start=len(raw), length=need - len(raw), limit=need)
                    assert more is not None
                    raw = raw + more.data
                else:  # no Range support: read the header's length from the start again
                    again = self.get(file, start=0, length=need, limit=need)
                    assert again is not None
                    raw = again.data
            return parse_header(raw, file=file, file_size=first.total, max_header=MAX_HEADER_REMOTE)
        except HeaderError as exc:
            raise HeaderError(exc.message, path=where, rule=exc.rule) from None

    def json(self, file: str, *, optional: bool) -> dict[str, Any] | None:
        got = self.get(file, optional=optional)
        if got is None:
            return None
        return parse_json_object(got.data, file=self.display(file))

    def load(self) -> CheckpointSource:
        warnings: list[SourceWarning] = []
        index = self.json(INDEX_FILE, optional=True)
        weight_map: dict[str, str] | None = None
        index_metadata: Mapping[str, Any] | None = None
        if index is not None:
            weight_map, index_metadata = parse_index(index, file=self.display(INDEX_FILE))
            names = shard_names(weight_map)
            shards = self._headers(names)
        else:
            first = self.get(
                SINGLE_FILE,
                start=0,
                length=FIRST_RANGE_BYTES,
                limit=FIRST_RANGE_BYTES,
                optional=True,
            )
            if first is None:
                raise CheckpointNotFoundError(
                    f"neither {INDEX_FILE} nor {SINGLE_FILE} found",
                    path=f"{self.repo_id}@{self.pinned}",
                )
            shards = (self._header_from(SINGLE_FILE, first),)
        if weight_map is not None:
            warnings.extend(
                check_index(weight_map, index_metadata, shards, file=self.display(INDEX_FILE))
            )
        config = self.json(CONFIG_FILE, optional=True)
        quant = self.json(QUANT_CONFIG_FILE, optional=True)
        gen = self.json(GENERATION_CONFIG_FILE, optional=True)
        return CheckpointSource(
            location=self.repo_id,
            kind="hub",
            revision=self.revision or "main",
            shards=shards,
            config=config,
            quant_config=quant,
            generation_config=gen,
            index_metadata=index_metadata,
            header_sha256=identity_sha256(shards),
            bytes_fetched=self.received,
            commit=self.commit,
            warnings=tuple(warnings),
        )

    def _headers(self, names: list[str]) -> tuple[ShardHeader, ...]:
        if len(names) == 1:
            return (self.header(names[0]),)
        pool = ThreadPoolExecutor(max_workers=min(MAX_PARALLEL_SHARDS, len(names)))
        try:
            return tuple(pool.map(self.header, names))
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
