"""A small, fast HTTP/1.1 streaming transport for server-sent events.

Why not httpx or aiohttp: the client-overhead benchmark (benchmarks/client_overhead)
showed that the cost per streamed chunk decides how many streams one CPU core can
follow without distorting their timings. This transport parses the response inside
``asyncio.Protocol.data_received`` — no coroutine switch per chunk — stamps each
read with ``time.perf_counter_ns`` the moment the bytes reach the event loop, and
hands decoded SSE ``data:`` payloads to a callback. Timeouts are enforced by one
watchdog per client instead of a timer per read.

Only what OpenAI-compatible servers need is implemented: ``POST`` with a JSON body,
``Transfer-Encoding: chunked`` or ``Content-Length`` or close-delimited bodies,
keep-alive connection reuse, optional TLS.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

from servelab.bench.samples import ErrorKind
from servelab.errors import UsageError

_MAX_HEADER_BYTES = 64 * 1024
_MAX_ERROR_BODY = 64 * 1024


class StreamFault(Exception):
    """Raised by an ``on_data`` callback to end the exchange with an error kind."""

    def __init__(self, kind: ErrorKind, detail: str) -> None:
        super().__init__(detail)
        self.kind = kind
        self.detail = detail


@dataclass(frozen=True, slots=True)
class Timeouts:
    """Per-request time limits, in seconds."""

    first_byte_s: float = 600.0
    """From send to the first body bytes (servers send headers at once, then prefill)."""
    stall_s: float = 120.0
    """Longest silence allowed once the response has started."""
    total_s: float = 3600.0
    """Whole request."""


@dataclass(frozen=True, slots=True)
class Endpoint:
    """Where requests go: scheme, host, port and a path prefix."""

    scheme: str
    host: str
    port: int
    prefix: str

    @classmethod
    def parse(cls, base_url: str) -> Endpoint:
        """Parse ``http://host:port[/prefix]``; a trailing ``/v1`` is dropped."""
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise UsageError(f"not an http(s) URL: {base_url!r}")
        port = parts.port or (443 if parts.scheme == "https" else 80)
        prefix = parts.path.rstrip("/")
        if prefix.endswith("/v1"):
            prefix = prefix[: -len("/v1")]
        return cls(parts.scheme, parts.hostname, port, prefix)

    @property
    def base_url(self) -> str:
        """The URL without a trailing slash (no ``/v1``)."""
        return f"{self.scheme}://{self.host}:{self.port}{self.prefix}"


class Exchange:
    """State of one request/response on a connection; filled in by the protocol.

    ``on_data(payload, t_ns)`` is called for every SSE ``data:`` payload (or for a
    whole JSON body when the server did not stream); it returns True when the
    stream is logically complete (``[DONE]``).
    """

    __slots__ = (
        "body_error",
        "deadline_ns",
        "done",
        "end_ns",
        "error",
        "error_detail",
        "first_byte_deadline_ns",
        "got_bytes",
        "got_event",
        "headers_done",
        "last_data_ns",
        "on_data",
        "retry_after_s",
        "stall_ns",
        "status",
    )

    def __init__(
        self,
        on_data: Callable[[bytes, int], bool],
        now_ns: int,
        timeouts: Timeouts,
        deadline_ns: int | None,
    ) -> None:
        self.on_data = on_data
        total = now_ns + int(timeouts.total_s * 1e9)
        self.deadline_ns = total if deadline_ns is None else min(total, deadline_ns)
        self.first_byte_deadline_ns = now_ns + int(timeouts.first_byte_s * 1e9)
        self.stall_ns = int(timeouts.stall_s * 1e9)
        self.last_data_ns = now_ns
        self.got_bytes = False
        self.got_event = False
        self.headers_done = False
        self.status: int | None = None
        self.retry_after_s: float | None = None
        self.error: ErrorKind | None = None
        self.error_detail: str | None = None
        self.body_error = bytearray()
        self.end_ns = 0
        self.done: asyncio.Future[None] | None = None


