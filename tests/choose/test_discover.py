"""Finding the builds of a base model on a local Hub-like server (never the network).

The server is a real HTTP server on loopback speaking the two parts of the Hub's API that
``servelab choose --discover`` uses: ``GET /api/models?filter=base_model:<relation>:<id>``
(what ``HfApi.list_models`` sends; children found by their ``base_model:`` tags, as the Hub
tags them) and ``GET /<repo>/resolve/<revision>/<file>`` with ``Range`` (header reads). It
holds a base model and four children: an FP8 quantization, a fine-tune, a LoRA adapter and
a GGUF repo, each with real files (safetensors headers, a GGUF file).
"""

from __future__ import annotations

import json
import re
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from tests.cli_checks import assert_one_line_errors

from servelab.choose.tree import model_tree
from servelab.cli.app import main
from servelab.errors import RemoteError
from servelab.testing.http_server import serve_handler

pytestmark = pytest.mark.timeout(600)

COMMIT = "0123456789abcdef0123456789abcdef01234567"
BASE = "tiny-org/tiny-moe"


@dataclass
class Repo:
    """A repo the server holds: its files and its listing entry."""

    directory: Path
    tags: tuple[str, ...] = ()
    library: str | None = "transformers"
    downloads: int = 0


@dataclass
class Hub:
    repos: dict[str, Repo] = field(default_factory=dict)
    api_status: int = 200
    queries: list[dict[str, list[str]]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def listing(self, query: dict[str, list[str]]) -> list[dict[str, Any]]:
        wanted = set(query.get("filter", []))
        hits = [(rid, r) for rid, r in self.repos.items() if wanted <= set(r.tags)]
        hits.sort(key=lambda kv: -kv[1].downloads)
        return [{"id": rid, "_id": rid, "modelId": rid, "tags": list(r.tags),
                 "library_name": r.library, "downloads": r.downloads, "likes": 0,
                 "private": False} for rid, r in hits]


def _handler(hub: Hub) -> type[BaseHTTPRequestHandler]:
    resolve = re.compile(r"^/(?P<repo>[^/]+/[^/]+)/resolve/(?P<rev>[^/]+)/(?P<file>.+)$")

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:
            pass

        def _send(self, code: int, body: bytes = b"", headers: dict[str, str] | None = None
                  ) -> None:
            self.send_response(code)
            for k, v in {"Content-Length": str(len(body)), **(headers or {})}.items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            url = urlsplit(self.path)
            if url.path == "/api/models":
                query = parse_qs(url.query)
                with hub.lock:
                    hub.queries.append(query)
                if hub.api_status != 200:
                    self._send(hub.api_status, b'{"error": "down"}',
                               {"Content-Type": "application/json"})
                    return
                body = json.dumps(hub.listing(query)).encode()
                self._send(200, body, {"Content-Type": "application/json"})
                return
            m = resolve.match(url.path)
            repo = hub.repos.get(m["repo"]) if m else None
            if m is None or repo is None:
                self._send(404, headers={"X-Error-Code": "RepositoryNotFound"})
                return
            path = repo.directory / m["file"]
            if ".." in m["file"] or not path.is_file():
                self._send(404, headers={"X-Error-Code": "EntryNotFound", "X-Repo-Commit": COMMIT})
                return
            data = path.read_bytes()
            rng = re.match(r"^bytes=(\d+)-(\d*)$", self.headers.get("Range") or "")
            if rng:
                start = int(rng[1])
                end = min(int(rng[2]) if rng[2] else len(data) - 1, len(data) - 1)
                self._send(206, data[start:end + 1], {
                    "Content-Range": f"bytes {start}-{end}/{len(data)}", "X-Repo-Commit": COMMIT})
                return
            self._send(200, data, {"X-Repo-Commit": COMMIT})

    return Handler


@pytest.fixture(scope="module")
def tree_dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The base (tiny Qwen3-MoE, BF16) and its children's files."""
    from servelab.synth.gguf import write_gguf
    from servelab.synth.quantize import quantize_checkpoint
    from servelab.synth.tiny import make_tiny_model

    root = tmp_path_factory.mktemp("tree")
    base = make_tiny_model("qwen3_moe", root / "base")
    tuned = make_tiny_model("qwen3_moe", root / "tuned", seed=7)
    fp8 = root / "fp8"
    quantize_checkpoint(base, fp8, "fp8-channel")
    (root / "gguf").mkdir()
    write_gguf(base, root / "gguf" / "tiny-moe-q8_0.gguf", qtype="Q8_0")
    adapter = root / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text(json.dumps(
        {"peft_type": "LORA", "base_model_name_or_path": BASE, "r": 8}))
    return {"base": base, "tuned": tuned, "fp8": fp8, "gguf": root / "gguf",
            "adapter": adapter}


@pytest.fixture
def hub(tree_dirs: dict[str, Path]) -> Iterator[tuple[Hub, str]]:
    h = Hub()
    h.repos[BASE] = Repo(tree_dirs["base"], ("transformers", "qwen3_moe"), downloads=900)
    h.repos["quant-org/tiny-moe-FP8"] = Repo(
        tree_dirs["fp8"], ("transformers", f"base_model:{BASE}",
                           f"base_model:quantized:{BASE}"), downloads=500)
    h.repos["tune-org/tiny-moe-chat"] = Repo(
        tree_dirs["tuned"], ("transformers", f"base_model:finetune:{BASE}"), downloads=300)
    h.repos["lora-org/tiny-moe-lora"] = Repo(
        tree_dirs["adapter"], ("peft", f"base_model:adapter:{BASE}"), library="peft",
        downloads=200)
    h.repos["gguf-org/tiny-moe-GGUF"] = Repo(
        tree_dirs["gguf"], ("gguf", f"base_model:quantized:{BASE}"), library="gguf",
        downloads=800)
    with serve_handler(_handler(h)) as url:
        yield h, url


def test_model_tree_lists_the_children_by_relation(hub: tuple[Hub, str]) -> None:
    h, url = hub
    tree = model_tree(BASE, endpoint=url)
    assert [(c.repo_id, c.relation, c.gguf) for c in tree] == [
        (BASE, "base", False),
        ("gguf-org/tiny-moe-GGUF", "quantized", True),  # most downloaded first
        ("quant-org/tiny-moe-FP8", "quantized", False),
        ("tune-org/tiny-moe-chat", "finetune", False),
        ("lora-org/tiny-moe-lora", "adapter", False),
    ]
    # one query per relation, each by the Hub's model-tree tag
    assert [q["filter"] for q in h.queries] == [
        [f"base_model:{rel}:{BASE}"] for rel in ("quantized", "finetune", "adapter", "merge")]
    assert {c.repo_id: c.plannable is None for c in tree} == {
        BASE: True, "gguf-org/tiny-moe-GGUF": False, "quant-org/tiny-moe-FP8": True,
        "tune-org/tiny-moe-chat": True, "lora-org/tiny-moe-lora": False}


def test_choose_discovers_and_ranks_the_tree(
    hub: tuple[Hub, str], capsys: pytest.CaptureFixture[str]
) -> None:
    _, url = hub
    with pytest.raises(SystemExit) as exc:
        main(["choose", BASE, "--discover", "--endpoint", url, "-H", "h200", "-c", "4096",
              "--no-store", "--json"])
    assert exc.value.code in (0, None)
    doc = json.loads(capsys.readouterr().out)
    rows = {r["build"]: r for r in doc["builds"]}
    assert set(rows) == {BASE, "quant-org/tiny-moe-FP8", "tune-org/tiny-moe-chat",
                         "lora-org/tiny-moe-lora", "gguf-org/tiny-moe-GGUF"}
    ranked = [r["build"] for r in doc["builds"] if r["rank"] is not None]
    assert set(ranked) == {BASE, "quant-org/tiny-moe-FP8", "tune-org/tiny-moe-chat"}
    assert rows["quant-org/tiny-moe-FP8"]["scheme"] == "fp8"
    assert rows[BASE]["bytes_per_token"] == rows["tune-org/tiny-moe-chat"]["bytes_per_token"]
    assert "adapter" in rows["lora-org/tiny-moe-lora"]["refused"]
    assert "GGUF repo" in rows["gguf-org/tiny-moe-GGUF"]["refused"]
    assert doc["pick"]["build"] in ranked and doc["pick"]["reason"]


def test_discovery_errors_are_one_line(
    hub: tuple[Hub, str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    h, url = hub
    h.api_status = 400  # (huggingface_hub retries a 5xx for about 20 s before it gives up)
    with pytest.raises(RemoteError, match=r"HTTP 400 from .* listing the model tree"):
        model_tree(BASE, endpoint=url)
    h.api_status = 403
    with pytest.raises(SystemExit) as exc:
        main(["choose", BASE, "--discover", "--endpoint", url, "--no-store"])
    err = capsys.readouterr().err
    assert exc.value.code != 0 and len(err.strip().splitlines()) == 1
    assert "HTTP 403" in err and "HF_TOKEN" in err
    h.api_status = 200
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(SystemExit) as exc:
        main(["choose", BASE, "--discover", "--endpoint", url, "--no-store"])
    err = capsys.readouterr().err
    assert exc.value.code != 0 and "HF_HUB_OFFLINE is set" in err
    assert len(err.strip().splitlines()) == 1
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    assert_one_line_errors([(["choose", "no-org/none", "--discover", "--endpoint", url,
                              "--no-store"], "RepositoryNotFound")], capsys)


def test_an_unreachable_hub_fails_at_once_with_the_reason(
    capsys: pytest.CaptureFixture[str]
) -> None:
    """No network (here: a port that accepts and hangs up) is one attempt and one line, not
    huggingface_hub's five retries with backoff (12 lines over 24 s, issue 41)."""
    attempts = []
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    server.settimeout(0.2)
    stop = threading.Event()

    def hang_up() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            attempts.append(1)
            conn.close()

    thread = threading.Thread(target=hang_up, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.getsockname()[1]}"
    try:
        with pytest.raises(SystemExit) as exc:
            main(["choose", BASE, "--discover", "--endpoint", url, "--no-store"])
        err = capsys.readouterr().err
        assert exc.value.code != 0 and len(err.strip().splitlines()) == 1, err
        # the reason is the OS's or httpx's (a reset or a disconnect, as the race goes)
        assert f"cannot reach {url} (" in err and "name the builds" in err
    finally:
        stop.set()
        thread.join(timeout=5)
        server.close()
    assert len(attempts) == 1
