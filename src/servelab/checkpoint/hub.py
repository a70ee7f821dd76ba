"""A Hub repo's checkpoint headers, read by bounded HTTP range requests.

What huggingface_hub gives: the file URL (:func:`huggingface_hub.hf_hub_url`), the
endpoint (``HF_ENDPOINT`` or ``endpoint=``), the default revision, and the token
(``token=``, else ``HF_TOKEN`` / ``hf auth login``, unless implicit tokens are disabled:
:func:`huggingface_hub.get_token`). What servelab does itself, because
huggingface_hub has no reader that stops after a header: one ranged GET of the first
100,000 bytes of each shard (as huggingface_hub's own safetensors metadata reader asks)
and a second range only when the header is longer (measured in benchmarks/RESULTS.md).
Reads are pinned to the commit the first answer names (``X-Repo-Commit``), so all shards
come from one snapshot. The transport is a plain ``httpx.Client`` with redirects followed
by hand (bounded, no scheme downgrade, the token dropped when the host changes),
per-request timeouts and an overall deadline, and a cap on the bytes read from any
response, so that a server that ignores ``Range`` cannot make us download weights. (Not
``get_hf_file_metadata``: one more request per file; not ``hf_raise_for_status``: it reads
an error's whole body, unbounded; the Hub's ``X-Error-Code`` is mapped here instead.)
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import urljoin, urlsplit

import httpx

from servelab import __version__
from servelab.checkpoint import configs
from servelab.checkpoint.safetensors_format import (
    HEADER_LEN_BYTES,
    MAX_HEADER_REMOTE,
    ShardHeader,
    parse_header,
    read_header_len,
)
from servelab.checkpoint.shard_index import check_index, parse_index, shard_names
from servelab.checkpoint.source_record import CheckpointSource, SourceWarning, identity_sha256
from servelab.errors import CheckpointNotFoundError, HeaderError, RemoteError

__all__ = [
    "DEFAULT_DEADLINE_S",
    "DEFAULT_TIMEOUT_S",
    "FIRST_RANGE_BYTES",
    "HubReader",
]

#: huggingface_hub's first range: bytes 0-100000 (100,001 bytes).
FIRST_RANGE_BYTES: Final = 100_001
MAX_REDIRECTS: Final = 5
DEFAULT_TIMEOUT_S: Final = 10.0
DEFAULT_DEADLINE_S: Final = 120.0
MAX_PARALLEL_SHARDS: Final = 8
_COMMIT = re.compile(r"^[0-9a-f]{40}$")


@dataclass(frozen=True, slots=True)
class _Fetched:
    data: bytes
    total: int | None
    ranged: bool = True
    """False when the server ignored ``Range`` and answered 200 with the whole file."""


_CONTENT_RANGE = re.compile(r"^bytes (\d+)-(\d+)/(\d+|\*)$")


class HubReader:
    """One Hub repo at one revision, read by bounded HTTP requests.

    :meth:`load` reads the checkpoint's headers and config files; :attr:`received` counts
    the body bytes read and :attr:`commit` is the commit the reads were pinned to.
    """

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

    def __enter__(self) -> HubReader:
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
        limit: int = configs.MAX_JSON_FILE_BYTES,
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
        return configs.parse_json_object(got.data, file=self.display(file))

    def load(self) -> CheckpointSource:
        warnings: list[SourceWarning] = []
        index = self.json(configs.INDEX_FILE, optional=True)
        weight_map: dict[str, str] | None = None
        index_metadata: Mapping[str, Any] | None = None
        if index is not None:
            weight_map, index_metadata = parse_index(index, file=self.display(configs.INDEX_FILE))
            names = shard_names(weight_map)
            shards = self._headers(names)
        else:
            first = self.get(
                configs.SINGLE_FILE,
                start=0,
                length=FIRST_RANGE_BYTES,
                limit=FIRST_RANGE_BYTES,
                optional=True,
            )
            if first is None:
                raise CheckpointNotFoundError(
                    f"neither {configs.INDEX_FILE} nor {configs.SINGLE_FILE} found",
                    path=f"{self.repo_id}@{self.pinned}",
                )
            shards = (self._header_from(configs.SINGLE_FILE, first),)
        if weight_map is not None:
            where = self.display(configs.INDEX_FILE)
            warnings.extend(check_index(weight_map, index_metadata, shards, file=where))
        config = self.json(configs.CONFIG_FILE, optional=True)
        quant = self.json(configs.QUANT_CONFIG_FILE, optional=True)
        gen = self.json(configs.GENERATION_CONFIG_FILE, optional=True)
        return CheckpointSource(
            location=self.repo_id, kind="hub", revision=self.revision or "main", shards=shards,
            config=config, quant_config=quant, generation_config=gen,
            index_metadata=index_metadata, header_sha256=identity_sha256(shards),
            bytes_fetched=self.received, commit=self.commit, warnings=tuple(warnings),
        )

    def _headers(self, names: list[str]) -> tuple[ShardHeader, ...]:
        if len(names) == 1:
            return (self.header(names[0]),)
        pool = ThreadPoolExecutor(max_workers=min(MAX_PARALLEL_SHARDS, len(names)))
        try:
            return tuple(pool.map(self.header, names))
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
