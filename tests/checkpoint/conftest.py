"""Shared fixtures for checkpoint tests (generic: any checkpoint test may use them).

* ``tiny_checkpoint(arch, **kw)`` — a REAL tiny random-weight checkpoint built with
  :func:`servelab.synth.tiny.make_tiny_model`, built once per session per arguments and
  cached. Treat the returned directory as read-only; copy it (``copy_checkpoint``) to
  mutate it.
* ``write_safetensors(path, header, data_len=None)`` — write a file with an exact header
  (a dict is JSON-encoded; bytes are written verbatim) and a sparse data region.
* ``hub_server`` — a real threaded HTTP server on loopback that serves checkpoint
  directories under the Hub's ``/{repo}/resolve/{revision}/{file}`` layout, honours
  ``Range``, records every request, and can misbehave on demand (see :class:`HubServer`).
"""

from __future__ import annotations

import json
import re
import shutil
import struct
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from servelab.synth.tiny import make_tiny_model

TinyFactory = Callable[..., Path]
WriteSafetensors = Callable[..., Path]

FAKE_COMMIT = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> TinyFactory:
    """Factory: ``tiny_checkpoint("qwen3_moe", max_shard_size="200KB", overrides={...})``."""
    cache: dict[str, Path] = {}
    lock = threading.Lock()

    def build(arch: str, **kwargs: Any) -> Path:
        key = json.dumps([arch, kwargs], sort_keys=True, default=str)
        with lock:
            if key not in cache:
                out = tmp_path_factory.mktemp(f"tiny-{arch}")
                cache[key] = make_tiny_model(arch, out, **kwargs)
            return cache[key]

    return build


@pytest.fixture
def copy_checkpoint(tmp_path: Path) -> Callable[[Path], Path]:
    """Copy a (cached, read-only) checkpoint directory into this test's tmp_path."""

    def copy(src: Path) -> Path:
        dst = tmp_path / f"copy-{src.name}"
        shutil.copytree(src, dst)
        return dst

    return copy


def encode_safetensors(header: dict[str, Any] | bytes) -> bytes:
    """``u64 N`` + header bytes (dicts are JSON-encoded compactly)."""
    body = header if isinstance(header, bytes) else json.dumps(header).encode()
    return struct.pack("<Q", len(body)) + body


@pytest.fixture
def write_safetensors() -> WriteSafetensors:
    """Write ``path`` = 8-byte length + header + a sparse data region.

    ``data_len`` defaults to the largest ``data_offsets`` end in a dict header (0 for
    bytes), so that valid headers make valid files.
    """

    def write(path: Path, header: dict[str, Any] | bytes, data_len: int | None = None) -> Path:
        if data_len is None:
            data_len = 0
            if isinstance(header, dict):
                for k, v in header.items():
                    if k != "__metadata__" and isinstance(v, dict):
                        data_len = max(data_len, int(v["data_offsets"][1]))
        raw = encode_safetensors(header)
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("wb") as f:
            f.write(raw)
            f.truncate(len(raw) + data_len)
        return path

    return write


# --------------------------------------------------------------------------- hub server


@dataclass
class Seen:
    """One request the server answered."""

    path: str
    range: str | None
    authorization: str | None
    status: int = 0
    body_bytes: int = 0


