"""The streaming transport parses HTTP/1.1 + SSE correctly however the bytes are split."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from servelab.bench.samples import ErrorKind
from servelab.bench.transport import Endpoint, Exchange, Timeouts, _Conn


def _chunked(events: list[bytes]) -> bytes:
    body = b"".join(b"%x\r\n%s\r\n" % (len(e), e) for e in events) + b"0\r\n\r\n"
    return (b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
            b"transfer-encoding: chunked\r\n\r\n" + body)


EVENTS = [b"data: " + json.dumps({"choices": [{"text": f" t{i}"}]}).encode() + b"\n\n"
          for i in range(5)]
EVENTS.append(b'data: {"choices": [], "usage": {"completion_tokens": 5}}\n\n')
EVENTS.append(b"data: [DONE]\n\n")
# A multi-event HTTP chunk and CRLF line endings must parse the same way.
RAW = _chunked([*EVENTS[:2], EVENTS[2] + EVENTS[3], EVENTS[4].replace(b"\n", b"\r\n"),
                *EVENTS[5:]])
EXPECTED = [e[6:].strip() for e in EVENTS]


def _feed(raw: bytes, cuts: list[int]) -> tuple[list[bytes], Exchange, _Conn]:
    got: list[bytes] = []

    def on_data(payload: bytes, t: int) -> bool:
        got.append(payload)
        return payload == b"[DONE]"

    ex = Exchange(on_data, 0, Timeouts(), None)
    conn = _Conn(lambda c: None)
    conn.ex = ex
    pos = 0
    for cut in [*sorted(set(cuts)), len(raw)]:
        if cut > pos:
            conn.data_received(raw[pos:cut])
            pos = cut
    return got, ex, conn


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(min_value=1, max_value=len(RAW) - 1), max_size=40))
def test_any_split_of_a_chunked_sse_response_gives_the_same_events(cuts: list[int]) -> None:
    got, ex, conn = _feed(RAW, cuts)
    assert got == EXPECTED
    assert ex.status == 200 and ex.error is None
    assert conn.ex is None  # exchange completed at the terminal chunk
    assert conn.reusable


def test_content_length_error_body_is_kept() -> None:
    body = b'{"error": {"message": "model not found"}}'
    raw = b"HTTP/1.1 404 Not Found\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body)
    got, ex, conn = _feed(raw, [10, 40])
    assert got == [] and ex.status == 404 and bytes(ex.body_error) == body
    assert conn.ex is None


def test_garbage_status_line_is_a_protocol_error() -> None:
    _, ex, _ = _feed(b"SMTP ready\r\n\r\n", [])
    assert ex.error is ErrorKind.PROTOCOL


def test_endpoint_parsing() -> None:
    e = Endpoint.parse("http://localhost:8000/v1/")
    assert (e.host, e.port, e.prefix) == ("localhost", 8000, "")
    assert Endpoint.parse("https://h/proxy/v1").base_url == "https://h:443/proxy"
