"""Attach by URL against a small real HTTP server (in a thread)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar

import pytest

from servelab.errors import RemoteError, UsageError
from servelab.serve.attach import attach, parse_metrics

METRICS = """\
# HELP vllm:generation_tokens_total Number of generation tokens processed.
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{engine="0",model_name="m"} 42.0
vllm:prompt_tokens_total{engine="0",model_name="m"} 7.0
vllm:cache_config_info{block_size="16",cache_dtype="auto",num_gpu_blocks="1024"} 1.0
vllm:kv_cache_usage_perc{engine="0",model_name="m"} NaN
bad line here
"""


class _Handler(BaseHTTPRequestHandler):
    routes: ClassVar[dict[str, tuple[int, bytes]]] = {}

    def do_GET(self) -> None:
        status, body = self.routes.get(self.path, (404, b"not found"))
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[tuple[str, dict[str, tuple[int, bytes]]]]:
    routes: ClassVar[dict[str, tuple[int, bytes]]] = {}
    handler = type("H", (_Handler,), {"routes": routes})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    t = threading.Thread(target=httpd.serve_forever, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", routes
    finally:
        httpd.shutdown()
        httpd.server_close()
        t.join()


def test_parse_metrics() -> None:
    samples = parse_metrics(METRICS)
    names = [s.name for s in samples]
    assert names == [
        "vllm:generation_tokens_total",
        "vllm:prompt_tokens_total",
        "vllm:cache_config_info",
    ]
    assert samples[2].labels["num_gpu_blocks"] == "1024"


def test_attach_reads_version_models_metrics(server) -> None:  # type: ignore[no-untyped-def]
    url, routes = server
    routes["/v1/models"] = (
        200,
        json.dumps({"data": [{"id": "m", "max_model_len": 4096}]}).encode(),
    )
    routes["/version"] = (200, b'{"version": "0.32.0"}')
    routes["/metrics"] = (200, METRICS.encode())
    info = attach(url + "/v1/")
    assert info.url == url
    assert info.version == "0.32.0"
    assert [(m.id, m.max_model_len) for m in info.models] == [("m", 4096)]
    assert info.metric("vllm:generation_tokens_total") == 42.0
    assert info.cache_config()["block_size"] == "16"
    assert info.to_dict()["metrics"] == {
        "vllm:prompt_tokens_total": 7.0,
        "vllm:generation_tokens_total": 42.0,
    }


def test_attach_to_a_non_vllm_server(server) -> None:  # type: ignore[no-untyped-def]
    url, routes = server
    routes["/v1/models"] = (200, b'{"data": [{"id": "x"}, {"bad": 1}, 3]}')
    info = attach(url)
    assert info.version is None and info.metrics == ()
    assert [m.id for m in info.models] == ["x"]


def test_attach_failures(server) -> None:  # type: ignore[no-untyped-def]
    url, routes = server
    with pytest.raises(RemoteError, match="HTTP 404"):
        attach(url)
    routes["/v1/models"] = (200, b"<html>")
    with pytest.raises(RemoteError, match="did not return JSON"):
        attach(url)
    with pytest.raises(UsageError):
        attach("ftp://x")
    with pytest.raises(RemoteError, match="cannot reach"):
        attach("http://127.0.0.1:9", timeout=1)
