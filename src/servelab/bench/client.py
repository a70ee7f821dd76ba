"""Async streaming client for ``/v1/completions`` and ``/v1/chat/completions``.

One call of :meth:`BenchClient.send` is one request and returns one
:class:`~servelab.bench.samples.RequestSample`; it never raises for a server or
network fault — the fault is the sample's ``error``. Token counts come from the
server's ``usage`` only, never from counting chunks; with ``continuous_usage`` the
server reports usage on every chunk so tokens per chunk are known too.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any, Literal

import orjson

from servelab.bench.prompts import Turn, chat_messages
from servelab.bench.samples import ErrorKind, RequestSample
from servelab.bench.transport import StreamFault, StreamingTransport, Timeouts
from servelab.errors import BenchError

EndpointKind = Literal["completions", "chat"]

_loads = orjson.loads  # strict (no trailing data, valid UTF-8); ~4x faster than json

_PATHS: dict[str, str] = {"completions": "/v1/completions", "chat": "/v1/chat/completions"}


@dataclass(frozen=True, slots=True)
class ClientOptions:
    """What every request of a run sends besides its prompt."""

    model: str
    endpoint: EndpointKind = "completions"
    temperature: float = 0.0
    ignore_eos: bool = True
    """Ask the server to generate exactly ``max_tokens`` (vLLM, SGLang support it)."""
    continuous_usage: bool = True
    """Ask for usage on every chunk (vLLM's ``stream_options.continuous_usage_stats``)."""
    chat_template_kwargs: dict[str, Any] | None = None
    extra_body: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class RequestSpec:
    """One request: its prompt text, the length it was built to, and the output length.

    ``history``: the earlier turns of a chat conversation, sent before ``prompt`` as
    alternating user / assistant messages (``prompt_len`` counts them all, templated).
    """

    prompt: str
    prompt_len: int
    max_tokens: int
    history: tuple[Turn, ...] = ()


class _Collector:
    """Turns SSE payloads into observations; raises StreamFault on bad events."""

    __slots__ = (
        "chat",
        "chunk_ns",
        "chunk_tokens",
        "completion_tokens",
        "continuous",
        "done",
        "finish_reason",
        "last_ct",
        "prompt_tokens",
        "send",
        "text_chunks",
        "texts",
    )

    def __init__(self, send: int, chat: bool, continuous: bool,
                 texts: list[str] | None = None) -> None:
        self.send = send
        self.chat = chat
        self.continuous = continuous
        self.chunk_ns: list[int] = []
        self.chunk_tokens: list[int] | None = [] if continuous else None
        self.last_ct = 0
        self.text_chunks = 0
        self.texts = texts
        self.prompt_tokens: int | None = None
        self.completion_tokens: int | None = None
        self.finish_reason: str | None = None
        self.done = False

    def on_data(self, payload: bytes, t: int) -> bool:
        if payload == b"[DONE]":
            self.done = True
            return True
        try:
            obj = _loads(payload)
        except ValueError:
            detail = f"invalid JSON in event: {payload[:80]!r}"
            raise StreamFault(ErrorKind.BAD_SSE, detail) from None
        try:
            usage = obj.get("usage")
            choices = obj.get("choices")
            if choices:
                c0 = choices[0]
                self.chunk_ns.append(t - self.send)
                if self.chat:
                    delta = c0.get("delta") or c0.get("message") or {}
                    text = (delta.get("content") or delta.get("reasoning_content")
                            or delta.get("reasoning"))
                else:
                    text = c0.get("text")
                if text:
                    self.text_chunks += 1
                    if self.texts is not None:
                        self.texts.append(text)
                fr = c0.get("finish_reason")
                if fr:
                    self.finish_reason = str(fr)
                if self.chunk_tokens is not None:
                    ct = usage.get("completion_tokens") if usage else None
                    if type(ct) is int:
                        self.chunk_tokens.append(ct - self.last_ct)
                        self.last_ct = ct
                    else:
                        self.chunk_tokens = None
            elif "error" in obj and not usage:
                err = obj["error"]
                msg = err.get("message") if isinstance(err, dict) else err
                raise StreamFault(ErrorKind.SERVER_ERROR_EVENT,
                                  f"server error in stream: {msg!s:.200}")
            if usage:
                pt = usage.get("prompt_tokens")
                ct = usage.get("completion_tokens")
                if type(pt) is int:
                    self.prompt_tokens = pt
                if type(ct) is int:
                    self.completion_tokens = ct
        except (AttributeError, TypeError, KeyError, IndexError) as exc:
            detail = f"unexpected event shape ({type(exc).__name__}): {payload[:80]!r}"
            raise StreamFault(ErrorKind.BAD_SSE, detail) from None
        return False


def _status_kind(status: int) -> ErrorKind:
    if status == 429:
        return ErrorKind.HTTP_429
    if 400 <= status < 500:
        return ErrorKind.HTTP_4XX
    if status >= 500:
        return ErrorKind.HTTP_5XX
    return ErrorKind.PROTOCOL


def _usage_problem(c: _Collector, max_tokens: int) -> str | None:
    ct = c.completion_tokens
    assert ct is not None
    if ct < c.text_chunks:
        return f"usage says {ct} completion tokens but {c.text_chunks} chunks carried text"
    if ct > max_tokens:
        return f"usage says {ct} completion tokens, more than max_tokens={max_tokens}"
    if c.chunk_tokens is not None and c.chunk_tokens:
        if any(n < 0 for n in c.chunk_tokens):
            return "per-chunk usage went backwards"
        if sum(c.chunk_tokens) != ct:
            return f"per-chunk usage sums to {sum(c.chunk_tokens)}, final usage says {ct}"
    return None


class BenchClient:
    """Sends benchmark requests to one OpenAI-compatible server.

    Use as ``async with BenchClient(url, options) as client: await client.send(...)``.
    """

    def __init__(
        self,
        base_url: str,
        options: ClientOptions,
        *,
        timeouts: Timeouts | None = None,
        api_key: str | None = None,
    ) -> None:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.options = options
        self.transport = StreamingTransport(base_url, timeouts=timeouts, headers=headers)
        self._path = _PATHS[options.endpoint]
        self._chat = options.endpoint == "chat"

    async def __aenter__(self) -> BenchClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.transport.aclose()

    def body(self, spec: RequestSpec) -> dict[str, Any]:
        """The JSON body sent for ``spec``."""
        o = self.options
        stream_options: dict[str, Any] = {"include_usage": True}
        if o.continuous_usage:
            stream_options["continuous_usage_stats"] = True
        body: dict[str, Any] = {
            "model": o.model,
            "max_tokens": spec.max_tokens,
            "temperature": o.temperature,
            "stream": True,
            "stream_options": stream_options,
        }
        if self._chat:
            body["messages"] = chat_messages(spec.history, spec.prompt)
            if o.chat_template_kwargs is not None:
                body["chat_template_kwargs"] = o.chat_template_kwargs
        else:
            if spec.history:
                raise BenchError("chat history needs the chat endpoint")
            body["prompt"] = spec.prompt
        if o.ignore_eos:
            body["ignore_eos"] = True
        body.update(o.extra_body)
        return body

    async def send(
        self,
        spec: RequestSpec,
        index: int,
        *,
        t0_ns: int,
        deadline_ns: int | None = None,
        warmup: bool = False,
        scheduled_ns: int | None = None,
        answer: list[str] | None = None,
    ) -> RequestSample:
        """Send one streaming request and return what was measured.

        ``scheduled_ns`` (open loop, on the ``perf_counter_ns`` clock) is kept relative to
        ``t0_ns`` like the send time, so the dispatch lag is known per request. With
        ``answer`` (a multi-turn conversation's history), the streamed text pieces are
        appended to it; other requests keep no text.
        """
        payload = json.dumps(self.body(spec), separators=(",", ":")).encode()
        send = time.perf_counter_ns()
        col = _Collector(send, self._chat, self.options.continuous_usage, answer)
        ex = await self.transport.post(
            self._path, payload, col.on_data, send_ns=send, deadline_ns=deadline_ns
        )
        error, detail = ex.error, ex.error_detail
        if error is None and ex.status is not None and ex.status != 200:
            error = _status_kind(ex.status)
            text = bytes(ex.body_error).decode("utf-8", "replace").strip()
            detail = f"HTTP {ex.status}: {text[:200]}"
        if error is None:
            if not col.chunk_ns:
                error, detail = ErrorKind.NO_CHOICES, "stream ended without a token chunk"
            elif col.completion_tokens is None:
                error, detail = ErrorKind.MISSING_USAGE, "no usage in the stream"
            else:
                problem = _usage_problem(col, spec.max_tokens)
                if problem is not None:
                    error, detail = ErrorKind.USAGE_MISMATCH, problem
        chunk_tokens = col.chunk_tokens
        if chunk_tokens is not None and len(chunk_tokens) != len(col.chunk_ns):
            chunk_tokens = None
        return RequestSample(
            index=index,
            prompt_len=spec.prompt_len,
            max_tokens=spec.max_tokens,
            send_ns=send - t0_ns,
            chunk_ns=tuple(col.chunk_ns),
            chunk_tokens=tuple(chunk_tokens) if chunk_tokens is not None else None,
            end_ns=max(ex.end_ns - send, 0),
            prompt_tokens=col.prompt_tokens,
            completion_tokens=col.completion_tokens,
            finish_reason=col.finish_reason,
            error=error,
            error_detail=detail,
            http_status=ex.status,
            retry_after_s=ex.retry_after_s,
            warmup=warmup,
            scheduled_ns=scheduled_ns - t0_ns if scheduled_ns is not None else None,
        )
