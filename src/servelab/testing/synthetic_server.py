"""TEST INFRASTRUCTURE: a synthetic OpenAI-compatible streaming server.

Not a model server. It answers ``/v1/completions`` and ``/v1/chat/completions``
with ``stream: true`` by emitting filler tokens on a configured schedule — first
chunk ``ttft_s (+ prefill_s_per_token × prompt tokens)`` after the request arrives,
then one chunk every ``itl_s`` — so a benchmark client's measurements can be
checked against known values, and it can inject faults (slow first byte, stall,
connection reset, HTTP 429/500/503 with or without Retry-After, invalid JSON in
the stream, missing or contradicting usage). It also serves ``/tokenize``,
``/v1/models``, ``/health``, ``/version`` and a vLLM-style ``/metrics``.

Tokenization rule (what ``/tokenize`` and ``usage.prompt_tokens`` count): one token
per whitespace-separated word of the prompt; for chat, the words of every message's
content plus :data:`CHAT_TOKENS_PER_MESSAGE` per message (a stand-in for a template).

Written on raw ``asyncio.Protocol`` with absolute-time scheduling (``loop.call_at``)
so that chunk times do not drift and the server is cheap per chunk. Run it in a
background thread with :class:`SyntheticServer`, or as a process:
``python -m servelab.testing.synthetic_server --port 18400 --ttft-ms 50 --itl-ms 10``.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import json
import socket
import struct
import threading
from typing import Any

from servelab.testing.synthetic_wire import (
    RECENT_BODIES,
    Fault,
    FaultKind,
    SyntheticConfig,
    _Counters,
    _frame,
    _render,
    _response,
    count_prompt_tokens,
    prompt_words,
)

__all__ = ["Fault", "FaultKind", "SyntheticConfig", "SyntheticServer", "main"]


class _Stream:
    """One streaming response, advanced by timer callbacks on the server loop."""

    __slots__ = ("conn", "cum", "fault", "frames", "handle", "idx", "prompt_tokens", "server",
                 "t_due", "t_first")

    def __init__(self, conn: _ServerConn, server: _Core, body: dict[str, Any], chat: bool,
                 fault: Fault | None) -> None:
        self.conn = conn
        self.server = server
        self.fault = fault
        self.prompt_tokens = count_prompt_tokens(body)
        mt = body.get("max_tokens", body.get("max_completion_tokens"))
        n_tokens = max(1, int(mt)) if isinstance(mt, int) else server.cfg.default_max_tokens
        so = body.get("stream_options") or {}
        include_usage = bool(so.get("include_usage"))
        continuous = bool(so.get("continuous_usage_stats"))
        if fault is not None and fault.kind is FaultKind.MISSING_USAGE:
            include_usage = continuous = False
        mismatch = fault is not None and fault.kind is FaultKind.USAGE_MISMATCH
        key = (str(body.get("model", server.cfg.model)), chat, self.prompt_tokens, n_tokens,
               server.cfg.tokens_per_chunk, include_usage, continuous, mismatch)
        cached = server.render_cache.get(key)
        if cached is None:
            if len(server.render_cache) > 4096:
                server.render_cache.clear()
            cached = server.render_cache[key] = _render(*key)
        self.frames, self.cum = cached
        self.idx = 0
        self.handle: asyncio.TimerHandle | None = None
        self.t_first = 0.0

    @property
    def n_tokens(self) -> int:
        """Tokens this response generates."""
        return self.cum[-1]

    @property
    def sent_tokens(self) -> int:
        """Tokens sent so far."""
        return self.cum[self.idx - 1] if self.idx else 0

    def start(self, t_recv: float) -> None:
        cfg = self.server.cfg
        self.t_first = t_recv + cfg.ttft_s + cfg.prefill_s_per_token * self.prompt_tokens
        self.t_due = self.t_first
        self.server.counters.running += 1
        self.handle = self.server.loop.call_at(self.t_first, self.tick)

    def tick(self) -> None:
        conn = self.conn
        if conn.closed:
            self.finish()
            return
        cfg = self.server.cfg
        i = self.idx
        end = len(self.frames)
        now = self.server.loop.time()
        j = i + 1
        loaded = cfg.itl_per_running_s > 0
        while (not loaded and j < end and j - i < cfg.max_chunks_per_write
               and self.t_first + j * cfg.itl_s <= now):
            j += 1
        fault = self.fault
        action = ""
        if fault is not None and i <= fault.after_chunks < j and fault.kind in (
                FaultKind.STALL, FaultKind.RESET, FaultKind.BAD_JSON):
            j = fault.after_chunks
            action = fault.kind.value
        if j > i:
            conn.write(b"".join(self.frames[i:j]))
        self.idx = j
        if action == FaultKind.BAD_JSON:
            conn.write(_frame(b'data: {"choices": [{"text": "tok", \n\n'))
            self.fault = None  # the client should give up; if not, the stream goes on
        elif action == FaultKind.STALL:
            return  # never send another byte; the client must give up
        elif action == FaultKind.RESET:
            conn.reset()
            self.finish()
            return
        if self.idx >= end:
            self.finish()
            conn.response_done()
            return
        if loaded:  # the gap depends on the load now; planned times do not drift
            running = self.server.counters.running
            self.t_due += cfg.itl_s + cfg.itl_per_running_s * max(running - 1, 0)
            self.handle = self.server.loop.call_at(self.t_due, self.tick)
            return
        self.handle = self.server.loop.call_at(self.t_first + self.idx * cfg.itl_s, self.tick)

    def finish(self) -> None:
        c = self.server.counters
        c.running -= 1
        sent = self.sent_tokens
        c.generation_tokens += sent
        if self.server.cfg.tokens_per_chunk > 1 and self.idx > 1:
            drafts = self.idx - 1
            c.spec_drafts += drafts
            c.spec_draft_tokens += drafts * (self.server.cfg.tokens_per_chunk - 1)
            c.spec_accepted += sent - self.idx
            for m in range(1, self.idx):  # chunk m: one verified token + its accepted drafts
                for pos in range(self.cum[m] - self.cum[m - 1] - 1):
                    c.spec_accepted_per_pos[pos] = c.spec_accepted_per_pos.get(pos, 0) + 1
        if self.conn.stream is self:
            self.conn.stream = None


class _ServerConn(asyncio.Protocol):
    def __init__(self, core: _Core) -> None:
        self.core = core
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        self.closed = False
        self.busy = False
        self.stream: _Stream | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        s = self.stream
        if s is not None:
            if s.handle is not None:
                s.handle.cancel()
            s.finish()

    def write(self, data: bytes) -> None:
        if self.transport is not None and not self.closed and not self.transport.is_closing():
            self.transport.write(data)

    def reset(self) -> None:
        """Abort with RST (SO_LINGER 0) so the client sees a connection reset."""
        if self.transport is None or self.closed:
            return
        sock = self.transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.transport.abort()

    def response_done(self) -> None:
        self.busy = False
        if self.buf:
            self._try_request()

    def data_received(self, data: bytes) -> None:
        self.buf += data
        if not self.busy:
            self._try_request()

    def _try_request(self) -> None:
        end = self.buf.find(b"\r\n\r\n")
        if end < 0:
            return
        head = bytes(self.buf[:end]).decode("latin-1")
        lines = head.split("\r\n")
        try:
            method, target, _ = lines[0].split(" ", 2)
        except ValueError:
            self.write(_response(400, b'{"error":"bad request line"}'))
            if self.transport is not None:
                self.transport.close()
            return
        length = 0
        for line in lines[1:]:
            name, _, value = line.partition(":")
            if name.strip().lower() == "content-length":
                length = int(value.strip() or 0)
        if len(self.buf) < end + 4 + length:
            return
        body = bytes(self.buf[end + 4 : end + 4 + length])
        del self.buf[: end + 4 + length]
        self.busy = True
        self.core.handle(self, method, target.split("?", 1)[0], body)


class _Core:
    def __init__(self, cfg: SyntheticConfig, loop: asyncio.AbstractEventLoop) -> None:
        self.cfg = cfg
        self.loop = loop
        self.counters = _Counters()
        self.render_cache: dict[tuple[Any, ...], tuple[tuple[bytes, ...], tuple[int, ...]]] = {}
        self.prefix_blocks: set[int] = set()
        self.recent: collections.deque[dict[str, Any]] = collections.deque(maxlen=RECENT_BODIES)

    def prefix_lookup(self, body: dict[str, Any], n_prompt: int) -> None:
        """Count cached leading blocks of this prompt, then cache all its full blocks."""
        b = self.cfg.prefix_block
        if b <= 0:
            return
        words = prompt_words(body)
        h = 0
        hits = 0
        missed = False
        for k in range(len(words) // b):
            h = hash((h, *words[k * b:(k + 1) * b]))
            if not missed and h in self.prefix_blocks:
                hits += b
            else:
                missed = True
                self.prefix_blocks.add(h)
        self.counters.prefix_queries += n_prompt
        self.counters.prefix_hits += min(hits, max(n_prompt - 1, 0))

    def _reply(self, conn: _ServerConn, status: int, obj: Any, extra: bytes = b"") -> None:
        conn.write(_response(status, json.dumps(obj).encode(), extra=extra))
        conn.response_done()

    def handle(self, conn: _ServerConn, method: str, path: str, raw: bytes) -> None:
        c = self.counters
        c.requests += 1
        cfg = self.cfg
        if method == "GET" and path == "/health":
            conn.write(_response(200, b"", b"text/plain"))
            conn.response_done()
        elif method == "GET" and path == "/version":
            self._reply(conn, 200, {"version": "synthetic"})
        elif method == "GET" and path == "/v1/models":
            self._reply(conn, 200, {"object": "list", "data": [
                {"id": cfg.model, "object": "model", "owned_by": "servelab-synthetic",
                 "max_model_len": cfg.max_model_len}]})
        elif method == "GET" and path == "/metrics":
            conn.write(_response(200, self.metrics_text().encode(), b"text/plain; version=0.0.4"))
            conn.response_done()
        elif method == "POST" and path in ("/tokenize", "/v1/completions",
                                           "/v1/chat/completions"):
            try:
                body = json.loads(raw)
                if not isinstance(body, dict):
                    raise ValueError("body is not an object")
            except ValueError as exc:
                self._reply(conn, 400, {"error": {"message": f"invalid JSON body: {exc}"}})
                return
            if path == "/tokenize":
                n = count_prompt_tokens(body)
                self._reply(conn, 200, {"count": n, "max_model_len": cfg.max_model_len,
                                        "tokens": list(range(n))})
            else:
                self._generate(conn, body, chat=path.endswith("chat/completions"))
        else:
            self._reply(conn, 404, {"error": {"message": f"no route {method} {path}"}})

    def _generate(self, conn: _ServerConn, body: dict[str, Any], chat: bool) -> None:
        c = self.counters
        c.generation_requests += 1
        self.recent.append(body)
        rid = c.generation_requests
        cfg = self.cfg
        fault = cfg.fault if cfg.fault is not None and rid % cfg.fault.every == 0 else None
        if fault is not None:
            c.faults[fault.kind.value] = c.faults.get(fault.kind.value, 0) + 1
        if fault is not None and fault.kind in (
            FaultKind.HTTP_429, FaultKind.HTTP_500, FaultKind.HTTP_503
        ):
            status = int(fault.kind.value[-3:])
            extra = b""
            if fault.retry_after_s is not None:
                extra = b"retry-after: %d\r\n" % round(fault.retry_after_s)
            self._reply(conn, status, {"error": {"message": f"injected {status}"}}, extra)
            return
        n_prompt = count_prompt_tokens(body)
        if n_prompt > cfg.max_model_len:
            self._reply(conn, 400, {"error": {"message": "prompt too long"}})
            return
        c.prompt_tokens += n_prompt
        if fault is not None and fault.kind is FaultKind.MISCOUNT:
            c.generation_tokens += 1
        self.prefix_lookup(body, n_prompt)
        t_recv = self.loop.time()
        if fault is not None and fault.kind is FaultKind.SLOW_FIRST_BYTE:
            t_recv += fault.delay_s
        stream = _Stream(conn, self, body, chat, fault)
        conn.stream = stream
        if not body.get("stream"):
            self._non_streaming(conn, stream, t_recv, chat)
            return
        head = (b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\n"
                b"transfer-encoding: chunked\r\n\r\n")
        if fault is not None and fault.kind is FaultKind.SLOW_FIRST_BYTE:
            self.loop.call_at(t_recv, conn.write, head)
        else:
            conn.write(head)
        stream.start(t_recv)

    def _non_streaming(self, conn: _ServerConn, s: _Stream, t_recv: float, chat: bool) -> None:
        cfg = self.cfg
        n = s.n_tokens
        chunks = 1 + -(-(n - 1) // cfg.tokens_per_chunk)
        t_done = t_recv + cfg.ttft_s + cfg.prefill_s_per_token * s.prompt_tokens + (
            chunks - 1) * cfg.itl_s
        text = " tok" * n
        choice: dict[str, Any] = {"index": 0, "finish_reason": "length"}
        if chat:
            choice["message"] = {"role": "assistant", "content": text}
        else:
            choice["text"] = text
        obj = {"id": "cmpl-x", "object": "chat.completion" if chat else "text_completion",
               "model": cfg.model, "choices": [choice],
               "usage": {"prompt_tokens": s.prompt_tokens, "completion_tokens": n,
                         "total_tokens": s.prompt_tokens + n}}

        def done() -> None:
            self.counters.generation_tokens += n
            conn.stream = None
            self._reply(conn, 200, obj)

        self.loop.call_at(t_done, done)

    def metrics_text(self) -> str:
        c = self.counters
        m = self.cfg.model
        lines = [
            "# TYPE vllm:prompt_tokens_total counter",
            f'vllm:prompt_tokens_total{{model_name="{m}"}} {float(c.prompt_tokens)}',
            "# TYPE vllm:generation_tokens_total counter",
            f'vllm:generation_tokens_total{{model_name="{m}"}} {float(c.generation_tokens)}',
            "# TYPE vllm:num_requests_running gauge",
            f'vllm:num_requests_running{{model_name="{m}"}} {float(c.running)}',
            "# TYPE vllm:prefix_cache_queries counter",
            f'vllm:prefix_cache_queries_total{{model_name="{m}"}} {float(c.prefix_queries)}',
            "# TYPE vllm:prefix_cache_hits counter",
            f'vllm:prefix_cache_hits_total{{model_name="{m}"}} {float(c.prefix_hits)}',
            "# TYPE synthetic:generation_requests_total counter",
            f"synthetic:generation_requests_total {float(c.generation_requests)}",
        ]
        if self.cfg.tokens_per_chunk > 1:
            lines += [
                "# TYPE vllm:spec_decode_num_drafts_total counter",
                f'vllm:spec_decode_num_drafts_total{{model_name="{m}"}} {float(c.spec_drafts)}',
                "# TYPE vllm:spec_decode_num_draft_tokens_total counter",
                f'vllm:spec_decode_num_draft_tokens_total{{model_name="{m}"}} '
                f"{float(c.spec_draft_tokens)}",
                "# TYPE vllm:spec_decode_num_accepted_tokens_total counter",
                f'vllm:spec_decode_num_accepted_tokens_total{{model_name="{m}"}} '
                f"{float(c.spec_accepted)}",
                "# TYPE vllm:spec_decode_num_accepted_tokens_per_pos counter",
            ]
            lines += [
                f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{model_name="{m}",'
                f'position="{pos}"}} {float(c.spec_accepted_per_pos.get(pos, 0))}'
                for pos in range(self.cfg.tokens_per_chunk - 1)
            ]
        return "\n".join(lines) + "\n"


class SyntheticServer:
    """Runs the synthetic server on its own event loop in a background thread.

    ``with SyntheticServer(SyntheticConfig(...)) as srv: srv.base_url`` — port 0
    picks a free port.
    """

    def __init__(self, config: SyntheticConfig | None = None, *, host: str = "127.0.0.1",
                 port: int = 0) -> None:
        self.config = config or SyntheticConfig()
        self.host = host
        self._port = port
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: asyncio.Server | None = None
        self._core: _Core | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None

    @property
    def port(self) -> int:
        """The bound port (after start)."""
        return self._port

    @property
    def base_url(self) -> str:
        """``http://host:port``."""
        return f"http://{self.host}:{self._port}"

    def counters(self) -> dict[str, Any]:
        """A snapshot of the server's counters (requests, tokens, faults injected)."""
        assert self._core is not None and self._loop is not None
        fut = asyncio.run_coroutine_threadsafe(self._snapshot(), self._loop)
        return fut.result(5)

    def prompts(self) -> list[str]:
        """The prompts of the last :data:`RECENT_BODIES` generation requests, oldest first
        (words joined by one space; a chat request's message contents in order)."""
        assert self._core is not None and self._loop is not None
        fut = asyncio.run_coroutine_threadsafe(self._prompts(), self._loop)
        return fut.result(5)

    async def _prompts(self) -> list[str]:
        assert self._core is not None
        return [" ".join(prompt_words(b)) for b in self._core.recent]

    async def _snapshot(self) -> dict[str, Any]:
        assert self._core is not None
        c = self._core.counters
        return {"requests": c.requests, "generation_requests": c.generation_requests,
                "prompt_tokens": c.prompt_tokens, "generation_tokens": c.generation_tokens,
                "running": c.running, "prefix_cache_queries": c.prefix_queries,
                "prefix_cache_hits": c.prefix_hits, "faults": dict(c.faults)}

    def start(self) -> SyntheticServer:
        """Start serving; returns once the socket is bound."""
        self._thread = threading.Thread(target=self._run, name="synthetic-server", daemon=True)
        self._thread.start()
        self._ready.wait(10)
        if self._error is not None:
            raise self._error
        return self

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            self._core = _Core(self.config, loop)
            core = self._core
            self._server = loop.run_until_complete(
                loop.create_server(lambda: _ServerConn(core), self.host, self._port,
                                   backlog=4096, reuse_address=True))
            self._port = self._server.sockets[0].getsockname()[1]
        except BaseException as exc:  # surfaced to start()
            self._error = exc
            self._ready.set()
            loop.close()
            return
        self._ready.set()
        try:
            loop.run_forever()
        finally:
            self._server.close()
            loop.run_until_complete(self._server.wait_closed())
            loop.close()

    def stop(self) -> None:
        """Stop the server and join its thread (open connections are dropped)."""
        loop = self._loop
        if loop is not None and self._thread is not None and self._thread.is_alive():
            async def _close() -> None:
                assert self._server is not None
                self._server.close()
                for task in asyncio.all_tasks():
                    if task is not asyncio.current_task():
                        task.cancel()
                if hasattr(self._server, "close_clients"):
                    self._server.close_clients()
                loop.stop()

            asyncio.run_coroutine_threadsafe(_close(), loop)
            self._thread.join(10)

    def __enter__(self) -> SyntheticServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


