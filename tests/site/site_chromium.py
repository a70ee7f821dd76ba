"""A small, real Chrome DevTools Protocol client for the site's browser tests.

Starts Debian's headless ``chromium`` with ``--remote-debugging-port=0``, reads the port it
chose from ``DevToolsActivePort``, and talks CDP over one websocket (flattened sessions). Pages
are loaded for real over HTTP; console messages, uncaught exceptions, failed loads and
JavaScript dialogs (an ``alert()`` that ran) are recorded per page.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import SimpleHTTPRequestHandler
from pathlib import Path
from typing import Any

from websockets.sync.client import ClientConnection, connect

from servelab.testing.http_server import serve_handler

CHROMIUM = os.environ.get("SERVELAB_CHROMIUM", "/usr/bin/chromium")
FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-dev-shm-usage", "--hide-scrollbars", "--mute-audio",
)


def chromium_available() -> bool:
    """True when the Chromium binary exists."""
    return shutil.which(CHROMIUM) is not None


@dataclass
class PageResult:
    """What loading one page produced."""

    url: str
    console: list[dict[str, Any]] = field(default_factory=list)
    exceptions: list[dict[str, Any]] = field(default_factory=list)
    log_entries: list[dict[str, Any]] = field(default_factory=list)
    dialogs: list[dict[str, Any]] = field(default_factory=list)
    failed_requests: list[dict[str, Any]] = field(default_factory=list)
    statuses: dict[str, int] = field(default_factory=dict)

    @property
    def errors(self) -> list[str]:
        """Console errors, uncaught exceptions, error log entries and HTTP failures."""
        out = [f"console.{c.get('type')}: {c.get('args')}" for c in self.console
               if c.get("type") in ("error", "assert")]
        out += [f"exception: {e.get('exceptionDetails', {}).get('text')}" for e in self.exceptions]
        out += [f"log {e['entry'].get('level')}: {e['entry'].get('text')} "
                f"{e['entry'].get('url', '')}" for e in self.log_entries
                if e["entry"].get("level") == "error"]
        out += [f"failed request: {f.get('errorText')}" for f in self.failed_requests]
        out += [f"HTTP {code}: {url}" for url, code in self.statuses.items() if code >= 400]
        return out


class Browser:
    """One headless Chromium process and a CDP connection to it."""

    def __init__(self, *, timeout_s: float = 30.0) -> None:
        self.timeout_s = timeout_s
        self._profile = tempfile.mkdtemp(prefix="servelab-chromium-")
        self._log = open(os.path.join(self._profile, "chromium.log"), "wb")  # noqa: SIM115
        self._proc = subprocess.Popen(
            [CHROMIUM, *FLAGS, f"--user-data-dir={self._profile}", "--remote-debugging-port=0",
             "about:blank"],
            stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True,
        )
        port_file = Path(self._profile) / "DevToolsActivePort"
        deadline = time.monotonic() + timeout_s
        while not port_file.exists() or len(port_file.read_text().splitlines()) < 2:
            if self._proc.poll() is not None or time.monotonic() > deadline:
                self._kill()
                raise RuntimeError("chromium did not start; see its log in " + self._profile)
            time.sleep(0.05)
        port, path = port_file.read_text().splitlines()[:2]
        self._stack = contextlib.ExitStack()
        self._ws: ClientConnection = self._stack.enter_context(
            connect(f"ws://127.0.0.1:{port}{path}", max_size=2**28, open_timeout=timeout_s))
        self._next_id = 0
        self._events: list[dict[str, Any]] = []

    # -- protocol ----------------------------------------------------------------------------

    def _recv(self, timeout: float) -> dict[str, Any]:
        msg: dict[str, Any] = json.loads(self._ws.recv(timeout=timeout))
        return msg

    def call(self, method: str, session: str | None = None, **params: Any) -> dict[str, Any]:
        """Send one command and wait for its result (events that arrive meanwhile are kept)."""
        self._next_id += 1
        msg: dict[str, Any] = {"id": self._next_id, "method": method, "params": params}
        if session:
            msg["sessionId"] = session
        self._ws.send(json.dumps(msg))
        deadline = time.monotonic() + self.timeout_s
        while True:
            reply = self._recv(max(0.1, deadline - time.monotonic()))
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                result: dict[str, Any] = reply.get("result", {})
                return result
            self._events.append(reply)

    def _wait_event(self, method: str, session: str) -> None:
        deadline = time.monotonic() + self.timeout_s
        while True:
            for i, ev in enumerate(self._events):
                if ev.get("method") == method and ev.get("sessionId") == session:
                    del self._events[i]
                    return
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"no {method} within {self.timeout_s} s")
            self._events.append(self._recv(remaining))

    def _drain(self, quiet_s: float = 0.3) -> None:
        """Collect events until none has arrived for ``quiet_s``."""
        while True:
            try:
                self._events.append(self._recv(quiet_s))
            except TimeoutError:
                return

    # -- pages -------------------------------------------------------------------------------

    @contextlib.contextmanager
    def page(self, url: str, *, width: int = 1200, height: int = 900) -> Iterator[Page]:
        """Open ``url`` in a fresh tab, wait for load, yield a :class:`Page`, then close it."""
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        session = self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        try:
            for domain in ("Page", "Runtime", "Log", "Network"):
                self.call(f"{domain}.enable", session)
            self.call("Emulation.setDeviceMetricsOverride", session, width=width, height=height,
                      deviceScaleFactor=1, mobile=False)
            self._events.clear()
            self.call("Page.navigate", session, url=url)
            self._wait_event("Page.loadEventFired", session)
            self._drain()
            result = PageResult(url)
            for ev in self._events:
                if ev.get("sessionId") != session:
                    continue
                method, params = ev.get("method"), ev.get("params", {})
                if method == "Runtime.consoleAPICalled":
                    result.console.append(params)
                elif method == "Runtime.exceptionThrown":
                    result.exceptions.append(params)
                elif method == "Log.entryAdded":
                    result.log_entries.append(params)
                elif method == "Page.javascriptDialogOpening":
                    result.dialogs.append(params)
                    self.call("Page.handleJavaScriptDialog", session, accept=True)
                elif method == "Network.loadingFailed":
                    result.failed_requests.append(params)
                elif method == "Network.responseReceived":
                    resp = params.get("response", {})
                    result.statuses[resp.get("url", "")] = int(resp.get("status", 0))
            self._events.clear()
            yield Page(self, session, result)
        finally:
            with contextlib.suppress(Exception):
                self.call("Target.closeTarget", targetId=target)

    def _kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self._proc.pid, signal.SIGKILL)
        self._proc.wait(timeout=10)
        self._log.close()
        shutil.rmtree(self._profile, ignore_errors=True)

    def close(self) -> None:
        """Close the browser and remove its profile."""
        with contextlib.suppress(Exception):
            self._ws.send(json.dumps({"id": 10**9, "method": "Browser.close", "params": {}}))
        with contextlib.suppress(Exception):
            self._stack.close()
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._proc.pid, signal.SIGKILL)
            self._proc.wait(timeout=10)
        self._log.close()
        shutil.rmtree(self._profile, ignore_errors=True)


class Page:
    """A loaded tab: evaluate JavaScript, take screenshots."""

    def __init__(self, browser: Browser, session: str, result: PageResult) -> None:
        self.browser, self.session, self.result = browser, session, result

    def js(self, expression: str) -> Any:
        """Evaluate ``expression`` in the page and return its JSON value."""
        reply = self.browser.call("Runtime.evaluate", self.session, expression=expression,
                                  returnByValue=True)
        if "exceptionDetails" in reply:
            raise RuntimeError(f"evaluation failed: {reply['exceptionDetails']}")
        return reply["result"].get("value")

    def screenshot(self, path: Path) -> Path:
        """Save a full-page PNG screenshot to ``path``."""
        data = self.browser.call("Page.captureScreenshot", self.session, format="png",
                                 captureBeyondViewport=True)["data"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data))
        return path


class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextlib.contextmanager
def serve_directory(root: Path) -> Iterator[str]:
    """Serve ``root`` over http://127.0.0.1 on a free port; yields the base URL."""

    def handler(*args: Any, **kwargs: Any) -> _QuietHandler:
        return _QuietHandler(*args, directory=str(root), **kwargs)

    with serve_handler(handler) as url:
        yield url + "/"