class _Conn(asyncio.Protocol):
    """One keep-alive connection; parses responses as bytes arrive."""

    def __init__(self, on_lost: Callable[[_Conn], None]) -> None:
        self.transport: asyncio.Transport | None = None
        self.ex: Exchange | None = None
        self.reusable = False
        self.closed = False
        self._on_lost = on_lost
        self._buf = bytearray()
        self._sse = bytearray()
        self._mode = ""  # "chunked" | "length" | "close"
        self._remaining = 0  # bytes left in current chunk (chunked) or body (length)
        self._chunk_trailer = False  # expecting CRLF after a chunk's data
        self._terminal = False  # saw the zero-size chunk
        self._is_json = False
        self._json_body = bytearray()

    # -- asyncio.Protocol -------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.reusable = False
        ex = self.ex
        if ex is not None:
            if self._mode == "close" and ex.headers_done and ex.error is None:
                self._finish_body(time.perf_counter_ns())
            else:
                detail = "connection closed by server" if exc is None else f"{exc!r}"
                self._fail(ErrorKind.DISCONNECT, detail, time.perf_counter_ns())
        self._on_lost(self)

    def data_received(self, data: bytes) -> None:
        t = time.perf_counter_ns()
        ex = self.ex
        if ex is None:  # bytes outside an exchange: the connection is unusable
            self.reusable = False
            self._abort()
            return
        ex.got_bytes = True
        ex.last_data_ns = t
        if not ex.headers_done:
            self._buf += data
            end = self._buf.find(b"\r\n\r\n")
            if end < 0:
                if len(self._buf) > _MAX_HEADER_BYTES:
                    self._fail(ErrorKind.PROTOCOL, "response headers too large", t)
                return
            head = bytes(self._buf[:end])
            rest = bytes(self._buf[end + 4 :])
            self._buf.clear()
            if not self._parse_head(head, t):
                return
            if not rest:
                return
            data = rest
        self._body(data, t)

    # -- parsing ------------------------------------------------------------------------
    def _parse_head(self, head: bytes, t: int) -> bool:
        ex = self.ex
        assert ex is not None
        lines = head.split(b"\r\n")
        status_line = lines[0].split(b" ", 2)
        try:
            if not status_line[0].startswith(b"HTTP/1."):
                raise ValueError
            status = int(status_line[1])
        except (ValueError, IndexError):
            self._fail(ErrorKind.PROTOCOL, f"bad status line {lines[0][:80]!r}", t)
            return False
        headers: dict[bytes, bytes] = {}
        for line in lines[1:]:
            name, sep, value = line.partition(b":")
            if not sep:
                self._fail(ErrorKind.PROTOCOL, f"bad header line {line[:80]!r}", t)
                return False
            headers[name.strip().lower()] = value.strip()
        ex.status = status
        ex.headers_done = True
        if b"retry-after" in headers:
            with contextlib.suppress(ValueError):
                ex.retry_after_s = max(0.0, float(headers[b"retry-after"]))
        te = headers.get(b"transfer-encoding", b"").lower()
        conn_hdr = headers.get(b"connection", b"").lower()
        if b"chunked" in te:
            self._mode = "chunked"
            self._remaining = -1
            self._chunk_trailer = False
            self._terminal = False
        elif b"content-length" in headers:
            try:
                self._remaining = int(headers[b"content-length"])
            except ValueError:
                self._fail(ErrorKind.PROTOCOL, "bad Content-Length", t)
                return False
            self._mode = "length"
        else:
            self._mode = "close"
        self.reusable = conn_hdr != b"close" and self._mode != "close"
        ctype = headers.get(b"content-type", b"").lower()
        self._is_json = status == 200 and b"event-stream" not in ctype
        if self._mode == "length" and self._remaining == 0:
            self._finish_body(t)
        return True

    def _body(self, data: bytes, t: int) -> None:
        if self._mode == "chunked":
            self._buf += data
            buf = self._buf
            pos = 0
            n = len(buf)
            while self.ex is not None:
                if self._terminal:  # after the "0" chunk: wait for the final CRLF
                    if n - pos < 2:
                        break
                    if n - pos > 2:
                        self.reusable = False  # trailers or junk: do not reuse
                    buf.clear()
                    self._finish_body(t)
                    return
                if self._chunk_trailer:
                    if n - pos < 2:
                        break
                    pos += 2
                    self._chunk_trailer = False
                if self._remaining < 0:  # need a size line
                    eol = buf.find(b"\r\n", pos)
                    if eol < 0:
                        if n - pos > 1024:
                            self._fail(ErrorKind.PROTOCOL, "bad chunk size line", t)
                        break
                    try:
                        line = buf[pos:eol]
                        size = int(line if b";" not in line else line.split(b";", 1)[0], 16)
                    except ValueError:
                        self._fail(ErrorKind.PROTOCOL, "bad chunk size line", t)
                        break
                    pos = eol + 2
                    if size == 0:
                        self._terminal = True
                        continue
                    self._remaining = size
                take = min(self._remaining, n - pos)
                if take <= 0:
                    break
                self._payload(bytes(buf[pos : pos + take]), t)
                pos += take
                self._remaining -= take
                if self._remaining == 0:
                    self._remaining = -1
                    self._chunk_trailer = True
            del buf[:pos]
        elif self._mode == "length":
            part = data[: self._remaining]
            self._remaining -= len(part)
            if len(data) > len(part):
                self.reusable = False
            self._payload(part, t)
            if self._remaining == 0 and self.ex is not None:
                self._finish_body(t)
        else:
            self._payload(data, t)

    def _payload(self, data: bytes, t: int) -> None:
        ex = self.ex
        if ex is None:
            return
        ex.got_event = True
        if ex.status != 200:
            if len(ex.body_error) < _MAX_ERROR_BODY:
                ex.body_error += data[: _MAX_ERROR_BODY - len(ex.body_error)]
            return
        if self._is_json:
            self._json_body += data
            return
        sse = self._sse
        if not sse and data.startswith(b"data:") and data.find(b"\n") == len(data) - 2 \
                and data.endswith(b"\n\n"):
            # Fast path: exactly one single-line event (vLLM sends one per HTTP chunk).
            try:
                if ex.on_data(data[5:-2].strip(), t):
                    ex.end_ns = t
            except StreamFault as fault:
                self._fail(fault.kind, fault.detail, t)
            return
        sse += data
        if b"\r" in data:
            sse[:] = sse.replace(b"\r\n", b"\n")
        start = 0
        while True:
            end = sse.find(b"\n\n", start)
            if end < 0:
                break
            event = bytes(sse[start:end])
            start = end + 2
            for line in event.split(b"\n"):
                if line.startswith(b"data:"):
                    try:
                        if ex.on_data(line[5:].strip(), t):
                            ex.end_ns = t
                    except StreamFault as fault:
                        self._fail(fault.kind, fault.detail, t)
                        return
        if start:
            del sse[:start]

    def _finish_body(self, t: int) -> None:
        ex = self.ex
        if ex is None:
            return
        if ex.status == 200 and self._is_json and self._json_body:
            try:
                ex.on_data(bytes(self._json_body), t)
            except StreamFault as fault:
                self._fail(fault.kind, fault.detail, t)
                return
        self._json_body.clear()
        self._sse.clear()
        if ex.end_ns == 0:
            ex.end_ns = t
        self._complete()

    def _fail(self, kind: ErrorKind, detail: str, t: int) -> None:
        ex = self.ex
        if ex is None:
            return
        if ex.error is None:
            ex.error = kind
            ex.error_detail = detail
        ex.end_ns = t
        self.reusable = False
        self._complete()
        self._abort()

    def fail_from_watchdog(self, kind: ErrorKind, detail: str, t: int) -> None:
        """Called by the client's watchdog when a limit is exceeded."""
        self._fail(kind, detail, t)

    def _complete(self) -> None:
        ex = self.ex
        self.ex = None
        self._buf.clear()
        if ex is not None and ex.done is not None and not ex.done.done():
            ex.done.set_result(None)

    def _abort(self) -> None:
        self.reusable = False
        if self.transport is not None and not self.closed:
            self.transport.abort()

    def start(self, ex: Exchange, request: bytes) -> None:
        """Begin an exchange on this (idle) connection."""
        assert self.transport is not None
        self.ex = ex
        self._mode = ""
        self._buf.clear()
        self._sse.clear()
        self._json_body.clear()
        self.transport.write(request)


