"""``servelab plan`` shows each KV group kind with its page and blocks per request."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from servelab.cli.app import app

runner = CliRunner()


@pytest.fixture(scope="module")
def tiny_sliding(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny Llama checkpoint whose config alternates sliding-window and full layers."""
    from servelab.synth.tiny import make_tiny_model

    path = make_tiny_model("llama", tmp_path_factory.mktemp("tiny") / "llama")
    config = json.loads((path / "config.json").read_text())
    n = config["num_hidden_layers"]
    config["layer_types"] = ["sliding_attention" if i % 2 == 0 else "full_attention"
                             for i in range(n)]
    config["sliding_window"] = 128
    (path / "config.json").write_text(json.dumps(config))
    return path


def _plan(path: Path, *extra: str) -> str:
    res = runner.invoke(app, ["plan", str(path), "--hardware", "h200", "--no-store",
                              "--engine-version", "0.26.0", "--max-model-len", "4096",
                              "--kv-cache-memory-bytes", "64MiB", *extra])
    assert res.exit_code == 0, res.output
    return res.output


def test_plan_json_lists_each_group_kind(tiny_sliding: Path) -> None:
    doc = json.loads(_plan(tiny_sliding, "--json"))
    kv = doc["kv_pool"]
    n = doc["dims"]["num_layers"]
    assert doc["dims"]["layer_kinds"] == {"sliding_attention": (n + 1) // 2,
                                          "full_attention": n // 2}
    kinds = {k["label"]: k for k in kv["group_kinds"]}
    assert set(kinds) == {"sliding_attention (window 128)", "full_attention"}
    slide, whole = kinds["sliding_attention (window 128)"], kinds["full_attention"]
    # H200 on 0.26: 8,192 batched tokens, 2 batches in flight: the window never binds
    # below 4,096 tokens, so sliding layers hold cdiv(4096, 16) + 1 blocks
    assert (slide["block_size"], slide["blocks_per_request"]) == (16, 4096 // 16 + 1)
    assert whole["blocks_per_request"] == 4096 // 16
    assert slide["page_bytes"] == whole["page_bytes"]
    assert (kv["max_num_batched_tokens"], kv["max_in_flight_tokens"]) == (8192, 16384)
    assert {g["spec"] for g in kv["groups"]} == {"SlidingWindowSpec", "FullAttentionSpec"}


def test_plan_table_and_markdown_show_the_kinds(tiny_sliding: Path) -> None:
    table = _plan(tiny_sliding)
    assert "sliding_attention (window 128)" in table and "blocks per request" in table
    md = _plan(tiny_sliding, "--markdown")
    assert "- sliding_attention (window 128):" in md