async def serve(config: SyntheticConfig, host: str, port: int) -> None:
    """Serve forever on the current loop (used by ``python -m``)."""
    loop = asyncio.get_running_loop()
    core = _Core(config, loop)
    server = await loop.create_server(lambda: _ServerConn(core), host, port, backlog=4096,
                                      reuse_address=True)
    print(f"synthetic server listening on http://{host}:{port}", flush=True)
    async with server:
        await server.serve_forever()


def main(argv: list[str] | None = None) -> None:
    """Command line: ``python -m servelab.testing.synthetic_server --help``."""
    p = argparse.ArgumentParser(description="servelab's synthetic OpenAI-compatible "
                                "streaming server (test infrastructure).")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=18400)
    p.add_argument("--ttft-ms", type=float, default=50.0)
    p.add_argument("--itl-ms", type=float, default=10.0)
    p.add_argument("--prefill-us-per-token", type=float, default=0.0)
    p.add_argument("--tokens-per-chunk", type=int, default=1)
    p.add_argument("--itl-per-running-ms", type=float, default=0.0)
    p.add_argument("--max-chunks-per-write", type=int, default=16)
    p.add_argument("--model", default="synthetic")
    p.add_argument("--fault", choices=[k.value for k in FaultKind], default=None)
    p.add_argument("--fault-every", type=int, default=1)
    args = p.parse_args(argv)
    fault = Fault(FaultKind(args.fault), every=args.fault_every) if args.fault else None
    cfg = SyntheticConfig(ttft_s=args.ttft_ms / 1e3, itl_s=args.itl_ms / 1e3,
                          prefill_s_per_token=args.prefill_us_per_token / 1e6,
                          tokens_per_chunk=args.tokens_per_chunk, model=args.model,
                          max_chunks_per_write=args.max_chunks_per_write,
                          itl_per_running_s=args.itl_per_running_ms / 1e3,
                          fault=fault)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(cfg, args.host, args.port))


if __name__ == "__main__":
    main()
