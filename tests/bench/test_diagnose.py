"""A broken endpoint gets the right diagnosis (issue 33): real local servers that misbehave —
nothing listening, a hung socket, a non-HTTP service, a web page, an auth wall, a failing
server — and the one line each one ends in, from the library and from the command line."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler

import pytest
from tests.bench.cli import servelab

from servelab.bench.diagnose import diagnose
from servelab.testing.http_server import serve_handler
from servelab.testing.synthetic_server import Fault, FaultKind, SyntheticConfig, SyntheticServer


@contextmanager
def _http(status: int, body: bytes, ctype: str) -> Iterator[str]:
    class H(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_POST = do_GET

        def log_message(self, *args: object) -> None:
            pass

    with serve_handler(H) as url:
        yield url


@contextmanager
def _raw(reply: bytes | None) -> Iterator[str]:
    """A TCP server that answers every connection with ``reply`` and closes it, or (None)
    accepts and holds it without a byte."""
    sock = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []
    stop = threading.Event()

    def loop() -> None:
        sock.settimeout(0.1)
        while not stop.is_set():
            try:
                conn, _ = sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            if reply is None:
                held.append(conn)
            else:
                conn.recv(65536)
                conn.sendall(reply)
                conn.close()

    t = threading.Thread(target=loop, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        stop.set()
        t.join(2)
        for c in held:
            c.close()
        sock.close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


HTML = b"<!DOCTYPE html><html><body>Welcome to nginx!</body></html>"


@contextmanager
def _endpoint(kind: str) -> Iterator[str]:
    if kind == "refused":
        yield f"http://127.0.0.1:{_free_port()}"
    elif kind == "hung":
        with _raw(None) as url:
            yield url
    elif kind == "not_http":
        with _raw(b"SSH-2.0-OpenSSH_9.6\r\n") as url:
            yield url
    elif kind == "html":
        with _http(200, HTML, "text/html") as url:
            yield url
    elif kind == "auth":
        with _http(401, b'{"error": "invalid api key"}', "application/json") as url:
            yield url
    elif kind == "server_error":
        with _http(500, b"Internal Server Error", "text/plain") as url:
            yield url
    else:
        raise AssertionError(kind)


CASES = [("refused", "refused", "connection refused"),
         ("hung", "hung", "sent nothing within"),
         ("not_http", "not_http", "does not speak HTTP"),
         ("html", "not_openai", "HTML page"),
         ("auth", "auth", "HTTP 401"),
         ("server_error", "server_error", "HTTP 500")]


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("kind", "verdict", "needle"), CASES, ids=[c[0] for c in CASES])
def test_diagnose_names_what_the_endpoint_is(kind: str, verdict: str, needle: str) -> None:
    with _endpoint(kind) as url:
        t = time.monotonic()
        d = diagnose(url, read_s=1.0)
    assert time.monotonic() - t < 5
    assert d.verdict == verdict and needle in d.detail, d


def test_an_openai_server_is_ok() -> None:
    with SyntheticServer(SyntheticConfig()) as srv:
        d = diagnose(srv.base_url)
    assert d.verdict == "ok" and d.models == ("synthetic",)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("with_model", [False, True], ids=["no-model", "model"])
@pytest.mark.parametrize(("kind", "verdict", "needle"),
                         [c for c in CASES if c[0] != "hung"], ids=[c[0] for c in CASES
                                                                    if c[0] != "hung"])
def test_bench_says_what_the_endpoint_is(kind: str, verdict: str, needle: str,
                                         with_model: bool) -> None:
    with _endpoint(kind) as url:
        proc = servelab("bench", url, "--prompt-lens", "8", "--output-len", "4",
                        *(["--model", "m"] if with_model else []))
    err = proc.stderr.strip()
    assert proc.returncode == 1 and "Traceback" not in err, err
    assert len(err.splitlines()) == 1 and needle in err and "/v1/models" in err, err
    assert "pass --model" not in err and "tokenize" not in err


@pytest.mark.timeout(120)
def test_a_hung_server_with_a_model_is_called_hung_not_missing_tokenize() -> None:
    with _endpoint("hung") as url:
        t = time.monotonic()
        proc = servelab("capacity", url, "--slo", "ttft_p50=500", "--model", "m")
    assert time.monotonic() - t < 40
    assert proc.returncode == 1 and "sent nothing within 15 s" in proc.stderr, proc.stderr
    assert "tokenize" not in proc.stderr


@pytest.mark.timeout(120)
def test_bench_fails_when_a_third_of_its_requests_fail() -> None:
    fault = Fault(FaultKind.HTTP_500, every=3)
    with SyntheticServer(SyntheticConfig(ttft_s=0.01, itl_s=0.002, fault=fault)) as srv:
        proc = servelab("bench", srv.base_url, "--prompt-lens", "8", "--output-len", "4",
                        "--requests", "9", "--max-repeats", "1", "--warmup", "0")
        ok = servelab("bench", srv.base_url, "--prompt-lens", "8", "--output-len", "4",
                      "--requests", "9", "--max-repeats", "1", "--warmup", "0",
                      "--max-failed", "0.5")
    assert proc.returncode == 1, proc.stderr
    assert "3 of 9 measured requests failed (33%, above --max-failed 10%): http_5xx 3" \
        in proc.stderr
    assert "prompt 8" in proc.stdout  # the table is shown all the same
    assert ok.returncode == 0, ok.stderr


@pytest.mark.timeout(120)
def test_capacity_against_a_failing_server_says_it_fails() -> None:
    fault = Fault(FaultKind.HTTP_500, every=1)
    with SyntheticServer(SyntheticConfig(ttft_s=0.01, itl_s=0.002, fault=fault)) as srv:
        proc = servelab("capacity", srv.base_url, "--slo", "ttft_p50=500", "--variable",
                        "concurrency", "--prompt-lens", "8", "--output-len", "4",
                        "--high", "4")
    assert proc.returncode == 1, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert "measured requests failed (100%" in last and "http_5xx" in last, proc.stderr