class StreamingTransport:
    """Streams POST requests to one endpoint over a pool of keep-alive connections.

    Use as ``async with StreamingTransport(url) as t: await t.post(...)``.
    """

    def __init__(
        self,
        base_url: str,
        *,
        timeouts: Timeouts | None = None,
        headers: dict[str, str] | None = None,
        watchdog_interval_s: float = 0.05,
    ) -> None:
        self.endpoint = Endpoint.parse(base_url)
        self.timeouts = timeouts or Timeouts()
        extra = {"Content-Type": "application/json", "Accept": "text/event-stream"}
        extra.update(headers or {})
        host = self.endpoint.host
        if ":" in host:
            host = f"[{host}]"
        self._head_prefix = f"Host: {host}:{self.endpoint.port}\r\n".encode() + b"".join(
            f"{k}: {v}\r\n".encode() for k, v in extra.items()
        )
        self._idle: list[_Conn] = []
        self._active: dict[_Conn, Exchange] = {}
        self._all: set[_Conn] = set()
        self._watchdog: asyncio.Task[None] | None = None
        self._interval = watchdog_interval_s
        self._ssl: ssl.SSLContext | None = (
            ssl.create_default_context() if self.endpoint.scheme == "https" else None
        )

    async def __aenter__(self) -> StreamingTransport:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close every connection and stop the watchdog."""
        if self._watchdog is not None:
            self._watchdog.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watchdog
            self._watchdog = None
        for conn in list(self._all):
            if conn.transport is not None and not conn.closed:
                conn.transport.close()
        self._idle.clear()
        self._all.clear()

    def _lost(self, conn: _Conn) -> None:
        self._all.discard(conn)
        self._active.pop(conn, None)
        if conn in self._idle:
            self._idle.remove(conn)

    async def _watch(self) -> None:
        while True:
            await asyncio.sleep(self._interval)
            now = time.perf_counter_ns()
            for conn, ex in list(self._active.items()):
                if conn.ex is not ex:
                    continue
                if now >= ex.deadline_ns:
                    conn.fail_from_watchdog(ErrorKind.TIMEOUT_TOTAL, "request deadline", now)
                elif not ex.got_event:  # headers may come at once; the first event counts
                    if now >= ex.first_byte_deadline_ns:
                        conn.fail_from_watchdog(
                            ErrorKind.TIMEOUT_FIRST_BYTE, "no response in time", now
                        )
                elif now - ex.last_data_ns >= ex.stall_ns:
                    conn.fail_from_watchdog(ErrorKind.TIMEOUT_STALL, "stream stalled", now)

    async def _connect(self, deadline_ns: int) -> _Conn:
        loop = asyncio.get_running_loop()
        budget = max(0.001, (deadline_ns - time.perf_counter_ns()) / 1e9)
        async with asyncio.timeout(budget):
            _, proto = await loop.create_connection(
                lambda: _Conn(self._lost),
                self.endpoint.host,
                self.endpoint.port,
                ssl=self._ssl,
            )
        self._all.add(proto)
        return proto

    async def post(
        self,
        path: str,
        body: bytes,
        on_data: Callable[[bytes, int], bool],
        *,
        send_ns: int,
        deadline_ns: int | None = None,
    ) -> Exchange:
        """Send one POST and feed every SSE payload to ``on_data`` until the body ends.

        Never raises for server or network faults: the returned exchange carries
        ``status``, ``error`` (an :class:`ErrorKind`) and ``end_ns``.
        """
        if self._watchdog is None:
            self._watchdog = asyncio.get_running_loop().create_task(self._watch())
        request = (
            f"POST {self.endpoint.prefix}{path} HTTP/1.1\r\n".encode()
            + self._head_prefix
            + f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        for attempt in range(2):
            ex = Exchange(on_data, send_ns, self.timeouts, deadline_ns)
            conn: _Conn | None = None
            reused = False
            while self._idle:
                cand = self._idle.pop()
                if not cand.closed and cand.reusable:
                    conn, reused = cand, True
                    break
            if conn is None:
                first_byte_deadline = min(ex.first_byte_deadline_ns, ex.deadline_ns)
                try:
                    conn = await self._connect(first_byte_deadline)
                except TimeoutError:
                    ex.error = ErrorKind.TIMEOUT_FIRST_BYTE
                    ex.error_detail = "connect timed out"
                    ex.end_ns = time.perf_counter_ns()
                    return ex
                except OSError as exc:
                    ex.error = ErrorKind.CONNECT
                    ex.error_detail = f"{type(exc).__name__}: {exc}"
                    ex.end_ns = time.perf_counter_ns()
                    return ex
            ex.done = asyncio.get_running_loop().create_future()
            self._active[conn] = ex
            conn.start(ex, request)
            try:
                await ex.done
            except asyncio.CancelledError:
                now = time.perf_counter_ns()
                conn.fail_from_watchdog(ErrorKind.TIMEOUT_TOTAL, "cancelled", now)
                raise
            finally:
                self._active.pop(conn, None)
            stale = reused and ex.error is ErrorKind.DISCONNECT and not ex.got_bytes
            if stale and attempt == 0:
                continue  # the server had closed an idle keep-alive connection: retry once
            if conn.reusable and not conn.closed and conn.ex is None:
                self._idle.append(conn)
            elif not conn.closed and conn.transport is not None:
                conn.transport.close()
            return ex
        raise AssertionError("unreachable")
