"""A small real HTTP server that behaves like a stubborn engine (test helper).

It prints vLLM-style startup lines, forks a child into its own process group (as
vLLM's EngineCore is), serves /health and /v1/models, and IGNORES SIGTERM — something
no real vLLM does on demand, but engines stuck in a kernel do. Usage:
``python stubborn_engine.py PORT MODEL_NAME``.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PORT = int(sys.argv[1])
NAME = sys.argv[2]

signal.signal(signal.SIGTERM, signal.SIG_IGN)
if os.fork() == 0:  # a grandchild that also ignores SIGTERM
    while True:
        time.sleep(1)

print("(APIServer pid=1) INFO 01-01 00:00:00 [x.py:1] Starting to load model m...", flush=True)
print(
    "(APIServer pid=1) INFO 01-01 00:00:01 [x.py:1] CPU KV cache size: 1,000 tokens, "
    "Maximum concurrency for 100 tokens per request: 10.00x",
    flush=True,
)


class Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        if self.path == "/health":
            body = b""
        elif self.path == "/v1/models":
            body = json.dumps({"data": [{"id": NAME, "max_model_len": 100}]}).encode()
        else:
            self.send_response(404)
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


print("(APIServer pid=1) INFO 01-01 00:00:02 [x.py:1] Starting vLLM server on http://x", flush=True)
ThreadingHTTPServer(("127.0.0.1", PORT), Handler).serve_forever()