@dataclass
class HubServer:
    """Real loopback HTTP server with the Hub's resolve-URL layout.

    Misbehaviour knobs (all off by default): ``ignore_range`` (answer 200 with the whole
    file), ``lie_total`` (Content-Range total replaced by this), ``short_range`` (send at
    most this many body bytes of a range, honestly labelled), ``truncate_body`` (promise
    the full range in Content-Length, send this many bytes, then close), ``redirect_to``
    (302 every resolve request to ``redirect_to + path``), ``stall_s`` (wait before
    answering), ``drip_s`` (pause between 1 KiB body chunks), ``status`` (file name →
    HTTP status to answer with).
    """

    repos: dict[str, Path] = field(default_factory=dict)
    commit: str = FAKE_COMMIT
    seen: list[Seen] = field(default_factory=list)
    ignore_range: bool = False
    lie_total: int | None = None
    short_range: int | None = None
    truncate_body: int | None = None
    redirect_to: str | None = None
    stall_s: float = 0.0
    drip_s: float = 0.0
    status: dict[str, int] = field(default_factory=dict)
    url: str = ""
    stop: threading.Event = field(default_factory=threading.Event)

    @property
    def body_bytes(self) -> int:
        """Body bytes sent so far over all requests."""
        return sum(s.body_bytes for s in self.seen)

    def add(self, repo_id: str, directory: Path) -> str:
        """Serve ``directory`` as ``repo_id``; returns the repo id."""
        self.repos[repo_id] = directory
        return repo_id

    # -- request handling (runs in server threads)

    _RESOLVE = re.compile(r"^/(?P<repo>[^/]+/[^/]+)/resolve/(?P<rev>[^/]+)/(?P<file>.+)$")

    def handle(self, h: BaseHTTPRequestHandler) -> None:
        seen = Seen(h.path, h.headers.get("Range"), h.headers.get("Authorization"))
        self.seen.append(seen)
        if self.stall_s:
            self.stop.wait(self.stall_s)
        m = self._RESOLVE.match(h.path)
        if self.redirect_to is not None:
            self._reply(h, seen, 302, {"Location": self.redirect_to + h.path})
            return
        if not m or m["repo"] not in self.repos:
            self._reply(h, seen, 404, {"X-Error-Code": "RepositoryNotFound"})
            return
        if m["rev"] not in ("main", self.commit):
            self._reply(h, seen, 404, {"X-Error-Code": "RevisionNotFound"})
            return
        name = m["file"]
        if name in self.status:
            self._reply(h, seen, self.status[name], {})
            return
        path = self.repos[m["repo"]] / name
        if ".." in name or not path.is_file():
            # Like the Hub: a missing file still names the commit it was looked up in.
            self._reply(
                h, seen, 404, {"X-Error-Code": "EntryNotFound", "X-Repo-Commit": self.commit}
            )
            return
        size = path.stat().st_size
        start, end = 0, size - 1
        rng = h.headers.get("Range")
        partial = False
        if rng and not self.ignore_range:
            rm = re.match(r"^bytes=(\d+)-(\d*)$", rng)
            assert rm, rng
            start = int(rm[1])
            end = min(int(rm[2]) if rm[2] else size - 1, size - 1)
            if start >= size:
                self._reply(h, seen, 416, {"Content-Range": f"bytes */{size}"})
                return
            partial = True
        count = end - start + 1
        send = count
        if partial and self.short_range is not None:
            send = count = min(count, self.short_range)
        if self.truncate_body is not None:
            send = min(send, self.truncate_body)
        headers = {"Content-Length": str(count), "X-Repo-Commit": self.commit}
        if partial:
            total = size if self.lie_total is None else self.lie_total
            headers["Content-Range"] = f"bytes {start}-{start + count - 1}/{total}"
        with path.open("rb") as f:
            f.seek(start)
            self._reply(h, seen, 206 if partial else 200, headers, f, send)

    def _reply(
        self,
        h: BaseHTTPRequestHandler,
        seen: Seen,
        code: int,
        headers: dict[str, str],
        f: Any = None,
        send: int = 0,
    ) -> None:
        seen.status = code
        h.send_response(code)
        headers.setdefault("Content-Length", "0")
        for k, v in headers.items():
            h.send_header(k, v)
        h.end_headers()
        try:
            while send > 0 and f is not None:
                chunk = f.read(min(send, 1024 if self.drip_s else 65536))
                if not chunk or self.stop.is_set():
                    break
                if self.drip_s:
                    self.stop.wait(self.drip_s)
                # Count before writing: once the client has the bytes it may return and the
                # test read ``body_bytes`` while this thread has not run its next line yet.
                seen.body_bytes += len(chunk)
                try:
                    h.wfile.write(chunk)
                except (BrokenPipeError, ConnectionResetError):
                    seen.body_bytes -= len(chunk)  # never reached the client whole
                    raise
                send -= len(chunk)
            h.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client stopped reading on purpose
        if self.truncate_body is not None:
            h.close_connection = True


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def do_GET(self) -> None:
        self.server.hub.handle(self)

    def log_message(self, format: str, *args: Any) -> None:
        pass


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    hub: HubServer


def _start(hub: HubServer, host: str = "127.0.0.1") -> tuple[_Server, threading.Thread]:
    srv = _Server((host, 0), _Handler)
    srv.hub = hub
    hub.url = f"http://{host}:{srv.server_address[1]}"
    t = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    t.start()
    return srv, t


@pytest.fixture
def hub_server() -> Iterator[Callable[..., HubServer]]:
    """Factory of loopback Hub servers (each call starts one more); all stopped after."""
    started: list[tuple[HubServer, _Server, threading.Thread]] = []

    def start(host: str = "127.0.0.1") -> HubServer:
        hub = HubServer()
        srv, t = _start(hub, host)
        started.append((hub, srv, t))
        return hub

    yield start
    for hub, srv, t in started:
        hub.stop.set()
        srv.shutdown()
        srv.server_close()
        t.join(timeout=5)
    time.sleep(0)  # let handler threads notice closed sockets


# --- analysis fixtures (engineer A2): quantized / MTP variants of real tiny checkpoints ---


@pytest.fixture(scope="session")
def variant_checkpoint(
    tiny_checkpoint: TinyFactory, tmp_path_factory: pytest.TempPathFactory
) -> Callable[[str], Path]:
    """Factory: a variant of the tiny ``qwen3_5_moe_text`` checkpoint, built once.

    ``"fp8-channel"``, ``"nvfp4"``, ``"fp8-block"``, ``"modelopt-nvfp4"`` (see
    :mod:`servelab.synth.quantize`), ``"mtp-declared"`` (config declares MTP, none
    ships), ``"mtp-shipped"`` (declared and shipped, per-expert), ``"mtp-undeclared"``
    (fused MTP tensors ship, config silent).
    """
    from servelab.synth.quantize import add_mtp_head, declare_mtp, quantize_checkpoint

    cache: dict[str, Path] = {}
    lock = threading.Lock()

    def build(variant: str) -> Path:
        with lock:
            if variant not in cache:
                src = tiny_checkpoint("qwen3_5_moe_text")
                dst = tmp_path_factory.mktemp("variants") / variant
                if variant == "mtp-declared":
                    declare_mtp(src, dst)
                elif variant == "mtp-shipped":
                    add_mtp_head(src, dst)
                elif variant == "mtp-undeclared":
                    add_mtp_head(src, dst, declare=False, fused_experts=True)
                else:
                    quantize_checkpoint(src, dst, variant)
                cache[variant] = dst
            return cache[variant]

    return build
