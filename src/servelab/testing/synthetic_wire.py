"""The synthetic server's wire: its configuration and faults, prompt token counting, HTTP
responses, and the OpenAI-compatible chunks it streams (:mod:`servelab.testing.
synthetic_server` serves them). Standard library only.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

CHAT_TOKENS_PER_MESSAGE = 3
RECENT_BODIES = 256
"""Generation requests whose prompts :meth:`SyntheticServer.prompts` can show."""


class FaultKind(StrEnum):
    """Faults the server can inject."""

    SLOW_FIRST_BYTE = "slow_first_byte"
    STALL = "stall"
    RESET = "reset"
    HTTP_429 = "http_429"
    HTTP_500 = "http_500"
    HTTP_503 = "http_503"
    BAD_JSON = "bad_json"
    MISSING_USAGE = "missing_usage"
    USAGE_MISMATCH = "usage_mismatch"
    MISCOUNT = "miscount"
    """The stream is correct, but ``/metrics`` counts one generated token more."""


@dataclass(frozen=True, slots=True)
class Fault:
    """Inject ``kind`` into every ``every``-th generation request (1 = all of them)."""

    kind: FaultKind
    every: int = 1
    after_chunks: int = 2
    """For mid-stream faults: how many token chunks go out first."""
    delay_s: float = 3600.0
    """For ``slow_first_byte``: how long the server waits before answering."""
    retry_after_s: float | None = None
    """For 429/503: send a ``Retry-After`` header with this many seconds."""


@dataclass(frozen=True, slots=True)
class SyntheticConfig:
    """Timing and identity of the synthetic server."""

    ttft_s: float = 0.05
    itl_s: float = 0.01
    """Time between chunks after the first one."""
    prefill_s_per_token: float = 0.0
    tokens_per_chunk: int = 1
    """Tokens per chunk after the first (>1 imitates speculative decoding)."""
    max_chunks_per_write: int = 16
    """When the server runs late (or ``itl_s`` is 0), due chunks go out together, up to this
    many per write: the schedule stays absolute, and ``itl_s=0`` streams as fast as a
    client can read."""
    model: str = "synthetic"
    max_model_len: int = 65536
    default_max_tokens: int = 16
    fault: Fault | None = None
    itl_per_running_s: float = 0.0
    """Load-dependent decode: each gap is ``itl_s + itl_per_running_s × (running − 1)``,
    ``running`` = streams in flight when the chunk goes out (a known capacity to search)."""
    prefix_block: int = 16
    """Tokens per prefix-cache block: the server keeps every full block of every prompt it
    saw (chained hashes of its words) and counts looked-up and cached prompt tokens as vLLM's
    ``vllm:prefix_cache_queries`` / ``vllm:prefix_cache_hits`` counters; 0 turns it off."""


def prompt_words(body: dict[str, Any]) -> list[str]:
    """The words a request's prompt consists of (message contents in order for chat)."""
    if "messages" in body:
        words: list[str] = []
        for msg in body["messages"]:
            content = msg.get("content", "") if isinstance(msg, dict) else ""
            if isinstance(content, list):
                content = " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
            words += str(content).split()
        return words
    prompt = body.get("prompt", "")
    if isinstance(prompt, list):
        prompt = " ".join(str(x) for x in prompt)
    return str(prompt).split()


def count_prompt_tokens(body: dict[str, Any]) -> int:
    """Prompt tokens under this server's tokenization rule (see module docstring)."""
    if "messages" in body:
        n_msgs = sum(1 for _ in body["messages"])
        return len(prompt_words(body)) + CHAT_TOKENS_PER_MESSAGE * n_msgs
    prompt = body.get("prompt", "")
    if isinstance(prompt, list) and prompt and all(isinstance(x, int) for x in prompt):
        return len(prompt)
    return len(prompt_words(body))


@dataclass
class _Counters:
    requests: int = 0
    generation_requests: int = 0
    prompt_tokens: int = 0
    generation_tokens: int = 0
    spec_drafts: int = 0
    spec_draft_tokens: int = 0
    spec_accepted: int = 0
    spec_accepted_per_pos: dict[int, int] = field(default_factory=dict)
    running: int = 0
    prefix_queries: int = 0
    prefix_hits: int = 0
    faults: dict[str, int] = field(default_factory=dict)


_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 429: "Too Many Requests",
            500: "Internal Server Error", 503: "Service Unavailable"}


def _response(status: int, body: bytes, ctype: bytes = b"application/json",
              extra: bytes = b"") -> bytes:
    reason = _REASONS.get(status, "Unknown").encode()
    return (
        b"HTTP/1.1 %d %s\r\ncontent-type: %s\r\ncontent-length: %d\r\n%s\r\n"
        % (status, reason, ctype, len(body), extra)
        + body
    )


def _frame(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


_RENDER_FAULTS = (FaultKind.MISSING_USAGE, FaultKind.USAGE_MISMATCH)


def _render(model: str, chat: bool, prompt_tokens: int, n_tokens: int, per_chunk: int,
            include_usage: bool, continuous: bool, mismatch: bool
            ) -> tuple[tuple[bytes, ...], tuple[int, ...]]:
    """All HTTP chunk frames of one response and the cumulative tokens after each frame.

    The last frame also carries the usage chunk, ``[DONE]`` and the terminal chunk.
    """
    kind = "chat.completion.chunk" if chat else "text_completion"
    prefix = (f'{{"id":"cmpl-synthetic","object":"{kind}","created":{int(time.time())},'
              f'"model":{json.dumps(model)},"choices":[').encode()

    def usage(completion: int) -> bytes:
        return b'"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d}' % (
            prompt_tokens, completion, prompt_tokens + completion)

    frames: list[bytes] = []
    cum: list[int] = []
    sent = 0
    while sent < n_tokens:
        ntok = min(1 if not frames else per_chunk, n_tokens - sent)
        sent += ntok
        last = sent >= n_tokens
        text = (" tok" * ntok).encode()
        fr = b'"length"' if last else b"null"
        if chat:
            choice = b'{"index":0,"delta":{"content":"%s"},"logprobs":null,"finish_reason":%s}' % (
                text, fr)
        else:
            choice = b'{"index":0,"text":"%s","logprobs":null,"finish_reason":%s}' % (text, fr)
        body = prefix + choice + b"]" + ((b"," + usage(sent)) if continuous else b"") + b"}"
        frame = _frame(b"data: " + body + b"\n\n")
        if last:
            if include_usage:
                reported = (1 if sent > 1 else sent + 5) if mismatch else sent
                frame += _frame(b"data: " + prefix + b"]," + usage(reported) + b"}\n\n")
            frame += _frame(b"data: [DONE]\n\n") + b"0\r\n\r\n"
        frames.append(frame)
        cum.append(sent)
    return tuple(frames), tuple(cum)
