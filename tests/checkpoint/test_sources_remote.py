"""Hub repos read remotely by range requests, against a real HTTP server on loopback.

The server (``hub_server`` in conftest) serves generated checkpoint directories under the
Hub's ``/{repo}/resolve/{revision}/{file}`` layout and counts every body byte it sends,
so the tests can assert that only headers (and small JSON files) cross the wire.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from servelab.checkpoint import load_checkpoint
from servelab.checkpoint.hub import FIRST_RANGE_BYTES
from servelab.errors import (
    CheckpointNotFoundError,
    HeaderError,
    RemoteError,
    ServelabError,
    ShardIndexError,
)

pytestmark = pytest.mark.timeout(60)

FAKE_COMMIT = "0123456789abcdef0123456789abcdef01234567"
JSON_FILES = ("model.safetensors.index.json", "config.json", "hf_quant_config.json",
              "generation_config.json")  # fmt: skip


def _json_bytes(d: Path) -> int:
    return sum((d / f).stat().st_size for f in JSON_FILES if (d / f).exists())


def _header_bytes(path: Path) -> int:
    """What a range reader must fetch: 100,001 bytes (or the whole small file), plus the
    rest of the header when it is longer than that."""
    size = path.stat().st_size
    with path.open("rb") as f:
        n = int.from_bytes(f.read(8), "little")
    return max(min(FIRST_RANGE_BYTES, size), 8 + n)


def test_single_file_repo_fetches_headers_only(
    hub_server: Callable[..., Any], tiny_checkpoint: Callable[..., Path]
) -> None:
    d = tiny_checkpoint("qwen3_moe")
    hub = hub_server()
    repo = hub.add("tiny/qwen3-moe", d)
    src = load_checkpoint(repo, endpoint=hub.url)
    local = load_checkpoint(d)
    assert src.kind == "hub" and src.location == repo and src.revision == "main"
    assert src.commit == FAKE_COMMIT
    assert src.tensors == local.tensors and src.header_sha256 == local.header_sha256
    assert src.config == local.config and src.generation_config == local.generation_config
    assert src.shards[0].file_size == (d / "model.safetensors").stat().st_size
    expected = _header_bytes(d / "model.safetensors") + _json_bytes(d)
    assert src.bytes_fetched == hub.body_bytes == expected
    weights = [s for s in hub.seen if s.path.endswith("/model.safetensors")]
    assert [s.range for s in weights] == ["bytes=0-100000"]
    # After the first answer, every read is pinned to the commit it reported.
    assert all(f"/resolve/{FAKE_COMMIT}/" in s.path for s in hub.seen[1:])


def test_sharded_repo(hub_server: Callable[..., Any], tiny_checkpoint: Callable[..., Path]) -> None:
    d = tiny_checkpoint("qwen3_moe", max_shard_size="300KB")
    hub = hub_server()
    src = load_checkpoint(hub.add("tiny/sharded", d), endpoint=hub.url, revision="main")
    local = load_checkpoint(d)
    assert src.tensors == local.tensors and src.header_sha256 == local.header_sha256
    assert src.index_metadata == local.index_metadata and src.warnings == ()
    shards = sorted(d.glob("model-*.safetensors"))
    assert len(src.shards) == len(shards) > 1
    expected = sum(_header_bytes(p) for p in shards) + _json_bytes(d)
    assert src.bytes_fetched == hub.body_bytes == expected
    total_weights = sum(p.stat().st_size for p in shards)
    assert src.bytes_fetched < total_weights


@pytest.fixture
def long_header_repo(write_safetensors: Callable[..., Path], tmp_path: Path) -> Path:
    """One file: ~250 kB of header (3,000 tensors), 1.5 GB of sparse data."""
    header: dict[str, Any] = {}
    off = 0
    for i in range(3000):
        nbytes = 512 * 1024
        header[f"model.layers.{i // 100}.mlp.experts.{i % 100}.down_proj.weight"] = {
            "dtype": "BF16",
            "shape": [512, 512],
            "data_offsets": [off, off + nbytes],
        }
        off += nbytes
    write_safetensors(tmp_path / "repo" / "model.safetensors", header)
    return tmp_path / "repo"


def _n(path: Path) -> int:
    with path.open("rb") as f:
        return int.from_bytes(f.read(8), "little")


def test_long_header_takes_a_second_range_and_no_data(
    hub_server: Callable[..., Any], long_header_repo: Path
) -> None:
    n = _n(long_header_repo / "model.safetensors")
    assert n > FIRST_RANGE_BYTES
    hub = hub_server()
    src = load_checkpoint(hub.add("big/header", long_header_repo), endpoint=hub.url)
    assert len(src.tensors) == 3000
    ranges = [s.range for s in hub.seen if s.path.endswith("model.safetensors")]
    assert ranges == ["bytes=0-100000", f"bytes=100001-{n + 7}"]
    assert src.bytes_fetched == hub.body_bytes == n + 8


def test_long_header_from_a_server_without_range_support(
    hub_server: Callable[..., Any], long_header_repo: Path
) -> None:
    hub = hub_server()
    hub.ignore_range = True
    src = load_checkpoint(hub.add("big/header", long_header_repo), endpoint=hub.url)
    assert len(src.tensors) == 3000
    assert src.shards[0].file_size == (long_header_repo / "model.safetensors").stat().st_size
    n = _n(long_header_repo / "model.safetensors")
    assert src.bytes_fetched < FIRST_RANGE_BYTES + n + 8 + 2**20  # never the 1.5 GB


def test_token_is_sent(
    hub_server: Callable[..., Any], tiny_checkpoint: Callable[..., Path]
) -> None:
    hub = hub_server()
    load_checkpoint(hub.add("a/b", tiny_checkpoint("llama")), endpoint=hub.url, token="hf_xyz")
    assert {s.authorization for s in hub.seen} == {"Bearer hf_xyz"}


def test_missing_repo_revision_and_weights(
    hub_server: Callable[..., Any], tiny_checkpoint: Callable[..., Path], tmp_path: Path
) -> None:
    hub = hub_server()
    hub.add("a/b", tiny_checkpoint("llama"))
    with pytest.raises(CheckpointNotFoundError, match="RepositoryNotFound") as info:
        load_checkpoint("a/nope", endpoint=hub.url)
    assert "no local path 'a/nope' exists" in str(info.value)
    with pytest.raises(CheckpointNotFoundError, match="RevisionNotFound"):
        load_checkpoint("a/b", endpoint=hub.url, revision="v9")
    (tmp_path / "config.json").write_text("{}")
    hub.add("no/weights", tmp_path)
    with pytest.raises(CheckpointNotFoundError, match="neither"):
        load_checkpoint("no/weights", endpoint=hub.url)


def test_access_denied(
    hub_server: Callable[..., Any], tiny_checkpoint: Callable[..., Path]
) -> None:
    hub = hub_server()
    hub.status["model.safetensors"] = 401
    with pytest.raises(RemoteError, match="gated or private"):
        load_checkpoint(hub.add("a/b", tiny_checkpoint("llama")), endpoint=hub.url)
    hub.status["model.safetensors"] = 503
    with pytest.raises(RemoteError, match="HTTP 503"):
        load_checkpoint("a/b", endpoint=hub.url)


def test_index_with_unsafe_shard_name(
    hub_server: Callable[..., Any], tmp_path: Path, write_safetensors: Callable[..., Path]
) -> None:
    write_safetensors(tmp_path / "x.safetensors", {})
    index = {"metadata": {}, "weight_map": {"a": "../../etc/passwd"}}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    hub = hub_server()
    with pytest.raises(ShardIndexError) as info:
        load_checkpoint(hub.add("a/b", tmp_path), endpoint=hub.url)
    assert info.value.rule == "index-unsafe-shard-name"
    assert not any("passwd" in s.path for s in hub.seen)


# --------------------------------------------------------------------------- faults


@pytest.fixture
def big_repo(tmp_path: Path, write_safetensors: Callable[..., Path]) -> Path:
    """A repo whose one file has a small header and 64 MiB of (sparse) data."""
    nbytes = 64 * 2**20
    header = {"w": {"dtype": "U8", "shape": [nbytes], "data_offsets": [0, nbytes]}}
    write_safetensors(tmp_path / "big" / "model.safetensors", header)
    return tmp_path / "big"


def test_server_ignoring_range_is_not_downloaded(
    hub_server: Callable[..., Any], big_repo: Path
) -> None:
    hub = hub_server()
    hub.ignore_range = True
    src = load_checkpoint(hub.add("a/b", big_repo), endpoint=hub.url)
    assert src.shards[0].file_size == (big_repo / "model.safetensors").stat().st_size
    # We stop reading after the first range's worth; socket buffers may hold a bit more.
    assert src.bytes_fetched < 4 * FIRST_RANGE_BYTES
    assert hub.body_bytes < 64 * 2**20 // 2


LIES = [(5000, "buffer-not-covered"), (10, "header-beyond-file"), (2**40, "buffer-not-covered")]


@pytest.mark.parametrize(("total", "rule"), LIES)
def test_server_lying_about_size(
    hub_server: Callable[..., Any], big_repo: Path, total: int, rule: str
) -> None:
    hub = hub_server()
    hub.lie_total = total
    with pytest.raises(HeaderError) as info:
        load_checkpoint(hub.add("a/b", big_repo), endpoint=hub.url)
    assert info.value.rule == rule and "a/b@" in str(info.value)


def test_short_range(hub_server: Callable[..., Any], big_repo: Path) -> None:
    hub = hub_server()
    hub.short_range = 50
    with pytest.raises(RemoteError, match="short read"):
        load_checkpoint(hub.add("a/b", big_repo), endpoint=hub.url)


def test_body_cut_short(hub_server: Callable[..., Any], big_repo: Path) -> None:
    hub = hub_server()
    hub.truncate_body = 10
    with pytest.raises(RemoteError, match="broken off"):
        load_checkpoint(hub.add("a/b", big_repo), endpoint=hub.url)


def test_redirect_to_another_host_drops_the_token(
    hub_server: Callable[..., Any], tiny_checkpoint: Callable[..., Path]
) -> None:
    d = tiny_checkpoint("llama")
    cdn = hub_server("127.0.0.2")
    cdn.add("a/b", d)
    front = hub_server()
    front.redirect_to = cdn.url
    src = load_checkpoint("a/b", endpoint=front.url, token="hf_secret")
    assert src.header_sha256 == load_checkpoint(d).header_sha256
    assert {s.authorization for s in front.seen} == {"Bearer hf_secret"}
    assert cdn.seen and {s.authorization for s in cdn.seen} == {None}


def test_redirect_loop(hub_server: Callable[..., Any]) -> None:
    hub = hub_server()
    hub.redirect_to = hub.url
    with pytest.raises(RemoteError, match="more than 5 redirects"):
        load_checkpoint("a/b", endpoint=hub.url)


@pytest.mark.parametrize("target", ["file:///etc", "ftp://127.0.0.1"])
def test_redirect_to_other_schemes_refused(hub_server: Callable[..., Any], target: str) -> None:
    hub = hub_server()
    hub.redirect_to = target
    with pytest.raises(RemoteError, match="refusing redirect"):
        load_checkpoint("a/b", endpoint=hub.url)


def test_redirect_to_dead_host(hub_server: Callable[..., Any]) -> None:
    hub = hub_server()
    with socket.socket() as s:  # a port that was just free: nothing listens there
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    hub.redirect_to = f"http://127.0.0.1:{port}"
    with pytest.raises(RemoteError, match="request failed"):
        load_checkpoint("a/b", endpoint=hub.url, timeout=2)


def test_stalled_server_times_out(hub_server: Callable[..., Any], big_repo: Path) -> None:
    hub = hub_server()
    hub.stall_s = 30
    with pytest.raises(RemoteError, match="timed out"):
        load_checkpoint(hub.add("a/b", big_repo), endpoint=hub.url, timeout=0.5)


def test_dripping_server_hits_the_deadline(hub_server: Callable[..., Any], big_repo: Path) -> None:
    hub = hub_server()
    hub.drip_s = 0.05  # 1 KiB per 50 ms: the first range would take ~5 s
    with pytest.raises(RemoteError, match="gave up"):
        load_checkpoint(hub.add("a/b", big_repo), endpoint=hub.url, timeout=2, deadline=0.5)


def test_remote_header_cap(
    hub_server: Callable[..., Any], tmp_path: Path, write_safetensors: Callable[..., Path]
) -> None:
    raw = (30_000_000).to_bytes(8, "little") + b"{}"
    (tmp_path / "model.safetensors").write_bytes(raw)
    hub = hub_server()
    with pytest.raises(HeaderError) as info:
        load_checkpoint(hub.add("a/b", tmp_path), endpoint=hub.url)
    assert info.value.rule == "header-too-large"
    assert isinstance(info.value, ServelabError)


def test_endpoint_and_token_from_the_environment(
    hub_server: Callable[..., Any], tiny_checkpoint: Callable[..., Path], tmp_path: Path
) -> None:
    """HF_ENDPOINT and HF_TOKEN reach the reader through huggingface_hub's own settings
    (a fresh interpreter, since huggingface_hub reads them at import)."""
    hub = hub_server()
    hub.add("env/repo", tiny_checkpoint("llama"))
    code = (
        "from servelab.checkpoint import load_checkpoint;"
        "s = load_checkpoint('env/repo'); print(len(s.tensors), s.commit)"
    )
    env = {
        **os.environ,
        "HF_ENDPOINT": hub.url,
        "HF_TOKEN": "hf_from_env",
        "HF_HOME": str(tmp_path / "hf-home"),
    }
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    count, commit = out.stdout.split()
    assert int(count) == len(load_checkpoint(tiny_checkpoint("llama")).tensors)
    assert commit == FAKE_COMMIT
    assert {s.authorization for s in hub.seen} == {"Bearer hf_from_env"}, [
        (s.path, s.authorization) for s in hub.seen
    ]
