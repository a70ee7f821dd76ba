"""Per-request samples: what one streamed request measured, and how it failed.

A :class:`RequestSample` holds raw observations only (clock readings from
``time.perf_counter_ns`` and the server's own ``usage`` counts); every metric is
derived from these in :mod:`servelab.bench.metrics`.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any


class ErrorKind(StrEnum):
    """Why a request did not yield a usable sample. Stable strings (they go into JSON)."""

    CONNECT = "connect"
    """The TCP connection could not be opened (refused, unreachable)."""
    TIMEOUT_FIRST_BYTE = "timeout_first_byte"
    """No response body (first event) within the first-byte timeout, headers or not."""
    TIMEOUT_STALL = "timeout_stall"
    """The stream started but went silent for longer than the stall timeout."""
    TIMEOUT_TOTAL = "timeout_total"
    """The request exceeded its total time budget (or the run's deadline)."""
    DISCONNECT = "disconnect"
    """The server closed or reset the connection before the stream ended."""
    HTTP_429 = "http_429"
    """Rate limited (HTTP 429)."""
    HTTP_4XX = "http_4xx"
    """Another client error status (bad model name, prompt too long, ...)."""
    HTTP_5XX = "http_5xx"
    """Server error status (500, 502, 503, ...)."""
    PROTOCOL = "protocol"
    """The HTTP response itself is malformed."""
    BAD_SSE = "bad_sse"
    """A server-sent event carried something that is not valid JSON."""
    SERVER_ERROR_EVENT = "server_error_event"
    """The stream carried an ``{"error": ...}`` object."""
    NO_CHOICES = "no_choices"
    """The stream ended without a single chunk carrying choices (no first token)."""
    MISSING_USAGE = "missing_usage"
    """The stream ended without ``usage``: token counts are unknown (never guessed)."""
    USAGE_MISMATCH = "usage_mismatch"
    """``usage`` contradicts the stream (fewer tokens than text chunks, more than asked...)."""
    REPORTED = "reported"
    """An imported result (``vllm bench serve``) recorded the request as failed; its own
    words are the detail."""


@dataclass(frozen=True, slots=True)
class RequestSample:
    """Everything measured for one request.

    Times are integers in nanoseconds. ``send_ns`` is relative to the start of the
    run; ``chunk_ns`` are offsets from ``send_ns`` of every chunk that carried
    ``choices`` (the first one is the time to first token). ``chunk_tokens`` is the
    number of tokens in each such chunk, known only when the server reports usage on
    every chunk (vLLM's ``continuous_usage_stats``); otherwise ``None``.
    ``prompt_tokens`` / ``completion_tokens`` come from the server's ``usage`` only.
    """

    index: int
    prompt_len: int
    """Prompt length the client asked for (tokens, as the server counts them)."""
    max_tokens: int
    send_ns: int
    chunk_ns: tuple[int, ...]
    chunk_tokens: tuple[int, ...] | None
    end_ns: int
    """Offset from ``send_ns`` when the response ended (``[DONE]``, close or error)."""
    prompt_tokens: int | None
    completion_tokens: int | None
    finish_reason: str | None
    error: ErrorKind | None = None
    error_detail: str | None = None
    http_status: int | None = None
    retry_after_s: float | None = None
    warmup: bool = False
    scheduled_ns: int | None = None
    """Open loop: when the load profile said to send it (same clock as ``send_ns``)."""

    @property
    def dispatch_lag_ns(self) -> int | None:
        """Open loop: how late the client sent the request after its scheduled time."""
        return self.send_ns - self.scheduled_ns if self.scheduled_ns is not None else None

    @property
    def ok(self) -> bool:
        """True when the sample is complete and consistent."""
        return self.error is None

    @property
    def ttft_ns(self) -> int | None:
        """Send to first chunk with choices."""
        return self.chunk_ns[0] if self.chunk_ns else None

    @property
    def latency_ns(self) -> int | None:
        """Send to last chunk with choices (``vllm bench serve``'s E2E latency)."""
        return self.chunk_ns[-1] if self.chunk_ns else None

    @property
    def prompt_len_mismatch(self) -> bool:
        """The server counted a different prompt length than the client built."""
        return self.prompt_tokens is not None and self.prompt_tokens != self.prompt_len

    def to_json(self) -> dict[str, Any]:
        """Plain-JSON form (schema ``servelab.bench/1``, ``samples[]``)."""
        return {
            "index": self.index,
            "prompt_len": self.prompt_len,
            "max_tokens": self.max_tokens,
            "send_ns": self.send_ns,
            "chunk_ns": list(self.chunk_ns),
            "chunk_tokens": list(self.chunk_tokens) if self.chunk_tokens is not None else None,
            "end_ns": self.end_ns,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "finish_reason": self.finish_reason,
            "error": self.error.value if self.error is not None else None,
            "error_detail": self.error_detail,
            "http_status": self.http_status,
            "retry_after_s": self.retry_after_s,
            "warmup": self.warmup,
            "scheduled_ns": self.scheduled_ns,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RequestSample:
        """Inverse of :meth:`to_json`."""
        ct = data.get("chunk_tokens")
        err = data.get("error")
        return cls(
            index=int(data["index"]),
            prompt_len=int(data["prompt_len"]),
            max_tokens=int(data["max_tokens"]),
            send_ns=int(data["send_ns"]),
            chunk_ns=tuple(int(x) for x in data["chunk_ns"]),
            chunk_tokens=tuple(int(x) for x in ct) if ct is not None else None,
            end_ns=int(data["end_ns"]),
            prompt_tokens=data.get("prompt_tokens"),
            completion_tokens=data.get("completion_tokens"),
            finish_reason=data.get("finish_reason"),
            error=ErrorKind(err) if err is not None else None,
            error_detail=data.get("error_detail"),
            http_status=data.get("http_status"),
            retry_after_s=data.get("retry_after_s"),
            warmup=bool(data.get("warmup", False)),
            scheduled_ns=data.get("scheduled_ns"),
        )
