"""A standard-library HTTP server in a thread, on a free local port (test infrastructure)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["serve_handler"]


@contextmanager
def serve_handler(handler: Callable[..., BaseHTTPRequestHandler] | type[Any]) -> Iterator[str]:
    """Serve ``handler`` on http://127.0.0.1 at a free port; yields the base URL (no slash)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
